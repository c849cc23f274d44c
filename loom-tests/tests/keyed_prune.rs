//! A take on a key racing the removal of that key: a prune of it at rest
//! changes no decision, and an eviction of it busy forgets at most its debt,
//! as documented on `WhenFull::Evict`.
//!
//! The key (slack 1, interval `T`) first spends its burst of 2 at clock 0,
//! so its state is known: the next permit at `T`, at rest (plus the 1 ms
//! grace) from `2T + PRUNE_GRACE`. Then one thread asks it for 2 more
//! without waiting (`take_n_timeout(.., 0)`, which returns the slot) while
//! another removes it:
//!
//! - prune: moves the clock to `2T + PRUNE_GRACE` and calls `prune()`. The
//!   taker reads the clock either before the move (refused: its slot is
//!   `2T` away) or after it, when the key is at rest and is admitted with
//!   the slot a lone limiter would give; whether the prune came first, and
//!   the key was decided as new, must not matter.
//! - evict: with `max_keys(1)` under `WhenFull::Evict`, a take on another
//!   key evicts the busy one. The taker is then either refused (before the
//!   eviction) or admitted as a new key at clock 0: the debt forgotten, a
//!   whole burst early and no more.

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::check;
use paceline::keyed::PRUNE_GRACE;
use paceline::{clock::ManualClock, keyed::WhenFull, Error, KeyedLimiter, Rate, Take};

const T: Duration = Duration::from_millis(1);
const SLACK: u64 = 1;
const KEY: u32 = 7;

fn limiter(clock: &ManualClock, when_full: WhenFull) -> Arc<KeyedLimiter<u32, ManualClock>> {
    let limiter = KeyedLimiter::<u32>::builder(Rate::every(T).unwrap())
        .slack(SLACK)
        // One shard: a loom lock per shard.
        .max_keys(1)
        .when_full(when_full)
        .clock(clock.clone())
        .build()
        .unwrap();
    // The whole burst at clock 0: the next permit at T.
    limiter.try_take_n(&KEY, SLACK + 1).unwrap();
    Arc::new(limiter)
}

/// The taker: 2 permits of [`KEY`] if their slot is now.
fn take_two(limiter: &KeyedLimiter<u32, ManualClock>) -> Result<Duration, Error> {
    limiter
        .take_n_timeout(&KEY, 2, Duration::ZERO)
        .map(|t| t.at())
}

/// Refused at clock 0: the key's next 2 permits are a slot `2T` away.
fn refused_at_zero() -> Result<Duration, Error> {
    Err(Error::QueueFull {
        wait: 2 * T,
        max_wait: Duration::ZERO,
    })
}

#[test]
fn pruning_a_key_at_rest_changes_no_decision() {
    check("keyed prune", || {
        let clock = ManualClock::new();
        let limiter = limiter(&clock, WhenFull::Refuse);
        let taker = {
            let limiter = limiter.clone();
            thread::spawn(move || take_two(&limiter))
        };
        let rest = 2 * T + Duration::from_nanos(PRUNE_GRACE);
        clock.set(rest);
        limiter.prune();
        let taken = taker.join().unwrap();
        // After the move, at rest or absent alike: from `rest - tau`, the
        // second permit one interval later, at `rest`.
        assert!(
            taken == refused_at_zero() || taken == Ok(rest),
            "taken {taken:?}: neither the decision at 0 nor at {rest:?}"
        );
        assert!(limiter.keyed_stats().keys <= 1);
        // And the key's state says so: spent by the take admitted at `rest`
        // (its next permit a slot `T` later), else at rest, its burst whole.
        // (A sweep that dropped the key busy, after the take, would leave it
        // whole after an admission.)
        let left = limiter.available(&KEY);
        let expected = if taken.is_ok() { 0 } else { SLACK + 1 };
        assert_eq!(left, expected, "taken {taken:?}, {left} permits left");
    });
}

#[test]
fn evicting_a_busy_key_forgets_at_most_its_debt() {
    check("keyed evict", || {
        let clock = ManualClock::new();
        let limiter = limiter(&clock, WhenFull::Evict);
        let taker = {
            let limiter = limiter.clone();
            thread::spawn(move || take_two(&limiter))
        };
        // Another key: the map is full of one busy key, which is evicted.
        assert_eq!(limiter.try_take(&8).map(drop), Ok(()));
        let taken = taker.join().unwrap();
        // Evicted first: decided as a new key, a burst at clock 0, the debt
        // (its next permit at T) forgotten. No more than that.
        assert!(
            taken == refused_at_zero() || taken == Ok(Duration::ZERO),
            "taken {taken:?}"
        );
        let stats = limiter.keyed_stats();
        assert!(stats.keys <= 1, "{} keys over max_keys 1", stats.keys);
        let admitted = u64::from(taken.is_ok());
        assert_eq!(stats.evicted, 1 + admitted, "{stats:?}");
        assert_eq!(stats.admitted, 2 + admitted, "{stats:?}");
    });
}
