//! Error types: [`Error`] for every take that was not admitted (the
//! limit's refusals and a server's failures), [`BuildError`] for every bad
//! value a limiter, a rate, a layer or a watched file is configured with
//! (`error/build.rs`), and [`Cause`], a server's or a file's own error
//! they carry.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::model::schedule::{Admit, Deny};

mod build;

pub use build::{BuildError, Cause};

/// Why a take did not admit its request: the one error of every take, on
/// every kind of limiter.
///
/// The first six variants are the limit's own refusals
/// ([`is_refusal`](Error::is_refusal)): nothing was stored, the limiter is
/// exactly as if it had not been asked. The rest are failures of a remote
/// limiter's server, which its fail policy turns into an admission only
/// when the server could not answer.
///
/// Equality is value by value, except for a server's own error (a
/// [`Cause`]), which has none: there, two errors are equal when they are
/// clones of one.
// `repr(u64)`: the variant is a whole word of its own, so a refusal is
// written as two words and its drop compares one (in the niche of the
// `Duration`s, telling the variant took a subtraction and two compares).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[repr(u64)]
pub enum Error {
    /// Not admitted now; it would be admitted after this delay if no one
    /// else takes first ([`try_take`](crate::Take::try_take)).
    RetryAfter(Delay),
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
    // The variants that own something (a cause, a message) come last and
    // together, so that a drop tells a refusal from them with one compare.
    /// The server did not answer within the response (or connect) timeout.
    Timeout,
    /// The server could not be reached, or the connection broke.
    Unavailable(Cause),
    /// The server answered with an error: the key holds something that is
    /// not a paceline state, the step failed (for PostgreSQL: the table is
    /// missing, or the role may not write it), or the reply was not
    /// understood. It concerns that call (that key) only: the connection
    /// stays in use. Its message carries the server's own words (for
    /// PostgreSQL its message, detail and hint), which the cause may keep a
    /// level down.
    Script(Cause),
    /// The builder's configuration cannot work (a URL that does not parse,
    /// a slack too large for the rate).
    Config(String),
}

impl Error {
    /// Whether this is the limit's own refusal (the first six variants), as
    /// opposed to a failure of the server or of the configuration.
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            Error::Timeout | Error::Unavailable(_) | Error::Script(_) | Error::Config(_)
        )
    }

    /// How long to wait before asking again, when the limit refused and
    /// waiting can help: the wait of [`RetryAfter`](Self::RetryAfter) and
    /// of [`QueueFull`](Self::QueueFull) (the time until the request would
    /// be admitted if no one else takes first). `None` for the refusals no
    /// wait cures (`ExceedsBurst`, `CostTooLarge`, `TooManyKeys`,
    /// `Saturated`) and for failures (whose retry is the caller's call: the
    /// connection backs off by itself).
    ///
    /// ```
    /// use paceline::{AtomicLimiter, Rate};
    /// use std::time::Duration;
    ///
    /// let limiter = AtomicLimiter::new(Rate::per_second(10));
    /// limiter.try_take()?;
    /// let refused = limiter.try_take().unwrap_err();
    /// assert!(refused.retry_after().unwrap() <= Duration::from_millis(100));
    /// assert_eq!(paceline::Error::Timeout.retry_after(), None);
    /// # Ok::<(), paceline::Error>(())
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::RetryAfter(wait) => Some(wait.duration()),
            Error::QueueFull { wait, .. } => Some(*wait),
            _ => None,
        }
    }

    /// The server could not be reached: `error` says why.
    pub(crate) fn unavailable(error: impl Into<Box<dyn StdError + Send + Sync>>) -> Error {
        Error::Unavailable(Cause::new(error.into(), None))
    }

    /// The server answered with an error: `error` says which.
    #[cfg_attr(
        not(any(feature = "redis", feature = "postgres", feature = "memcached")),
        allow(dead_code)
    )]
    pub(crate) fn script(error: impl Into<Box<dyn StdError + Send + Sync>>) -> Error {
        Error::Script(Cause::new(error.into(), None))
    }

    /// This failure, naming `server` (its address, never a password, and
    /// the limiter's name where it has one) if it carries a server's error.
    pub(crate) fn at(mut self, server: &Arc<str>) -> Error {
        if let Error::Unavailable(c) | Error::Script(c) = &mut self {
            *c = Cause::new(Arc::clone(&c.0.error), Some(Arc::clone(server)));
        }
        self
    }

    /// The one mapping from a refusal of [`schedule::step`] to the caller's
    /// error, for a request of `cost` under `admit` on a limiter whose slack
    /// is `slack`; every limiter kind uses it. `try_take` (`Within(0)`) is
    /// told when to retry (a try refused in place builds the same
    /// `RetryAfter`); a bounded wait (`Within(max)`, `max > 0`) that is
    /// refused found the queue full.
    ///
    /// [`schedule::step`]: crate::model::schedule::step
    #[cold]
    pub(crate) fn refused(deny: Deny, cost: u64, admit: Admit, slack: u64) -> Error {
        match (deny, admit) {
            (Deny::Wait(wait), Admit::Within(0)) => Error::RetryAfter(Delay(wait)),
            (Deny::Wait(wait), Admit::Within(max)) => Error::QueueFull {
                wait: Duration::from_nanos(wait),
                max_wait: Duration::from_nanos(max),
            },
            (Deny::ExceedsBurst, _) => Error::ExceedsBurst {
                cost,
                burst: slack.saturating_add(1),
            },
            (Deny::Saturated, _) => Error::Saturated,
            // `Always` admits every cost that fits; nothing else refuses it.
            (Deny::CostTooLarge, _) | (Deny::Wait(_), Admit::Always) => {
                Error::CostTooLarge { cost }
            }
        }
    }

    /// A `take_timeout`'s refusal: `Within(0)` is also `try_take`'s, but a
    /// timeout's refusal is the full queue's, whatever wait it allowed, and
    /// names the wait the caller allowed (a step's names the part of it
    /// left, or a saturated one).
    pub(crate) fn timed_out(self, max_wait: Duration) -> Error {
        match self.retry_after() {
            Some(wait) => Error::QueueFull { wait, max_wait },
            None => self,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The server a cause names, after a space.
        let at = |c: &Cause| {
            c.0.server
                .as_ref()
                .map(|s| format!(" {s}"))
                .unwrap_or_default()
        };
        match self {
            Error::RetryAfter(d) => write!(f, "rate limited: retry after {d:?}"),
            Error::QueueFull { wait, max_wait } => write!(
                f,
                "rate limited: the permit is {wait:?} away, longer than the {max_wait:?} allowed"
            ),
            Error::ExceedsBurst { cost, burst } => write!(
                f,
                "a cost of {cost} permits exceeds the burst of {burst} and can never be admitted in time"
            ),
            Error::CostTooLarge { cost } => write!(
                f,
                "a cost of {cost} permits spans more than 146 years at this rate"
            ),
            Error::TooManyKeys { max_keys } => write!(
                f,
                "rate limited: all {max_keys} tracked keys are busy and new keys are refused"
            ),
            Error::Saturated => f.write_str(
                "no permit can be scheduled: the slot is past the end of the limiter's \
                 time range (about 438 years of clock time)",
            ),
            Error::Unavailable(e) => {
                write!(f, "limit server{} unavailable: {}", at(e), Why(&**e))
            }
            Error::Timeout => f.write_str("the limit server did not answer within the timeout"),
            Error::Script(e) => write!(
                f,
                "the limit server{} rejected paceline's step: {}",
                at(e),
                Why(&**e)
            ),
            Error::Config(e) => write!(f, "invalid remote limiter configuration: {e}"),
        }
    }
}

