//! [`AsyncRemoteLimiter<B>`]: the remote limiter's async face, its calls
//! as futures (feature `tokio`), written once for every backend over
//! [`Core`](super::core::Core).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Async, AsyncBackend, Backend, Done, Error, Op, RemoteLimiter};
use crate::limiter::take::{AsyncTake, Booked, State, Taken, Within};
use crate::values::limit::Limit;

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
pub type AsyncRemoteLimiter<B> = RemoteLimiter<B, Async>;

impl<B: Backend> From<RemoteLimiter<B>> for AsyncRemoteLimiter<B::Async> {
    /// The async face of `limiter`: the same server, limit, fail policy,
    /// wait strategy, timeouts and counts, over the backend's async
    /// connection (made by the first call, in the runtime that call runs
    /// on). Limiters made from it by [`with_limit`](Self::with_limit) share
    /// it.
    fn from(limiter: RemoteLimiter<B>) -> Self {
        let core = limiter.core;
        RemoteLimiter::of(core.over(Arc::new(core.backend.to_async())))
    }
}

impl<B: AsyncBackend> AsyncRemoteLimiter<B> {
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
        self.core.call_async(key, Op::Reset).await?.flag()
    }
}

impl<K, B> AsyncTake<K> for AsyncRemoteLimiter<B>
where
    K: fmt::Display + Sync + ?Sized,
    B: AsyncBackend,
{
    async fn take_within(&self, key: &K, cost: u64, within: Within) -> Result<Taken, Error> {
        self.core.take_async(&key.to_string(), cost, within).await
    }
    async fn can_take(&self, key: &K, cost: u64) -> Result<bool, Error> {
        let peeked = self
            .core
            .call_async(&key.to_string(), self.core.peek_op())
            .await;
        self.core.can_take_from(peeked.and_then(Done::peeked), cost)
    }
    async fn state(&self, key: &K) -> Result<State, Error> {
        self.core.state_async(&key.to_string()).await
    }
    fn limit_for(&self, _key: &K) -> Option<Limit> {
        Some(self.core.limit())
    }
    async fn book(&self, key: &K, cost: u64, within: Within) -> Result<Booked, Error> {
        self.core.book_async(&key.to_string(), cost, within).await
    }
    /// As the blocking face's (see [`RemoteLimiter`]'s `Take`): one round
    /// trip, never sent twice.
    ///
    /// # Cancel safety
    /// Dropped before it answers, the settle may or may not have reached
    /// the server; it is not sent again.
    async fn settle(&self, key: &K, booked: Booked, actual: u64) -> Result<(), Error> {
        self.core
            .settle_async(&key.to_string(), booked, actual)
            .await
    }
}
