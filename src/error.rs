//! Error types: [`RateError`] for rates, [`BuildError`] for limiter
//! configuration, [`TakeError`] for requests that were not admitted.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use crate::schedule::{Admit, Deny};

/// Why a [`Rate`](crate::Rate) could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateError {
    /// The count was 0: a limiter must let something through.
    ZeroCount,
    /// The period was 0.
    ZeroPeriod,
    /// `period / count` is under one nanosecond, paceline's unit of time.
    IntervalTooShort {
        /// The requested count.
        count: u64,
        /// The requested period.
        period: Duration,
    },
    /// `period / count` is over 2^62 ns (about 146 years).
    IntervalTooLong {
        /// The requested count.
        count: u64,
        /// The requested period.
        period: Duration,
    },
    /// Whole nanoseconds can only approximate `period / count` to worse than
    /// [`Rate::MAX_ROUNDING`](crate::Rate::MAX_ROUNDING).
    Imprecise {
        /// The requested count.
        count: u64,
        /// The requested period.
        period: Duration,
        /// The nearest whole-nanosecond interval.
        interval_ns: u64,
    },
    /// A string did not parse as a rate.
    Parse {
        /// The string given.
        input: String,
        /// What was wrong with it.
        reason: &'static str,
    },
    /// The string had a decimal point, `"10/1.5s"`: rates are whole numbers.
    Decimals {
        /// The string given.
        input: String,
        /// The same rate in whole numbers, `"20/3s"`, where there is one.
        instead: Option<String>,
    },
    /// The string read as `COUNT/PERIOD`, but that rate is refused
    /// (`"0/s"`): the string, and [`Rate::new`](crate::Rate::new)'s error,
    /// which is also this error's [`source`](Error::source).
    Invalid {
        /// The string given.
        input: String,
        /// Why the rate it spells is refused: one of the variants above
        /// `Parse`.
        error: Box<RateError>,
    },
}

impl fmt::Display for RateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RateError::ZeroCount => f.write_str("rate must be at least 1 per period, got 0"),
            RateError::ZeroPeriod => f.write_str("rate period must be longer than 0"),
            RateError::IntervalTooShort { count, period } => write!(
                f,
                "rate {count} per {period:?} is faster than 1 per nanosecond, paceline's resolution"
            ),
            RateError::IntervalTooLong { count, period } => write!(
                f,
                "rate {count} per {period:?} spaces permits more than 146 years apart"
            ),
            RateError::Imprecise {
                count,
                period,
                interval_ns,
            } => write!(
                f,
                "rate {count} per {period:?} needs a fractional-nanosecond interval; \
                 the nearest, {interval_ns} ns, is off by more than 0.1 % \
                 (use Rate::every with an exact interval)"
            ),
            RateError::Parse { input, reason } => {
                write!(f, "cannot parse rate {input:?}: {reason}")
            }
            RateError::Decimals { input, instead } => {
                write!(f, "cannot parse rate {input:?}: decimals are not supported")?;
                match instead {
                    Some(rate) => write!(f, " (write {rate:?})"),
                    None => Ok(()),
                }
            }
            RateError::Invalid { input, error } => write!(f, "invalid rate {input:?}: {error}"),
        }
    }
}

impl Error for RateError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            RateError::Invalid { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

/// Why a limiter could not be built, or its rate not changed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// `slack * interval`, the time a limiter may bank, is over 2^62 ns
    /// (about 146 years).
    SlackTooLarge {
        /// The requested slack, in permits.
        slack: u64,
        /// The interval between permits.
        interval: Duration,
    },
    /// The limiter has no rate to change ([`Unlimited`](crate::Unlimited)).
    NoRate,
    /// A warm-up period over 2^62 ns (about 146 years).
    WarmUpTooLong {
        /// The requested period (saturated at `u64::MAX` ns).
        warm_up: Duration,
    },
    /// More overrides than a keyed limiter holds
    /// ([`KeyedLimiter::MAX_OVERRIDES`](crate::KeyedLimiter::MAX_OVERRIDES),
    /// 1 048 575: each tracked key stores its limit's index in 20 bits).
    TooManyOverrides {
        /// How many overrides the change asked for.
        overrides: usize,
        /// The most a keyed limiter holds.
        max: usize,
    },
    /// A lease's expiry `E` is zero, or longer than the slack banks: the
    /// limiter underneath would run at a slack of `S - ceil(E / T)`, under
    /// zero ([`Leased`](crate::lease::Leased)).
    LeaseTooLong {
        /// The expiry asked for.
        expiry: Duration,
        /// The slack, in permits.
        slack: u64,
        /// The interval between permits.
        interval: Duration,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::SlackTooLarge { slack, interval } => write!(
                f,
                "slack of {slack} permits at one per {interval:?} banks more than 146 years"
            ),
            BuildError::NoRate => f.write_str("an unlimited limiter has no rate to change"),
            BuildError::WarmUpTooLong { warm_up } => {
                write!(f, "a warm-up of {warm_up:?} is over 146 years")
            }
            BuildError::TooManyOverrides { overrides, max } => write!(
                f,
                "{overrides} overrides are more than a keyed limiter holds (at most {max})"
            ),
            BuildError::LeaseTooLong {
                expiry,
                slack,
                interval,
            } => write!(
                f,
                "a lease expiring after {expiry:?} needs a nonzero expiry of at most the slack \
                 ({slack} permits at one per {interval:?})"
            ),
        }
    }
}

