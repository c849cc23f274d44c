//! The window script (`window.lua`) against the window step, on a real
//! `redis-server`, at a test clock: every decision, state, give-back and
//! settle the model's, a key forgotten at its window's end; what a real
//! call leaves (the key's count and window, its expiry at the window's
//! end); and a server clock stepped back.

use super::*;
use crate::model::window::{Params as WindowParams, Window};
use crate::remote::window_cases::{self, acts_forward, start, windows};
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
    let quota = prop_oneof![4 => 1..=10u64, 1 => Just(1u64 << 30), 1 => Just(super::super::script::MAX_QUOTA)];
    let strategy = (quota, windows(), start(), acts_forward());
    runner
        .run(&strategy, |(quota, window, start, acts)| {
            let Some(params) = window_cases::params(quota, window) else {
                return Ok(());
            };
            let lim = window_limiter(&server, params.quota(), window);
            let key = fresh_key();
            let backend = lim.backend();
            window_cases::check_expiring(params, start, &acts, |op, now| {
                backend.call_at(&key, op, Some(now)).map(|(done, _)| done)
            })
        })
        .unwrap();
}

#[test]
fn a_window_key_is_its_count_and_window_expiring_at_the_window_end() {
    let server = RedisServer::start();
    let lim = window_limiter(&server, 5, Window::Fixed { seconds: 100 });
    let taken = lim.try_take_n("w", 3).unwrap();
    let at = taken.at().as_nanos() as u64;
    let p = WindowParams::new(5, Window::Fixed { seconds: 100 }).unwrap();
    let index = p.index_at(at);
    let full = format!("{}w", lim.prefix());
    // f * 2^52 + r * 2^37 + c: the window started (f 0), r its index mod
    // 32767 plus 1, c the count.
    let value = ((index % 32_767 + 1) << 37) + 3;
    let got = server.raw(&format!("GET {full}"));
    assert!(got.contains(&format!("\r\n{value}\r\n")), "{got:?} {value}");
    // Gone from the window's end on, on the server's clock.
    let pexpiretime = server.raw(&format!("PEXPIRETIME {full}"));
    let end_ms = p.end(index) / 1_000_000;
    assert!(
        pexpiretime.contains(&format!(":{}", end_ms - 1)),
        "{pexpiretime:?} {end_ms}"
    );
    // A second take, granted at once on the INCRBY alone, reads the same
    // window off the key.
    let again = lim.try_take("w").unwrap();
    assert_eq!(again.available(), 1);
    let got = server.raw(&format!("GET {full}"));
    assert!(got.contains(&format!("\r\n{}\r\n", value + 1)), "{got:?}");
    // What the take found: two left, until the window's end.
    assert_eq!(taken.available(), 2);
    assert_eq!(taken.reset().as_nanos() as u64, p.end(index) - at);
    assert_eq!(
        lim.limit(),
        Limit::per_window(5, Window::Fixed { seconds: 100 }).unwrap()
    );
}

#[test]
fn a_key_s_abbreviated_index_is_read_as_the_window_nearest_the_client_s() {
    use super::super::script::nearest;
    let round = 32_767u64;
    for near in [
        0,
        1,
        5,
        round - 1,
        round,
        round + 1,
        1_000_000,
        u64::MAX / 2,
    ] {
        for d in [0i64, 1, -1, 7, -7, 16_383, -16_383, 16_000, -12_345] {
            let Some(i) = near.checked_add_signed(d) else {
                continue;
            };
            assert_eq!(nearest(i % round, near), i, "near {near}, d {d}");
        }
    }
}

#[test]
fn a_server_clock_stepped_back_keeps_the_window_its_key_holds() {
    let server = RedisServer::start();
    let window = Window::Fixed { seconds: 60 };
    let lim = window_limiter(&server, 3, window);
    let p = WindowParams::new(3, window).unwrap();
    let backend = lim.backend();
    let key = fresh_key();
    let s = 1_000_000_000u64;
    let take_within = |now: u64, admit: Admit| {
        let count = crate::remote::seam::Count {
            cost: 1,
            params: p,
            admit,
            ask: crate::wait::Ask::Answer,
        };
        backend
            .call_at(&key, Call::Count(count), Some(now + ORIGIN))
            .map(|(done, _)| done)
            .and_then(crate::remote::Done::decision)
            .unwrap()
    };
    let take = |now: u64| take_within(now, Admit::Always);
    // Two in the window [6000 s, 6060 s).
    let t = 6_030 * s;
    for _ in 0..2 {
        assert!(matches!(take(t), Decision::Granted(_)));
    }
    // Back 45 s, into the window before: the key still holds 6000's, and a
    // take counts there and goes at once; the window stays spent, the next
    // take waits for the one after it (75 s on the clock stepped back).
    let Decision::Granted(b) = take(t - 45 * s) else {
        panic!("refused")
    };
    assert_eq!(b.slot, t - 45 * s + ORIGIN);
    assert_eq!(
        p.unpack(b.next),
        crate::model::window::State {
            index: 100,
            count: 3
        }
    );
    assert_eq!(
        take_within(t - 45 * s, Admit::Within(0)),
        Decision::Denied(Deny::Wait(75 * s))
    );
    // Past the window's end, then back before any call: the key is gone,
    // and the window the clock lands in starts afresh.
    let _ = backend.call_at(&key, Call::PeekCount(p), Some(6_061 * s + ORIGIN));
    let Decision::Granted(b) = take(t) else {
        panic!("refused")
    };
    assert_eq!(
        p.unpack(b.next),
        crate::model::window::State {
            index: 100,
            count: 1
        }
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
        (format!("HSET {full} i 1 c 1"), "WRONGTYPE"),
        (format!("SET {full} x"), "not an integer"),
        (format!("SET {full} 12"), "not a paceline window"),
        (
            format!("SET {full} 1700000000000000000"),
            "not a paceline window",
        ),
        // A window's form with no expiry, and one whose expiry ends no
        // window of the limit's, where a take's INCRBY finds no room (the
        // count over the quota) and the step reads the key in full.
        (format!("SET {full} 137438953480"), "not a paceline window"),
        (
            format!("SET {full} 137438953480 PXAT 4102444800123"),
            "not a paceline window",
        ),
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
    let strategy = (1..=10u64, windows(), start(), acts_forward());
    runner
        .run(&strategy, |(quota, window, start, acts)| {
            let Some(params) = window_cases::params(quota, window) else {
                return Ok(());
            };
            // Keys spread over the cluster's nodes.
            let key = fresh_key();
            window_cases::check_expiring(params, start, &acts, |op, now| {
                backend.call_at(&key, op, Some(now)).map(|(done, _)| done)
            })
        })
        .unwrap();
}
