//! [`RedisBackend`], the blocking backend: the step as an `EVALSHA` on a
//! pooled connection; and the calls only Redis has.

use std::fmt;

use super::conn::Pool;
use super::script::{self, Wire};
use crate::remote::{Decision, Error, Remote, RemoteLimiter, Request};

/// A limiter whose state lives in Redis, so that every process using the
/// same Redis and key shares one limit: [`RemoteLimiter`] over
/// [`RedisBackend`]. Made by [`builder`](RemoteLimiter::builder) or
/// [`cluster_builder`](RemoteLimiter::cluster_builder); its calls are
/// [`RemoteLimiter`]'s, plus [`ping`](RemoteLimiter::ping) and
/// [`prefix`](RemoteLimiter::prefix). See [the module docs](super) for the
/// model, waiting and failures; its async face is
/// `AsyncRedisLimiter::from(limiter)`.
///
/// ```no_run
/// # use paceline::{redis::RedisLimiter, Rate};
/// # use paceline::Take;
/// let users = RedisLimiter::builder("redis://127.0.0.1/", Rate::per_second(10)).build()?;
/// let partners = users.with_limit(Rate::per_second(500), 50)?;
/// users.take("user:42")?;
/// partners.take("user:7")?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type RedisLimiter = RemoteLimiter<RedisBackend>;

/// The blocking Redis backend: a pool of connections and the wire format
/// (the prefix, the script).
pub struct RedisBackend {
    pub(super) pool: Pool,
    pub(super) wire: Wire,
}

impl RedisBackend {
    /// Runs the step: at the server's `TIME`, or at `now` (internal ns;
    /// tests only). Also answers the TTL the key was given, ms.
    pub(super) fn step_at(
        &self,
        key: &str,
        request: &Request,
        now: Option<u64>,
    ) -> Result<(Decision, u64), Error> {
        let call = self.wire.step(key, request, now);
        let reply: ::redis::Value = self.pool.run(|c| self.wire.invoke(&call, c))?;
        script::decision(&reply, request, now.is_some())
    }

    /// Undoes a grant at `now` (`None`: the server's `TIME`; tests give
    /// one).
    pub(super) fn give_back_at(
        &self,
        key: &str,
        tau: u64,
        undo: crate::store::Booking,
        now: Option<u64>,
    ) -> Result<bool, Error> {
        let call = self.wire.give_back(key, tau, undo, now);
        let reply: ::redis::Value = self.pool.run(|c| self.wire.invoke(&call, c))?;
        script::given_back(&reply)
    }

    /// Reads `key`'s state and the server's time (or `now`, in tests).
    pub(super) fn peek_at(&self, key: &str, now: Option<u64>) -> Result<(u64, u64), Error> {
        let call = self.wire.peek(key, now);
        let reply: ::redis::Value = self.pool.run(|c| self.wire.invoke(&call, c))?;
        script::peeked(&reply)
    }
}

impl Remote for RedisBackend {
    #[cfg(feature = "tokio")]
    type Async = super::aio::AsyncRedisBackend;

    #[cfg(feature = "tokio")]
    fn to_async(&self) -> Self::Async {
        let (connect, response) = self.pool.timeouts();
        super::aio::AsyncRedisBackend::twin(
            self.pool.target(),
            self.wire.prefix(),
            connect,
            response,
        )
    }

    /// The step script's `give` (never retried: run twice, it could erase
    /// a booking made in between from the state the first run restored).
    fn undo(&self, key: &str, tau: u64, undo: crate::store::Booking) -> Result<bool, Error> {
        self.give_back_at(key, tau, undo, None)
    }

    fn step(&self, key: &str, request: &Request) -> Result<Decision, Error> {
        self.step_at(key, request, None)
            .map(|(decision, _ttl)| decision)
    }

    fn peek(&self, key: &str) -> Result<(u64, u64), Error> {
        self.peek_at(key, None)
    }

    /// One `DEL` of the prefixed key, as redis_rate's `Reset` (a `DEL`
    /// twice is one).
    fn reset(&self, key: &str) -> Result<bool, Error> {
        let del = self.wire.del(key);
        self.pool
            .run(|c| del.query::<u64>(c))
            .map(|removed| removed > 0)
    }
}

impl RedisLimiter {
    /// One `PING` round trip on one of the limiter's connections: a health
    /// check (at start-up, say), and the floor a call's round trip is
    /// measured against. Connects if no connection is open.
    ///
    /// # Errors
    /// Redis failures, whatever the policy.
    pub fn ping(&self) -> Result<(), Error> {
        self.backend()
            .pool
            .run(|c| ::redis::cmd("PING").query::<String>(c))
            .map(drop)
    }

    /// The prefix put before every key.
    pub fn prefix(&self) -> &str {
        self.backend().wire.prefix()
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("prefix", &self.wire.prefix())
            .finish_non_exhaustive()
    }
}
