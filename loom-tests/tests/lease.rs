//! A lease's lock-free spends (`src/lease/held.rs`'s CAS loop) racing each
//! other, a refill, and the clock passing the batch's expiry.
//!
//! Two threads spend one permit at a time from one `Leased` over an
//! `AtomicLimiter` (slack 3, T = 1 ms, leases of E = 1 ms: the lender runs
//! at slack 2, from full credit, whose burst of 3 the first take spends),
//! while a third moves the clock on by `T` four times: to the refusal's
//! retry-after, and past the next batch's expiry. Whatever the interleaving:
//!
//! - every spend's time is within `[decision, decision + E)` of some
//!   batch, so all spends together hold `S + 1 + w / T` in every window,
//!   and no more are spent by any time than the lender can have granted
//!   by then;
//! - no permit is spent twice: spends never exceed what was leased, and
//!   `leased = spent + given back + expired + held` at the end.
//!
//! The broken steps it was seen to catch are in `src/lib.rs`'s table; one
//! of them was the first version (the word's accesses all `Relaxed`).

#![cfg(paceline_loom)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use loom::thread;
use loom_tests::check;
use paceline::lease::Leased;
use paceline::{clock::ManualClock, AtomicLimiter, Limit, Rate, Take};

const T_NS: u64 = 1_000_000;
const SLACK: u64 = 3;

/// The most permits any window of `spends` (time ns, one permit each)
/// holds beyond `SLACK + 1 + w / T`.
fn excess(mut spends: Vec<u64>) -> i64 {
    spends.sort_unstable();
    let mut worst = i64::MIN;
    for i in 0..spends.len() {
        for j in i..spends.len() {
            let count = (j - i + 1) as i64;
            let allowed = (SLACK + 1 + (spends[j] - spends[i]) / T_NS) as i64;
            worst = worst.max(count - allowed);
        }
    }
    worst
}

/// Whether the spends up to each time are at most what the lender (from
/// full credit at 0, slack `SLACK - 1`) can have granted by then,
/// `SLACK + t / T`: each spend comes at or after its batch's decision.
fn decided_first(mut spends: Vec<u64>) -> bool {
    spends.sort_unstable();
    spends
        .iter()
        .enumerate()
        .all(|(i, &t)| i as u64 + 1 <= SLACK + t / T_NS)
}

#[test]
fn spends_race_refills_and_expiry_within_the_bound() {
    check("lease", || {
        let clock = ManualClock::new();
        let limit = Limit::new(Rate::per_second(1000), SLACK);
        let lender = AtomicLimiter::builder(limit.rate())
            .slack(SLACK)
            .full_credit(true)
            .clock(clock.clone())
            .build()
            .unwrap();
        let leased = Arc::new(
            Leased::with_clock(lender, limit, Duration::from_nanos(T_NS), clock.clone())
                .unwrap()
                .with_stats(true),
        );
        // The whole reduced burst at 0: the next batch waits for 3 T.
        let first = leased.try_take_n(&(), SLACK).unwrap().at().as_nanos() as u64;
        let spends = Arc::new(Mutex::new(vec![first; SLACK as usize]));
        let spender = || {
            let (leased, spends) = (leased.clone(), spends.clone());
            thread::spawn(move || {
                for _ in 0..2 {
                    if let Ok(taken) = leased.try_take(&()) {
                        spends.lock().unwrap().push(taken.at().as_nanos() as u64);
                    }
                }
            })
        };
        let a = spender();
        let b = spender();
        // To the refusal's retry-after, then past the next batch's expiry.
        for _ in 0..4 {
            clock.advance(Duration::from_nanos(T_NS));
        }
        a.join().unwrap();
        b.join().unwrap();
        let spends = spends.lock().unwrap().clone();
        let s = leased.stats().unwrap().leases.unwrap();
        assert_eq!(s.spent, spends.len() as u64, "{s:?}");
        // Settled: what was held is given back or counted expired.
        leased.release();
        assert_eq!(leased.held(), 0);
        let s = leased.stats().unwrap().leases.unwrap();
        assert_eq!(s.leased, s.spent + s.given_back + s.expired, "{s:?}");
        assert!(excess(spends.clone()) <= 0, "over the bound: {spends:?}");
        assert!(
            decided_first(spends.clone()),
            "spent before paid: {spends:?} {s:?}"
        );
    });
}
