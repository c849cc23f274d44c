//! [`Error`]: why a take through the [`Take`](crate::Take) interface did
//! not admit its request: the limit's own refusal ([`TakeError`]), or a
//! failure of the server a remote limiter keeps its state in.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::values::error::TakeError;

/// The server's own error, whatever the backend (for Redis a
/// `redis::RedisError`; for PostgreSQL a `tokio_postgres::Error`, or a
/// `deadpool_postgres::PoolError` when no connection could be had:
/// `downcast_ref` it to look inside).
pub type Cause = Arc<dyn StdError + Send + Sync + 'static>;

/// Why a take did not admit its request: the one error of the
/// [`Take`](crate::Take) and [`AsyncTake`](crate::AsyncTake) interface.
///
/// Only [`Refused`](Error::Refused) is the limit's own answer, and the only
/// error an in-process limiter gives; the rest are failures of a remote
/// limiter's server, which a fail policy turns into an admission only when
/// the server could not answer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The limit refused the request: the same refusals, with the same
    /// meaning, as the in-process limiters' (nothing was stored).
    Refused(TakeError),
    /// The server could not be reached, or the connection broke.
    Unavailable(Cause),
    /// The server did not answer within the response (or connect) timeout.
    Timeout,
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
    /// Whether this is the limit's own refusal, as opposed to a failure of
    /// the server or of the configuration.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Error::Refused(_))
    }

    /// How long to wait before asking again, when the limit refused and
    /// waiting can help: [`TakeError::retry_after`] of the refusal. `None`
    /// for the refusals no wait cures and for failures (whose retry is the
    /// caller's call: the connection backs off by itself).
    ///
    /// ```
    /// use paceline::{Error, TakeError};
    /// use std::time::Duration;
    ///
    /// let refused = Error::Refused(TakeError::RetryAfter(Duration::from_millis(8)));
    /// assert_eq!(refused.retry_after(), Some(Duration::from_millis(8)));
    /// assert_eq!(Error::Timeout.retry_after(), None);
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Refused(e) => e.retry_after(),
            _ => None,
        }
    }

    /// The limit's refusal inside, if this is one (`None` for a failure).
    pub fn refusal(&self) -> Option<&TakeError> {
        match self {
            Error::Refused(e) => Some(e),
            _ => None,
        }
    }

    /// A `take_timeout`'s refusal: see [`TakeError`]'s `timed_out`.
    pub(crate) fn timed_out(self, max_wait: Duration) -> Error {
        match self {
            Error::Refused(e) => Error::Refused(e.timed_out(max_wait)),
            e => e,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Refused(e) => e.fmt(f),
            Error::Unavailable(e) => write!(f, "limit server unavailable: {}", Why(&**e)),
            Error::Timeout => f.write_str("the limit server did not answer within the timeout"),
            Error::Script(e) => write!(
                f,
                "the limit server rejected paceline's step: {}",
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
            Error::Refused(e) => Some(e),
            Error::Unavailable(e) | Error::Script(e) => Some(&**e),
            Error::Timeout | Error::Config(_) => None,
        }
    }
}

impl From<TakeError> for Error {
    fn from(e: TakeError) -> Error {
        Error::Refused(e)
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
        let e = Error::Script(Arc::new(Vague(Server)));
        assert_eq!(
            e.to_string(),
            "the limit server rejected paceline's step: db error: ERROR: too long; \
             DETAIL: in \"t\". HINT: Shorter."
        );
    }
}
