//! `set_rate`: slots already handed out stand; later requests are spaced by
//! the new interval. Deterministic, on a `ManualClock`, for both limiters.

#[cfg(feature = "keyed")]
use paceline::Take;
mod common;

use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::Duration;

use common::{build, Log, Sim, KINDS};
use paceline::{clock::ManualClock, Rate};

const MS: Duration = Duration::from_millis(1);

/// The next permit is one *new* interval after the last one handed out:
/// speeding up from 10/s does not wait out the old 100 ms, slowing down to
/// 1/s waits the whole new second.
#[test]
fn the_next_permit_is_one_new_interval_after_the_last() {
    for kind in KINDS {
        let clock = ManualClock::with_auto_advance();
        let limiter = build(kind, Rate::per_second(10), 0, clock.clone());
        assert_eq!(limiter.take(), Duration::ZERO);
        limiter.set_rate(Rate::per_second(1)).unwrap();
        assert_eq!(limiter.rate(), Some(Rate::per_second(1)));
        assert_eq!(limiter.next_free(), 1000 * MS, "{kind:?}");
        assert_eq!(limiter.take(), 1000 * MS, "{kind:?}");
        assert_eq!(limiter.take(), 2000 * MS, "{kind:?}");
        limiter.set_rate(Rate::per_second(100)).unwrap();
        assert_eq!(limiter.take(), 2010 * MS, "{kind:?}");
        assert_eq!(limiter.take(), 2020 * MS, "{kind:?}");
    }
}

/// From one per hour to 100/s: the next permit is 10 ms after the last, not
/// an hour.
#[test]
fn speeding_up_from_a_slow_rate_does_not_wait_out_the_old_interval() {
    for kind in KINDS {
        let clock = ManualClock::new();
        let limiter = build(kind, Rate::per_hour(1), 10, clock.clone());
        limiter.take();
        assert!(limiter.try_take().is_err());
        limiter.set_rate(Rate::per_second(100)).unwrap();
        clock.advance(10 * MS);
        assert!(limiter.try_take().is_ok(), "{kind:?}");
        assert!(limiter.try_take().is_err(), "{kind:?}");
    }
}

/// Three workers keep a limiter at 100/s busy; just before 1 s it is slowed
/// to 10/s. The three slots already handed out (1.00, 1.01, 1.02 s, each with
/// a worker parked on it) go as booked; every gap after them is 100 ms.
#[test]
fn a_rate_change_under_waiting_threads_paces_the_later_permits() {
    for kind in KINDS {
        let clock = ManualClock::new();
        let limiter = build(kind, Rate::per_second(100), 0, clock.clone());
        let (log, stop) = (Log::default(), AtomicBool::new(false));
        thread::scope(|s| {
            let mut sim = Sim::new(&clock, &log, &stop);
            for _ in 0..3 {
                let limiter = &limiter;
                sim.spawn(s, move || limiter.take());
            }
            sim.run_until(1000 * MS - Duration::from_nanos(1));
            limiter.set_rate(Rate::per_second(10)).unwrap();
            sim.run_until(3000 * MS);
            sim.finish();
        });
        let times = log.sorted();
        assert_eq!(log.count_before(1000 * MS), 100, "{kind:?}");
        let after: Vec<Duration> = times.into_iter().filter(|&t| t >= 1000 * MS).collect();
        let booked = [1000 * MS, 1010 * MS, 1020 * MS];
        let paced = (0..=18).map(|k| 1120 * MS + k * 100 * MS);
        let want: Vec<Duration> = booked.into_iter().chain(paced).collect();
        assert_eq!(after, want, "{kind:?}");
    }
}

/// The same under a `KeyedLimiter`: three workers keep key 7 busy at 100/s
/// while the default rate drops to 10/s. The shard moves under its write
/// lock between two of the key's steps: the three slots handed out stand,
/// every gap after them is 100 ms.
#[cfg(feature = "keyed")]
#[test]
fn a_keyed_rate_change_under_waiting_threads_paces_the_keys_later_permits() {
    let clock = ManualClock::new();
    let limiter = paceline::KeyedLimiter::<u32>::builder(Rate::per_second(100))
        .slack(0)
        .clock(clock.clone())
        .build()
        .unwrap();
    let (log, stop) = (Log::default(), AtomicBool::new(false));
    thread::scope(|s| {
        let mut sim = Sim::new(&clock, &log, &stop);
        for _ in 0..3 {
            let limiter = &limiter;
            sim.spawn(s, move || limiter.take(&7).unwrap().at());
        }
        sim.run_until(1000 * MS - Duration::from_nanos(1));
        limiter.set_rate(Rate::per_second(10)).unwrap();
        sim.run_until(3000 * MS);
        sim.finish();
    });
    let times = log.sorted();
    assert_eq!(log.count_before(1000 * MS), 100);
    let after: Vec<Duration> = times.into_iter().filter(|&t| t >= 1000 * MS).collect();
    let booked = [1000 * MS, 1010 * MS, 1020 * MS];
    let paced = (0..=18).map(|k| 1120 * MS + k * 100 * MS);
    let want: Vec<Duration> = booked.into_iter().chain(paced).collect();
    assert_eq!(after, want);
}

