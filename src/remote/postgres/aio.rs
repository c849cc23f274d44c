//! [`AsyncPostgresLimiter`]: the PostgreSQL limiter's calls as futures, for
//! Tokio (features `postgres` and `tokio`).
//!
//! The same statements, decisions, table, fail policy and errors as
//! [`PostgresLimiter`], through the same seam (`src/remote/limiter.rs`), on
//! the same pool; the calls run on the caller's runtime, and takes wait in
//! the crate's one async wait (`src/wait/tokio.rs`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::backend::Backend;
use super::PostgresLimiter;
use crate::error::BuildError;
use crate::rate::Rate;
use crate::remote::limiter::{Core, Shared};
use crate::remote::{AsyncRemote, Decision, Error, FailPolicy, Request, Undo};
use crate::schedule;
use crate::slack::Slack;
use crate::stats::{Counted, Stats};
use crate::wait::Wait;

/// The async face of a [`PostgresLimiter`]: its calls as futures, under the
/// same names; made by `AsyncPostgresLimiter::from(limiter)`.
///
/// ```no_run
/// use paceline::postgres::{AsyncPostgresLimiter, PostgresLimiter};
/// use paceline::Rate;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), paceline::postgres::Error> {
/// let limiter = PostgresLimiter::builder("host=/run/postgresql dbname=app", Rate::per_second(100))
///     .build()?;
/// let limiter = AsyncPostgresLimiter::from(limiter);
/// limiter.install().await?;
/// limiter.take("api").await?; // sleeps (as a task) until the slot
/// # Ok(())
/// # }
/// ```
///
/// Cheap to clone (clones share the pool); `Send + Sync`.
///
/// # Cancel safety
/// As [`AsyncRedisLimiter`](crate::redis::AsyncRedisLimiter)'s (with the
/// `redis` feature): a [`take`](Self::take) cancelled before its slot is
/// within 10 ms has booked nothing; one cancelled after booking gives its
/// slot back, in a task of its own, with one `UPDATE … WHERE tat = <its
/// state>` (or a `DELETE` when the row was absent before it), which changes
/// nothing if anyone took since. Best effort: if it fails, the slot stays
/// spent. A future dropped while its statement runs may or may not have
/// taken its permit.
#[derive(Clone)]
pub struct AsyncPostgresLimiter {
    core: Core<Backend>,
    unlogged: bool,
}

impl AsyncRemote for Backend {
    async fn step(&self, key: &str, request: &Request) -> Result<Decision, Error> {
        self.step_at(key, request, None).await
    }

    async fn peek(&self, key: &str) -> Result<(u64, u64), Error> {
        self.peek_at(key, None).await
    }

    async fn give_back(&self, key: &str, tau: u64, undo: Undo) -> Result<bool, Error> {
        Backend::give_back(self, key, tau, undo).await
    }
}

impl From<PostgresLimiter> for AsyncPostgresLimiter {
    /// The async face of `limiter`: the same pool, table, limit, fail
    /// policy, wait strategy and timeouts. Its calls run on the runtime they
    /// are awaited on.
    ///
    /// Each connection runs on the runtime that made it: if the limiter's
    /// own pool (not one handed in) holds idle connections its blocking
    /// calls made (on their runtime thread), they are closed here, so that
    /// the async calls make theirs on the runtime they run on.
    fn from(limiter: PostgresLimiter) -> AsyncPostgresLimiter {
        let core = &limiter.core;
        let blocking = core.backend();
        if blocking.owns_pool_on_its_thread() {
            blocking.backend.0.pool.retain(|_, _| false);
        }
        AsyncPostgresLimiter {
            unlogged: blocking.unlogged,
            core: Core {
                shared: Arc::new(Shared {
                    backend: blocking.backend.clone(),
                    policy: core.shared.policy,
                    wait: core.shared.wait,
                    clock: core.shared.clock.clone(),
                    meter: core.shared.meter.clone(),
                }),
                rate: core.rate,
                slack: core.slack,
                params: core.params,
            },
        }
    }
}

impl AsyncPostgresLimiter {
    /// As [`PostgresLimiter::install`].
    ///
    /// # Errors
    /// As [`PostgresLimiter::install`].
    pub async fn install(&self) -> Result<(), Error> {
        self.core.backend().install(self.unlogged).await
    }

    /// As [`PostgresLimiter::prune`].
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    pub async fn prune(&self) -> Result<u64, Error> {
        self.core.backend().prune().await
    }

