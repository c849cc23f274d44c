//! Error types: [`BuildError`] for every bad value a limiter, a rate, a
//! layer or a watched file is configured with (`error/build.rs`);
//! [`TakeError`] for requests that were not admitted.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use crate::model::schedule::{Admit, Deny};

mod build;

pub use build::{BuildError, Cause};

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
    /// ([`WhenFull::Refuse`](crate::keyed::WhenFull::Refuse)); keys already tracked
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