/// A change republishes a fresh or full limiter's state as a new word of a
/// bounded table of generations, so that a step decided before the change
/// fails its CAS; the table wraps. Past two wraps (70,000 changes) the
/// limiter still decides as it did before any change: the first request of
/// a fresh one goes at once and banks nothing, a full one grants its burst.
/// (The test hangs, or overflows, if the table reaches the word that marks a
/// change in progress.)
#[test]
fn many_changes_to_a_resting_limiter_keep_its_state() {
    for full_credit in [false, true] {
        let clock = ManualClock::new();
        let limiter = paceline::AtomicLimiter::builder(Rate::per_second(10))
            .slack(2)
            .full_credit(full_credit)
            .clock(clock.clone())
            .build()
            .unwrap();
        for i in 0..70_000 {
            let rate = if i % 2 == 0 { 20 } else { 10 };
            limiter.set_rate(Rate::per_second(rate)).unwrap();
            // Every word of the table, read: none may be mistaken for a
            // change in progress.
            assert_eq!(limiter.available(), 3, "change {i}");
        }
        assert_eq!(limiter.rate(), Rate::per_second(10));
        assert_eq!(limiter.available(), 3, "full_credit {full_credit}");
        if full_credit {
            assert!(limiter.try_take_n(3).is_ok());
        } else {
            // Fresh: the first request goes at once, the next one interval on.
            assert!(limiter.try_take().is_ok());
            assert_eq!(limiter.next_free(), Duration::from_millis(100));
        }
    }
}

/// A slack given in time is resolved at each rate: 10 ms is 10 permits at
/// 1000/s and 100 at 10 000/s; a slack given in permits stays that count.
/// The default is the larger of 10 permits and 10 ms. Keyed limiters (the
/// default and an override) and every direct kind resolve it alike.
#[cfg(feature = "keyed")]
#[test]
fn a_slack_in_time_is_resolved_again_at_each_rate() {
    use paceline::{AtomicLimiter, KeyedLimiter, MutexLimiter, Slack};
    let ten_ms = 10 * MS;
    let direct = AtomicLimiter::builder(Rate::per_second(1000))
        .slack(ten_ms)
        .build()
        .unwrap();
    let mutex = MutexLimiter::builder(Rate::per_second(1000))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let counted = AtomicLimiter::builder(Rate::per_second(1000))
        .slack(20)
        .build()
        .unwrap();
    assert_eq!(
        (direct.slack(), mutex.slack(), counted.slack()),
        (10, 10, 20)
    );
    for l in [&direct, &counted] {
        l.set_rate(Rate::per_second(10_000)).unwrap();
    }
    mutex.set_rate(Rate::per_second(10_000)).unwrap();
    assert_eq!(
        (direct.slack(), mutex.slack(), counted.slack()),
        (100, 100, 20)
    );
    mutex.set_rate(Rate::per_second(7)).unwrap();
    assert_eq!(
        mutex.slack(),
        10,
        "the default keeps uber's 10 at low rates"
    );
    direct.set_slack(Slack::at_least(3, 2 * MS)).unwrap();
    assert_eq!(direct.slack(), 20);
    direct
        .set_limit(Rate::per_second(100), Slack::at_least(3, 2 * MS))
        .unwrap();
    assert_eq!(direct.slack(), 3);

    let keyed = KeyedLimiter::<String>::builder(Rate::per_second(1000))
        .slack(ten_ms)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    keyed
        .set_override("big".to_string(), Rate::per_second(2000), ten_ms)
        .unwrap();
    assert_eq!(keyed.slack(), 10);
    assert_eq!(keyed.rate_for("big").1, 20);
    keyed.set_rate(Rate::per_second(100_000)).unwrap();
    assert_eq!(keyed.slack(), 1000);
    assert_eq!(keyed.rate_for("any").1, 1000);
    assert_eq!(keyed.rate_for("big").1, 20, "an override keeps its own");
    // Banked credit follows the resolved slack: a key at rest bursts 1001.
    assert_eq!(keyed.available("any"), 1001);
}
