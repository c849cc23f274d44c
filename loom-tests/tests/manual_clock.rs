//! Blocking takes on a [`ManualClock`] that another thread advances: every
//! waiter wakes once the clock passes its slot (no lost wake-up, which loom
//! reports as a deadlock) and none returns before the time it reports.
//!
//! This is the clock the other models and paceline's own tests drive time
//! with, so its lock-and-condvar hand-off is worth proving too.

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::{check, OneKey, Subject};
use paceline::{clock::ManualClock, AtomicLimiter, MutexLimiter};

const T: Duration = Duration::from_millis(1);

fn waiters_wake_at_their_slot<L: Subject>() {
    check(&format!("{} manual clock", L::NAME), || {
        let clock = ManualClock::new();
        // Slack 2, spent at once: the next slots are T, 2T, 3T whenever
        // they are reserved, since the clock stays within the banked window
        // of the state (with no slack, a take reserved after an advance
        // would start later and need more advancing than happens here).
        let limiter = Arc::new(L::build(T, 2, true, clock.clone()));
        limiter.take_n(3).expect("a full limiter admits its burst");

        let waiter = |takes: usize| {
            let limiter = limiter.clone();
            let clock = clock.clone();
            thread::spawn(move || {
                (0..takes)
                    .map(|_| {
                        let at = limiter.take();
                        let woke = clock.elapsed();
                        assert!(
                            woke >= at,
                            "{}: take returned at {woke:?}, before its time {at:?}",
                            L::NAME
                        );
                        at
                    })
                    .collect::<Vec<_>>()
            })
        };
        let a = waiter(2);
        let b = waiter(1);
        // The three permits need the clock at 3T; a lost wake-up leaves a
        // waiter blocked for ever, which loom reports.
        for _ in 0..3 {
            clock.advance(T);
        }
        let mut went = a.join().unwrap();
        went.extend(b.join().unwrap());
        // Each went at its slot, or at once if the clock had passed it.
        assert!(
            went.iter().all(|&at| T <= at && at <= 3 * T),
            "{}: permits went at {went:?}",
            L::NAME
        );
        assert_eq!(
            clock.elapsed() + limiter.next_free(),
            4 * T,
            "{}: the three permits are not all in the state",
            L::NAME
        );
    });
}

#[test]
fn atomic_limiter_waiters_wake_at_their_slot() {
    waiters_wake_at_their_slot::<AtomicLimiter<ManualClock>>();
}

#[test]
fn mutex_limiter_waiters_wake_at_their_slot() {
    waiters_wake_at_their_slot::<MutexLimiter<ManualClock>>();
}

#[test]
fn keyed_limiter_waiters_wake_at_their_slot() {
    waiters_wake_at_their_slot::<OneKey>();
}
