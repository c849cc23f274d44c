//! Bad input and extremes: every invalid rate or option is a clear `Err`;
//! huge costs, centuries of idleness and a clock that steps back never panic,
//! wrap, or grant a permit early. And the trait objects work for every type.

mod common;
#[allow(unused_imports)]
use common::Limiter;

use std::sync::Arc;
use std::time::Duration;

use common::{build, build_with, KINDS};
use paceline::{
    clock::ManualClock, AtomicLimiter, BuildError, Error, MutexLimiter, Rate, Unlimited, Wait,
};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

#[test]
fn invalid_rates_are_errors_that_say_which_and_why() {
    let table: Vec<(Result<Rate, BuildError>, &str)> = vec![
        (Rate::new(0, SEC), "at least 1 per period, got 0"),
        (
            Rate::new(10, Duration::ZERO),
            "period must be longer than 0",
        ),
        (
            Rate::new(2_000_000_000, SEC),
            "faster than 1 per nanosecond",
        ),
        (
            Rate::new(u64::MAX, Duration::from_nanos(1)),
            "faster than 1 per nanosecond",
        ),
        (Rate::new(1, 200 * YEAR), "more than 146 years apart"),
        (Rate::new(1, Duration::MAX), "more than 146 years apart"),
        (Rate::every(Duration::ZERO), "period must be longer than 0"),
        (
            Rate::new(2, Duration::from_nanos(3)),
            "fractional-nanosecond interval",
        ),
        ("fast".parse(), "expected COUNT/PERIOD"),
    ];
    for (result, says) in table {
        let err = result.expect_err(says);
        let msg = err.to_string();
        assert!(msg.contains(says), "{err:?} says {msg:?}, not {says:?}");
        // It is a std error, usable with `?` into Box<dyn Error>.
        let _: Box<dyn std::error::Error + Send + Sync> = Box::new(err);
    }
    // The longest interval is accepted.
    assert!(Rate::new(1, Duration::from_nanos(1 << 62)).is_ok());
    assert!(Rate::new(1, Duration::from_nanos((1 << 62) + 1)).is_err());
}

#[test]
#[should_panic(expected = "invalid rate: rate must be at least 1 per period, got 0")]
fn per_second_zero_panics_with_the_reason() {
    let _ = Rate::per_second(0);
}

#[test]
fn slack_that_banks_over_146_years_is_a_build_error() {
    let yearly = Rate::every(YEAR).unwrap();
    for err in [
        AtomicLimiter::builder(yearly)
            .slack(200)
            .build()
            .map(drop)
            .unwrap_err(),
        MutexLimiter::builder(yearly)
            .slack(200)
            .build()
            .map(drop)
            .unwrap_err(),
        AtomicLimiter::builder(Rate::per_second(1))
            .slack(u64::MAX)
            .build()
            .map(drop)
            .unwrap_err(),
        MutexLimiter::builder(Rate::per_second(1))
            .slack(u64::MAX)
            .build()
            .map(drop)
            .unwrap_err(),
    ] {
        assert!(matches!(err, BuildError::SlackTooLarge { .. }), "{err:?}");
        assert!(
            err.to_string().contains("banks more than 146 years"),
            "{err}"
        );
    }
    // 146 years of slack is fine.
    assert!(AtomicLimiter::builder(yearly).slack(146).build().is_ok());
}

#[test]
#[should_panic(expected = "banks more than 146 years")]
fn new_panics_only_when_the_default_slack_overflows() {
    let _ = AtomicLimiter::new(Rate::every(20 * YEAR).unwrap());
}

#[test]
fn set_rate_that_overflows_the_slack_is_refused_and_changes_nothing() {
    for kind in KINDS {
        let clock = ManualClock::new();
        let limiter = build(kind, Rate::per_second(10), 10, clock.clone());
        let err = limiter
            .set_rate(Rate::every(20 * YEAR).unwrap())
            .unwrap_err();
        assert!(
            matches!(err, BuildError::SlackTooLarge { .. }),
            "{kind:?}: {err:?}"
        );
        assert_eq!(limiter.rate(), Some(Rate::per_second(10)), "{kind:?}");
        limiter.take();
        assert_eq!(
            limiter.next_free(),
            100 * MS,
            "{kind:?}: still paced at 10/s"
        );
    }
}

#[test]
fn huge_costs_are_refused_without_changing_anything() {
    for kind in KINDS {
        let clock = ManualClock::new();
        let limiter = build(kind, Rate::per_second(100), 10, clock.clone());
        limiter.take();
        let cost_too_large = Error::CostTooLarge { cost: u64::MAX };
        assert_eq!(
            limiter.take_n(u64::MAX),
            Err(cost_too_large.clone()),
            "{kind:?}"
        );
        assert_eq!(
            limiter.try_take_n(u64::MAX),
            Err(cost_too_large.clone()),
            "{kind:?}"
        );
        assert_eq!(
            limiter.take_n_timeout(u64::MAX, Duration::MAX),
            Err(cost_too_large.clone())
        );
        assert!(!limiter.can_take(u64::MAX), "{kind:?}");
        assert!(cost_too_large.to_string().contains("more than 146 years"));
        // Nothing was stored: exactly as if they had not been asked.
        assert_eq!(limiter.next_free(), 10 * MS, "{kind:?}");
        clock.advance(SEC);
        assert_eq!(limiter.available(), 11, "{kind:?}");
    }
}

