//! `reset` on every in-process store: it puts a direct limiter back to how
//! it was built (no credit, or its whole burst with `full_credit`; cold for
//! a warm-up limiter) and makes a keyed limiter forget a key; a reset racing
//! takes refills at most once per reset; an async take booked before a reset
//! and then dropped gives nothing back. (Redis: `tests/redis.rs`.)
//! Built with the default `keyed` feature, as the keyed cases need it.
#![cfg(feature = "keyed")]

use paceline::Take;
#[macro_use]
mod common;
#[allow(unused_imports)]
use common::Limiter;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use paceline::{
    clock::ManualClock, AtomicLimiter, Error, KeyedLimiter, MutexLimiter, Rate, Unlimited,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_reset_limiter_without_credit_is_fresh_again() {
    for_both_kinds!(
        Rate::per_second(10),
        [.slack(3).clock(ManualClock::with_auto_advance())],
        |limiter| {
            // Fresh: the first permit at once, no credit for more.
            limiter.try_take().unwrap();
            assert_eq!(limiter.try_take(), Err(Error::RetryAfter(ms(100).into())));
            // In debt: three more booked ahead.
            for _ in 0..3 {
                limiter.take_timeout(Duration::ZERO).unwrap_err();
            }
            assert_eq!(limiter.take_n_timeout(3, ms(1000)).map(drop), Ok(()));
            limiter.clock().set(ms(400)); // the booked slots have come
            limiter.reset();
            // As when built: the first request at once (of any cost up to
            // the burst), the next one interval later, however long the
            // clock has run.
            assert_eq!(limiter.available(), 4);
            limiter.try_take().unwrap();
            assert_eq!(limiter.try_take(), Err(Error::RetryAfter(ms(100).into())));
            assert_eq!(limiter.next_free(), ms(100));
            // The rate and slack in force stay.
            assert_eq!((limiter.rate(), limiter.slack()), (Rate::per_second(10), 3));
        }
    );
}

#[test]
fn a_reset_limiter_with_full_credit_has_its_whole_burst_again() {
    for_both_kinds!(
        Rate::per_second(10),
        [.slack(3).full_credit(true).clock(ManualClock::with_auto_advance())],
        |limiter| {
            limiter.try_take_n(4).unwrap();
            assert!(limiter.try_take().is_err());
            // Debt booked ahead is forgotten too.
            limiter.take_n_timeout(2, ms(1000)).unwrap();
            limiter.reset();
            assert_eq!(limiter.available(), 4);
            limiter.try_take_n(4).unwrap();
            assert_eq!(limiter.try_take(), Err(Error::RetryAfter(ms(100).into())));
            // Resetting a limiter at rest changes nothing.
            limiter.clock().advance(ms(1000));
            limiter.reset();
            assert_eq!(limiter.available(), 4);
        }
    );
}

#[test]
fn a_reset_after_a_rate_change_keeps_the_new_limit() {
    for_both_kinds!(
        Rate::per_second(10),
        [.slack(3).full_credit(true).clock(ManualClock::new())],
        |limiter| {
            limiter.set_limit(Rate::per_second(100), 5).unwrap();
            limiter.try_take_n(4).unwrap();
            limiter.reset();
            assert_eq!(limiter.available(), 6);
            limiter.try_take_n(6).unwrap();
            assert_eq!(limiter.try_take(), Err(Error::RetryAfter(ms(10).into())));
        }
    );
}

/// A warming-up limiter is cold again after a reset: its first permits come
/// at the cold (slower) spacing, as when built.
#[test]
fn a_reset_warm_up_limiter_is_cold_again() {
    let clock = ManualClock::with_auto_advance();
    let limiter = AtomicLimiter::builder(Rate::per_second(100))
        .slack(0)
        .clock(clock)
        .warm_up(ms(1000))
        .build()
        .unwrap();
    let spacings = |limiter: &paceline::WarmUpLimiter<ManualClock>| {
        let first = limiter.take().at();
        let second = limiter.take().at();
        second - first
    };
    let cold = spacings(&limiter);
    // Warm it up: a second of steady use.
    for _ in 0..200 {
        limiter.take();
    }
    let warm = spacings(&limiter);
    assert!(warm < cold, "warm {warm:?} cold {cold:?}");
    limiter.reset();
    assert_eq!(spacings(&limiter), cold);
}

#[test]
fn reset_through_dyn_limiter_and_unlimited_is_a_no_op() {
    let limiters: Vec<Box<dyn Limiter>> = vec![
        Box::new(
            AtomicLimiter::builder(Rate::per_second(1))
                .slack(1)
                .full_credit(true)
                .clock(ManualClock::new())
                .build()
                .unwrap(),
        ),
        Box::new(Unlimited),
    ];
    for limiter in &limiters {
        limiter.try_take_n(2).unwrap();
        limiter.reset();
        limiter.try_take_n(2).unwrap();
    }
    Unlimited.reset();
    assert_eq!(Unlimited.available(), u64::MAX);
}

/// Two threads `take` as fast as they can while this one resets `resets`
/// times; how many takes were admitted.
fn race_resets(resets: u64, take: impl Fn() -> bool + Sync, reset: impl Fn()) -> u64 {
    let admitted = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    if take() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        for _ in 0..resets {
            reset();
            thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
    });
    admitted.load(Ordering::Relaxed)
}

