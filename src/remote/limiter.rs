//! [`RemoteLimiter<B, F>`]: the remote limiter, its calls written once for
//! every backend over [`Core`]: what both faces have here, with the
//! blocking face's calls; the async face's are in `src/remote/aio.rs`.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use super::core::{Common, Core};
use super::{Backend, Done, Error, FailPolicy, Op};
use crate::limiter::take::{Booked, State, Take, Taken, Within};
use crate::observe::stats::{Counted, Stats};
use crate::values::error::BuildError;
use crate::values::limit::Limit;
use crate::values::rate::Rate;
use crate::values::slack::Slack;
use crate::wait::Wait;

/// A limiter whose state lives in a server, so that every process using the
/// same server and key shares one limit: [`RedisLimiter`](crate::redis::RedisLimiter),
/// [`PostgresLimiter`](crate::postgres::PostgresLimiter),
/// `MemcachedLimiter` and
/// [`MemoryLimiter`](super::memory::MemoryLimiter) are it over their
/// backends.
///
/// Calls name a key (`"api"`, `"user:42"`): each key is its own limit at
/// this limiter's rate and slack, or its own quota per window when the
/// limit is one ([`Limit::per_window`]: see the guide's [remote
/// limits](crate::guide::remote#quotas-per-window)). The calls and their meaning are
/// [`AtomicLimiter`](crate::AtomicLimiter)'s, plus an [`Error`] on
/// failure, which the [`FailPolicy`] turns into an admission only when the
/// server could not answer. It answers the [`Take`] interface for any key
/// that displays as text. Its async face,
/// [`AsyncRemoteLimiter`](super::AsyncRemoteLimiter) (feature `tokio`), is
/// this type with `F` [`Async`](super::Async), made by
/// `AsyncRemoteLimiter::from(limiter)`: the calls below but `available`,
/// `next_free` and `reset` are the same on both faces.
///
/// It is cheap to clone (the clones share connections) and `Send + Sync`.
///
/// # What `take` returns
/// The time the permit went on the server's clock, as Unix time (see [the
/// time a take returns](crate::limiter::take#the-time-a-take-returns)): every
/// process sharing a key reads one clock. (memcached lends none: there it
/// is the Unix time of the clock the limiter decides on.) The wait the server reports is
/// counted on the local clock from the reply's arrival, so a permit is
/// never early by the server's clock.
pub struct RemoteLimiter<B, F = Blocking> {
    pub(crate) core: Core<B>,
    face: PhantomData<F>,
}

/// The blocking face of a [`RemoteLimiter`], its default: its calls block
/// the thread.
#[derive(Debug)]
pub enum Blocking {}

/// The async face of a [`RemoteLimiter`]: its calls are futures (see
/// [`AsyncRemoteLimiter`](super::AsyncRemoteLimiter)).
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub enum Async {}

impl<B, F> Clone for RemoteLimiter<B, F> {
    fn clone(&self) -> Self {
        RemoteLimiter::of(self.core.clone())
    }
}

impl<B, F> RemoteLimiter<B, F> {
    /// The limiter over `core`, on face `F`.
    pub(crate) fn of(core: Core<B>) -> Self {
        RemoteLimiter {
            core,
            face: PhantomData,
        }
    }

    /// The same limiter (same server, connections and policy) at another
    /// rate and slack: for keys that need their own limit. Every process
    /// must use the same limit for a key; if two disagree, each request is
    /// paced by the limit of the process that made it.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when `slack` intervals of `rate` span
    /// over 146 years.
    pub fn with_limit(&self, rate: Rate, slack: impl Into<Slack>) -> Result<Self, BuildError> {
        Ok(RemoteLimiter::of(self.core.with_limit(rate, slack.into())?))
    }

    /// The same limiter (same server, connections and policy) at another
    /// limit: a rate and its slack, or a quota per window
    /// ([`Limit::per_window`]), which every call then counts in the
    /// server, window by window of the server's clock. As with
    /// [`with_limit`](Self::with_limit), every process must use the same
    /// limit for a key, and a key holds a paced state or a window's,
    /// never both (each store keeps either as one number, which the other
    /// kind may misread; Redis fails a window's call on a paced key): give
    /// each kind keys of its own.
    ///
    /// # Errors
    /// As [`with_limit`](Self::with_limit). (A quota Redis cannot count,
    /// over 2^36 - 1, fails its calls with [`Error::Config`].)
    pub fn with(&self, limit: impl Into<Limit>) -> Result<Self, BuildError> {
        Ok(RemoteLimiter::of(self.core.with(limit.into())?))
    }

    /// The rate in force.
    pub fn rate(&self) -> Rate {
        self.core.rate
    }

    /// The slack, in permits: the burst is `slack + 1`. For a limit
    /// counted by window, the quota less one.
    pub fn slack(&self) -> u64 {
        self.core.slack()
    }

    /// The limit in force, its slack in permits.
    pub fn limit(&self) -> Limit {
        self.core.limit()
    }

    /// What a call does when the server fails it.
    pub fn fail_policy(&self) -> FailPolicy {
        self.core.shared.policy
    }