/// A cause and the errors under it, on one line: a server's own words are
/// often a level down (tokio-postgres says "db error" and keeps the
/// server's message, detail and hint in its source). A level whose text
/// the line already holds is left out.
struct Why<'a>(&'a (dyn StdError + 'static));

impl fmt::Display for Why<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// Enough for any real chain; a cycle must not loop for ever.
        const MAX_DEPTH: usize = 8;
        let mut line = self.0.to_string();
        let chain = std::iter::successors(self.0.source(), |&e| e.source());
        for e in chain.take(MAX_DEPTH) {
            let text = e.to_string();
            // (An empty text is contained too.)
            if line.contains(&text) {
                continue;
            }
            // Multi-line messages (PostgreSQL's `DETAIL:` and `HINT:`) on
            // the one line.
            let mut sep = ": ";
            for part in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                line.push_str(sep);
                line.push_str(part);
                sep = if part.ends_with('.') { " " } else { "; " };
            }
        }
        f.write_str(&line)
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Error::Unavailable(e) | Error::Script(e) => Some(&**e),
            _ => None,
        }
    }
}

/// How long a refused request would wait: [`Error::RetryAfter`]'s. It keeps
/// the nanoseconds the limiter computed and makes a [`Duration`] of them
/// only when asked ([`duration`](Self::duration)), so a refusal whose wait
/// nobody reads costs no division. It prints as a `Duration`, and one
/// converts into it (saturating at 584 years).
///
/// ```
/// use paceline::{AtomicLimiter, Error, Rate};
/// use std::time::Duration;
///
/// let limiter = AtomicLimiter::new(Rate::per_second(10));
/// limiter.try_take()?;
/// let Err(Error::RetryAfter(wait)) = limiter.try_take() else {
///     panic!("a second permit within 100 ms");
/// };
/// assert!(wait.duration() <= Duration::from_millis(100));
/// assert_ne!(wait, Duration::ZERO.into());
/// # Ok::<(), paceline::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Delay(pub(crate) u64);

impl Delay {
    /// The delay as a [`Duration`].
    pub const fn duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }
}

impl From<Duration> for Delay {
    fn from(d: Duration) -> Delay {
        Delay(crate::clock::nanos(d))
    }
}

impl fmt::Debug for Delay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.duration(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that says little and keeps the server's words below it, as
    /// tokio-postgres's "db error" does.
    #[derive(Debug)]
    struct Vague(Server);

    #[derive(Debug)]
    struct Server;

    impl fmt::Display for Vague {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("db error")
        }
    }

    impl StdError for Vague {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&self.0)
        }
    }

    impl fmt::Display for Server {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("ERROR: too long\nDETAIL: in \"t\".\nHINT: Shorter.")
        }
    }

    impl StdError for Server {}

    #[test]
    fn a_script_error_says_the_servers_words_on_one_line() {
        let e = Error::script(Vague(Server));
        assert_eq!(
            e.to_string(),
            "the limit server rejected paceline's step: db error: ERROR: too long; \
             DETAIL: in \"t\". HINT: Shorter."
        );
    }
}
