//! `set_rate` racing blocking takes: no panic, no slot handed out twice,
//! every grant paced by one of the two rates, whole, and the change taking
//! effect once: in reservation order, old-rate grants, then new-rate ones.
//!
//! As in `take.rs`, slack 0 and an auto-advancing clock make each returned
//! time the caller's slot, and every request start where the previous one
//! ended, except across the change: `set_rate` rebases the state, so the
//! first slot after it is one *new* interval after the last slot handed out
//! (`schedule::rebase`). A grant of cost `n` paced at interval `T` takes
//! `[start, start + n * T)` and its slot is the last permit's, `start + (n -
//! 1) * T`. So the slots, and the state at the end, must be explained by one
//! place for the rebase and one choice of `T1` or `T2` per grant: `T1`
//! before the rebase, `T2` after it.

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::{check, in_slot_order, OneKey, Subject};
use paceline::{clock::Clock, clock::ManualClock, AtomicLimiter, MutexLimiter, Rate};

const T1: Duration = Duration::from_millis(1);
const T2: Duration = Duration::from_millis(3);

/// The grants' slots and the final state `end` when the rate changes from
/// `T1` to `T2` just before grant `k` (`k == grants.len()`: after the last),
/// starting from a fresh state at 0, and grant `i` is paced at
/// `intervals[i]`.
///
/// The change [rebases](paceline::model::schedule::rebase) the state: the next slot
/// is one `T2` after the last slot handed out, that is, the state moves by
/// `T2 - T1` (a fresh state, before any grant, is left alone).
fn schedule(
    grants: &[(Duration, u64)],
    k: usize,
    intervals: &[Duration],
) -> (Vec<Duration>, Duration) {
    let mut start = Duration::ZERO;
    let mut slots = Vec::new();
    let rebase = |start: Duration| {
        if start.is_zero() {
            start
        } else {
            start - T1 + T2
        }
    };
    for (i, (&(_, cost), &t)) in grants.iter().zip(intervals).enumerate() {
        if i == k {
            start = rebase(start);
        }
        slots.push(start + t * (cost as u32 - 1));
        start += t * cost as u32;
    }
    if k == grants.len() {
        start = rebase(start);
    }
    (slots, start)
}

/// Every explanation of `grants` (in slot order) and the final state `end`:
/// where the change took effect (`k`, the first grant after the rebase) and
/// the interval of each grant, one of `T1`, `T2`. Slots alone do not always
/// fix them: a cost-1 grant at `T1` followed by the rebase leaves the state
/// where one at `T2` does.
fn explanations(grants: &[(Duration, u64)], end: Duration) -> Vec<(usize, Vec<Duration>)> {
    let slots: Vec<Duration> = grants.iter().map(|&(slot, _)| slot).collect();
    (0..=grants.len())
        .flat_map(|k| (0..1u32 << grants.len()).map(move |choice| (k, choice)))
        .map(|(k, choice)| {
            let intervals = (0..grants.len())
                .map(|i| if choice >> i & 1 == 0 { T1 } else { T2 })
                .collect::<Vec<_>>();
            (k, intervals)
        })
        .filter(|(k, intervals)| schedule(grants, *k, intervals) == (slots.clone(), end))
        .collect()
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
        let i = grants
            .iter()
            .position(|&(slot, _)| slot == after_set)
            .unwrap();
        // Each check narrows the explanations; the first to leave none is
        // the invariant broken.
        let name = L::NAME;
        let all = explanations(&grants, end);
        assert!(
            !all.is_empty(),
            "{name}: grants {grants:?} ending at {end:?} are not paced by {T1:?} or {T2:?} \
             each, with the change rebasing the state once"
        );
        // The change takes effect once: no grant reserved after one at the
        // new rate goes back to the old.
        let once: Vec<_> = all
            .into_iter()
            .filter(|(_, intervals)| intervals.windows(2).all(|w| w[0] <= w[1]))
            .collect();
        assert!(
            !once.is_empty(),
            "{name}: the rate went back to {T1:?} after a grant at {T2:?}: {grants:?}"
        );
        let after: Vec<_> = once
            .into_iter()
            .filter(|(_, intervals)| intervals[i] == T2)
            .collect();
        assert!(
            !after.is_empty(),
            "{name}: the take after set_rate was paced at the old rate: {grants:?}"
        );
        // The next slot after the change is one new interval after the last
        // one handed out: every grant after the rebase is paced at `T2`, and
        // none before it. (A step between the rebase and the interval's
        // store would book at `T1` from the rebased state.)
        let exact = after
            .iter()
            .any(|(k, intervals)| (0..intervals.len()).all(|j| (intervals[j] == T2) == (j >= *k)));
        assert!(
            exact,
            "{name}: a grant after the rebase was paced at the old rate: {grants:?}"
        );
        assert_eq!(limiter.rate(), Rate::every(T2).unwrap(), "{}", L::NAME);
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

#[test]
fn keyed_limiter_grants_follow_one_rate_or_the_other() {
    grants_follow_one_rate_or_the_other::<OneKey>();
}