/// The largest cost that fits books 146 years of schedule at once; nothing
/// wraps, and a clock stepped back over it sees the whole wait.
#[test]
fn the_largest_cost_books_146_years_and_nothing_wraps() {
    const NS: Duration = Duration::from_nanos(1);
    for kind in KINDS {
        let clock = ManualClock::with_auto_advance();
        let limiter = build(kind, Rate::every(NS).unwrap(), 0, clock.clone());
        limiter.take();
        assert_eq!(
            limiter.take_n_timeout(1 << 62, Duration::ZERO),
            Err(Error::ExceedsBurst {
                cost: 1 << 62,
                burst: 1
            }),
            "{kind:?}"
        );
        assert_eq!(
            limiter.take_n((1 << 62) + 1),
            Err(Error::CostTooLarge {
                cost: (1 << 62) + 1
            }),
            "{kind:?}"
        );
        // The whole 2^62 ns: its last permit is 2^62 ns after the first.
        assert_eq!(
            limiter.take_n(1 << 62),
            Ok(Duration::from_nanos(1 << 62)),
            "{kind:?}"
        );
        assert_eq!(
            limiter.try_take(),
            Err(Error::RetryAfter(NS.into())),
            "{kind:?}"
        );
        clock.set(Duration::ZERO);
        assert_eq!(
            limiter.try_take(),
            Err(Error::RetryAfter(
                Duration::from_nanos((1 << 62) + 1).into()
            )),
            "{kind:?}"
        );
        assert_eq!(limiter.available(), 0, "{kind:?}");
    }
}

/// Ten and four hundred years of idleness: the next burst is still exactly
/// `slack + 1`, and the permit after it waits its interval.
#[test]
fn centuries_of_idleness_bank_only_the_slack() {
    for kind in KINDS {
        for idle in [10 * YEAR, 400 * YEAR] {
            let clock = ManualClock::new();
            let limiter = build(kind, Rate::per_second(100), 10, clock.clone());
            limiter.take();
            clock.advance(idle);
            assert_eq!(limiter.available(), 11, "{kind:?}, {idle:?}");
            for _ in 0..11 {
                assert!(limiter.try_take().is_ok(), "{kind:?}, {idle:?}");
            }
            assert_eq!(
                limiter.try_take(),
                Err(Error::RetryAfter((10 * MS).into())),
                "{kind:?}"
            );
            assert_eq!(limiter.next_free(), 10 * MS);
        }
    }
}

/// The extremes of a `u64` clock reading: no call panics, and `take` returns
/// the reading or later. Past 2^64 - 2^62 ns (about 438 years) of clock
/// reading, internal time saturates at `u64::MAX`: the time `take` reports
/// sticks there, and the limiter can no longer pace (a documented limit no
/// real clock reaches; its origin is its creation).
#[test]
fn clock_at_u64_extremes_never_panics() {
    for kind in KINDS {
        for full in [false, true] {
            for at in [0, 1, u64::MAX >> 2, u64::MAX >> 1, u64::MAX - 1, u64::MAX] {
                let clock = ManualClock::with_auto_advance();
                let limiter = build_with(
                    kind,
                    Rate::per_second(100),
                    10,
                    full,
                    Wait::PRECISE,
                    clock.clone(),
                );
                clock.set(Duration::from_nanos(at));
                let t = limiter.take();
                assert!(
                    t >= Duration::from_nanos(at.min(u64::MAX - (1 << 62))),
                    "{kind:?} at {at}"
                );
                let _ = limiter.try_take_n(3);
                let _ = limiter.take_n(5);
                let _ = limiter.take_timeout(Duration::MAX);
                let _ = limiter.can_take(u64::MAX);
                let _ = (limiter.available(), limiter.next_free());
            }
        }
    }
}

/// A clock that steps back (TSCs of two cores can disagree) delays callers
/// but never admits one early: the state does not move back with it.
#[test]
fn a_clock_stepping_back_never_grants_early() {
    for kind in KINDS {
        let clock = ManualClock::with_auto_advance();
        let limiter = build(kind, Rate::per_second(100), 10, clock.clone());
        clock.set(10 * SEC);
        assert_eq!(limiter.take(), 10 * SEC);
        clock.set(SEC);
        // 9 s in the past, with 10 permits of slack: nothing is free.
        assert_eq!(limiter.available(), 0, "{kind:?}");
        assert_eq!(
            limiter.try_take(),
            Err(Error::RetryAfter((9 * SEC + 10 * MS).into())),
            "{kind:?}"
        );
        // A blocking take waits for the slot after the last one.
        assert_eq!(limiter.take(), 10 * SEC + 10 * MS, "{kind:?}");
        clock.set(Duration::ZERO);
        assert_eq!(limiter.take(), 10 * SEC + 20 * MS, "{kind:?}");
    }
}

