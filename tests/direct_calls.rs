//! Calls of the direct limiters pinned outcome by outcome, on the concrete
//! types (not through `dyn Limiter`, whose defaults would stand in for
//! them): `take_timeout`, `set_limit`, `Error::retry_after`, and where a
//! blocking wait sleeps and spins with each `Wait` strategy.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use paceline::{clock::Clock, clock::ManualClock, AtomicLimiter, BuildError, Error, Rate, Wait};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn take_timeout_waits_within_its_bound_and_refuses_beyond_it_storing_nothing() {
    for_both_kinds!(
        Rate::per_second(10),
        [.slack(0).clock(ManualClock::with_auto_advance())],
        |limiter| {
            // 10/s, slack 0: the first permit now, the next 100 ms later.
            assert_eq!(limiter.take_timeout(ms(0)).map(|t| t.at()), Ok(ms(0)));
            assert_eq!(
                limiter.take_timeout(ms(99)),
                Err(Error::QueueFull {
                    wait: ms(100),
                    max_wait: ms(99)
                })
            );
            // The refusal booked nothing.
            assert_eq!(limiter.next_free(), ms(100));
            // Within the bound: it waits (the clock advances to the slot).
            assert_eq!(limiter.take_timeout(ms(100)).map(|t| t.at()), Ok(ms(100)));
            assert_eq!(limiter.next_free(), ms(100));
        }
    );
}

#[test]
fn set_limit_changes_rate_and_slack_as_one_conserving_spent_credit() {
    for_both_kinds!(
        Rate::per_second(1),
        [.slack(10).full_credit(true).clock(ManualClock::new())],
        |limiter| {
            limiter.try_take_n(10).unwrap(); // 10 of the 11 banked
            limiter.set_limit(Rate::per_second(1000), 3).unwrap();
            assert_eq!(limiter.rate(), Rate::per_second(1000));
            assert_eq!(limiter.slack(), 3);
            // The one permit left, not a fresh burst at the new rate.
            assert_eq!(limiter.available(), 1);
            // Refused: the limit in force is unchanged.
            assert_eq!(
                limiter.set_limit(Rate::per_hour(1), u64::MAX),
                Err(BuildError::SlackTooLarge {
                    slack: u64::MAX,
                    interval: Duration::from_secs(3600)
                })
            );
            assert_eq!(limiter.rate(), Rate::per_second(1000));
            assert_eq!(limiter.slack(), 3);
        }
    );
}

#[test]
fn set_limit_banks_up_to_the_new_slack_at_the_new_rate() {
    let clock = ManualClock::new();
    let limiter = AtomicLimiter::builder(Rate::per_second(1))
        .slack(10)
        .full_credit(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    limiter.try_take_n(11).unwrap();
    limiter.set_limit(Rate::per_second(1000), 3).unwrap();
    clock.advance(ms(2));
    assert_eq!(limiter.available(), 2);
    clock.advance(ms(100));
    assert_eq!(limiter.available(), 4, "a burst of slack + 1 = 4");
}

/// What `Taken`'s docs promise of a take's answer: six words, the error
/// marked in the one word of a `Taken` that is never 0.
#[test]
fn a_takes_answer_is_six_words() {
    assert_eq!(std::mem::size_of::<Result<paceline::Taken, Error>>(), 48);
}

#[test]
fn retry_after_is_the_wait_a_refusal_names_and_none_for_the_others() {
    assert_eq!(Error::RetryAfter(ms(7).into()).retry_after(), Some(ms(7)));
    let full = Error::QueueFull {
        wait: ms(9),
        max_wait: ms(1),
    };
    assert_eq!(full.retry_after(), Some(ms(9)));
    for never in [
        Error::ExceedsBurst { cost: 5, burst: 2 },
        Error::CostTooLarge { cost: u64::MAX },
        Error::TooManyKeys { max_keys: 1 },
        Error::Saturated,
    ] {
        assert_eq!(never.retry_after(), None, "{never:?}");
    }
    // From a real refusal: exactly when the next permit is free.
    let limiter = AtomicLimiter::builder(Rate::per_second(4))
        .slack(0)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    limiter.try_take().unwrap();
    let refused = limiter.try_take().unwrap_err();
    assert_eq!(refused.retry_after(), Some(ms(250)));
    assert_eq!(refused.retry_after(), Some(limiter.next_free()));
    // Its wait is a `Delay`: the `Duration` it was made from, printed as one.
    let Error::RetryAfter(wait) = refused else {
        panic!("a try refused with {refused:?}");
    };
    assert_eq!(wait, ms(250).into());
    assert_eq!(format!("{wait:?}"), "250ms");
}

/// A clock whose waits record their deadline and jump to it.
#[derive(Clone, Default)]
struct Recording {
    now: Arc<AtomicU64>,
    waits: Arc<Mutex<Vec<(&'static str, u64)>>>,
}

impl Recording {
    fn take_log(&self) -> Vec<(&'static str, u64)> {
        std::mem::take(&mut *self.waits.lock().unwrap())
    }

    fn reach(&self, how: &'static str, deadline: u64) {
        self.waits.lock().unwrap().push((how, deadline));
        self.now.fetch_max(deadline, Ordering::SeqCst);
    }
}

impl Clock for Recording {
    fn now(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    fn sleep_until(&self, deadline: u64) {
        self.reach("sleep", deadline);
    }

    fn spin_until(&self, deadline: u64) {
        self.reach("spin", deadline);
    }
}

#[test]
fn a_precise_wait_sleeps_until_its_spin_before_the_deadline_then_spins() {
    let clock = Recording::default();
    let spin = Duration::from_micros(150);
    Wait::Precise { spin }.wait_until(&clock, 1_000_000);
    assert_eq!(clock.take_log(), [("sleep", 850_000), ("spin", 1_000_000)]);
    // A deadline closer than the spin: spin only.
    Wait::Precise { spin: ms(5) }.wait_until(&clock, 4_000_000);
    assert_eq!(clock.take_log(), [("spin", 4_000_000)]);
    // One exactly the spin away: nothing to sleep.
    Wait::Precise { spin: ms(5) }.wait_until(&clock, 5_000_000);
    assert_eq!(clock.take_log(), [("spin", 5_000_000)]);
    Wait::Sleep.wait_until(&clock, 9_000_000);
    assert_eq!(clock.take_log(), [("sleep", 9_000_000)]);
}

#[test]
fn blocking_takes_wait_for_their_slot_with_the_builders_strategy() {
    let spin = Duration::from_micros(300);
    for (wait, expect) in [
        (Wait::Sleep, vec![("sleep", 100_000_000)]),
        (
            Wait::Precise { spin },
            vec![("sleep", 99_700_000), ("spin", 100_000_000)],
        ),
    ] {
        let clock = Recording::default();
        let limiter = AtomicLimiter::builder(Rate::per_second(10))
            .slack(0)
            .wait(wait)
            .clock(clock.clone())
            .build()
            .unwrap();
        assert_eq!(limiter.take().at(), Duration::ZERO);
        assert!(clock.take_log().is_empty(), "the first permit is free");
        assert_eq!(limiter.take().at(), ms(100));
        assert_eq!(clock.take_log(), expect, "{wait:?}");
    }
}
