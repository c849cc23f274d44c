//! The slack bugs uber-go/ratelimit shipped, each pinned down here.
//!
//! - #90: with `WithoutSlack` nothing was limited at all.
//! - #106, #119, #122: after an idle spell the slack clamp was applied again
//!   on every call, not once, so a limiter that had been idle let everything
//!   through.
//!
//! Each case runs on both limiters, single-threaded on a `ManualClock`.

mod common;

use std::time::Duration;

use common::{build, KINDS};
use paceline::{clock::ManualClock, Error, Rate};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// #90: slack 0 must space every permit by the interval, from the first.
#[test]
fn without_slack_every_permit_waits_its_interval() {
    for kind in KINDS {
        let clock = ManualClock::with_auto_advance();
        let limiter = build(kind, Rate::per_second(100), 0, clock.clone());
        let times: Vec<Duration> = (0..50).map(|_| limiter.take()).collect();
        let want: Vec<Duration> = (0..50).map(|k| k * 10 * MS).collect();
        assert_eq!(times, want, "{kind:?}");
        assert_eq!(
            clock.elapsed(),
            490 * MS,
            "{kind:?}: the clock waited for each"
        );
    }
}

/// #90, seen through the non-blocking call: at one instant exactly one permit
/// is free, and after any idle spell still exactly one.
#[test]
fn without_slack_idle_time_banks_nothing() {
    for kind in KINDS {
        let clock = ManualClock::new();
        let limiter = build(kind, Rate::per_second(100), 0, clock.clone());
        for idle in [Duration::ZERO, 10 * MS, SEC, 3600 * SEC] {
            clock.advance(idle);
            assert!(limiter.try_take().is_ok(), "{kind:?} after {idle:?}");
            assert_eq!(
                limiter.try_take(),
                Err(Error::RetryAfter((10 * MS).into())),
                "{kind:?} after {idle:?}"
            );
            assert_eq!(limiter.available(), 0, "{kind:?}");
            clock.advance(10 * MS);
        }
    }
}

/// #106/#119/#122: after an idle hour, one burst of `slack + 1` permits, then
/// the limiter is back to one per interval. The clamp that forgets old credit
/// applies once, not on every call.
#[test]
fn after_idle_slack_is_spent_once_then_the_rate_holds() {
    for kind in KINDS {
        for slack in [1, 10] {
            let clock = ManualClock::with_auto_advance();
            let limiter = build(kind, Rate::per_second(100), slack, clock.clone());
            limiter.take();
            clock.advance(3600 * SEC);
            let t0 = clock.elapsed();
            let times: Vec<Duration> = (0..40).map(|_| limiter.take()).collect();
            let burst = slack as usize + 1;
            assert!(times[..burst].iter().all(|&t| t == t0), "{kind:?}");
            for (k, t) in times[burst..].iter().enumerate() {
                assert_eq!(*t, t0 + (k as u32 + 1) * 10 * MS, "{kind:?}, slack {slack}");
            }
        }
    }
}

/// The same through `try_take` called every millisecond for a second after
/// an idle spell: 11 at once, then one per 10 ms, 111 in all, which is the
/// window bound `slack + 1 + (b - a) / T` exactly.
#[test]
fn after_idle_polling_gets_the_burst_then_the_rate() {
    for kind in KINDS {
        let clock = ManualClock::new();
        let limiter = build(kind, Rate::per_second(100), 10, clock.clone());
        limiter.take();
        clock.advance(10 * SEC);
        let mut admitted = 0;
        for _ in 0..=1000 {
            while limiter.try_take().is_ok() {
                admitted += 1;
            }
            clock.advance(MS);
        }
        assert_eq!(admitted, 111, "{kind:?}");
    }
}

/// Idle, burst, idle, burst: every idle spell refills the bank to `slack`,
/// never more, whatever happened before.
#[test]
fn repeated_idle_spells_each_bank_at_most_slack() {
    for kind in KINDS {
        let clock = ManualClock::new();
        let limiter = build(kind, Rate::per_second(10), 3, clock.clone());
        limiter.take();
        for idle in [SEC, 60 * SEC, 400 * MS, 86_400 * SEC] {
            clock.advance(idle);
            let mut burst = 0;
            while limiter.try_take().is_ok() {
                burst += 1;
            }
            assert_eq!(burst, 4, "{kind:?} after {idle:?}");
        }
    }
}

/// A fresh limiter banks nothing before its first permit, however late that
/// comes (uber's behaviour): idling from creation is not credit.
#[test]
fn idle_before_the_first_permit_is_not_credit() {
    for kind in KINDS {
        let clock = ManualClock::new();
        let limiter = build(kind, Rate::per_second(100), 10, clock.clone());
        clock.advance(3600 * SEC);
        assert!(limiter.try_take().is_ok(), "{kind:?}");
        assert!(limiter.try_take().is_err(), "{kind:?}");
    }
}
