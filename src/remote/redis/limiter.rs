//! [`RedisLimiter`], the blocking limiter, and its backend: the step as an
//! `EVALSHA` on a pooled connection.

use std::fmt;
use std::time::Duration;

use super::conn::Pool;
use super::script::{self, Wire};
use crate::error::BuildError;
use crate::rate::Rate;
use crate::remote::limiter::Core;
use crate::remote::{Decision, Error, FailPolicy, Remote, Request};
use crate::schedule::{self, Admit};
use crate::slack::Slack;
use crate::stats::{Counted, Stats};
use crate::wait::{self, Wait};

/// The blocking backend: a pool of connections and the wire format.
pub(super) struct Blocking {
    pub(super) pool: Pool,
    pub(super) wire: Wire,
}

impl Blocking {
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

    /// Undoes a grant at `now` (tests only: the async limiter's give-back
    /// runs the same call at the server's `TIME`).
    #[cfg(test)]
    pub(super) fn give_back_at(
        &self,
        key: &str,
        tau: u64,
        undo: crate::remote::Undo,
        now: u64,
    ) -> Result<bool, Error> {
        let call = self.wire.give_back(key, tau, undo, Some(now));
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

impl Remote for Blocking {
    const ASYNC_TAKE: &'static str = "AsyncRedisLimiter::take";

    fn step(&self, key: &str, request: &Request) -> Result<Decision, Error> {
        self.step_at(key, request, None)
            .map(|(decision, _ttl)| decision)
    }

    fn peek(&self, key: &str) -> Result<(u64, u64), Error> {
        self.peek_at(key, None)
    }
}

/// A limiter whose state lives in Redis, so that every process using the same
/// Redis and key shares one limit.
///
/// Calls name a key (`"api"`, `"user:42"`): each key is its own limit at this
/// limiter's rate and slack, stored under the prefix. The calls and their
/// meaning are [`AtomicLimiter`](crate::AtomicLimiter)'s, plus an
/// [`Error`] on failure. See [the module docs](super) for the model, waiting
/// and failures; its async face is `AsyncRedisLimiter::from(limiter)`.
///
/// It is cheap to clone (the clones share connections) and `Send + Sync`.
#[derive(Clone)]
pub struct RedisLimiter {
    pub(super) core: Core<Blocking>,
}

impl RedisLimiter {
    /// The same limiter (same Redis, connections, prefix and policy) at
    /// another rate and slack: for keys that need their own limit.
    ///
    /// ```no_run
    /// # use paceline::{redis::RedisLimiter, Rate};
    /// let users = RedisLimiter::builder("redis://127.0.0.1/", Rate::per_second(10)).build()?;
    /// let partners = users.with_limit(Rate::per_second(500), 50)?;
    /// users.take("user:42")?;
    /// partners.take("user:7")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Every process must use the same limit for a key; if two disagree, each
    /// request is paced by the limit of the process that made it.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when `slack` intervals of `rate` span
    /// over 146 years.
    pub fn with_limit(
        &self,
        rate: Rate,
        slack: impl Into<Slack>,
    ) -> Result<RedisLimiter, BuildError> {
        Ok(RedisLimiter {
            core: self.core.with_limit(rate, slack.into())?,
        })
    }

    /// Blocks until the next permit of `key`'s limit comes up, and returns
    /// its slot as the server's Unix time.
    ///
    /// # Errors
    /// A failure of Redis ([`Error::Unavailable`], [`Error::Timeout`],
    /// [`Error::Script`]) under [`FailPolicy::Closed`]; under
    /// [`FailPolicy::Open`] it returns at once with the local Unix time.
    pub fn take(&self, key: &str) -> Result<Duration, Error> {
        self.take_n(key, 1)
    }

    /// Blocks until `cost` permits of `key`'s limit are paid for, as one
    /// request ("pay first"), and returns its slot as the server's Unix time.
    ///
    /// # Errors
    /// [`TakeError::CostTooLarge`](crate::TakeError::CostTooLarge) (as
    /// [`Error::Refused`]) when `cost` intervals span over 146 years; Redis
    /// failures as [`take`](Self::take).
    pub fn take_n(&self, key: &str, cost: u64) -> Result<Duration, Error> {
        self.core.take(key, cost, Admit::Always)
    }

    /// Takes a permit of `key`'s limit if one is free now; never waits for
    /// one. A refusal stores nothing.
    ///
    /// # Errors
    /// [`TakeError::RetryAfter`](crate::TakeError::RetryAfter) (as
    /// [`Error::Refused`]) with how long until it would be admitted; Redis
    /// failures as [`take`](Self::take) (under [`FailPolicy::Open`] they
    /// admit).
    pub fn try_take(&self, key: &str) -> Result<(), Error> {
        self.try_take_n(key, 1)
    }

    /// Takes `cost` permits of `key`'s limit if they are free now.
    ///
    /// # Errors
    /// As [`try_take`](Self::try_take), and
    /// [`TakeError::ExceedsBurst`](crate::TakeError::ExceedsBurst) when
    /// `cost > slack + 1`,
    /// [`TakeError::CostTooLarge`](crate::TakeError::CostTooLarge).
    pub fn try_take_n(&self, key: &str, cost: u64) -> Result<(), Error> {
        self.core.try_take(key, cost)
    }

    /// Takes a permit of `key`'s limit and waits for it only if its slot is
    /// at most `max_wait` away; otherwise fails at once, storing nothing.
    ///
    /// # Errors
    /// [`TakeError::QueueFull`](crate::TakeError::QueueFull) (as
    /// [`Error::Refused`]); Redis failures as [`take`](Self::take).
    pub fn take_timeout(&self, key: &str, max_wait: Duration) -> Result<Duration, Error> {
        self.take_n_timeout(key, 1, max_wait)
    }

    /// [`take_timeout`](Self::take_timeout) for `cost` permits.
    ///
    /// # Errors
    /// As [`take_timeout`](Self::take_timeout), and
    /// [`TakeError::ExceedsBurst`](crate::TakeError::ExceedsBurst),
    /// [`TakeError::CostTooLarge`](crate::TakeError::CostTooLarge).
    pub fn take_n_timeout(
        &self,
        key: &str,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, Error> {
        self.core
            .take(key, cost, Admit::Within(wait::nanos(max_wait)))
            .map_err(|e| e.timed_out(max_wait))
    }

    /// Whether [`try_take_n(key, cost)`](Self::try_take_n) would succeed now.
    /// Consumes nothing.
    ///
    /// # Errors
    /// Redis failures under [`FailPolicy::Closed`]; under
    /// [`FailPolicy::Open`] they answer `true`.
    pub fn can_take(&self, key: &str, cost: u64) -> Result<bool, Error> {
        self.core.can_take(key, cost)
    }

    /// How many permits of `key`'s limit one request could take now without
    /// waiting, from 0 to `slack + 1`.
    ///
    /// # Errors
    /// Redis failures (whatever the policy: there is nothing to admit).
    pub fn available(&self, key: &str) -> Result<u64, Error> {
        self.core.peek(key, schedule::available)
    }

    /// How long until a permit of `key`'s limit is free (zero: one is free
    /// now).
    ///
    /// # Errors
    /// Redis failures (whatever the policy).
    pub fn next_free(&self, key: &str) -> Result<Duration, Error> {
        self.core.peek(key, |tat, now, p| {
            Duration::from_nanos(schedule::next_free(tat, now, p))
        })
    }

    /// Forgets `key`'s state: one `DEL` of the prefixed key, as
    /// redis_rate's `Reset`. The key comes back at rest, as a key never
    /// used, with its whole burst (`slack + 1` at once): a deliberate
    /// refill, for every process sharing the key, and the bound of `slack +
    /// 1 + w / T` in a window `w` holds from the reset on. `true` when the
    /// key held a state (an absent one had expired at rest already).
    ///
    /// Takes racing it land wholly before or after it (Redis runs one
    /// command at a time). An async take booked before the reset and then
    /// dropped gives nothing back: the give-back restores only a key that
    /// still holds that take's state, and the reset removed it. (One
    /// exception, unlike the in-process limiters, which count resets: if
    /// takes after the reset bring the key back to that very state, to the
    /// nanosecond, before the booked take is dropped, its give-back
    /// succeeds, and one slot can go out twice.)
    ///
    /// ```no_run
    /// # use paceline::{redis::RedisLimiter, Rate};
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1/", Rate::per_second(10)).build()?;
    /// limiter.try_take_n("user:42", 11)?;
    /// limiter.reset("user:42")?;
    /// assert_eq!(limiter.available("user:42")?, 11); // as a new key
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// Redis failures ([`Error::Unavailable`], [`Error::Timeout`]) whatever
    /// the [`FailPolicy`]: a reset admits nothing, and one that failed must
    /// not pass for done. Retrying it is safe (a `DEL` twice is one).
    pub fn reset(&self, key: &str) -> Result<bool, Error> {
        let wire = &self.core.backend().wire;
        let del = wire.del(key);
        self.core
            .backend()
            .pool
            .run(|c| del.query::<u64>(c))
            .map(|removed| removed > 0)
    }

    /// One `PING` round trip on one of the limiter's connections: a health
    /// check (at start-up, say), and the floor a call's round trip is
    /// measured against. Connects if no connection is open.
    ///
    /// # Errors
    /// Redis failures, whatever the policy.
    pub fn ping(&self) -> Result<(), Error> {
        self.core
            .backend()
            .pool
            .run(|c| ::redis::cmd("PING").query::<String>(c))
            .map(drop)
    }

    /// The rate in force.
    pub fn rate(&self) -> Rate {
        self.core.rate
    }

    /// The slack, in permits: the burst is `slack + 1`.
    pub fn slack(&self) -> u64 {
        self.core.slack
    }

    /// What a call does when Redis fails it.
    pub fn fail_policy(&self) -> FailPolicy {
        self.core.fail_policy()
    }

    /// What the limiter decided, all keys and `with_limit` siblings
    /// together, or `None` unless its builder asked
    /// ([`RedisBuilder::stats`](super::RedisBuilder::stats)). See
    /// [`Stats`].
    pub fn stats(&self) -> Option<Stats> {
        self.core.shared.meter.read()
    }

    /// How a take waits out its slot.
    pub fn wait_strategy(&self) -> Wait {
        self.core.wait_strategy()
    }

    /// The prefix put before every key.
    pub fn prefix(&self) -> &str {
        self.core.backend().wire.prefix()
    }
}

impl Counted for RedisLimiter {
    fn stats(&self) -> Option<Stats> {
        self.core.shared.meter.read()
    }
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("rate", &self.rate())
            .field("slack", &self.slack())
            .field("prefix", &self.prefix())
            .field("fail_policy", &self.fail_policy())
            .finish_non_exhaustive()
    }
}
