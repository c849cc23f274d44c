//! Concurrent `try_take_n` while another thread moves the clock: the number
//! admitted never exceeds `slack + 1 + elapsed / T`, and a refused call
//! changes nothing.
//!
//! The limiter (slack 1, full credit) first spends its whole burst at clock
//! 0, so its state is known exactly: empty, `tat = T`. Then two threads try
//! while a third advances the clock by `T` twice. The state never falls
//! behind `now - tau` in that window, so each admitted permit moves it by
//! exactly `T` and nothing else may: whatever the interleaving, the permits
//! admitted in the race plus those still available at the end must come to
//! exactly `elapsed / T`.

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::{check, OneKey, Subject};
use paceline::{clock::ManualClock, AtomicLimiter, Error, MutexLimiter};

const T: Duration = Duration::from_millis(1);
const SLACK: u64 = 1;

/// Permits admitted by `try_take_n` for each cost in `costs`, in turn.
fn try_each<L: Subject>(limiter: &L, costs: &[u64]) -> u64 {
    let mut admitted = 0;
    for &cost in costs {
        match limiter.try_take_n(cost) {
            Ok(()) => admitted += cost,
            // Refused for now, and told to come back later, not now.
            Err(Error::RetryAfter(wait)) => {
                assert!(
                    wait.duration() > Duration::ZERO,
                    "{}: refused cost {cost} with retry after {wait:?}",
                    L::NAME
                );
            }
            Err(e) => panic!("{}: cost {cost} refused with {e}", L::NAME),
        }
    }
    admitted
}

fn admitted_within_the_budget<L: Subject>() {
    check(&format!("{} try_take", L::NAME), || {
        let clock = ManualClock::new();
        let limiter = Arc::new(L::build(T, SLACK, true, clock.clone()));

        // Spend the burst: the limiter is empty at clock 0.
        let burst = SLACK + 1;
        limiter
            .try_take_n(burst)
            .expect("a full limiter admits its burst");
        assert_eq!(limiter.available(), 0, "{}", L::NAME);

        let a = {
            let limiter = limiter.clone();
            thread::spawn(move || try_each(&*limiter, &[1, 1]))
        };
        let b = {
            let limiter = limiter.clone();
            thread::spawn(move || try_each(&*limiter, &[2, 1]))
        };
        clock.advance(T);
        clock.advance(T);
        let raced = a.join().unwrap() + b.join().unwrap();

        let elapsed = clock.elapsed();
        let budget = SLACK + 1 + (elapsed.as_nanos() / T.as_nanos()) as u64;
        assert!(
            burst + raced <= budget,
            "{}: admitted {} permits in {elapsed:?}, over slack + 1 + elapsed / T = {budget}",
            L::NAME,
            burst + raced
        );
        // Refusals stored nothing (and no admission was lost): what was
        // admitted and what is left add up to what the clock paid for.
        assert_eq!(
            raced + limiter.available(),
            budget - burst,
            "{}: {raced} admitted in the race, {} left",
            L::NAME,
            limiter.available()
        );
    });
}

#[test]
fn atomic_limiter_admits_within_the_budget() {
    admitted_within_the_budget::<AtomicLimiter<ManualClock>>();
}

#[test]
fn mutex_limiter_admits_within_the_budget() {
    admitted_within_the_budget::<MutexLimiter<ManualClock>>();
}

#[test]
fn keyed_limiter_admits_within_the_budget() {
    admitted_within_the_budget::<OneKey>();
}