#[test]
fn a_cost_of_zero_is_admitted_at_once_and_changes_nothing() {
    for kind in KINDS {
        let clock = ManualClock::new();
        let limiter = build(kind, Rate::per_second(10), 0, clock.clone());
        clock.set(SEC);
        limiter.take();
        // The next permit is 100 ms away, but a cost of 0 need not wait.
        assert_eq!(limiter.take_n(0), Ok(SEC), "{kind:?}");
        assert_eq!(limiter.try_take_n(0), Ok(()), "{kind:?}");
        assert_eq!(
            limiter.take_n_timeout(0, Duration::ZERO),
            Ok(SEC),
            "{kind:?}"
        );
        assert!(limiter.can_take(0), "{kind:?}");
        assert_eq!(limiter.next_free(), 100 * MS, "{kind:?}");
        assert_eq!(
            limiter.try_take(),
            Err(Error::RetryAfter((100 * MS).into()))
        );
    }
}

/// A cost above the burst can never pass without waiting: `try_take_n` says
/// so (not "retry later"), `take_n` waits for it.
#[test]
fn a_cost_above_the_burst_exceeds_it_instead_of_retrying() {
    for kind in KINDS {
        let clock = ManualClock::with_auto_advance();
        let limiter = build_with(
            kind,
            Rate::per_second(10),
            2,
            true,
            Wait::Sleep,
            clock.clone(),
        );
        let err = limiter.try_take_n(4).unwrap_err();
        assert_eq!(err, Error::ExceedsBurst { cost: 4, burst: 3 }, "{kind:?}");
        assert!(err.to_string().contains("exceeds the burst of 3"), "{err}");
        // At rest, 4 permits need one interval more than the bank holds.
        assert_eq!(limiter.take_n(4), Ok(100 * MS), "{kind:?}");
    }
}

/// `take_timeout` refuses with `QueueFull`, whatever the allowed wait, zero
/// included.
#[test]
fn take_timeout_refuses_with_queue_full() {
    for kind in KINDS {
        let clock = ManualClock::with_auto_advance();
        let limiter = build(kind, Rate::per_second(10), 0, clock.clone());
        limiter.take();
        for max_wait in [Duration::ZERO, 50 * MS, 100 * MS - Duration::from_nanos(1)] {
            let err = limiter.take_timeout(max_wait).unwrap_err();
            assert_eq!(
                err,
                Error::QueueFull {
                    wait: 100 * MS,
                    max_wait
                },
                "{kind:?}"
            );
            assert!(err.to_string().contains("longer than the"), "{err}");
        }
        clock.advance(50 * MS);
        assert_eq!(limiter.take_timeout(50 * MS), Ok(100 * MS), "{kind:?}");
    }
}

fn every_limiter(clock: &ManualClock) -> Vec<Box<dyn Limiter>> {
    vec![
        Box::new(
            AtomicLimiter::builder(Rate::per_second(10))
                .clock(clock.clone())
                .build()
                .unwrap(),
        ),
        Box::new(
            MutexLimiter::builder(Rate::per_second(10))
                .clock(clock.clone())
                .build()
                .unwrap(),
        ),
        Box::new(Unlimited),
    ]
}

#[test]
fn every_limiter_works_as_a_boxed_or_shared_trait_object() {
    let clock = ManualClock::with_auto_advance();
    for boxed in every_limiter(&clock) {
        let shared: Arc<dyn Limiter> = Arc::from(boxed);
        let limited = shared.rate().is_some();
        let t0 = shared.take();
        assert!(shared.take_n(2).is_ok());
        assert!(shared.take_timeout(SEC).is_ok());
        let _ = shared.try_take();
        let _ = shared.try_take_n(2);
        let _ = shared.take_n_timeout(2, SEC);
        let _ = (shared.can_take(1), shared.available(), shared.next_free());
        let other = Arc::clone(&shared);
        let t1 = std::thread::spawn(move || other.take()).join().unwrap();
        assert!(t1 >= t0);
        if limited {
            assert_eq!(shared.slack(), 10);
            assert_eq!(shared.rate(), Some(Rate::per_second(10)));
            assert_eq!(shared.set_rate(Rate::per_second(20)), Ok(()));
            assert_eq!(shared.rate(), Some(Rate::per_second(20)));
        }
    }
}

#[test]
fn unlimited_has_no_rate_and_admits_any_cost() {
    assert_eq!(Limiter::rate(&Unlimited), None);
    assert_eq!(Unlimited.take_n(u64::MAX), Ok(Duration::ZERO));
}
