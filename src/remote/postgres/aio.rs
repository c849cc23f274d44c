//! [`AsyncPostgresLimiter`]: the PostgreSQL limiter's calls as futures
//! (features `postgres` and `tokio`): [`AsyncRemoteLimiter`] over
//! [`AsyncPostgresBackend`], and the calls only PostgreSQL has.

use super::backend::AsyncPostgresBackend;
use crate::remote::{AsyncBackend, AsyncRemoteLimiter, Done, Error, Op};

/// The async face of a [`PostgresLimiter`](super::PostgresLimiter):
/// [`AsyncRemoteLimiter`] over [`AsyncPostgresBackend`], made by
/// `AsyncPostgresLimiter::from(limiter)`, on the same pool; its calls run
/// on the runtime they are awaited on. Its calls are
/// [`AsyncRemoteLimiter`]'s, plus [`install`](AsyncRemoteLimiter::install),
/// [`prune`](AsyncRemoteLimiter::prune), [`ping`](AsyncRemoteLimiter::ping)
/// and [`table`](AsyncRemoteLimiter::table).
///
/// ```no_run
/// use paceline::postgres::{AsyncPostgresLimiter, PostgresLimiter};
/// use paceline::Rate;
/// use paceline::AsyncTake;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), paceline::Error> {
/// let limiter = PostgresLimiter::builder("host=/run/postgresql dbname=app", Rate::per_second(100))
///     .build()?;
/// let limiter = AsyncPostgresLimiter::from(limiter);
/// limiter.install().await?;
/// limiter.take("api").await?; // sleeps (as a task) until the slot
/// # Ok(())
/// # }
/// ```
///
/// A give-back (a take cancelled after booking) is one `UPDATE … WHERE tat
/// = <its state>` (or a `DELETE` when the row was absent before it), which
/// changes nothing if anyone took since.
pub type AsyncPostgresLimiter = AsyncRemoteLimiter<AsyncPostgresBackend>;

impl AsyncBackend for AsyncPostgresBackend {
    async fn call(&self, key: &str, op: Op) -> Result<Done, Error> {
        self.call_at(key, op, None).await
    }
}

impl AsyncPostgresLimiter {
    /// As [`PostgresLimiter::install`](super::PostgresLimiter::install).
    ///
    /// # Errors
    /// As [`PostgresLimiter::install`](super::PostgresLimiter::install).
    pub async fn install(&self) -> Result<(), Error> {
        self.backend().install().await
    }

    /// As [`PostgresLimiter::prune`](super::PostgresLimiter::prune).
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    pub async fn prune(&self) -> Result<u64, Error> {
        self.backend().prune().await
    }

    /// One `SELECT 1` round trip.
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    pub async fn ping(&self) -> Result<(), Error> {
        self.backend().ping().await
    }

    /// The table, as the builder got it.
    pub fn table(&self) -> &str {
        &self.backend().0.table.name
    }
}

crate::remote::debug_backend!(AsyncPostgresBackend, |b| "table": b.0.table.name);
