//! The window script (`window.lua`) against the window step, on a real
//! `redis-server`, at a test clock: every decision, state, give-back and
//! settle the model's; and what a real call leaves (the hash's fields, its
//! expiry at the window's end plus the margin).

use super::*;
use crate::model::window::{Params as WindowParams, Window};
use crate::remote::window_cases::{self, acts, start, windows};
use crate::values::limit::Limit;

fn window_limiter(server: &RedisServer, quota: u64, window: Window) -> RedisLimiter {
    RedisLimiter::builder(server.url(), Rate::per_second(1))
        .limit(Limit::per_window(quota, window).unwrap())
        .build()
        .unwrap()
}

#[test]
fn lua_window_step_agrees_with_the_model_call_for_call() {
    let server = RedisServer::start();
    let mut runner = crate::remote::settle_cases::runner(300);
    let quota = prop_oneof![4 => 1..=10u64, 1 => Just(1u64 << 40), 1 => Just(super::super::script::MAX_QUOTA)];
    let strategy = (quota, windows(), start(), acts());
    runner
        .run(&strategy, |(quota, window, start, acts)| {
            let Some(params) = window_cases::params(quota, window) else {
                return Ok(());
            };
            let lim = window_limiter(&server, params.quota(), window);
            let key = fresh_key();
            let backend = lim.backend();
            window_cases::check(params, start, &acts, |op, now| {
                backend.call_at(&key, op, Some(now)).map(|(done, _)| done)
            })
        })
        .unwrap();
}

#[test]
fn a_window_key_is_a_hash_of_two_integers_expiring_after_its_window() {
    let server = RedisServer::start();
    let lim = window_limiter(&server, 5, Window::Fixed { seconds: 100 });
    let taken = lim.try_take_n("w", 3).unwrap();
    let at = taken.at().as_nanos() as u64;
    let p = WindowParams::new(5, Window::Fixed { seconds: 100 }).unwrap();
    let index = p.index_at(at);
    let full = format!("{}w", lim.prefix());
    let fields = server.raw(&format!("HGETALL {full}"));
    let want = format!(
        "i\r\n${}\r\n{index}\r\n$1\r\nc\r\n$1\r\n3\r\n",
        index.to_string().len()
    );
    assert!(fields.contains(&want), "{fields:?}");
    // Expires 10 s after the window's end, on the server's clock.
    let pexpiretime = server.raw(&format!("PEXPIRETIME {full}"));
    let end_ms = p.end(index) / 1_000_000;
    assert!(
        pexpiretime.contains(&format!(":{}", end_ms + 10_000)),
        "{pexpiretime:?} {end_ms}"
    );
    // What the take found: two left, until the window's end.
    assert_eq!(taken.available(), 2);
    assert_eq!(taken.reset().as_nanos() as u64, p.end(index) - at);
    assert_eq!(
        lim.limit(),
        Limit::per_window(5, Window::Fixed { seconds: 100 }).unwrap()
    );
}

#[test]
fn a_quota_the_script_cannot_count_exactly_is_refused_by_name() {
    let server = RedisServer::start();
    let quota = super::super::script::MAX_QUOTA + 1;
    let lim = window_limiter(&server, quota, Window::Year { offset: 0 });
    let e = lim.try_take("k").unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e:?}");
    assert!(e.to_string().contains(&quota.to_string()), "{e}");
}

#[test]
fn a_value_not_a_window_is_an_error_never_a_grant() {
    let server = RedisServer::start();
    let lim = window_limiter(&server, 5, Window::MINUTE);
    let full = format!("{}k", lim.prefix());
    for (set, shown) in [
        (format!("SET {full} 12"), "WRONGTYPE"),
        (format!("HSET {full} i x c 1"), "not a paceline window"),
        (format!("HSET {full} other 1"), "not a paceline window"),
    ] {
        server.raw(&format!("DEL {full}"));
        server.raw(&set);
        let e = lim.try_take("k").unwrap_err();
        assert!(matches!(e, Error::Script(_)), "{set}: {e:?}");
        assert!(format!("{e}").contains(shown), "{set}: {e}");
    }
}

#[test]
fn lua_window_step_agrees_with_the_model_on_a_cluster() {
    let cluster = server::RedisCluster::start();
    let lim = RedisLimiter::cluster_builder(cluster.urls(), Rate::per_second(1))
        .limit(Limit::per_window(1, Window::SECOND).unwrap())
        .build()
        .unwrap();
    let backend = lim.backend();
    let mut runner = crate::remote::settle_cases::runner(60);
    let strategy = (1..=10u64, windows(), start(), acts());
    runner
        .run(&strategy, |(quota, window, start, acts)| {
            let Some(params) = window_cases::params(quota, window) else {
                return Ok(());
            };
            // Keys spread over the cluster's nodes.
            let key = fresh_key();
            window_cases::check(params, start, &acts, |op, now| {
                backend.call_at(&key, op, Some(now)).map(|(done, _)| done)
            })
        })
        .unwrap();
}
