//! [`PostgresLimiter`]: one limit shared by every process that reaches the
//! same PostgreSQL database (feature `postgres`).
//!
//! A `PostgresLimiter` keeps each key's state in one row of a table and runs
//! paceline's step on it as **one SQL statement**, atomically, on the
//! server's clock (`clock_timestamp()`), in exact integer nanoseconds; each
//! decision is [`schedule::step`](crate::model::schedule::step)'s (a property test
//! runs both, with the clock injected). When to pick it over Redis, handing
//! in a pool, the schema, keys, the statement, transactions, pruning and its
//! bound, failures and what a crash forgets: the guide's [remote
//! limits](crate::guide::remote#postgresql).
//!
//! ```no_run
//! use paceline::postgres::{FailPolicy, PostgresLimiter};
//! use paceline::Rate;
//! use paceline::Take;
//!
//! let limiter = PostgresLimiter::builder("host=/run/postgresql user=app dbname=app", Rate::per_second(100))
//!     .slack(10)
//!     .on_error(FailPolicy::Closed) // server down: return the error (the default)
//!     .build()?;
//! limiter.install()?; // CREATE TABLE IF NOT EXISTS …; idempotent
//! limiter.take("api")?; // blocks until this process's share of 100/s comes up
//! # Ok::<(), paceline::postgres::Error>(())
//! ```
//!
//! # Implementation details
//!
//! - The step is one call of a PL/pgSQL function that `install` creates
//!   beside the table (`src/remote/postgres/sql.rs`, `step_function`): one
//!   round trip, its statements planned once per connection. It updates
//!   first, on the row's newest version, only if that version admits (so a
//!   grant on a tracked key is one index lookup and one, mostly HOT,
//!   update, and a refusal writes and locks nothing); failing that it reads
//!   the row, and inserts an absent key that is admitted (`ON CONFLICT DO
//!   NOTHING`: a key inserted meanwhile is asked again). The client tells a
//!   refusal's kind and wait from the clock and the `tat` read
//!   (`src/remote/postgres/step.rs`), with the function's arithmetic; a
//!   `tat` that admits although nothing was written (another call changed
//!   the row between the update and the read) is asked again.
//! - `tat` is stored as `tat - 2^63` (every `u64` state in a `bigint`, in
//!   order); `rest_at` is rounded up to whole seconds, in `bigint`
//!   arithmetic only, so most updates are HOT. A row is deleted only once
//!   at rest for a second (a lease's lender's: at rest at the stated
//!   slack, the limit's `keep`), and an absent row decides as one at rest.
//! - The blocking face runs the async calls on a private runtime thread and
//!   waits on a channel, so it works on any thread; every call runs on the
//!   limiter's own pool connection, autocommit.

#[cfg(feature = "tokio")]
mod aio;
mod backend;
mod builder;
mod limiter;
mod runtime;
mod sql;
mod step;
mod window;
mod window_sql;
#[cfg(feature = "tokio")]
pub use aio::AsyncPostgresLimiter;
pub use backend::AsyncPostgresBackend;
#[cfg(feature = "fleet")]
pub(crate) use builder::{address, own_config};
pub use builder::{
    PostgresBuilder, PostgresSettings, DEFAULT_POOL_SIZE, DEFAULT_PRUNE_BATCH, DEFAULT_PRUNE_EVERY,
    DEFAULT_TABLE,
};
pub use limiter::{PostgresBackend, PostgresLimiter};
#[cfg(feature = "fleet")]
pub(crate) use runtime::RuntimeThread;

pub use super::{Cause, Error, FailPolicy, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT};

/// The client crates the limiter runs on, re-exported so that a pool handed
/// to [`PostgresLimiter::from_pool`] is of the same version.
pub use deadpool_postgres;
pub use tokio_postgres;

#[cfg(test)]
mod tests;