/// Threads take while another resets: on a stopped clock nothing accrues,
/// so each reset refills at most what a new limiter has (`per_reset` takes
/// of 1: the burst with full credit, one without). At most `(resets + 1) *
/// per_reset` are admitted in all, and after the last reset the limiter
/// has what it had when built.
#[test]
fn resets_racing_takes_refill_at_most_one_burst_each() {
    fn run<L: Limiter + 'static>(limiter: Arc<L>, full_credit: bool) {
        const RESETS: u64 = 200;
        // What the limiter had when built (a cold warm-up limiter's burst is
        // smaller), and what takes of 1 can have of it.
        let built = limiter.available();
        let per_reset = if full_credit { built } else { 1 };
        let admitted = race_resets(RESETS, || limiter.try_take().is_ok(), || limiter.reset());
        assert!(
            admitted <= (RESETS + 1) * per_reset,
            "{admitted} admitted with {RESETS} resets of {per_reset}"
        );
        // Quiet now: spend what is left, then one reset frees it again.
        while limiter.try_take().is_ok() {}
        limiter.reset();
        assert_eq!(limiter.available(), built);
        for _ in 0..per_reset {
            limiter.try_take().unwrap();
        }
        assert!(limiter.try_take().is_err());
    }
    let rate = Rate::per_second(1);
    for full in [false, true] {
        run(
            Arc::new(
                AtomicLimiter::builder(rate)
                    .slack(3)
                    .full_credit(full)
                    .clock(ManualClock::new())
                    .build()
                    .unwrap(),
            ),
            full,
        );
        run(
            Arc::new(
                MutexLimiter::builder(rate)
                    .slack(3)
                    .full_credit(full)
                    .clock(ManualClock::new())
                    .build()
                    .unwrap(),
            ),
            full,
        );
        run(
            Arc::new(
                AtomicLimiter::builder(rate)
                    .slack(3)
                    .full_credit(full)
                    .clock(ManualClock::new())
                    .warm_up(ms(10))
                    .build()
                    .unwrap(),
            ),
            full,
        );
    }
}

#[test]
fn a_reset_key_comes_back_as_a_new_key() {
    let limiter = KeyedLimiter::<String>::builder(Rate::per_second(10))
        .slack(3)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    limiter.try_take_n("a", 4).unwrap();
    limiter.try_take_n("b", 2).unwrap();
    assert!(limiter.try_take("a").is_err());
    assert_eq!(limiter.len(), 2);
    assert!(limiter.reset("a"));
    // A new key's full burst; the other key untouched.
    assert_eq!(limiter.len(), 1);
    assert_eq!(limiter.available("a"), 4);
    assert_eq!(limiter.available("b"), 2);
    assert!(limiter.snapshot().iter().all(|k| k.key != "a"));
    limiter.try_take_n("a", 4).unwrap();
    assert_eq!(
        limiter.try_take("a"),
        Err(Error::RetryAfter(ms(100).into()))
    );
    // The forgotten key's calls stay counted; a key not tracked is not reset.
    assert!(!limiter.reset("never"));
    let stats = limiter.keyed_stats();
    assert_eq!((stats.keys, stats.reset), (2, 1));
    assert_eq!((stats.admitted, stats.refused), (3, 2));
}

