//! `set_limit` (rate and slack as one unit) racing takes: every execution is
//! explained by one sequential order of the calls, each take decided whole
//! by the old parameters or the new, never by a mix (the new interval with
//! the old slack, say). Checked against the pure step: the observed answers
//! and the final state must be those of the change landing before the first
//! take, between them, or after both.

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::{check, Subject};
use paceline::model::schedule::{self, Admit, Params, FULL, ORIGIN};
use paceline::{clock::ManualClock, AtomicLimiter, MutexLimiter, Rate};

/// Old: 1 ms, slack 2 (burst 3). New: 3 ms, slack 0 (burst 1).
const T1: u64 = 1_000_000;
const T2: u64 = 3_000_000;

/// What the taker observed: `try_take_n(3)` admitted, then `try_take_n(1)`
/// admitted or the wait its refusal told (a refusal no parameters change is
/// answered from the state alone: its wait must be one a sequential order
/// gives too; `u64::MAX` for a refusal no wait cures), and the state at
/// the end as `(available, next_free)`.
type Seen = (bool, Result<(), u64>, u64, u64);

/// The answers when the change lands before take `k` (2: after both).
fn sequential(k: usize) -> Seen {
    let (old, new) = (Params::new(T1, 2).unwrap(), Params::new(T2, 0).unwrap());
    let now = ORIGIN;
    let (mut tat, mut p) = (FULL, old);
    let mut answers = [Err(0); 2];
    for (i, cost) in [3u64, 1].into_iter().enumerate() {
        if i == k {
            tat = schedule::rebase(tat, now, p, new);
            p = new;
        }
        answers[i] = match schedule::step(tat, now, cost, p, Admit::Within(0)) {
            Ok(g) => {
                tat = g.next;
                Ok(())
            }
            Err(schedule::Deny::Wait(wait)) => Err(wait),
            // No wait helps (a cost over the new burst).
            Err(_) => Err(u64::MAX),
        };
    }
    if k == 2 {
        tat = schedule::rebase(tat, now, p, new);
        p = new;
    }
    (
        answers[0].is_ok(),
        answers[1],
        schedule::available(tat, now, p),
        schedule::next_free(tat, now, p),
    )
}

fn set_limit_racing_takes<S: Subject>(build: fn(ManualClock) -> S, set: fn(&S)) {
    let explained: Vec<Seen> = (0..3).map(sequential).collect();
    check(S::NAME, move || {
        let limiter = Arc::new(build(ManualClock::new()));
        let changer = {
            let limiter = limiter.clone();
            thread::spawn(move || set(&limiter))
        };
        let first = limiter.try_take_n(3).is_ok();
        let second = limiter
            .try_take_n(1)
            .map_err(|e| e.retry_after().map_or(u64::MAX, |w| w.as_nanos() as u64));
        changer.join().unwrap();
        let seen = (
            first,
            second,
            limiter.available(),
            limiter.next_free().as_nanos() as u64,
        );
        assert!(
            explained.contains(&seen),
            "{}: {seen:?} is no sequential order's {explained:?}",
            S::NAME
        );
    });
}

fn rate(interval: u64) -> Rate {
    Rate::every(Duration::from_nanos(interval)).unwrap()
}

#[test]
fn atomic_limiter_set_limit_is_one_unit() {
    set_limit_racing_takes(
        |clock| {
            AtomicLimiter::builder(rate(T1))
                .slack(2)
                .full_credit(true)
                .clock(clock)
                .build()
                .unwrap()
        },
        |l| l.set_limit(rate(T2), 0).unwrap(),
    );
}

#[test]
fn mutex_limiter_set_limit_is_one_unit() {
    set_limit_racing_takes(
        |clock| {
            MutexLimiter::builder(rate(T1))
                .slack(2)
                .full_credit(true)
                .clock(clock)
                .build()
                .unwrap()
        },
        |l| l.set_limit(rate(T2), 0).unwrap(),
    );
}