    /// How a take waits out its slot.
    pub fn wait_strategy(&self) -> Wait {
        self.core.shared.wait
    }

    /// What the limiter decided, all keys, `with_limit` siblings and the
    /// other face together, or `None` unless its builder asked. See
    /// [`Stats`].
    pub fn stats(&self) -> Option<Stats> {
        self.core.shared.meter.read()
    }

    /// The backend: what only its server has (see its own calls).
    pub fn backend(&self) -> &B {
        &self.core.backend
    }
}

impl<B: Backend> RemoteLimiter<B> {
    /// A limiter of `limit` (a rate and its slack, or a quota per window)
    /// over `backend`, failing as `policy` says, and counting
    /// ([`stats`](Self::stats)): for a backend made by hand (the in-memory
    /// one); the Redis and PostgreSQL limiters have builders of their own.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when the slack at the rate banks over
    /// 146 years.
    pub fn with_backend(backend: B, limit: Limit, policy: FailPolicy) -> Result<Self, BuildError> {
        let mut common = Common::new(limit.rate());
        common.set_limit(limit);
        (common.policy, common.counting.on) = (policy, true);
        Core::new(backend, "memory", &common).map(RemoteLimiter::of)
    }

    /// How many permits of `key`'s limit one request could take now without
    /// waiting, from 0 to `slack + 1`.
    ///
    /// # Errors
    /// Failures, whatever the policy: there is nothing to admit.
    pub fn available(&self, key: &str) -> Result<u64, Error> {
        Ok(self.core.state(key)?.available())
    }

    /// How long until a permit of `key`'s limit is free (zero: one is free
    /// now).
    ///
    /// # Errors
    /// Failures, whatever the policy.
    pub fn next_free(&self, key: &str) -> Result<Duration, Error> {
        Ok(self.core.state(key)?.next_free())
    }

    /// Forgets `key`'s state: the key comes back at rest, as a key never
    /// used, with its whole burst (`slack + 1` at once), for every process
    /// sharing it: a deliberate refill, after which the [window
    /// bound](crate::guide::model#slack-and-burst-the-window-bound) holds
    /// again. `true` when the key
    /// held a state. Takes racing it land wholly before or after it. An
    /// async take booked before the reset and then dropped gives nothing
    /// back (unless takes after the reset bring the key back to that very
    /// state, to the nanosecond, before it is dropped).
    ///
    /// # Errors
    /// Failures, whatever the [`FailPolicy`]: a reset admits nothing, and
    /// one that failed must not pass for done. Retrying it is safe.
    pub fn reset(&self, key: &str) -> Result<bool, Error> {
        self.core.call(key, Op::Reset)?.flag()
    }
}

/// Any key that displays as text (`str`, `String`, a number, the HTTP
/// layer's `ClientKey`) names the server's key.
///
/// A booking ([`book`](Take::book)) holds the server's: the time its
/// permit went and the cost, on the server's clock. Its
/// [`settle`](Take::settle) is one round trip (none when the actual cost
/// is the booked one) running the model's settle in the server on the
/// server's clock, as a take runs the step; it fails within the timeouts,
/// naming the server, and under [`FailPolicy::Open`] a settle the server
/// could not answer is dropped (the estimate stands). It is never sent
/// twice, so a refund is never given twice.
impl<K: fmt::Display + ?Sized, B: Backend> Take<K> for RemoteLimiter<B> {
    fn take_within(&self, key: &K, cost: u64, within: Within) -> Result<Taken, Error> {
        self.core
            .take(&key.to_string(), cost, within.admit())
            .map_err(|e| within.refusal(e))
    }
    fn can_take(&self, key: &K, cost: u64) -> Result<bool, Error> {
        let peeked = self.core.call(&key.to_string(), self.core.peek_op());
        self.core.can_take_from(peeked.and_then(Done::peeked), cost)
    }
    fn state(&self, key: &K) -> Result<State, Error> {
        self.core.state(&key.to_string())
    }
    fn limit_for(&self, _key: &K) -> Option<Limit> {
        Some(self.core.limit())
    }
    fn book(&self, key: &K, cost: u64, within: Within) -> Result<Booked, Error> {
        let key = key.to_string();
        let (taken, booking) =
            (self.core.take_booked(&key, cost, within.admit())).map_err(|e| within.refusal(e))?;
        Ok(self.core.booked(&key, taken, cost, booking))
    }
    fn settle(&self, key: &K, booked: Booked, actual: u64) -> Result<(), Error> {
        self.core.settle_booked(&key.to_string(), booked, actual)
    }
}

impl<B, F> Counted for RemoteLimiter<B, F> {
    fn stats(&self) -> Option<Stats> {
        self.core.shared.meter.read()
    }
}

/// Its backend (whose name says the face: `RedisBackend`,
/// `AsyncRedisBackend`), limit and fail policy.
impl<B: fmt::Debug, F> fmt::Debug for RemoteLimiter<B, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteLimiter")
            .field("backend", self.backend())
            .field("rate", &self.rate())
            .field("slack", &self.slack())
            .field("fail_policy", &self.fail_policy())
            .finish_non_exhaustive()
    }
}