impl Error for BuildError {}

/// Why a request was not admitted.
///
/// Nothing is stored when a request is refused: the limiter is exactly as if
/// it had not been asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TakeError {
    /// Not admitted now; it would be admitted after `retry_after` if no one
    /// else takes first ([`try_take`](crate::Take::try_take)).
    RetryAfter(Duration),
    /// Its slot is `wait` away, longer than the `max_wait` the caller allowed:
    /// the queue ahead is full ([`take_timeout`](crate::Take::take_timeout)).
    QueueFull {
        /// How long the request would have waited.
        wait: Duration,
        /// How long the caller allowed.
        max_wait: Duration,
    },
    /// The cost is larger than the burst (`slack + 1`) and could never be
    /// admitted within the allowed wait, even by a limiter at rest.
    ExceedsBurst {
        /// The requested cost, in permits.
        cost: u64,
        /// The most a limiter at rest admits at once: `slack + 1`.
        burst: u64,
    },
    /// `cost * interval` is over 2^62 ns (about 146 years): no clock could
    /// ever reach that slot.
    CostTooLarge {
        /// The requested cost, in permits.
        cost: u64,
    },
    /// A [`KeyedLimiter`](crate::KeyedLimiter) already tracks its ceiling of
    /// busy keys and was built to refuse new ones
    /// ([`WhenFull::Refuse`](crate::WhenFull::Refuse)); keys already tracked
    /// are unaffected.
    TooManyKeys {
        /// The ceiling on the number of tracked keys.
        max_keys: usize,
    },
    /// The slot would fall past the end of the limiter's time range (clock
    /// readings past about 438 years, or a schedule booked that far ahead):
    /// nothing can be scheduled there, so nothing is admitted.
    Saturated,
}

impl TakeError {
    /// How long to wait before asking again, when waiting can help: the
    /// wait of [`RetryAfter`](Self::RetryAfter) and of
    /// [`QueueFull`](Self::QueueFull) (the time until the request would be
    /// admitted if no one else takes first). `None` for the refusals no wait
    /// cures (`ExceedsBurst`, `CostTooLarge`, `TooManyKeys`, `Saturated`).
    ///
    /// ```
    /// use paceline::{AtomicLimiter, Rate};
    /// use std::time::Duration;
    ///
    /// let limiter = AtomicLimiter::new(Rate::per_second(10));
    /// limiter.try_take()?;
    /// let refused = limiter.try_take().unwrap_err();
    /// assert!(refused.retry_after().unwrap() <= Duration::from_millis(100));
    /// # Ok::<(), paceline::TakeError>(())
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            TakeError::RetryAfter(wait) | TakeError::QueueFull { wait, .. } => Some(*wait),
            _ => None,
        }
    }

    /// The one mapping from a refusal of [`schedule::step`] to the caller's
    /// error, for a request of `cost` under `admit` on a limiter whose slack
    /// is `slack`; every limiter kind uses it. `try_take` (`Within(0)`) is
    /// told when to retry; a bounded wait (`Within(max)`, `max > 0`) that is
    /// refused found the queue full.
    #[cold]
    pub(crate) fn refused(deny: Deny, cost: u64, admit: Admit, slack: u64) -> TakeError {
        match (deny, admit) {
            (Deny::Wait(wait), Admit::Within(0)) => {
                TakeError::RetryAfter(Duration::from_nanos(wait))
            }
            (Deny::Wait(wait), Admit::Within(max)) => TakeError::QueueFull {
                wait: Duration::from_nanos(wait),
                max_wait: Duration::from_nanos(max),
            },
            (Deny::ExceedsBurst, _) => TakeError::ExceedsBurst {
                cost,
                burst: slack.saturating_add(1),
            },
            (Deny::Saturated, _) => TakeError::Saturated,
            // `Always` admits every cost that fits; nothing else refuses it.
            (Deny::CostTooLarge, _) | (Deny::Wait(_), Admit::Always) => {
                TakeError::CostTooLarge { cost }
            }
        }
    }

    /// A `take_timeout`'s refusal: `Within(0)` is also `try_take`'s, but a
    /// timeout's refusal is the full queue's, whatever wait it allowed.
    pub(crate) fn timed_out(self, max_wait: Duration) -> TakeError {
        match self {
            TakeError::RetryAfter(wait) => TakeError::QueueFull { wait, max_wait },
            e => e,
        }
    }
}

impl fmt::Display for TakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TakeError::RetryAfter(d) => write!(f, "rate limited: retry after {d:?}"),
            TakeError::QueueFull { wait, max_wait } => write!(
                f,
                "rate limited: the permit is {wait:?} away, longer than the {max_wait:?} allowed"
            ),
            TakeError::ExceedsBurst { cost, burst } => write!(
                f,
                "a cost of {cost} permits exceeds the burst of {burst} and can never be admitted in time"
            ),
            TakeError::CostTooLarge { cost } => write!(
                f,
                "a cost of {cost} permits spans more than 146 years at this rate"
            ),
            TakeError::TooManyKeys { max_keys } => write!(
                f,
                "rate limited: all {max_keys} tracked keys are busy and new keys are refused"
            ),
            TakeError::Saturated => f.write_str(
                "no permit can be scheduled: the slot is past the end of the limiter's \
                 time range (about 438 years of clock time)",
            ),
        }
    }
}

impl Error for TakeError {}