#[test]
fn resets_racing_a_keys_takes_refill_at_most_one_burst_each() {
    const RESETS: u64 = 200;
    let limiter = Arc::new(
        KeyedLimiter::<u32, _>::builder(Rate::per_second(1))
            .slack(3)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    let admitted = race_resets(
        RESETS,
        || limiter.try_take(&7).is_ok(),
        || {
            limiter.reset(&7);
        },
    );
    assert!(admitted <= (RESETS + 1) * 4, "{admitted} admitted");
    assert!(limiter.len() <= 1);
    assert_eq!(limiter.keyed_stats().admitted, admitted);
}

#[cfg(feature = "tokio")]
mod tokio_calls {
    use super::*;
    use futures_util::FutureExt;
    use paceline::tokio::{AsyncKeyedLimiter, AsyncLimiter, TokioClock};
    use paceline::AsyncTake;

    /// A take booked before a reset and dropped after it gives nothing back:
    /// the schedule after the reset stands (undoing the old booking there
    /// could hand a slot out twice).
    #[tokio::test(start_paused = true)]
    async fn a_direct_take_booked_before_a_reset_and_dropped_gives_nothing_back() {
        let limiter = AsyncLimiter::builder(Rate::per_second(200))
            .slack(0)
            .build()
            .unwrap();
        limiter.take().await;
        let mut booked = Box::pin(limiter.take_timeout(ms(1000))); // slot 5 ms: booked at once
        assert!((&mut booked).now_or_never().is_none());
        limiter.limiter().reset();
        // Fresh: one at once; its next slot is 5 ms on.
        limiter.try_take().await.unwrap();
        assert_eq!(limiter.limiter().next_free(), ms(5));
        drop(booked);
        assert_eq!(limiter.limiter().next_free(), ms(5));
        assert!(limiter.try_take().await.is_err());
    }

    /// The same on the last take after the reset: the state after the reset
    /// comes back to the very word the dropped booking stored, and still
    /// nothing is given back.
    #[tokio::test(start_paused = true)]
    async fn a_direct_take_dropped_after_a_reset_that_led_back_to_its_state_gives_nothing_back() {
        let limiter = AsyncLimiter::builder(Rate::per_second(200))
            .slack(0)
            .build()
            .unwrap();
        limiter.take().await;
        let mut first = Box::pin(limiter.take_timeout(ms(1000))); // slot 5 ms: booked at once
        assert!((&mut first).now_or_never().is_none());
        limiter.limiter().reset();
        limiter.take().await; // at 0 again
        let mut second = Box::pin(limiter.take_timeout(ms(1000))); // 5 ms again
        assert!((&mut second).now_or_never().is_none());
        drop(first);
        // `second` still holds 5 ms.
        assert_eq!(limiter.limiter().next_free(), ms(10));
        assert_eq!(second.await.map(|t| t.at()), Ok(ms(5)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_keyed_take_booked_before_a_reset_and_dropped_gives_nothing_back() {
        let limiter = AsyncKeyedLimiter::from(
            KeyedLimiter::<u32, _>::builder(Rate::per_second(200))
                .slack(0)
                .clock(TokioClock::new())
                .build()
                .unwrap(),
        );
        limiter.take(&1).await.unwrap();
        let mut first = Box::pin(limiter.take_timeout(&1, ms(1000)));
        assert!((&mut first).now_or_never().is_none());
        // The key comes back as new and books the same two slots: its state
        // is the word `first`'s grant stored.
        assert!(limiter.limiter().reset(&1));
        limiter.try_take(&1).await.unwrap();
        let mut second = Box::pin(limiter.take_timeout(&1, ms(1000)));
        assert!((&mut second).now_or_never().is_none());
        drop(first);
        assert_eq!(limiter.limiter().next_free(&1), ms(10));
        assert_eq!(second.await.map(|t| t.at()), Ok(ms(5)));
        assert_eq!(limiter.limiter().keyed_stats().reset, 1);
    }
}
