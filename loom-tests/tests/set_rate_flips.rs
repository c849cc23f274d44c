//! `set_rate` flipping the rate there and back (`A` → `B` → `A`) while two
//! threads take: the window bound holds, every grant is paced by one rate,
//! and each slot is exactly one interval (the one in force for its grant)
//! after the one before, so that after a change the next slot is one *new*
//! interval after the last.
//!
//! This is the race a two-step `set_rate` (rebase `tat`, then store the
//! interval) loses: a step between the two books one slot at the old
//! spacing from the rebased state, the flip back then rebases that booking
//! as if made at the new interval, and pulls the state back: two slots
//! closer than either interval (with the state fresh, the same happens to a
//! first request decided before the change and stored after it).
//!
//! Slack 0 and a clock that never moves: each request starts where the
//! state stands, so the slots, in order, must be spaced by exactly the
//! interval each grant was paced at, and never by less than `A`, the faster
//! rate (`slack + 1 + elapsed / A` permits in any window).

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::{check, OneKey, Subject};
use paceline::model::schedule::{Admit, Grant, ORIGIN};
use paceline::{clock::ManualClock, AtomicLimiter, MutexLimiter, Rate};

/// The rate the limiter starts at and comes back to.
const A: Duration = Duration::from_millis(2);
/// The rate in between: not a multiple of `A`, so that no sequence of
/// bookings at `A` can bring a state lowered by `B - A` back to a word a
/// preempted step read (an ABA this model is not about; see `atomic.rs`).
const B: Duration = Duration::from_millis(3);

fn flips_keep_the_window_bound<L: Subject>() {
    check(&format!("{} set_rate flips", L::NAME), || {
        let clock = ManualClock::new();
        let limiter = Arc::new(L::build(A, 0, false, clock));

        let flipper = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                limiter.set_rate(Rate::every(B).unwrap()).unwrap();
                limiter.set_rate(Rate::every(A).unwrap()).unwrap();
            })
        };
        let taker = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.reserve(1, Admit::Always).expect("cost 1 fits"))
        };
        let mut grants = vec![limiter.reserve(1, Admit::Always).expect("cost 1 fits")];
        grants.push(taker.join().unwrap());
        flipper.join().unwrap();
        // Quiescent, at `A` again: one interval after the last slot.
        let last = limiter.reserve(1, Admit::Always).expect("cost 1 fits");
        grants.sort_by_key(|g| g.slot);
        grants.push(last);
        check_grants::<L>(&grants);
    });
}

/// `grants` in slot order, each of cost 1.
fn check_grants<L: Subject>(grants: &[Grant]) {
    let name = L::NAME;
    let ms = |ns: u64| (ns - ORIGIN) as f64 / 1e6;
    let shown = || {
        grants
            .iter()
            .map(|g| format!("slot {}ms next {}ms", ms(g.slot), ms(g.next)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let interval = |g: &Grant| Duration::from_nanos(g.next - g.slot);
    for g in grants {
        assert!(
            interval(g) == A || interval(g) == B,
            "{name}: a grant paced by neither {A:?} nor {B:?}: [{}]",
            shown()
        );
    }
    assert_eq!(
        grants[0].slot, ORIGIN,
        "{name}: the first grant goes at once"
    );
    for pair in grants.windows(2) {
        let gap = Duration::from_nanos(pair[1].slot.saturating_sub(pair[0].slot));
        assert!(
            pair[1].slot > pair[0].slot && gap >= A,
            "{name}: two slots {gap:?} apart, closer than {A:?}: over the window bound: [{}]",
            shown()
        );
        // `FLIPS_IGNORE=exact` turns this one off, to see what the window
        // bound catches alone.
        if std::env::var("FLIPS_IGNORE").as_deref() != Ok("exact") {
            assert_eq!(
                gap,
                interval(&pair[1]),
                "{name}: a slot not one interval in force after the one before: [{}]",
                shown()
            );
        }
    }
    let last = grants.last().unwrap();
    assert_eq!(
        interval(last),
        A,
        "{name}: after the flips, a take paced at {B:?}: [{}]",
        shown()
    );
}

#[test]
fn atomic_limiter_flips_keep_the_window_bound() {
    flips_keep_the_window_bound::<AtomicLimiter<ManualClock>>();
}

#[test]
fn mutex_limiter_flips_keep_the_window_bound() {
    flips_keep_the_window_bound::<MutexLimiter<ManualClock>>();
}

#[test]
fn keyed_limiter_flips_keep_the_window_bound() {
    flips_keep_the_window_bound::<OneKey>();
}
