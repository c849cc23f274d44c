//! [`PostgresBackend`], the blocking backend: the async backend's calls run
//! on a private runtime thread; and the calls only PostgreSQL has.

use std::future::Future;
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

use deadpool_postgres::Pool;

use super::backend::AsyncPostgresBackend;
use super::runtime::RuntimeThread;
use super::sql;
use crate::remote::{Backend, Done, Error, Op, RemoteLimiter};

/// A limiter whose state lives in a PostgreSQL table, so that every process
/// using the same database, table and key shares one limit: [`RemoteLimiter`]
/// over [`PostgresBackend`]. Made by [`builder`](RemoteLimiter::builder),
/// [`from_config`](RemoteLimiter::from_config) or
/// [`from_pool`](RemoteLimiter::from_pool); its calls are
/// [`RemoteLimiter`]'s, plus [`install`](RemoteLimiter::install),
/// [`schema_sql`](RemoteLimiter::schema_sql), [`prune`](RemoteLimiter::prune),
/// [`ping`](RemoteLimiter::ping), [`table`](RemoteLimiter::table) and
/// [`pool`](RemoteLimiter::pool). Each key is one row of the table. See
/// [the module docs](super) for the model, the schema, pruning,
/// transactions and failures; its async face is
/// `AsyncPostgresLimiter::from(limiter)`.
pub type PostgresLimiter = RemoteLimiter<PostgresBackend>;

/// The blocking PostgreSQL backend: the async one, driven on a private
/// runtime thread (started by the first call).
pub struct PostgresBackend {
    pub(super) backend: AsyncPostgresBackend,
    /// Whether the pool is the limiter's own (built from a config).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(super) own_pool: bool,
    pub(super) runtime: OnceLock<Result<RuntimeThread, String>>,
}

impl PostgresBackend {
    /// Runs `f(backend)` on the runtime thread and waits for its result.
    pub(super) fn block_on<T, F, Fut>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(AsyncPostgresBackend) -> Fut,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let runtime = self
            .runtime
            .get_or_init(RuntimeThread::start)
            .as_ref()
            .map_err(|e| Error::unavailable(std::io::Error::other(e.clone())))?;
        let (tx, rx) = mpsc::sync_channel(1);
        let fut = f(self.backend.clone());
        runtime.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        // Every call inside is bounded by the timeouts; this bound only
        // guards against a runtime thread that died.
        let inner = &self.backend.0;
        let bound = (inner.connect_timeout + inner.response_timeout) * 2 + Duration::from_secs(1);
        rx.recv_timeout(bound).unwrap_or(Err(Error::Timeout))
    }

    /// Runs `op` at `now` (internal ns; tests only) or the server's clock.
    pub(super) fn call_at(&self, key: &str, op: Op, now: Option<u64>) -> Result<Done, Error> {
        let key = key.to_owned();
        self.block_on(move |b| async move { b.call_at(&key, op, now).await })
    }
}

impl Backend for PostgresBackend {
    #[cfg(feature = "tokio")]
    type Async = AsyncPostgresBackend;

    /// The same pool, table and timeouts. Each connection runs on the
    /// runtime that made it: if the limiter's own pool (not one handed in)
    /// holds idle connections its blocking calls made (on their runtime
    /// thread), they are closed here, so that the async calls make theirs
    /// on the runtime they run on.
    #[cfg(feature = "tokio")]
    fn to_async(&self) -> AsyncPostgresBackend {
        if self.own_pool && self.runtime.get().is_some() {
            self.backend.0.pool.retain(|_, _| false);
        }
        self.backend.clone()
    }

    fn call(&self, key: &str, op: Op) -> Result<Done, Error> {
        self.call_at(key, op, None)
    }
}

impl PostgresLimiter {
    /// Creates the table and its index if they are missing, and the step's
    /// function `<table>_step`, the settle's `<table>_settle` and a quota
    /// per window's `<table>_count` (replacing older ones; the SQL is
    /// [`schema_sql`](Self::schema_sql)'s, in one transaction under an
    /// advisory lock, so concurrent installs are safe), then checks that
    /// the table has paceline's columns. Idempotent: run it at every
    /// start-up, or have a DBA run the SQL once instead.
    ///
    /// # Errors
    /// Server failures, whatever the policy; [`Error::Config`] when the
    /// table exists with other columns; [`Error::Script`] when the server
    /// refuses (no `CREATE` right on the schema, say).
    pub fn install(&self) -> Result<(), Error> {
        self.backend()
            .block_on(|b| async move { b.install().await })
    }

    /// The SQL [`install`](Self::install) runs, for a DBA to review or run.
    pub fn schema_sql(&self) -> String {
        let b = self.backend();
        sql::schema(&b.backend.0.table, b.backend.0.unlogged).join("\n")
    }

    /// Deletes every row at rest now, in batches (each walks the `rest_at`
    /// index and touches at most a batch of rows, so no call scans the
    /// table); how many it deleted. Rows at rest decide exactly as absent
    /// ones, so pruning never changes a decision.
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    pub fn prune(&self) -> Result<u64, Error> {
        self.backend().block_on(|b| async move { b.prune().await })
    }

    /// One `SELECT 1` round trip on one of the pool's connections: a health
    /// check, and the floor a call's round trip is measured against.
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    pub fn ping(&self) -> Result<(), Error> {
        self.backend().block_on(|b| async move { b.ping().await })
    }

    /// The table, as the builder got it.
    pub fn table(&self) -> &str {
        &self.backend().backend.0.table.name
    }

    /// The pool the limiter's calls use (its own, or the one handed in).
    pub fn pool(&self) -> &Pool {
        &self.backend().backend.0.pool
    }
}

crate::remote::debug_backend!(PostgresBackend, |b|
    "table": b.backend.0.table.name, "unlogged": b.backend.0.unlogged);
