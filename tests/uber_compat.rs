//! uber-go/ratelimit's behaviour, case by case, on a `ManualClock`.
//!
//! uber's tests run on a mock clock and allow a little noise; these are exact.
//! The workers' times are the times their `take` returned, which on a manual
//! clock stepped from slot to slot is each permit's slot. "By `t`" counts the
//! permits that went strictly before `t`, which is what uber's assertion at
//! `t` sees (its check fires before the takers released at `t` run): so a
//! limiter at 100/s has let 100 through by 1 s, and the 101st goes at 1 s
//! exactly. Every case runs on both `AtomicLimiter` and `MutexLimiter`.

mod common;
#[allow(unused_imports)]
use common::Limiter;

use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::Duration;

use common::{build, build_with, Log, Sim, KINDS, PARK_TIMEOUT};
use paceline::{clock::ManualClock, Rate, Unlimited, Wait};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

#[test]
fn four_threads_without_slack_get_100_200_300_by_1_2_3_seconds() {
    for (kind, wait) in KINDS
        .into_iter()
        .flat_map(|k| [(k, Wait::Sleep), (k, Wait::PRECISE)])
    {
        let clock = ManualClock::new();
        let limiter = build_with(kind, Rate::per_second(100), 0, false, wait, clock.clone());
        let (log, stop) = (Log::default(), AtomicBool::new(false));
        thread::scope(|s| {
            let mut sim = Sim::new(&clock, &log, &stop);
            for _ in 0..4 {
                let limiter = &limiter;
                sim.spawn(s, move || limiter.take());
            }
            sim.run_until(3 * SEC);
            sim.finish();
        });
        assert_eq!(log.count_before(SEC), 100, "{kind:?} {wait:?}");
        assert_eq!(log.count_before(2 * SEC), 200, "{kind:?} {wait:?}");
        assert_eq!(log.count_before(3 * SEC), 300, "{kind:?} {wait:?}");
        // The permit at t = 0 makes it 101 at 1 s inclusive.
        assert_eq!(
            log.count_before(SEC + Duration::from_nanos(1)),
            101,
            "{kind:?} {wait:?}"
        );
        // And they are exactly one interval apart, whichever thread got them.
        let times = log.sorted();
        let want: Vec<Duration> = (0..=300).map(|k| k * 10 * MS).collect();
        assert_eq!(times, want, "{kind:?} {wait:?}");
    }
}

#[test]
fn seven_per_minute_gives_1_8_15_by_1_second_1_minute_2_minutes() {
    for kind in KINDS {
        let clock = ManualClock::new();
        // Default slack, as uber's test: two takers keep it behind schedule.
        let limiter = build(kind, Rate::per_minute(7), 10, clock.clone());
        let (log, stop) = (Log::default(), AtomicBool::new(false));
        thread::scope(|s| {
            let mut sim = Sim::new(&clock, &log, &stop);
            for _ in 0..2 {
                let limiter = &limiter;
                sim.spawn(s, move || limiter.take());
            }
            sim.run_until(2 * 60 * SEC);
            sim.finish();
        });
        assert_eq!(log.count_before(SEC), 1, "{kind:?}");
        assert_eq!(log.count_before(60 * SEC), 8, "{kind:?}");
        assert_eq!(log.count_before(120 * SEC), 15, "{kind:?}");
        // 60 s / 7 rounds to 8_571_428_571 ns; the 8th permit goes 3 ns
        // before the minute.
        let t = Duration::from_nanos(8_571_428_571);
        assert_eq!(
            log.sorted()[..8],
            (0..8).map(|k| k * t).collect::<Vec<_>>()[..]
        );
    }
}

/// Three threads call `take` at once on a fresh limiter: the first goes at
/// once, the others one interval apart, with or without slack, however long
/// after its creation the limiter is first used.
#[test]
fn three_concurrent_first_calls_are_spaced_0_t_t() {
    for kind in KINDS {
        for slack in [10, 0] {
            for start in [Duration::ZERO, 5 * SEC] {
                let clock = ManualClock::new();
                let limiter = build(kind, Rate::per_second(10), slack, clock.clone());
                clock.set(start);
                let mut times: Vec<Duration> = thread::scope(|s| {
                    let handles: Vec<_> = (0..3).map(|_| s.spawn(|| limiter.take())).collect();
                    for left in [2, 1] {
                        assert!(clock.wait_for_waiters(left, PARK_TIMEOUT));
                        clock.set(clock.next_deadline().unwrap());
                    }
                    handles.into_iter().map(|h| h.join().unwrap()).collect()
                });
                times.sort();
                let gaps: Vec<Duration> = [start, times[0], times[1]]
                    .iter()
                    .zip(&times)
                    .map(|(prev, t)| *t - *prev)
                    .collect();
                assert_eq!(
                    gaps,
                    [Duration::ZERO, 100 * MS, 100 * MS],
                    "{kind:?}, slack {slack}, first use at {start:?}"
                );
            }
        }
    }
}

