//! [`AsyncRemoteLimiter<B>`]: the remote limiter's calls as futures (feature
//! `tokio`), written once for every backend over [`Core`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::core::{Core, Shared};
use super::{AsyncBackend, Backend, Error, FailPolicy, RemoteLimiter};
use crate::limiter::take::{AsyncTake, State, Taken, Within};
use crate::observe::stats::{Counted, Stats};
use crate::values::error::BuildError;
use crate::values::limit::Limit;
use crate::values::rate::Rate;
use crate::values::slack::Slack;
use crate::wait::Wait;

/// The async face of a [`RemoteLimiter`]: its calls as futures, under the
/// same names, made by `AsyncRemoteLimiter::from(limiter)`:
/// `AsyncRedisLimiter`, `AsyncPostgresLimiter` and `AsyncMemoryLimiter` are
/// it over their backends.
///
/// Cheap to clone; `Send + Sync`. It answers [`AsyncTake`] for any key
/// that displays as text.
///
/// # Waiting
/// As [`AsyncLimiter`](crate::tokio::AsyncLimiter)'s: an unbounded take
/// books its slot in the server only once it is within 10 ms; until then it
/// sleeps, and asks again.
///
/// # Cancel safety
/// A `take` cancelled before booking has booked nothing; one
/// cancelled after (a `take_timeout` books at once)
/// gives its slot back with one best-effort round trip of its own; one
/// dropped while its request is on the wire may or may not have booked
/// ([cancel safety](crate::guide::waiting#cancel-safety)).
pub struct AsyncRemoteLimiter<B> {
    core: Core<B>,
}

impl<B> Clone for AsyncRemoteLimiter<B> {
    fn clone(&self) -> Self {
        AsyncRemoteLimiter {
            core: self.core.clone(),
        }
    }
}

impl<B: Backend> From<RemoteLimiter<B>> for AsyncRemoteLimiter<B::Async> {
    /// The async face of `limiter`: the same server, limit, fail policy,
    /// wait strategy, timeouts and counts, over the backend's async
    /// connection (made by the first call, in the runtime that call runs
    /// on). Limiters made from it by [`with_limit`](Self::with_limit) share
    /// it.
    fn from(limiter: RemoteLimiter<B>) -> Self {
        let core = &limiter.core;
        AsyncRemoteLimiter {
            core: Core {
                shared: Arc::new(Shared {
                    backend: core.backend().to_async(),
                    policy: core.shared.policy,
                    wait: core.shared.wait,
                    clock: core.shared.clock.clone(),
                    meter: core.shared.meter.clone(),
                    #[cfg(feature = "tracing")]
                    lost: Default::default(),
                }),
                rate: core.rate,
                slack: core.slack,
                params: core.params,
            },
        }
    }
}

impl<B: AsyncBackend> AsyncRemoteLimiter<B> {
    /// The same limiter at another rate and slack; see
    /// [`RemoteLimiter::with_limit`].
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`].
    pub fn with_limit(&self, rate: Rate, slack: impl Into<Slack>) -> Result<Self, BuildError> {
        Ok(AsyncRemoteLimiter {
            core: self.core.with_limit(rate, slack.into())?,
        })
    }

    /// How many permits of `key`'s limit one request could take now.
    ///
    /// # Errors
    /// As [`RemoteLimiter::available`].
    pub async fn available(&self, key: &str) -> Result<u64, Error> {
        Ok(self.core.state_async(key).await?.available())
    }

    /// How long until a permit of `key`'s limit is free.
    ///
    /// # Errors
    /// As [`RemoteLimiter::next_free`].
    pub async fn next_free(&self, key: &str) -> Result<Duration, Error> {
        Ok(self.core.state_async(key).await?.next_free())
    }

    /// Forgets `key`'s state; see [`RemoteLimiter::reset`].
    ///
    /// # Errors
    /// As [`RemoteLimiter::reset`].
    pub async fn reset(&self, key: &str) -> Result<bool, Error> {
        self.core.backend().reset(key).await
    }

    /// The rate in force.
    pub fn rate(&self) -> Rate {
        self.core.rate
    }

    /// The slack, in permits: the burst is `slack + 1`.
    pub fn slack(&self) -> u64 {
        self.core.slack
    }

    /// The limit in force, its slack in permits.
    pub fn limit(&self) -> Limit {
        self.core.limit()
    }

    /// What a call does when the server fails it.
    pub fn fail_policy(&self) -> FailPolicy {
        self.core.fail_policy()
    }

    /// How a take waits out its slot.
    pub fn wait_strategy(&self) -> Wait {
        self.core.wait_strategy()
    }

    /// What the limiter decided (with its blocking twin and siblings), or
    /// `None` unless its builder asked. See [`Stats`].
    pub fn stats(&self) -> Option<Stats> {
        self.core.shared.meter.read()
    }

    /// The backend: what only its server has (see its own calls).
    pub fn backend(&self) -> &B {
        self.core.backend()
    }
}

impl<K, B> AsyncTake<K> for AsyncRemoteLimiter<B>
where
    K: fmt::Display + Sync + ?Sized,
    B: AsyncBackend,
{
    async fn take_within(&self, key: &K, cost: u64, within: Within) -> Result<Taken, Error> {
        let key = key.to_string();
        match within {
            Within::Now => self.core.try_take_async(&key, cost).await,
            Within::Any => self.core.take_async(&key, cost).await,
            Within::Max(max_wait) => self.core.take_timeout_async(&key, cost, max_wait).await,
        }
    }
    async fn can_take(&self, key: &K, cost: u64) -> Result<bool, Error> {
        self.core.can_take_async(&key.to_string(), cost).await
    }
    async fn state(&self, key: &K) -> Result<State, Error> {
        self.core.state_async(&key.to_string()).await
    }
    fn limit_for(&self, _key: &K) -> Option<Limit> {
        Some(self.core.limit())
    }
}

impl<B> Counted for AsyncRemoteLimiter<B> {
    fn stats(&self) -> Option<Stats> {
        self.core.shared.meter.read()
    }
}

impl<B: AsyncBackend> fmt::Debug for AsyncRemoteLimiter<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncRemoteLimiter")
            .field("rate", &self.rate())
            .field("slack", &self.slack())
            .field("fail_policy", &self.fail_policy())
            .finish_non_exhaustive()
    }
}
