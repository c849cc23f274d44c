//! [`RemoteBuilder`]: what every remote limiter's builder sets (the limit,
//! the fail policy, the wait, the timeouts, counting), once for every
//! backend, as [`RemoteLimiter`](super::RemoteLimiter) holds the calls
//! once. A backend's own settings (Redis's prefix; PostgreSQL's table,
//! pool and pruning) and its `build` are inherent methods on
//! `RemoteBuilder<ItsSettings>`, named by the backend's alias
//! ([`RedisBuilder`](crate::redis::RedisBuilder),
//! [`PostgresBuilder`](crate::postgres::PostgresBuilder)).

use std::time::Duration;

use super::core::{Common, Core};
use super::{Error, FailPolicy, RemoteLimiter};
use crate::values::limit::Limit;
use crate::values::rate::Rate;
use crate::values::slack::Slack;
use crate::wait::Wait;

/// Configures a remote limiter over the backend whose settings `S` are:
/// see the backend's alias for how to make one and what it builds.
#[must_use = "a builder does nothing until .build()"]
#[derive(Debug)]
pub struct RemoteBuilder<S> {
    pub(crate) common: Common,
    pub(crate) server: S,
}

impl<S> RemoteBuilder<S> {
    /// A builder at `rate`, with every other setting at its default, for
    /// the backend settings `server`.
    pub(crate) fn new(rate: Rate, server: S) -> RemoteBuilder<S> {
        RemoteBuilder {
            common: Common::new(rate),
            server,
        }
    }

    /// The limit, replacing the rate the builder was made with and the
    /// slack: a rate and its slack, or a quota per window
    /// ([`Limit::per_window`]), which every call then counts in the
    /// server, window by window of its clock (see the guide's [remote
    /// limits](crate::guide::remote)). A slack set beside a quota is
    /// refused at `build`: a quota's burst is the quota.
    pub fn limit(mut self, limit: Limit) -> Self {
        self.common.set_limit(limit);
        self
    }

    crate::values::setters! {
        /// Whether the limiter counts what it decides, all keys (and
        /// `with_limit` siblings) together: `stats()` on the limiter, and
        /// [`Counted`](crate::observe::stats::Counted) for
        /// [`stats::prometheus`](crate::observe::stats::prometheus). Default `false`.
        /// A server's failure counts in [`Stats::failed`](crate::observe::stats::Stats::failed),
        /// and then as admitted or refused as the fail policy decides.
        stats(on: bool) => common.counting.on;
        /// How much unused time a key may bank for a later burst: a permit
        /// count, a `Duration` or a [`Slack`] (default [`Slack::DEFAULT`], as
        /// in-process: 10 permits, or 10 ms of permits if that is more).
        slack(slack: impl Into<Slack>) => common.slack;
        /// What a call does when the server fails it (default
        /// [`FailPolicy::Closed`]): `Open` admits only when the server could
        /// not answer.
        on_error(policy: FailPolicy) => common.policy;
        /// How a take waits out its slot (default [`Wait::Sleep`]): blocking
        /// takes, and the async face's takes too (`paceline::tokio::PRECISE`, a
        /// 2 ms spin, suits those).
        wait(wait: Wait) => common.wait;
        /// The longest wait for a connection, a new one included (default
        /// [`DEFAULT_CONNECT_TIMEOUT`](super::DEFAULT_CONNECT_TIMEOUT)).
        connect_timeout(timeout: Duration) => common.connect_timeout;
        /// The longest wait for a reply (default
        /// [`DEFAULT_RESPONSE_TIMEOUT`](super::DEFAULT_RESPONSE_TIMEOUT)): the
        /// client gives up then, whatever the server does.
        response_timeout(timeout: Duration) => common.response_timeout;
    }

    /// Counts as [`stats(true)`](Self::stats) and sends the counts to the
    /// `metrics` facade too, labelled `limiter = name` (see
    /// [`Builder::metrics`](crate::Builder::metrics)).
    #[cfg(feature = "metrics")]
    pub fn metrics(mut self, name: impl Into<String>) -> Self {
        self.common.counting.facade = Some(name.into());
        self
    }
}

impl Common {
    /// The limiter over `backend`, whose server is at `server` (never with
    /// a password), failing and waiting as set; a zero timeout is refused.
    pub(crate) fn limiter<B>(&self, backend: B, server: &str) -> Result<RemoteLimiter<B>, Error> {
        if self.connect_timeout.is_zero() || self.response_timeout.is_zero() {
            return Err(Error::Config("timeouts must be longer than zero".into()));
        }
        Core::new(backend, server, self)
            .map(RemoteLimiter::of)
            .map_err(|e| Error::Config(e.to_string()))
    }
}
