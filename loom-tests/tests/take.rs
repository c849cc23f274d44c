//! Concurrent blocking `take` / `take_n`: every caller gets its own slot, the
//! slots are spaced by the interval times their cost in reservation order,
//! and no update is lost.
//!
//! Slack 0 makes each returned time the caller's slot exactly (nothing is
//! banked, so a slot is never in the past), and an auto-advancing clock lets
//! a waiter jump the clock to its slot instead of blocking. Since the clock
//! then never passes the state, every request starts where the previous one
//! ended: the grants must tile `[0, total * T)` with no gap and no overlap.

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::{check, in_slot_order, OneKey, Subject};
use paceline::{clock::Clock, clock::ManualClock, AtomicLimiter, MutexLimiter};

const T: Duration = Duration::from_millis(1);

fn grants_tile_the_schedule<L: Subject>() {
    check(&format!("{} take", L::NAME), || {
        let clock = ManualClock::with_auto_advance();
        let limiter = Arc::new(L::build(T, 0, false, clock.clone()));

        let a = {
            let limiter = limiter.clone();
            thread::spawn(move || vec![(limiter.take(), 1), (limiter.take(), 1)])
        };
        let b = {
            let limiter = limiter.clone();
            thread::spawn(move || vec![(limiter.take_n(2).expect("cost 2 fits"), 2)])
        };
        let c = limiter.take_n(3).expect("cost 3 fits");
        let mut grants = vec![(c, 3)];
        grants.extend(a.join().unwrap());
        grants.extend(b.join().unwrap());
        let grants = in_slot_order(grants);

        // The first request starts at the clock's origin, each later one
        // where the one before it ended: distinct slots, `T * cost` apart.
        let mut end = Duration::ZERO;
        for &(slot, cost) in &grants {
            let start = slot - T * (cost as u32 - 1);
            assert_eq!(
                start,
                end,
                "{}: grant {slot:?} (cost {cost}) does not start where the previous one ended; \
                 all grants: {grants:?}",
                L::NAME
            );
            end = slot + T;
        }

        // No update lost: the state is exactly the sum of what was granted.
        let total: u64 = grants.iter().map(|&(_, cost)| cost).sum();
        let now = Duration::from_nanos(clock.now());
        assert_eq!(
            now + limiter.next_free(),
            T * total as u32,
            "{}: state does not account for the {total} permits granted: {grants:?}",
            L::NAME
        );
        assert_eq!(limiter.available(), 0, "{}", L::NAME);
    });
}

#[test]
fn atomic_limiter_grants_tile_the_schedule() {
    grants_tile_the_schedule::<AtomicLimiter<ManualClock>>();
}

#[test]
fn mutex_limiter_grants_tile_the_schedule() {
    grants_tile_the_schedule::<MutexLimiter<ManualClock>>();
}

#[test]
fn keyed_limiter_grants_tile_the_schedule() {
    grants_tile_the_schedule::<OneKey>();
}
