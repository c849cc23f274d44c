//! Retrying a refused request inside [`Pace`] (opt-in): which requests
//! may be sent again, and how many times.

use std::time::Duration;

use ::reqwest::Method;

use super::Pace;
use crate::limiter::take::AsyncTake;

/// The retries [`Pace::retry`] is usually given: three, as most HTTP
/// clients' retry policies default to.
pub const DEFAULT_RETRIES: u32 = 3;

/// The longest a retry waits for the far side without
/// [`honour_retry_after`](Pace::honour_retry_after) (which sets its own
/// cap): a minute.
pub(super) const RETRY_WAIT_CAP: Duration = Duration::from_secs(60);

/// How `Pace` retries: how many times, and whether any method may be.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Retry {
    pub times: u32,
    pub any_method: bool,
}

impl Retry {
    /// Whether a request of `method` may be sent again: the idempotent
    /// methods of RFC 9110 §9.2.2 (GET, HEAD, OPTIONS, PUT, DELETE,
    /// TRACE), or any when asked.
    pub fn allows(&self, method: &Method) -> bool {
        self.times > 0
            && (self.any_method
                || [
                    Method::GET,
                    Method::HEAD,
                    Method::OPTIONS,
                    Method::PUT,
                    Method::DELETE,
                    Method::TRACE,
                ]
                .contains(method))
    }
}

impl<L: AsyncTake + 'static> Pace<L> {
    /// Sends a refused request (429 or 503) again, at most `times` times
    /// ([`DEFAULT_RETRIES`] is the usual choice): after the far side's wait
    /// (its `Retry-After`, or the reset of a budget it says is spent), then
    /// through the limiter, taking a slot again. With
    /// [`honour_retry_after(max)`](Self::honour_retry_after) the wait is the
    /// push that answers the refusal, capped at `max`; without it, the
    /// request alone waits, at most a minute.
    ///
    /// Only a request whose body can be cloned
    /// ([`Request::try_clone`](::reqwest::Request::try_clone): not a
    /// stream) and of an idempotent method (GET, HEAD, OPTIONS, PUT,
    /// DELETE, TRACE; any with [`retry_any_method`](Self::retry_any_method))
    /// is sent again; any other refusal is handed back as it came. The
    /// answer to the last try is handed back, refused or not. `retry(0)`,
    /// the default: every refusal is handed back.
    #[must_use]
    pub fn retry(mut self, times: u32) -> Self {
        self.retry.times = times;
        self
    }

    /// Lets [`retry`](Self::retry) send any method again (POST, PATCH, …),
    /// for an API that refuses before it acts on a request (a 429 or 503
    /// from its rate limiter means it did nothing): the body must still
    /// be one that can be cloned.
    #[must_use]
    pub fn retry_any_method(mut self) -> Self {
        self.retry.any_method = true;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotent_methods_only_unless_told() {
        let retry = Retry {
            times: 3,
            any_method: false,
        };
        for method in ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"] {
            assert!(retry.allows(&method.parse().unwrap()), "{method}");
        }
        for method in ["POST", "PATCH", "CONNECT", "PURGE"] {
            assert!(!retry.allows(&method.parse().unwrap()), "{method}");
        }
        let any = Retry {
            any_method: true,
            ..retry
        };
        assert!(any.allows(&Method::POST));
        let off = Retry {
            times: 0,
            any_method: true,
        };
        assert!(!off.allows(&Method::GET));
    }
}
