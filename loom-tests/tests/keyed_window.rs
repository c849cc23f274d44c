//! Two threads take on one key of a keyed limiter counted by window (a
//! quota of 3 a minute), before and after it is tracked: the window's
//! count is the permits admitted, whatever the interleaving (nothing lost,
//! nothing counted twice, never over the quota). The keyed window path
//! runs the window store's own loop (`store::window::update_word`), which
//! the `window` models check on the store; this one checks it under the
//! keyed limiter's shard lock, a new key's insert racing a take on it.
//!
//! The clock stands still at a Unix time inside one minute, so the key has
//! exactly the quota to give.

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::check;
use paceline::model::window::Window;
use paceline::{clock::ManualClock, Error, KeyedLimiter, Limit, Rate, Take};

const QUOTA: u64 = 3;
const KEY: u32 = 7;

/// Permits admitted by `try_take_n` on [`KEY`] for each cost, in turn.
fn try_each(limiter: &KeyedLimiter<u32, ManualClock>, costs: &[u64]) -> u64 {
    let mut permits = 0;
    for &cost in costs {
        match limiter.try_take_n(&KEY, cost) {
            Ok(_) => permits += cost,
            Err(Error::RetryAfter(wait)) => assert!(wait.duration() > Duration::ZERO),
            Err(e) => panic!("cost {cost} refused with {e}"),
        }
    }
    permits
}

#[test]
fn a_window_keys_count_is_the_permits_admitted() {
    check("keyed window", || {
        let clock = ManualClock::new();
        // 30 s into a minute: the window ends 30 s later.
        clock.set(Duration::from_secs(1_709_164_830));
        let minute = Limit::per_window(QUOTA, Window::Fixed { seconds: 60 }).unwrap();
        let limiter = Arc::new(
            KeyedLimiter::<u32>::builder(Rate::per_second(1))
                .limit(minute)
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
        let permits = a.join().unwrap() + b.join().unwrap();
        assert!(
            permits <= QUOTA,
            "{permits} permits in one window of {QUOTA}"
        );
        let left = limiter.available(&KEY);
        assert_eq!(
            permits + left,
            QUOTA,
            "{permits} admitted, {left} left: an update lost or counted twice"
        );
    });
}
