//! Two threads take on the same key before the keyed limiter tracks it:
//! exactly one entry is created, the burst bound holds, and no update is
//! lost.
//!
//! The clock stands at 0 throughout, so the key (slack 2, full credit as a
//! new key) has exactly `slack + 1 = 3` permits to give: what the threads
//! are admitted plus what is still available at the end must come to
//! exactly 3, whatever the interleaving. Both threads miss the key under
//! their shard's read lock and race for its write lock (`decide_new`); the
//! loser must find the winner's entry and step on it, and later calls on
//! both threads race their CAS on that entry under the read lock.

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::check;
use paceline::{clock::ManualClock, Error, KeyedLimiter, Rate, Take};

const T: Duration = Duration::from_millis(1);
const SLACK: u64 = 2;
const KEY: u32 = 7;

/// Permits admitted by `try_take_n` on [`KEY`] for each cost, in turn, and
/// the number of calls admitted.
fn try_each(limiter: &KeyedLimiter<u32, ManualClock>, costs: &[u64]) -> (u64, u64) {
    let (mut permits, mut calls) = (0, 0);
    for &cost in costs {
        match limiter.try_take_n(&KEY, cost) {
            Ok(_) => {
                permits += cost;
                calls += 1;
            }
            Err(Error::RetryAfter(wait)) => assert!(wait.duration() > Duration::ZERO),
            Err(e) => panic!("cost {cost} refused with {e}"),
        }
    }
    (permits, calls)
}

#[test]
fn a_new_keys_first_takes_create_one_entry_within_the_burst() {
    check("keyed first take", || {
        let clock = ManualClock::new();
        let limiter = Arc::new(
            KeyedLimiter::<u32>::builder(Rate::every(T).unwrap())
                .slack(SLACK)
                // One shard: a loom lock per shard.
                .max_keys(1)
                .clock(clock)
                .build()
                .unwrap(),
        );
        let a = {
            let limiter = limiter.clone();
            thread::spawn(move || try_each(&limiter, &[1, 1]))
        };
        let b = {
            let limiter = limiter.clone();
            thread::spawn(move || try_each(&limiter, &[2]))
        };
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let (permits, calls) = (a.0 + b.0, a.1 + b.1);
        let burst = SLACK + 1;
        assert!(
            permits <= burst,
            "{permits} permits at one instant, over the burst {burst}"
        );
        assert_eq!(
            permits + limiter.available(&KEY),
            burst,
            "{permits} admitted, {} left: an update lost",
            limiter.available(&KEY)
        );
        let stats = limiter.keyed_stats();
        assert_eq!(stats.keys, 1, "one key, {} entries", stats.keys);
        assert_eq!(stats.admitted, calls, "calls admitted, as counted");
    });
}
