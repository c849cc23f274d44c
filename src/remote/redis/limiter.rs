//! [`RedisBackend`], the blocking backend: the step as an `EVALSHA` on a
//! pooled connection; and the calls only Redis has.

use super::conn::Pool;
use super::script::{self, Wire};
use crate::remote::{Backend, Done, Error, Op, RemoteLimiter};

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
    /// Runs `op`: at the server's `TIME`, or at `now` (internal ns; tests
    /// only). Also answers the TTL a grant gave its key then, ms.
    pub(super) fn call_at(
        &self,
        key: &str,
        op: Op,
        now: Option<u64>,
    ) -> Result<(Done, u64), Error> {
        script::check(&op)?;
        let cmd = self.wire.command(key, &op, now);
        let reply: ::redis::Value = self.pool.run(op.once(), |c| self.wire.invoke(&cmd, c))?;
        script::done(&reply, &op, now.is_some())
    }
}

impl Backend for RedisBackend {
    #[cfg(feature = "tokio")]
    type Async = super::aio::AsyncRedisBackend;

    #[cfg(feature = "tokio")]
    fn to_async(&self) -> Self::Async {
        super::aio::AsyncRedisBackend::twin(&self.pool, self.wire.prefix())
    }

    /// The script's `take`, `peek`, `give` or `settle`, or one `DEL` of
    /// the prefixed key; a give-back or a settle never sent twice (see
    /// `Pool::run`).
    fn call(&self, key: &str, op: Op) -> Result<Done, Error> {
        self.call_at(key, op, None).map(|(done, _ttl)| done)
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
            .run(false, |c| ::redis::cmd("PING").query::<String>(c))
            .map(drop)
    }

    /// The prefix put before every key.
    pub fn prefix(&self) -> &str {
        self.backend().wire.prefix()
    }
}

crate::remote::debug_backend!(RedisBackend, |b| "prefix": b.wire.prefix());
