//! The one async wait, on every in-process limiter kind: cancelled takes
//! keep the limiter's capacity, a take never returns before its limiter's
//! clock reads its slot, `Wait::Precise` is honoured, and a passed slot is
//! never given back.
#![cfg(all(feature = "tokio", feature = "keyed"))]

use paceline::AsyncTake;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use paceline::tokio::{AsyncKeyedLimiter, AsyncLimiter, TokioClock};
use paceline::{
    clock::Clock, clock::ManualClock, clock::StdClock, Error, KeyedLimiter, Rate, Wait,
};
use tokio::time::{sleep, timeout, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `tasks` tasks loop on `timeout(50 ms, take)` until `run` has passed on
/// Tokio's (paused) clock; returns the permits they got.
async fn timed_out_loop<F, Fut>(tasks: usize, run: Duration, take: F) -> u64
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let got = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (take, got) = (take.clone(), Arc::clone(&got));
            tokio::spawn(async move {
                while start.elapsed() < run {
                    if timeout(ms(50), take()).await.is_ok() {
                        got.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    got.load(Ordering::Relaxed)
}

/// Issue 16, item 1: at 100/s with slack 10, six tasks looping on a 50 ms
/// timeout around `take` got 6 permits in 2 s (every booked slot was given
/// up after others had booked behind it). They must get at least 90 % of
/// the rate: 11 at once, then 100/s.
#[tokio::test(start_paused = true)]
async fn takes_cancelled_by_a_timeout_keep_the_direct_limiters_capacity() {
    for tasks in [5, 6, 20] {
        let limiter = AsyncLimiter::new(Rate::per_second(100));
        let l = limiter.clone();
        let got = timed_out_loop(tasks, ms(2000), move || {
            let l = l.clone();
            async move {
                l.take().await;
            }
        })
        .await;
        assert!(
            got >= 190,
            "{tasks} tasks got {got} permits in 2 s at 100/s"
        );
        assert!(
            got <= 11 + 200 + 1,
            "{tasks} tasks got {got}: over the bound"
        );
        // The load has stopped: free again within one burst window (100 ms).
        sleep(ms(100)).await;
        assert_eq!(
            limiter.limiter().next_free(),
            Duration::ZERO,
            "{tasks} tasks"
        );
    }
}

/// The same for one key of a keyed limiter.
#[tokio::test(start_paused = true)]
async fn takes_cancelled_by_a_timeout_keep_a_keys_capacity() {
    for tasks in [6, 20] {
        let limiter = AsyncKeyedLimiter::from(
            KeyedLimiter::<u32, _>::builder(Rate::per_second(100))
                .clock(TokioClock::new())
                .build()
                .unwrap(),
        );
        let l = limiter.clone();
        let got = timed_out_loop(tasks, ms(2000), move || {
            let l = l.clone();
            async move {
                l.take(&7).await.unwrap();
            }
        })
        .await;
        assert!(
            got >= 190,
            "{tasks} tasks got {got} permits in 2 s at 100/s"
        );
        assert!(
            got <= 11 + 200 + 1,
            "{tasks} tasks got {got}: over the bound"
        );
        sleep(ms(100)).await;
        assert_eq!(limiter.limiter().next_free(&7), Duration::ZERO);
    }
}

/// Issue 16, item 3: the keyed async wait slept once on Tokio's timer and
/// returned, whatever the limiter's clock said. Under paused time a real
/// clock barely moves: each take must still return only once the limiter's
/// own clock reads its slot.
#[tokio::test(start_paused = true)]
async fn a_keyed_take_returns_only_once_its_clock_reads_the_slot() {
    let limiter = AsyncKeyedLimiter::from(
        KeyedLimiter::<u32, _>::builder(Rate::per_second(100))
            .slack(0)
            .clock(StdClock::new())
            .build()
            .unwrap(),
    );
    for _ in 0..4 {
        let went = limiter.take(&1).await.unwrap().at();
        let now = Duration::from_nanos(limiter.limiter().clock().now());
        assert!(now >= went, "returned at {now:?}, before its slot {went:?}");
    }
}

/// ... and on a clock that never moves, a take whose slot is ahead never
/// returns at all (it used to return after one timer sleep).
#[tokio::test(start_paused = true)]
async fn a_keyed_take_on_a_stopped_clock_waits_for_it() {
    let clock = ManualClock::new();
    let limiter = AsyncKeyedLimiter::from(
        KeyedLimiter::<u32, _>::builder(Rate::per_second(10))
            .slack(0)
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    limiter.take(&1).await.unwrap();
    assert!(timeout(Duration::from_secs(3600), limiter.take(&1))
        .await
        .is_err());
    assert!(
        timeout(Duration::from_secs(3600), limiter.take_timeout(&1, ms(200)))
            .await
            .is_err()
    );
    clock.advance(ms(100));
    assert_eq!(limiter.take(&1).await.map(|t| t.at()), Ok(ms(100)));
}

/// A clock that counts its readings: a precise wait reads it in a loop
/// while it yields through the spin window, a sleeping wait a few times.
#[derive(Clone)]
struct Counting {
    clock: StdClock,
    reads: Arc<AtomicU64>,
}

impl Counting {
    fn new() -> Self {
        Counting {
            clock: StdClock::new(),
            reads: Arc::default(),
        }
    }
}

impl Clock for Counting {
    fn now(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.clock.now()
    }
}

/// Clock reads during one take that waits 30 ms under `wait`.
async fn reads_while_waiting(wait: Wait, keyed: bool) -> u64 {
    let clock = Counting::new();
    let rate = Rate::per_second(33);
    if keyed {
        let l = AsyncKeyedLimiter::from(
            KeyedLimiter::<u32, _>::builder(rate)
                .slack(0)
                .wait(wait)
                .clock(clock.clone())
                .build()
                .unwrap(),
        );
        l.take(&1).await.unwrap();
        let before = clock.reads.load(Ordering::Relaxed);
        l.take_timeout(&1, ms(100)).await.unwrap();
        clock.reads.load(Ordering::Relaxed) - before
    } else {
        let l = AsyncLimiter::builder(rate)
            .slack(0)
            .wait(wait)
            .clock(clock.clone())
            .build()
            .unwrap();
        l.take().await;
        let before = clock.reads.load(Ordering::Relaxed);
        l.take_timeout(ms(100)).await.unwrap();
        clock.reads.load(Ordering::Relaxed) - before
    }
}

/// Issue 10: keyed async waits ignored `Wait::Precise`. Both kinds now wait
/// through one module: a precise wait yields and reads its clock in a loop
/// for the last `spin` before the slot; a sleeping one does not.
#[tokio::test(flavor = "current_thread")]
async fn async_waits_honour_the_precise_strategy_on_every_kind() {
    let precise = Wait::Precise { spin: ms(20) };
    for keyed in [false, true] {
        let sleeping = reads_while_waiting(Wait::Sleep, keyed).await;
        let spinning = reads_while_waiting(precise, keyed).await;
        assert!(
            sleeping < 20,
            "keyed {keyed}: {sleeping} reads while sleeping"
        );
        assert!(
            spinning > 100,
            "keyed {keyed}: {spinning} reads in a precise wait (sleeping: {sleeping})"
        );
    }
}

/// A booked take (slot 5 ms: within the 10 ms horizon, so a
/// `take_timeout` books it at once) left unpolled for `unpolled`, then
/// dropped; returns what a `try_take` on its key then gets.
async fn try_take_after_dropping_a_booked_take(unpolled: Duration) -> Result<(), Error> {
    let limiter = AsyncKeyedLimiter::from(
        KeyedLimiter::<u32, _>::builder(Rate::per_second(200))
            .slack(0)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
    limiter.take(&1).await.unwrap();
    {
        let mut booked = Box::pin(limiter.take_timeout(&1, ms(1000)));
        assert!(futures_util::FutureExt::now_or_never(&mut booked).is_none()); // 5 ms
        tokio::time::advance(unpolled).await;
    }
    limiter.try_take(&1).await.map(drop)
}

/// A booked take whose slot passed before it was polled again, then dropped,
/// has taken its permit: a passed slot is never given back (the keyed wait
/// used to give back whatever the clock said).
#[tokio::test(start_paused = true)]
async fn a_keyed_take_dropped_after_its_slot_keeps_it_spent() {
    assert_eq!(
        try_take_after_dropping_a_booked_take(Duration::from_micros(7_500)).await,
        Err(Error::RetryAfter(Duration::from_micros(2_500).into()))
    );
}

/// At its slot exactly, a booked take's permit is due: dropped then, it
/// keeps the slot spent (a give-back needs the slot still ahead).
#[tokio::test(start_paused = true)]
async fn a_keyed_take_dropped_at_its_slot_keeps_it_spent() {
    assert_eq!(
        try_take_after_dropping_a_booked_take(ms(5)).await,
        Err(Error::RetryAfter(ms(5).into()))
    );
}

/// A booked keyed take dropped after its key was evicted and re-created
/// gives nothing back, even when the new entry's state has come back to the
/// very word the grant stored: undoing it then would hand a slot out twice.
#[tokio::test(start_paused = true)]
async fn a_keyed_take_dropped_after_its_key_was_evicted_gives_nothing_back() {
    let limiter = AsyncKeyedLimiter::from(
        KeyedLimiter::<u32, _>::builder(Rate::per_second(200))
            .slack(0)
            .max_keys(1)
            .when_full(paceline::keyed::WhenFull::Evict)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
    // Slot 0, then one booked at 5 ms (within the horizon: booked at
    // once), pending.
    limiter.take(&1).await.unwrap();
    let mut first = Box::pin(limiter.take_timeout(&1, ms(1000)));
    assert!(futures_util::FutureExt::now_or_never(&mut first).is_none());
    // Key 2 evicts key 1; key 1 comes back, evicting key 2, and books the
    // same two slots again: its state is the word `first`'s grant stored.
    limiter.try_take(&2).await.unwrap();
    limiter.try_take(&1).await.unwrap();
    let mut second = Box::pin(limiter.take_timeout(&1, ms(1000)));
    assert!(futures_util::FutureExt::now_or_never(&mut second).is_none());
    assert_eq!(limiter.limiter().keyed_stats().evicted, 2);
    drop(first);
    // `second` still holds 5 ms: the next free slot is 10 ms.
    assert_eq!(limiter.limiter().next_free(&1), ms(10));
    assert_eq!(second.await.map(|t| t.at()), Ok(ms(5)));
}