    /// The same limiter at another rate and slack; see
    /// [`PostgresLimiter::with_limit`].
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`].
    pub fn with_limit(
        &self,
        rate: Rate,
        slack: impl Into<Slack>,
    ) -> Result<AsyncPostgresLimiter, BuildError> {
        Ok(AsyncPostgresLimiter {
            core: self.core.with_limit(rate, slack.into())?,
            unlogged: self.unlogged,
        })
    }

    /// Waits until the next permit of `key`'s limit comes up; see
    /// [`PostgresLimiter::take`].
    ///
    /// # Errors
    /// As [`PostgresLimiter::take`].
    ///
    /// # Cancel safety
    /// See [the type's](AsyncPostgresLimiter#cancel-safety).
    pub async fn take(&self, key: &str) -> Result<Duration, Error> {
        self.take_n(key, 1).await
    }

    /// Waits until `cost` permits of `key`'s limit are paid for.
    ///
    /// # Errors
    /// As [`PostgresLimiter::take_n`].
    ///
    /// # Cancel safety
    /// As [`take`](Self::take).
    pub async fn take_n(&self, key: &str, cost: u64) -> Result<Duration, Error> {
        self.core.take_async(key, cost).await
    }

    /// Takes a permit of `key`'s limit if one is free now.
    ///
    /// # Errors
    /// As [`PostgresLimiter::try_take`].
    ///
    /// # Cancel safety
    /// Dropped while its statement runs, it may or may not have taken.
    pub async fn try_take(&self, key: &str) -> Result<(), Error> {
        self.try_take_n(key, 1).await
    }

    /// Takes `cost` permits of `key`'s limit if they are free now.
    ///
    /// # Errors
    /// As [`PostgresLimiter::try_take_n`].
    ///
    /// # Cancel safety
    /// As [`try_take`](Self::try_take).
    pub async fn try_take_n(&self, key: &str, cost: u64) -> Result<(), Error> {
        self.core.try_take_async(key, cost).await
    }

    /// Takes a permit, waiting only if its slot is at most `max_wait` away.
    ///
    /// # Errors
    /// As [`PostgresLimiter::take_timeout`].
    ///
    /// # Cancel safety
    /// It books at once: dropped after that, it gives its slot back while no
    /// one has booked since.
    pub async fn take_timeout(&self, key: &str, max_wait: Duration) -> Result<Duration, Error> {
        self.take_n_timeout(key, 1, max_wait).await
    }

    /// [`take_timeout`](Self::take_timeout) for `cost` permits.
    ///
    /// # Errors
    /// As [`PostgresLimiter::take_n_timeout`].
    ///
    /// # Cancel safety
    /// As [`take_timeout`](Self::take_timeout).
    pub async fn take_n_timeout(
        &self,
        key: &str,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, Error> {
        self.core.take_timeout_async(key, cost, max_wait).await
    }

    /// Whether [`try_take_n(key, cost)`](Self::try_take_n) would succeed
    /// now; a plain `SELECT`.
    ///
    /// # Errors
    /// As [`PostgresLimiter::can_take`].
    ///
    /// # Cancel safety
    /// Cancel safe: it writes nothing.
    pub async fn can_take(&self, key: &str, cost: u64) -> Result<bool, Error> {
        self.core.can_take_async(key, cost).await
    }

    /// How many permits of `key`'s limit one request could take now.
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    ///
    /// # Cancel safety
    /// Cancel safe: it writes nothing.
    pub async fn available(&self, key: &str) -> Result<u64, Error> {
        self.core.peek_async(key, schedule::available).await
    }

    /// How long until a permit of `key`'s limit is free (zero: now).
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    ///
    /// # Cancel safety
    /// Cancel safe: it writes nothing.
    pub async fn next_free(&self, key: &str) -> Result<Duration, Error> {
        self.core
            .peek_async(key, |tat, now, p| {
                Duration::from_nanos(schedule::next_free(tat, now, p))
            })
            .await
    }

    /// Forgets `key`'s state, as [`PostgresLimiter::reset`].
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    ///
    /// # Cancel safety
    /// Dropped before the reply, the `DELETE` may or may not have run;
    /// running it again is safe.
    pub async fn reset(&self, key: &str) -> Result<bool, Error> {
        self.core.backend().reset(key).await
    }

    /// One `SELECT 1` round trip.
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    pub async fn ping(&self) -> Result<(), Error> {
        self.core.backend().ping().await
    }

    /// The rate in force.
    pub fn rate(&self) -> Rate {
        self.core.rate
    }

    /// The slack, in permits.
    pub fn slack(&self) -> u64 {
        self.core.slack
    }

    /// What a call does when the server fails it.
    pub fn fail_policy(&self) -> FailPolicy {
        self.core.fail_policy()
    }

    /// How a take waits out its slot.
    pub fn wait_strategy(&self) -> Wait {
        self.core.wait_strategy()
    }

    /// The table, as the builder got it.
    pub fn table(&self) -> &str {
        &self.core.backend().0.table.name
    }

    /// What the limiter decided, all keys and `with_limit` siblings
    /// together (and the blocking limiter it was made from), or `None`
    /// unless its builder asked ([`PostgresBuilder::stats`](super::PostgresBuilder::stats)).
    pub fn stats(&self) -> Option<Stats> {
        self.core.shared.meter.read()
    }
}

impl Counted for AsyncPostgresLimiter {
    fn stats(&self) -> Option<Stats> {
        self.core.shared.meter.read()
    }
}

impl fmt::Debug for AsyncPostgresLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncPostgresLimiter")
            .field("rate", &self.rate())
            .field("slack", &self.slack())
            .field("table", &self.table())
            .field("fail_policy", &self.fail_policy())
            .finish_non_exhaustive()
    }
}
