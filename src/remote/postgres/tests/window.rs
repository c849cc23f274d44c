//! The window's PL/pgSQL function against the window step, on a real
//! PostgreSQL, at a test clock: every decision, word, give-back and
//! settle the model's; and the row's `rest_at` after its window.

use super::*;
use crate::limiter::take::Take;
use crate::model::window::{Params as WindowParams, Window};
use crate::remote::window_cases::{self, acts, start, windows};
use crate::values::limit::Limit;

fn window_limiter(server: &PgServer, quota: u64, window: Window) -> PostgresLimiter {
    let lim = PostgresLimiter::builder(&server.conn(), Rate::per_second(1))
        .limit(Limit::per_window(quota, window).unwrap())
        .prune(0, 64)
        .pool_size(2)
        .build()
        .unwrap();
    lim.install().unwrap();
    lim
}

#[test]
fn the_window_function_agrees_with_the_window_step_call_for_call() {
    let server = PgServer::start();
    let mut runner = crate::remote::settle_cases::runner(120);
    let quota = prop_oneof![4 => 1..=10u64, 1 => Just(1u64 << 40), 1 => Just(u64::MAX >> 12)];
    let strategy = (quota, windows(), start(), acts());
    let lim = window_limiter(&server, 1, Window::SECOND);
    let backend = lim.backend();
    runner
        .run(&strategy, |(quota, window, start, acts)| {
            let Some(params) = window_cases::params(quota, window) else {
                return Ok(());
            };
            let key = fresh_key();
            window_cases::check(params, start, &acts, |op, now| {
                backend.call_at(&key, op, Some(now))
            })
        })
        .unwrap();
}

#[test]
fn a_window_row_rests_after_its_window() {
    let server = PgServer::start();
    let lim = window_limiter(&server, 5, Window::HOUR);
    let taken = lim.try_take_n("w", 2).unwrap();
    assert_eq!(taken.available(), 3);
    let p = WindowParams::new(5, Window::HOUR).unwrap();
    let at = taken.at().as_nanos() as u64;
    let end = p.end(p.index_at(at)) / 1_000_000_000;
    assert_eq!(rest_at(&lim, "w"), Some(end as i64 + 2));
    assert_eq!(taken.reset().as_nanos() as u64, p.end(p.index_at(at)) - at);
    // A try beyond the quota is told to come back at the next hour.
    lim.try_take_n("w", 3).unwrap();
    let e = lim.try_take("w").unwrap_err();
    let wait = e.retry_after().unwrap().as_nanos() as u64;
    assert!(wait <= p.end(p.index_at(at)) - at, "{wait}");
}
