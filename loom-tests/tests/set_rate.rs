//! `set_rate` racing blocking takes: no panic, no slot handed out twice,
//! every grant paced by one of the two rates, whole, and the change taking
//! effect once: in reservation order, old-rate grants, then new-rate ones.
//!
//! As in `take.rs`, slack 0 and an auto-advancing clock make each returned
//! time the caller's slot, and every request start where the previous one
//! ended. A grant of cost `n` paced at interval `T` takes `[start, start +
//! n * T)` and its slot is the last permit's, `start + (n - 1) * T`. So the
//! slots, and the state at the end, must be explained by one choice of `T1`
//! or `T2` per grant.

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::{check, in_slot_order, Subject};
use paceline::{AtomicLimiter, Clock, ManualClock, MutexLimiter, Rate};

const T1: Duration = Duration::from_millis(1);
const T2: Duration = Duration::from_millis(3);

/// The grants' slots and the final state `end` when grant `i` is paced at
/// `intervals[i]`, starting from 0.
fn schedule(grants: &[(Duration, u64)], intervals: &[Duration]) -> (Vec<Duration>, Duration) {
    let mut start = Duration::ZERO;
    let mut slots = Vec::new();
    for (&(_, cost), &t) in grants.iter().zip(intervals) {
        slots.push(start + t * (cost as u32 - 1));
        start += t * cost as u32;
    }
    (slots, start)
}

/// The intervals that explain `grants` (in slot order) and the final state
/// `end`, one of `T1`, `T2` per grant, if any.
fn explain(grants: &[(Duration, u64)], end: Duration) -> Option<Vec<Duration>> {
    let slots: Vec<Duration> = grants.iter().map(|&(slot, _)| slot).collect();
    (0..1u32 << grants.len())
        .map(|choice| {
            (0..grants.len())
                .map(|i| if choice >> i & 1 == 0 { T1 } else { T2 })
                .collect::<Vec<_>>()
        })
        .find(|intervals| schedule(grants, intervals) == (slots.clone(), end))
}

fn grants_follow_one_rate_or_the_other<L: Subject>() {
    check(&format!("{} set_rate", L::NAME), || {
        let clock = ManualClock::with_auto_advance();
        let limiter = Arc::new(L::build(T1, 0, false, clock.clone()));

        let a = {
            let limiter = limiter.clone();
            thread::spawn(move || vec![(limiter.take(), 1), (limiter.take_n(2).unwrap(), 2)])
        };
        let b = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                limiter.set_rate(Rate::every(T2).unwrap()).unwrap();
                // Reserved after this thread's own set_rate: paced by T2.
                limiter.take()
            })
        };
        let mut grants = vec![(limiter.take(), 1)];
        grants.extend(a.join().unwrap());
        let after_set = b.join().unwrap();
        grants.push((after_set, 1));
        let grants = in_slot_order(grants);

        for pair in grants.windows(2) {
            assert!(
                pair[0].0 < pair[1].0,
                "{}: a slot handed out twice: {grants:?}",
                L::NAME
            );
        }
        let end = Duration::from_nanos(clock.now()) + limiter.next_free();
        let intervals = explain(&grants, end).unwrap_or_else(|| {
            panic!(
                "{}: grants {grants:?} ending at {end:?} are not paced by {T1:?} or {T2:?} each",
                L::NAME
            )
        });
        // The change takes effect once: no grant reserved after one at the
        // new rate goes back to the old. (Slots fix each grant's interval,
        // so the explanation is unique.)
        assert!(
            intervals.windows(2).all(|w| w[0] <= w[1]),
            "{}: the rate went back to {T1:?} after a grant at {T2:?}: {grants:?} paced at {intervals:?}",
            L::NAME
        );
        let i = grants
            .iter()
            .position(|&(slot, _)| slot == after_set)
            .unwrap();
        assert_eq!(
            intervals[i],
            T2,
            "{}: the take after set_rate was paced at the old rate: {grants:?}",
            L::NAME
        );
        assert_eq!(
            limiter.rate(),
            Some(Rate::every(T2).unwrap()),
            "{}",
            L::NAME
        );
    });
}

#[test]
fn atomic_limiter_grants_follow_one_rate_or_the_other() {
    grants_follow_one_rate_or_the_other::<AtomicLimiter<ManualClock>>();
}

#[test]
fn mutex_limiter_grants_follow_one_rate_or_the_other() {
    grants_follow_one_rate_or_the_other::<MutexLimiter<ManualClock>>();
}
