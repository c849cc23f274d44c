//! [`PostgresLimiter`]: one limit shared by every process that reaches the
//! same PostgreSQL database (feature `postgres`).
//!
//! Services that run on several hosts often have PostgreSQL and no Redis. A
//! `PostgresLimiter` keeps each key's state in one row of a table and runs
//! paceline's step on it as **one SQL statement**, atomically, on the
//! server's clock (`clock_timestamp()`), in exact integer nanoseconds: every
//! process draws from the same schedule, client clocks never matter, and
//! each decision is [`schedule::step`](crate::schedule::step)'s (a property
//! test runs both on random sequences, with the clock injected).
//!
//! ```no_run
//! use paceline::postgres::{FailPolicy, PostgresLimiter};
//! use paceline::Rate;
//!
//! let limiter = PostgresLimiter::builder("host=/run/postgresql user=app dbname=app", Rate::per_second(100))
//!     .slack(10)
//!     .on_error(FailPolicy::Closed) // server down: return the error (the default)
//!     .build()?;
//! limiter.install()?; // CREATE TABLE IF NOT EXISTS …; idempotent
//! limiter.take("api")?; // blocks until this process's share of 100/s comes up
//! match limiter.try_take("user:42") {
//!     Ok(()) => { /* go */ }
//!     Err(e) => eprintln!("{e}"), // "rate limited: retry after 9.98ms", or server trouble
//! }
//! # Ok::<(), paceline::postgres::Error>(())
//! ```
//!
//! # When to pick PostgreSQL over Redis
//!
//! - **You have PostgreSQL and no Redis.** One less server to run, secure,
//!   back up and watch. This is the main reason.
//! - **The limit must survive a restart.** A logged table is crash-safe and
//!   replicated like the rest of the database; Redis keeps limits across a
//!   restart only with persistence configured.
//! - **Moderate rates per key.** A grant is a row update and a commit: one
//!   hot key does at most one grant per commit latency (see "Commit cost").
//!   On an `UNLOGGED` table that is tens of thousands per second; on a
//!   logged one with `fsync` it can be a few hundred. Refusals write
//!   nothing and cost only a read.
//!
//! Pick Redis for very hot keys, for the lowest latency, or when the
//! database is already the bottleneck: every call here is a statement on
//! the database server, and a granted one a write. Measured
//! (`benches/postgres.rs`, `docs/PERFORMANCE.md`): a granted `try_take`
//! costs about three `SELECT 1` round trips, a refused one about two; with
//! every call a write, Pecorino's float leaky-bucket UPSERT does ~1.3x the
//! calls per second, and on a hot key that mostly refuses paceline does
//! more (several times more at 64 connections, where each of Pecorino's
//! calls writes and waits on the row lock). See `docs/ARCHITECTURE.md` for
//! the comparison with Redis.
//!
//! # Client crates, and handing in a pool
//!
//! The limiter runs on `tokio-postgres` with a `deadpool-postgres` pool,
//! the stack most Tokio services with PostgreSQL already have:
//! [`from_pool`](PostgresLimiter::from_pool) takes the application's
//! `deadpool_postgres::Pool` (whatever its TLS connector), and
//! [`builder`](PostgresLimiter::builder) / [`from_config`](PostgresLimiter::from_config)
//! make a small pool of its own (no TLS). Both crates are re-exported
//! ([`tokio_postgres`], [`deadpool_postgres`]) so the versions match. The
//! synchronous `postgres` crate is not used: it drives a runtime of its own
//! with `block_on`, which panics on a Tokio thread, and has no per-query
//! timeout (a hung server would hang the caller). The blocking face instead
//! runs the async calls on a private runtime thread and waits on a channel,
//! so it works on any thread. `sqlx` is left out: 0.9 needs a newer Rust
//! than paceline's MSRV, and 0.8 doubles the dependency tree; the seam in
//! `src/remote/` makes a sqlx backend a small addition.
//!
//! # The schema
//!
//! [`install`](PostgresLimiter::install) runs this (for the default table,
//! [`DEFAULT_TABLE`]) in one transaction, after
//! `SELECT pg_advisory_xact_lock(7312604315)` so that concurrent installs
//! are safe, checking the table's columns before the index (a table of
//! another shape is an [`Error::Config`] naming its columns). It is idempotent. A DBA
//! can run it instead ([`schema_sql`](PostgresLimiter::schema_sql) prints
//! it for the configured table):
//!
//! ```sql
//! CREATE [UNLOGGED] TABLE IF NOT EXISTS "paceline_limits" (
//!   key      text COLLATE "C" PRIMARY KEY,
//!   tat      bigint NOT NULL,     -- the schedule's state: internal ns - 2^63
//!   prev_tat bigint,              -- the state the last grant replaced (give-back)
//!   rest_at  bigint NOT NULL      -- Unix s from which the row is at rest (+1 s grace)
//! ) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01,
//!        autovacuum_vacuum_threshold = 1000);
//! CREATE INDEX IF NOT EXISTS "paceline_limits_rest_at" ON "paceline_limits" (rest_at);
//! ```
//!
//! `tat` is stored as `tat - 2^63` so that every state of the `u64`
//! schedule fits a `bigint` in order; a DBA reads it as a time with
//! `to_timestamp((tat + 4611686018427387904) / 1e9)`. `rest_at` is rounded
//! up to whole seconds, so on a busy key it changes at most once a second:
//! nearly every update touches no indexed column, and is a HOT update
//! (`fillfactor = 80` leaves the room). Requires PostgreSQL 12 or later
//! (`MATERIALIZED` CTEs), 14 or later for the exact clock reading
//! (`extract` returns `numeric` from 14 on).
//!
//! # Keys
//!
//! A key comes from a client, so every key is limited, whatever its length
//! or bytes: a row's `key` is the caller's key as given when it is at most
//! 512 bytes of printable ASCII (space to `~`) and does not start with
//! `~sha256:`, which covers the usual ones (`user:42`, an IP address or
//! prefix, an API key, a UUID), so an operator reads them in `psql`. Any
//! other key is stored as `~sha256:` and the 64 hex digits of the SHA-256
//! of its bytes (see `src/remote/key.rs`): a key of ~3 KB of random text
//! (over the `text` btree's limit of about 2.7 KB), one with a NUL (which
//! `text` cannot hold), control bytes (which would reach an operator's
//! terminal) or non-ASCII text (which a database not in UTF-8 may have no
//! character for). No two keys share a row, and `reset` and every process
//! find the same one. A DBA looks a digested key up with
//! `'~sha256:' || encode(sha256(convert_to(key_text, 'UTF8')), 'hex')`.
//!
//! # The step, as one statement
//!
//! Each take is one `WITH … INSERT … ON CONFLICT (key) DO UPDATE … WHERE …
//! RETURNING` statement (see `src/remote/postgres/sql.rs`), autocommit:
//!
//! - it reads `clock_timestamp()` once, in a `MATERIALIZED` CTE, as exact
//!   nanoseconds (the server's clock resolution is 1 µs);
//! - it decides on the row as the statement's snapshot sees it, without a
//!   lock: **a refusal writes nothing** (no row lock, no transaction id, no
//!   WAL);
//! - a grant is written by the `INSERT … ON CONFLICT DO UPDATE`, whose
//!   `SET` and `WHERE` are evaluated again on the newest row version under
//!   its lock, so concurrent steps never lose an update; if that newest
//!   version refuses (another process took in between), no row version is
//!   written (the `ON CONFLICT … WHERE` only held the row's lock, as any
//!   `SELECT … FOR UPDATE` would) and the limiter asks again, with a newer
//!   snapshot, which refuses without a lock;
//! - [`can_take`](PostgresLimiter::can_take), [`available`](PostgresLimiter::available)
//!   and [`next_free`](PostgresLimiter::next_free) are a plain `SELECT`.
//!
//! The clock is read when the statement starts, possibly before it waits for
//! a row lock: a decision is taken as of up to that wait earlier, never
//! later, and the client counts the wait from the reply's arrival, so a
//! permit is never early by the server's clock.
//!
//! An absent row decides as a bucket at rest, with the whole slack banked
//! (as with Redis, a key's first request finds full credit).
//!
//! # Outside the caller's transaction
//!
//! Every call runs on a connection of the limiter's pool, as one autocommit
//! statement: it is never part of the application's transaction. A permit
//! taken while the application's transaction is open **stays taken when
//! that transaction rolls back** (a throttle must not be undone by the work
//! it throttled failing); `tests/postgres.rs` pins this. On a shared pool
//! this needs a free connection: an application that holds them all while
//! waiting on a take gets [`Error::Timeout`] from the checkout.
//!
//! # Pruning: rows of idle keys cost nothing for long
//!
//! After every [`DEFAULT_PRUNE_EVERY`] admitted writes, the limiter spawns
//! one batch: `DELETE` at most [`DEFAULT_PRUNE_BATCH`] rows whose `rest_at`
//! is past, found by walking the `rest_at` index from its oldest end
//! (`ORDER BY rest_at LIMIT n FOR UPDATE SKIP LOCKED`): no call scans the
//! table, and none waits on a row a step holds. A row is deleted only once
//! it has been at rest for a second or more, and an absent row decides exactly
//! as one at rest, so pruning never changes a decision.
//! [`prune`](PostgresLimiter::prune) runs batches until none is full.
//!
//! **The bound.** With `D = cost·T + tau + 2 s` (a grant's row lives until
//! it is at rest, plus the rounding of `rest_at` up to a second and a
//! second of grace), the table
//! holds at most the keys written in the last `D` plus one batch per
//! running prune: each batch deletes up to 64 rows per 32 new ones, twice
//! the rate rows arrive, so a backlog of expired rows only shrinks. Under a
//! flood of distinct keys at rate `R` that is about `R·D` rows
//! (`tests/postgres_flood.rs` floods 1 M keys and checks it). The table's
//! file stays bounded while autovacuum keeps up (the schema sets a 1 %
//! scale factor for that).
//!
//! # Failures
//!
//! A server that cannot be reached, a reply that does not come within the
//! response timeout (a hung server: the client gives up and closes that
//! connection), or a statement the server cancels (`statement_timeout`,
//! `lock_timeout`: set on the limiter's own connections to the response
//! timeout unless [`statement_timeout`](PostgresBuilder::statement_timeout)
//! says otherwise) are each an [`Error`] — [`Error::Unavailable`],
//! [`Error::Timeout`] and [`Error::Timeout`] — and with [`FailPolicy::Open`]
//! they admit the request instead. No call panics, and none waits on the
//! server longer than the connect timeout (for a connection) plus the
//! response timeout (a blocking take then also waits for its slot). After a
//! server restart the pool's dead connections are dropped and new ones
//! made by the next call; so are they when a call times out while nothing
//! came back on any connection since it was sent (a link that died without
//! a reset: otherwise each idle connection would cost a caller a timeout). While no connection can be made, calls fail at
//! once with the last error between attempts, backing off from 10 ms to at
//! most 500 ms (as the Redis limiter does). A step is never sent twice, except when the
//! server said it wrote nothing; a call that failed on the way back may
//! still have taken its permits: failures err on the side of the limit.
//!
//! # Commit cost, and what a crash forgets
//!
//! A grant holds its row lock until its commit, and on a logged table a
//! commit waits for the WAL to reach disk: one hot key grants at most one
//! permit per commit latency (a few hundred per second with a 2–10 ms
//! `fsync`). Refusals commit nothing.
//!
//! | table | a grant's commit | after a server crash |
//! |---|---|---|
//! | logged (default) | waits for the WAL flush | every committed grant is kept |
//! | [`unlogged(true)`](PostgresBuilder::unlogged) | no WAL, no flush wait | the table is **empty**: every key grants its whole burst (`slack + 1`) again, like Redis after a `FLUSHALL`; standbys never have it |
//!
//! A clean shutdown and restart keeps an unlogged table too. As with Redis,
//! a small slack bounds what a loss can grant.
//!
//! # Async
//!
//! With the `tokio` feature too, `AsyncPostgresLimiter::from(limiter)` is a
//! limiter's async face: the same calls as futures, on the same pool.

#[cfg(feature = "tokio")]
mod aio;
mod backend;
mod builder;
mod limiter;
mod runtime;
mod sql;
#[cfg(test)]
mod tests;

#[cfg(feature = "tokio")]
pub use aio::AsyncPostgresLimiter;
pub use backend::AsyncPostgresBackend;
pub use builder::{PostgresBuilder, PostgresSettings, DEFAULT_POOL_SIZE};
pub use limiter::{PostgresBackend, PostgresLimiter};

pub use super::Cause;
pub use super::{Error, FailPolicy, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT};

/// The client crates the limiter runs on, re-exported so that a pool handed
/// to [`PostgresLimiter::from_pool`] is of the same version.
pub use deadpool_postgres;
pub use tokio_postgres;

/// The table unless the builder names another.
pub const DEFAULT_TABLE: &str = "paceline_limits";

/// Admitted writes between two prune batches, unless the builder sets
/// another.
pub const DEFAULT_PRUNE_EVERY: u64 = 32;

/// Rows one prune batch deletes at most, unless the builder sets another:
/// twice [`DEFAULT_PRUNE_EVERY`], so pruning outpaces new keys.
pub const DEFAULT_PRUNE_BATCH: u64 = 128;
