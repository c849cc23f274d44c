//! `stats()`: every limiter kind counts what it decided exactly (requests
//! admitted and refused, permits, scheduled wait, cancellations), counts
//! nothing unless asked, and loses no count across threads; the Prometheus
//! text says the same.
// The direct and keyed kinds share one tally and most tests here, so the
// file needs `keyed` (a default feature).
#![cfg(feature = "keyed")]

#[cfg(feature = "tokio")]
use paceline::AsyncTake;
use paceline::Take;
#[macro_use]
mod common;
#[allow(unused_imports)]
use common::Limiter;

use std::thread;
use std::time::Duration;

use paceline::stats::{prometheus, Counted, Stats};
use paceline::{
    clock::ManualClock, AtomicLimiter, Error, KeyedLimiter, MutexLimiter, Rate, WarmUpLimiter,
};
use proptest::prelude::*;

/// One call, as the property drives them.
#[derive(Clone, Debug)]
enum Call {
    TryTake(u64),
    TakeTimeout(u64, u64),
    Take(u64),
    Advance(u64),
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        (0..5u64).prop_map(Call::TryTake),
        (0..5u64, 0..300u64).prop_map(|(n, ms)| Call::TakeTimeout(n, ms)),
        (0..4u64).prop_map(Call::Take),
        (0..400u64).prop_map(Call::Advance),
    ]
}

/// What the calls' own results add up to: the count each limiter must
/// report. `take(key, call)` makes one call (never `Advance`), answering
/// when the permit went, or `None` for a `try_take` (at once). A take's
/// wait is from the clock at the call to the slot it returns (the clock
/// moves only when told, or by a wait).
fn tally<'a, K: 'a>(
    clock: &ManualClock,
    calls: impl IntoIterator<Item = (&'a K, &'a Call)>,
    mut take: impl FnMut(&K, &Call) -> Result<Option<Duration>, Error>,
) -> Stats {
    let mut expected = Stats::default();
    for (key, call) in calls {
        let cost = match *call {
            Call::TryTake(n) | Call::TakeTimeout(n, _) | Call::Take(n) => n,
            Call::Advance(ms) => {
                clock.advance(Duration::from_millis(ms));
                continue;
            }
        };
        let before = clock.elapsed();
        match take(key, call) {
            Ok(went) => {
                expected.admitted += 1;
                expected.permits += cost;
                expected.wait += went.unwrap_or(before).saturating_sub(before);
            }
            Err(_) => expected.refused += 1,
        }
    }
    expected
}

/// [`tally`] for a direct limiter.
fn tally_direct(limiter: &dyn Limiter, clock: &ManualClock, calls: &[Call]) -> Stats {
    tally(
        clock,
        calls.iter().map(|c| (&(), c)),
        |(), call| match *call {
            Call::TryTake(n) => limiter.try_take_n(n).map(|()| None),
            Call::TakeTimeout(n, ms) => limiter
                .take_n_timeout(n, Duration::from_millis(ms))
                .map(Some),
            Call::Take(n) => limiter.take_n(n).map(Some),
            Call::Advance(_) => unreachable!("tally advances the clock itself"),
        },
    )
}

/// A limiter that counts, behind one `dyn`.
trait CountedLimiter: Limiter + Counted {}

impl<T: Limiter + Counted> CountedLimiter for T {}

