//! The CAS loop over the window step against the model, on a real
//! `memcached`, the client's clock a `ManualClock` read as Unix time: every
//! decision, word, give-back and settle the model's; and the item's
//! expiry after its window.

use super::*;
use crate::model::window::{Params as WindowParams, Window};
use crate::remote::window_cases::{self, acts, start, windows};
use crate::values::limit::Limit;

fn window_limiter(
    server: &MemcachedServer,
    quota: u64,
    window: Window,
    clock: &ManualClock,
) -> MemcachedLimiter<ManualClock> {
    MemcachedLimiter::builder(server.addr(), Rate::per_second(1))
        .limit(Limit::per_window(quota, window).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn the_cas_loop_agrees_with_the_window_step_call_for_call() {
    let server = MemcachedServer::start();
    let mut runner = crate::remote::settle_cases::runner(200);
    let quota = prop_oneof![4 => 1..=10u64, 1 => Just(1u64 << 40)];
    let strategy = (quota, windows(), start(), acts());
    runner
        .run(&strategy, |(quota, window, start, acts)| {
            let Some(params) = window_cases::params(quota, window) else {
                return Ok(());
            };
            let clock = ManualClock::new();
            let lim = window_limiter(&server, params.quota(), window, &clock);
            let key = fresh_key();
            let backend = lim.backend();
            window_cases::check(params, start, &acts, |op, now| {
                clock.set(Duration::from_nanos(now - ORIGIN));
                backend.call(&key, op)
            })
        })
        .unwrap();
}

#[test]
fn a_window_item_expires_after_its_window() {
    let server = MemcachedServer::start();
    let clock = ManualClock::new();
    // Today, 20 s into a minute.
    let now = 1_779_999_980 * 1_000_000_000u64;
    clock.set(Duration::from_nanos(now));
    let lim = window_limiter(&server, 5, Window::MINUTE, &clock);
    let taken = lim.try_take_n("w", 2).unwrap();
    assert_eq!(taken.available(), 3);
    let p = WindowParams::new(5, Window::MINUTE).unwrap();
    let stored = format!("{}w", lim.prefix());
    let (ttl, value) = ttl_and_value(&server, &stored).unwrap();
    let index = p.index_at(now);
    assert_eq!(value, (index << p.count_bits() | 2).to_string());
    // 40 s left in the minute, and the grace.
    assert_eq!(ttl, 40 + 2);
}