/// uber's slack table. One worker takes from a limiter at 10/s without slack,
/// then from one at 100/s with the slack under test: for 2 s it is held to
/// 10/s, so the fast limiter banks credit, but at most `slack` permits of it.
/// At 2 s two more workers take from the fast limiter alone and spend the
/// bank at once. By 3 s: the 20 slow-paced units before 2 s, plus the fast
/// limiter's permits from its banked base to 3 s.
#[test]
fn slack_banks_at_most_slack_permits_130_140_270() {
    for kind in KINDS {
        for (slack, want) in [(10, 130), (20, 140), (150, 270)] {
            let clock = ManualClock::new();
            let slow = build(kind, Rate::per_second(10), 0, clock.clone());
            let fast = build(kind, Rate::per_second(100), slack, clock.clone());
            let (log, stop) = (Log::default(), AtomicBool::new(false));
            thread::scope(|s| {
                let mut sim = Sim::new(&clock, &log, &stop);
                let (slow, fast) = (&slow, &fast);
                sim.spawn(s, move || {
                    slow.take();
                    fast.take()
                });
                sim.run_until(2 * SEC);
                sim.spawn(s, move || fast.take());
                sim.spawn(s, move || fast.take());
                sim.run_until(3 * SEC);
                sim.finish();
            });
            assert_eq!(log.count_before(2 * SEC), 20, "{kind:?}, slack {slack}");
            assert_eq!(log.count_before(3 * SEC), want, "{kind:?}, slack {slack}");
        }
    }
}

/// Rate 1/s with slack 1: a take at 1 ns, then four at 2 s + 1, 2, 3, 4 ns.
/// The first goes at once; the idle second banks one permit, so the next two
/// go at once too; the last two wait their turn at 3 s + 1 ns and 4 s + 1 ns.
#[test]
fn slack_of_one_banks_one_permit_three_done_by_3s_all_by_10s() {
    const NS: Duration = Duration::from_nanos(1);
    for kind in KINDS {
        let clock = ManualClock::new();
        let limiter = build(kind, Rate::per_second(1), 1, clock.clone());
        clock.set(NS);
        let first = limiter.take();
        let times: Vec<Duration> = thread::scope(|s| {
            let mut handles = Vec::new();
            for k in 1..=4u32 {
                clock.set(2 * SEC + k * NS);
                handles.push(s.spawn(|| limiter.take()));
                // Each caller has returned or parked before the next one comes.
                let start = std::time::Instant::now();
                while handles.iter().filter(|h| h.is_finished()).count() + clock.waiters()
                    < handles.len()
                {
                    assert!(
                        start.elapsed() < PARK_TIMEOUT,
                        "caller {k} neither returned nor parked"
                    );
                    thread::yield_now();
                }
            }
            // The first two at 2 s went at once on the banked permit.
            assert_eq!(clock.waiters(), 2);
            clock.set(3 * SEC);
            assert_eq!(handles.iter().filter(|h| h.is_finished()).count(), 2);
            clock.set(10 * SEC);
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all = vec![first];
        all.extend(times);
        assert_eq!(all.iter().filter(|&&t| t < 3 * SEC).count(), 3, "{kind:?}");
        assert_eq!(
            all,
            [
                NS,
                2 * SEC + NS,
                2 * SEC + 2 * NS,
                3 * SEC + NS,
                4 * SEC + NS
            ],
            "{kind:?}"
        );
    }
}

#[test]
fn unlimited_admits_a_thousand_calls_at_once() {
    let as_object: &dyn Limiter = &Unlimited;
    for _ in 0..1000 {
        assert_eq!(Unlimited.take(), Duration::ZERO);
        assert_eq!(as_object.take(), Duration::ZERO);
        assert!(as_object.try_take().is_ok());
    }
    assert_eq!(as_object.available(), u64::MAX);
    assert_eq!(as_object.next_free(), Duration::ZERO);
}
