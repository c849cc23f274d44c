//! What a remote limiter's connections know of their server, shared by
//! every backend: the [`Gate`] that spaces reconnects while the server is
//! down, and (for the connections a timeout cannot simply drop) [`Heard`],
//! when the server last answered.

#[cfg(any(feature = "postgres", all(feature = "redis", feature = "tokio")))]
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Error;
use crate::primitive::{lock, Mutex};

/// The first pause before reconnecting to a server that refused: short, so a
/// restarted server is back in use almost at once.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(10);

/// The longest pause between reconnect attempts: how late, at worst, a
/// limiter notices that its server is back.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// The backoff after a connection could not be made (the server is down):
/// calls meanwhile fail at once with the same error instead of each waiting
/// out a connect timeout; [`BACKOFF_MIN`], doubling to [`BACKOFF_MAX`] while
/// the server stays down.
#[derive(Default)]
pub(crate) struct Gate(Mutex<Closed>);

#[derive(Default)]
struct Closed {
    /// No reconnect before this instant (after a failed one), and why the
    /// last reconnect failed, repeated to calls the gate turns away.
    until: Option<(Instant, Error)>,
    /// The last pause (zero: none since a connection was made).
    delay: Duration,
}

impl Gate {
    /// The last error, while the backoff runs.
    pub(crate) fn closed(&self) -> Option<Error> {
        match &lock(&self.0).until {
            Some((until, last)) if Instant::now() < *until => Some(last.clone()),
            _ => None,
        }
    }

    /// A connection was made: the next failure pauses [`BACKOFF_MIN`].
    pub(crate) fn opened(&self) {
        *lock(&self.0) = Closed::default();
    }

    /// A connection could not be made, for `e`.
    pub(crate) fn failed(&self, e: &Error) {
        let mut closed = lock(&self.0);
        closed.delay = (closed.delay * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
        closed.until = Some((Instant::now() + closed.delay, e.clone()));
    }

    /// Opens or closes the gate by how a connect ended, and hands it on.
    #[cfg(any(feature = "redis", feature = "memcached"))]
    pub(crate) fn record<T>(&self, connected: Result<T, Error>) -> Result<T, Error> {
        connected
            .inspect(|_| self.opened())
            .inspect_err(|e| self.failed(e))
    }
}

/// When a server last answered on a link (or a pool of them), to tell a
/// slow reply from a dead link: a call that times out when nothing at all
/// has come back since it was sent finds the link dead (a black hole, where
/// packets vanish and no reset ever comes).
#[cfg(any(feature = "postgres", all(feature = "redis", feature = "tokio")))]
pub(crate) struct Heard {
    /// When the link was made; what `last` counts from.
    since: Instant,
    /// When a reply last came (ns after `since`; 0: none yet).
    last: AtomicU64,
}

#[cfg(any(feature = "postgres", all(feature = "redis", feature = "tokio")))]
impl Heard {
    pub(crate) fn new() -> Heard {
        Heard {
            since: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    /// The server answered (even with an error): the link works.
    pub(crate) fn answered(&self) {
        let now = self.since.elapsed().as_nanos() as u64;
        // Relaxed: a hint for the next timeout, ordered with nothing else.
        self.last.fetch_max(now, Ordering::Relaxed);
    }

    /// Whether nothing came back since a call was sent at `sent` on a link
    /// that already existed then.
    pub(crate) fn silent_since(&self, sent: Instant) -> bool {
        sent.checked_duration_since(self.since)
            .is_some_and(|d| self.last.load(Ordering::Relaxed) <= d.as_nanos() as u64)
    }
}
