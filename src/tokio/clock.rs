//! [`TokioClock`]: a [`Clock`] on `tokio::time::Instant`.

use std::fmt;

use ::tokio::time::Instant;

use crate::clock::{nanos, Clock};

/// A clock on [`tokio::time::Instant`](::tokio::time::Instant), the default
/// clock of an [`AsyncLimiter`](super::AsyncLimiter). Its origin is its
/// creation.
///
/// It reads real time, like [`StdClock`](crate::clock::StdClock), except when Tokio's
/// time is paused (`tokio::time::pause()`, or
/// `#[tokio::test(start_paused = true)]`, both from Tokio's `test-util`
/// feature): it then reads Tokio's frozen clock, which moves only when every
/// task waits and the runtime jumps to the next timer, or on
/// `tokio::time::advance`. That makes an async limiter's pacing
/// deterministic in tests, with no real waiting; see the
/// guide on [testing with paused time](crate::guide::waiting#testing-with-paused-time).
///
/// It is meant for async waiting. A *blocking* limiter on it works in real
/// time, but under paused time a blocking wait would never end (nothing
/// advances a clock that only moves while the runtime idles).
#[derive(Clone, Copy)]
pub struct TokioClock {
    origin: Instant,
}

impl TokioClock {
    /// A clock whose origin is now (Tokio's now: the paused clock's reading
    /// when time is paused).
    pub fn new() -> TokioClock {
        TokioClock {
            origin: Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl fmt::Debug for TokioClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokioClock")
            .field("now_ns", &self.now())
            .finish()
    }
}

impl Clock for TokioClock {
    #[inline]
    fn now(&self) -> u64 {
        // Saturates at 0 before the origin and at 584 years after it.
        nanos(Instant::now().saturating_duration_since(self.origin))
    }
}