/// Every direct kind, counting, at `rate` with `slack` on `clock`.
fn direct_kinds(
    rate: Rate,
    slack: u64,
    clock: &ManualClock,
) -> Vec<(&'static str, Box<dyn CountedLimiter>)> {
    let atomic = AtomicLimiter::builder(rate)
        .slack(slack)
        .stats(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mutex = MutexLimiter::builder(rate)
        .slack(slack)
        .stats(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    let warm: WarmUpLimiter<ManualClock> = AtomicLimiter::builder(rate)
        .slack(slack)
        .warm_up(Duration::from_millis(500))
        .stats(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    vec![
        ("atomic", Box::new(atomic)),
        ("mutex", Box::new(mutex)),
        ("warm_up", Box::new(warm)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(256)))]

    /// For any sequence of calls, a direct limiter's counts are the tally
    /// of the results its callers saw.
    #[test]
    fn direct_counts_are_the_tally_of_the_results(
        per_sec in 1..50u64,
        slack in 0..6u64,
        calls in prop::collection::vec(call(), 0..40),
    ) {
        for kind in 0..3 {
            let clock = ManualClock::with_auto_advance();
            let (name, limiter) = direct_kinds(Rate::per_second(per_sec), slack, &clock)
                .swap_remove(kind);
            let expected = tally_direct(&*limiter, &clock, &calls);
            prop_assert_eq!(Limiter::stats(&*limiter), Some(expected), "{}", name);
        }
    }

    /// The same for a keyed limiter, over three keys.
    #[test]
    fn keyed_counts_are_the_tally_of_the_results(
        per_sec in 1..50u64,
        slack in 0..6u64,
        calls in prop::collection::vec((0..3u8, call()), 0..40),
    ) {
        let clock = ManualClock::with_auto_advance();
        let limiter = KeyedLimiter::<u8>::builder(Rate::per_second(per_sec))
            .slack(slack)
            .stats(true)
            .clock(clock.clone())
            .build()
            .unwrap();
        let expected = tally(&clock, calls.iter().map(|(k, c)| (k, c)), |key, call| match *call {
            Call::TryTake(n) => limiter.try_take_n(key, n).map(|_| None),
            Call::TakeTimeout(n, ms) => limiter
                .take_n_timeout(key, n, Duration::from_millis(ms))
                .map(|t| Some(t.at())),
            Call::Take(n) => limiter.take_n(key, n).map(|t| Some(t.at())),
            Call::Advance(_) => unreachable!("tally advances the clock itself"),
        });
        prop_assert_eq!(limiter.keyed_stats().requests, Some(expected));
        prop_assert_eq!(Counted::stats(&limiter), Some(expected));
        // The per-key totals, always on, agree on the calls.
        prop_assert_eq!(
            (limiter.keyed_stats().admitted, limiter.keyed_stats().refused),
            (expected.admitted, expected.refused)
        );
    }
}

#[test]
fn a_limiter_counts_nothing_unless_asked() {
    let clock = ManualClock::new();
    let direct = AtomicLimiter::builder(Rate::per_second(10))
        .clock(clock.clone())
        .build()
        .unwrap();
    let keyed = KeyedLimiter::<u8>::builder(Rate::per_second(10))
        .clock(clock)
        .build()
        .unwrap();
    direct.try_take().unwrap();
    keyed.try_take(&1).unwrap();
    assert_eq!(direct.stats(), None);
    assert_eq!(keyed.keyed_stats().requests, None);
    assert_eq!(Counted::stats(&keyed), None);
    assert_eq!(
        prometheus(&[("direct", &direct), ("keyed", &keyed)])
            .lines()
            .filter(|l| !l.starts_with('#'))
            .count(),
        0
    );
}

#[test]
fn each_kind_counts_a_known_sequence() {
    // 10/s, no slack: T = 100 ms.
    for_both_kinds!(Rate::per_second(10), [.slack(0).stats(true).clock(ManualClock::with_auto_advance())], |limiter| {
        limiter.try_take().unwrap(); // admitted, free
        assert!(limiter.try_take().is_err()); // refused: 100 ms away
        assert!(limiter.take_timeout(Duration::from_millis(50)).is_err()); // refused: QueueFull
        assert!(limiter.try_take_n(2).is_err()); // refused: ExceedsBurst
        assert!(limiter.take_n(u64::MAX).is_err()); // refused: CostTooLarge
        limiter.take(); // admitted after 100 ms
        limiter.take_n(3).unwrap(); // admitted, 300 ms: its last permit's slot
        limiter.take_n(0).unwrap(); // admitted, nothing to pay
        let stats = limiter.stats().unwrap();
        assert_eq!(stats.admitted, 4);
        assert_eq!(stats.refused, 4);
        assert_eq!(stats.permits, 5);
        assert_eq!(stats.wait, Duration::from_millis(400));
        assert_eq!((stats.cancelled, stats.failed), (0, 0));
        // A reset forgets the state, not the counts.
        limiter.reset();
        assert_eq!(limiter.stats().unwrap(), stats);
    });
}

#[test]
fn threads_lose_no_count() {
    const THREADS: u64 = 8;
    const CALLS: u64 = 20_000;
    // 1000/s with a burst of 5000: some calls admitted, most refused.
    let limiter = AtomicLimiter::builder(Rate::per_second(1000))
        .slack(4999)
        .full_credit(true)
        .stats(true)
        .build()
        .unwrap();
    let keyed = KeyedLimiter::<u64>::builder(Rate::per_second(1000))
        .slack(99)
        .stats(true)
        .build()
        .unwrap();
    let (admitted, permits) = thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (limiter, keyed) = (&limiter, &keyed);
                s.spawn(move || {
                    let (mut admitted, mut permits) = (0u64, 0u64);
                    for i in 0..CALLS {
                        let cost = 1 + i % 3;
                        if limiter.try_take_n(cost).is_ok() {
                            admitted += 1;
                            permits += cost;
                        }
                        let _ = keyed.try_take(&(t % 3));
                    }
                    (admitted, permits)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .fold((0, 0), |(a, p), (a2, p2)| (a + a2, p + p2))
    });
    let stats = limiter.stats().unwrap();
    assert_eq!(stats.admitted, admitted);
    assert_eq!(stats.permits, permits);
    assert_eq!(stats.admitted + stats.refused, THREADS * CALLS);
    let keyed_stats = keyed.keyed_stats();
    let requests = keyed_stats.requests.unwrap();
    assert_eq!(requests.admitted + requests.refused, THREADS * CALLS);
    assert_eq!(requests.admitted, keyed_stats.admitted);
    assert_eq!(requests.permits, requests.admitted);
}

#[test]
fn prometheus_text_says_what_stats_say() {
    let clock = ManualClock::with_auto_advance();
    let api = AtomicLimiter::builder(Rate::per_second(10))
        .slack(1)
        .stats(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    api.try_take_n(2).unwrap();
    api.take(); // 100 ms
    assert!(api.try_take().is_err());
    let users = KeyedLimiter::<String>::builder(Rate::per_second(1))
        .stats(true)
        .build()
        .unwrap();
    users.try_take("alice").unwrap();
    let silent = MutexLimiter::new(Rate::per_second(1));

    let text = prometheus(&[
        ("api", &api),
        ("a \"quoted\\ name\n", &users),
        ("silent", &silent),
    ]);
    let expected = "\
# HELP paceline_admitted_total Requests admitted.
# TYPE paceline_admitted_total counter
paceline_admitted_total{limiter=\"api\"} 2
paceline_admitted_total{limiter=\"a \\\"quoted\\\\ name\\n\"} 1
# HELP paceline_permits_total Permits admitted (the sum of the admitted requests' costs).
# TYPE paceline_permits_total counter
paceline_permits_total{limiter=\"api\"} 3
paceline_permits_total{limiter=\"a \\\"quoted\\\\ name\\n\"} 1
# HELP paceline_refused_total Requests refused.
# TYPE paceline_refused_total counter
paceline_refused_total{limiter=\"api\"} 1
paceline_refused_total{limiter=\"a \\\"quoted\\\\ name\\n\"} 0
# HELP paceline_cancelled_total Admitted requests dropped before their slot.
# TYPE paceline_cancelled_total counter
paceline_cancelled_total{limiter=\"api\"} 0
paceline_cancelled_total{limiter=\"a \\\"quoted\\\\ name\\n\"} 0
# HELP paceline_failed_total Calls the limiter's server failed.
# TYPE paceline_failed_total counter
paceline_failed_total{limiter=\"api\"} 0
paceline_failed_total{limiter=\"a \\\"quoted\\\\ name\\n\"} 0
# HELP paceline_wait_seconds Wait the admitted requests were scheduled for.
# TYPE paceline_wait_seconds summary
paceline_wait_seconds_sum{limiter=\"api\"} 0.1
paceline_wait_seconds_count{limiter=\"api\"} 2
paceline_wait_seconds_sum{limiter=\"a \\\"quoted\\\\ name\\n\"} 0
paceline_wait_seconds_count{limiter=\"a \\\"quoted\\\\ name\\n\"} 1
";
    assert_eq!(text, expected);
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_async_take_dropped_before_its_slot_counts_as_cancelled() {
    use paceline::tokio::{AsyncKeyedLimiter, AsyncLimiter};

    let limiter: AsyncLimiter = AsyncLimiter::builder(Rate::per_second(100))
        .slack(0)
        .stats(true)
        .build()
        .unwrap();
    limiter.take().await; // free
                          // Books the slot 10 ms away, then is dropped before it.
    let timed_out = tokio::time::timeout(Duration::from_millis(5), limiter.take()).await;
    assert!(timed_out.is_err());
    let stats = limiter.stats().unwrap();
    assert_eq!((stats.admitted, stats.cancelled), (2, 1));

    let keyed = AsyncKeyedLimiter::from(
        KeyedLimiter::<u8>::builder(Rate::per_second(100))
            .slack(0)
            .stats(true)
            .clock(paceline::tokio::TokioClock::new())
            .build()
            .unwrap(),
    );
    keyed.take(&1).await.unwrap();
    let timed_out = tokio::time::timeout(Duration::from_millis(5), keyed.take(&1)).await;
    assert!(timed_out.is_err());
    let stats = Counted::stats(&keyed).unwrap();
    assert_eq!((stats.admitted, stats.cancelled), (2, 1));
}

#[cfg(feature = "metrics")]
#[test]
fn the_metrics_facade_gets_the_same_counts() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let limiter = metrics::with_local_recorder(&recorder, || {
        AtomicLimiter::builder(Rate::per_second(10))
            .slack(1)
            .metrics("api")
            .clock(ManualClock::with_auto_advance())
            .build()
            .unwrap()
    });
    limiter.try_take_n(2).unwrap();
    limiter.take();
    assert!(limiter.try_take().is_err());
    let stats = limiter.stats().unwrap();

    let mut seen = std::collections::BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        let labels: Vec<_> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        assert_eq!(labels, [("limiter".to_owned(), "api".to_owned())]);
        let value = match value {
            DebugValue::Counter(n) => n as f64,
            DebugValue::Histogram(v) => v.iter().map(|x| x.into_inner()).sum(),
            DebugValue::Gauge(g) => g.into_inner(),
        };
        seen.insert(key.name().to_owned(), value);
    }
    assert_eq!(seen["paceline_admitted_total"], stats.admitted as f64);
    assert_eq!(seen["paceline_permits_total"], stats.permits as f64);
    assert_eq!(seen["paceline_refused_total"], stats.refused as f64);
    assert_eq!(seen["paceline_cancelled_total"], 0.0);
    assert_eq!(seen["paceline_failed_total"], 0.0);
    assert!((seen["paceline_wait_seconds"] - 0.1).abs() < 1e-9);
}

/// Async takes that wait (beyond the horizon, or for a cost above the
/// burst) are admitted once, as their callers saw: asking again while they
/// wait is no refusal.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn async_takes_that_wait_count_as_admitted_not_refused() {
    use paceline::tokio::{AsyncKeyedLimiter, AsyncLimiter, TokioClock};

    // 10/s, no slack: T = 100 ms, ten horizons.
    let limiter: AsyncLimiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .stats(true)
        .build()
        .unwrap();
    for _ in 0..5 {
        limiter.take().await;
    }
    limiter.take_n(3).await.unwrap(); // above the burst: waits its intervals
    let stats = limiter.stats().unwrap();
    assert_eq!((stats.admitted, stats.permits, stats.refused), (6, 8, 0));

    let keyed = AsyncKeyedLimiter::from(
        KeyedLimiter::<u8>::builder(Rate::per_second(10))
            .slack(0)
            .stats(true)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
    for _ in 0..5 {
        keyed.take(&1).await.unwrap();
    }
    keyed.take_n(&1, 3).await.unwrap();
    let stats = Counted::stats(&keyed).unwrap();
    assert_eq!((stats.admitted, stats.permits, stats.refused), (6, 8, 0));
    let totals = keyed.limiter().keyed_stats();
    assert_eq!((totals.admitted, totals.refused), (6, 0));
}

/// A paced async writer or reader pays for each chunk once: its chunks are
/// admitted requests, none of them refused, however long each waits.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn paced_async_streams_count_each_chunk_once_as_admitted() {
    use paceline::io::{PacedReader, PacedWriter};
    use paceline::tokio::AsyncLimiter;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    // 1 000 bytes/s, chunks of one burst (100 bytes): 100 ms apart.
    let limiter = || -> AsyncLimiter {
        AsyncLimiter::builder(Rate::per_second(1000))
            .slack(99)
            .stats(true)
            .build()
            .unwrap()
    };
    let writes = limiter();
    let mut writer = PacedWriter::new(Vec::new(), writes.clone());
    writer.write_all(&[7; 400]).await.unwrap();
    let stats = writes.stats().unwrap();
    assert_eq!((stats.admitted, stats.permits, stats.refused), (4, 400, 0));

    let reads = limiter();
    let mut reader = PacedReader::new(&[7u8; 1600][..], reads.clone());
    let (mut buf, mut chunks) = ([0; 100], 0);
    while reader.read(&mut buf).await.unwrap() > 0 {
        chunks += 1;
    }
    assert_eq!(chunks, 16);
    let stats = reads.stats().unwrap();
    assert_eq!(
        (stats.admitted, stats.permits, stats.refused),
        (16, 1600, 0)
    );
}
