//! [`PostgresLimiter`], the blocking limiter, its builder, and its backend:
//! the async backend's calls run on a private runtime thread.

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use super::backend::{Backend, Inner};
use super::sql::{self, Table};
use super::{DEFAULT_PRUNE_BATCH, DEFAULT_PRUNE_EVERY, DEFAULT_TABLE};
use crate::error::BuildError;
use crate::rate::Rate;
use crate::remote::limiter::Core;
use crate::remote::{
    Decision, Error, FailPolicy, Remote, Request, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT,
};
use crate::schedule::{self, Admit};
use crate::slack::Slack;
use crate::stats::{Counted, Counting, Stats};
use crate::wait::{self, Wait};

/// Connections in a pool the builder makes, unless it sets another number.
pub const DEFAULT_POOL_SIZE: usize = 8;

/// Where a builder's limiter gets its connections.
enum Source {
    /// A pool of its own, to the server `Config` names (no TLS).
    Config(Box<tokio_postgres::Config>),
    /// The caller's pool.
    Pool(Pool),
}

/// Configures a [`PostgresLimiter`]; made by [`PostgresLimiter::builder`],
/// [`PostgresLimiter::from_config`] or [`PostgresLimiter::from_pool`]. For
/// async calls, build the limiter and take its async face,
/// `AsyncPostgresLimiter::from(limiter)` (features `postgres` and `tokio`).
#[must_use = "a builder does nothing until .build()"]
pub struct PostgresBuilder {
    source: Result<Source, Error>,
    rate: Rate,
    slack: Slack,
    table: String,
    policy: FailPolicy,
    wait: Wait,
    connect_timeout: Duration,
    response_timeout: Duration,
    statement_timeout: Option<Duration>,
    pool_size: usize,
    unlogged: bool,
    prune_every: u64,
    prune_batch: u64,
    counting: Counting,
}

impl PostgresLimiter {
    /// A builder for a limiter at `rate` on the server `conn` names: a
    /// libpq-style string (`"host=/run/postgresql user=app dbname=app"`) or
    /// URL (`"postgresql://app@db.internal/app"`). The limiter keeps a pool
    /// of its own connections ([`pool_size`](PostgresBuilder::pool_size)),
    /// without TLS; for TLS, build a `deadpool_postgres::Pool` with your
    /// connector and use [`from_pool`](Self::from_pool). Nothing connects
    /// until the first call.
    pub fn builder(conn: &str, rate: Rate) -> PostgresBuilder {
        let config = tokio_postgres::Config::from_str(conn)
            .map_err(|e| Error::Config(format!("connection string: {e}")));
        PostgresBuilder::new(config.map(|c| Source::Config(Box::new(c))), rate)
    }

    /// A builder for a limiter at `rate` on the server `config` names (its
    /// own pool, no TLS; see [`builder`](Self::builder)).
    pub fn from_config(config: tokio_postgres::Config, rate: Rate) -> PostgresBuilder {
        PostgresBuilder::new(Ok(Source::Config(Box::new(config))), rate)
    }

    /// A builder for a limiter at `rate` on a pool the application already
    /// has (any TLS connector). Each call checks a connection out for one
    /// autocommit statement and returns it. A pool of its own is safer: if
    /// the application's tasks hold every connection while they wait on a
    /// take, the limiter's checkout can only time out. The builder's
    /// [`statement_timeout`](PostgresBuilder::statement_timeout) and
    /// [`pool_size`](PostgresBuilder::pool_size) do not apply (the pool's
    /// connections are the application's); the connect and response
    /// timeouts do.
    pub fn from_pool(pool: Pool, rate: Rate) -> PostgresBuilder {
        PostgresBuilder::new(Ok(Source::Pool(pool)), rate)
    }
}

impl PostgresBuilder {
    fn new(source: Result<Source, Error>, rate: Rate) -> PostgresBuilder {
        PostgresBuilder {
            source,
            rate,
            slack: Slack::DEFAULT,
            table: DEFAULT_TABLE.to_owned(),
            policy: FailPolicy::default(),
            wait: Wait::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            statement_timeout: None,
            pool_size: DEFAULT_POOL_SIZE,
            unlogged: false,
            prune_every: DEFAULT_PRUNE_EVERY,
            prune_batch: DEFAULT_PRUNE_BATCH,
            counting: Counting::default(),
        }
    }

    /// Whether the limiter counts what it decides, all keys (and
    /// `with_limit` siblings) together: `stats()` on the limiter, and
    /// [`Counted`] for [`stats::prometheus`](crate::stats::prometheus).
    /// Default `false`. A server's failure counts in
    /// [`Stats::failed`](crate::stats::Stats::failed), and then as admitted
    /// or refused as the fail policy decides.
    pub fn stats(mut self, on: bool) -> Self {
        self.counting.on = on;
        self
    }

    /// Counts as [`stats(true)`](Self::stats) and sends the counts to the
    /// `metrics` facade too, labelled `limiter = name` (see
    /// [`Builder::metrics`](crate::Builder::metrics)).
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics(mut self, name: impl Into<String>) -> Self {
        self.counting.facade = Some(name.into());
        self
    }

    /// How much unused time a key may bank for a later burst (default
    /// [`Slack::DEFAULT`]).
    pub fn slack(mut self, slack: impl Into<Slack>) -> Self {
        self.slack = slack.into();
        self
    }

    /// The table the limits live in (default [`DEFAULT_TABLE`]): `name` or
    /// `schema.name`, each part used as given (quoted, so case is kept).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// What a call does when the server fails it (default
    /// [`FailPolicy::Closed`]).
    pub fn on_error(mut self, policy: FailPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How a take waits out its slot (default [`Wait::Sleep`]).
    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// The longest wait for a connection from the pool, a new one included
    /// (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The longest wait for a reply (default [`DEFAULT_RESPONSE_TIMEOUT`]):
    /// the client gives up then, whatever the server does, and closes that
    /// connection.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The server's `statement_timeout` (and `lock_timeout`) on the
    /// limiter's own connections (default: the response timeout): a step
    /// stuck behind a lock is cancelled by the server, and the connection
    /// stays in use. Not for [`from_pool`](PostgresLimiter::from_pool).
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = Some(timeout);
        self
    }

    /// Connections in the limiter's own pool (default
    /// [`DEFAULT_POOL_SIZE`]). Not for [`from_pool`](PostgresLimiter::from_pool).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// Whether [`install`](PostgresLimiter::install) creates the table
    /// `UNLOGGED` (default `false`): no WAL, so faster commits, but a crash
    /// of the server empties it and standbys do not have it (see the
    /// module's "What a crash forgets").
    pub fn unlogged(mut self, unlogged: bool) -> Self {
        self.unlogged = unlogged;
        self
    }

    /// Pruning: after every `every` admitted writes, a task deletes at most
    /// `batch` rows at rest (defaults [`DEFAULT_PRUNE_EVERY`],
    /// [`DEFAULT_PRUNE_BATCH`]). `every = 0` turns it off (then call
    /// [`prune`](PostgresLimiter::prune) yourself).
    pub fn prune(mut self, every: u64, batch: u64) -> Self {
        self.prune_every = every;
        self.prune_batch = batch;
        self
    }

    /// The limiter. It does not connect yet: the first call does.
    ///
    /// # Errors
    /// [`Error::Config`] for a connection string that does not parse, a bad
    /// table name, a slack whose intervals span over 146 years, a zero
    /// timeout, pool size or prune batch.
    pub fn build(self) -> Result<PostgresLimiter, Error> {
        if self.connect_timeout.is_zero() || self.response_timeout.is_zero() {
            return Err(Error::Config("timeouts must be longer than zero".into()));
        }
        if self.statement_timeout.is_some_and(|t| t.as_millis() == 0) {
            return Err(Error::Config(
                "statement_timeout must be at least 1 ms".into(),
            ));
        }
        if self.pool_size == 0 {
            return Err(Error::Config("pool_size must be at least 1".into()));
        }
        let batch = i64::try_from(self.prune_batch)
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                Error::Config(format!(
                    "prune batch {}: want 1 to 2^63 - 1",
                    self.prune_batch
                ))
            })?;
        let table = Table::new(&self.table)?;
        let source = self.source?;
        let own_pool = matches!(source, Source::Config(_));
        let pool = match source {
            Source::Pool(pool) => pool,
            Source::Config(mut config) => {
                if config.get_connect_timeout().is_none() {
                    config.connect_timeout(self.connect_timeout);
                }
                if config.get_application_name().is_none() {
                    config.application_name("paceline");
                }
                let st = self
                    .statement_timeout
                    .unwrap_or(self.response_timeout)
                    .as_millis()
                    .max(1);
                let ours = format!("-c statement_timeout={st} -c lock_timeout={st}");
                let options = match config.get_options() {
                    Some(theirs) => format!("{theirs} {ours}"),
                    None => ours,
                };
                config.options(options);
                config.keepalives_idle(Duration::from_secs(10));
                let manager = Manager::from_config(
                    *config,
                    NoTls,
                    ManagerConfig {
                        recycling_method: RecyclingMethod::Fast,
                    },
                );
                Pool::builder(manager)
                    .max_size(self.pool_size)
                    .runtime(Runtime::Tokio1)
                    .wait_timeout(Some(self.connect_timeout))
                    .create_timeout(Some(self.connect_timeout))
                    .recycle_timeout(Some(self.connect_timeout))
                    .build()
                    .map_err(|e| Error::Config(e.to_string()))?
            }
        };
        let inner = Inner::new(
            pool,
            table,
            self.connect_timeout,
            self.response_timeout,
            self.prune_every,
            batch,
        );
        let backend = Blocking {
            backend: Backend(Arc::new(inner)),
            unlogged: self.unlogged,
            own_pool,
            runtime: OnceLock::new(),
        };
        let core = Core::new(
            backend,
            self.rate,
            self.slack,
            self.policy,
            self.wait,
            &self.counting,
        )
        .map_err(|e| Error::Config(e.to_string()))?;
        Ok(PostgresLimiter { core })
    }
}

impl fmt::Debug for PostgresBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBuilder")
            .field("rate", &self.rate)
            .field("slack", &self.slack)
            .field("table", &self.table)
            .field("fail_policy", &self.policy)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .finish_non_exhaustive()
    }
}

/// A current-thread Tokio runtime on a thread of its own, which runs the
/// blocking face's calls (reqwest's `blocking` pattern): the caller waits on
/// a std channel, so a blocking call works on any thread. It stops when
/// dropped.
struct RuntimeThread {
    handle: tokio::runtime::Handle,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl RuntimeThread {
    fn start() -> Result<RuntimeThread, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the limiter's runtime: {e}"))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("paceline-postgres".into())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
            })
            .map_err(|e| format!("cannot start the limiter's runtime thread: {e}"))?;
        Ok(RuntimeThread {
            handle,
            _stop: stop,
        })
    }
}

/// The blocking backend: the async one, driven on a private runtime thread
/// (started by the first call).
pub(super) struct Blocking {
    pub(super) backend: Backend,
    pub(super) unlogged: bool,
    /// Whether the pool is the limiter's own (built from a config).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    own_pool: bool,
    runtime: OnceLock<Result<RuntimeThread, String>>,
}

impl Blocking {
    /// Whether the pool is the limiter's own and its runtime thread has run
    /// (so it may hold connections made there).
    #[cfg(feature = "tokio")]
    pub(super) fn owns_pool_on_its_thread(&self) -> bool {
        self.own_pool && self.runtime.get().is_some()
    }

    /// Runs `f(backend)` on the runtime thread and waits for its result.
    pub(super) fn call<T, F, Fut>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(Backend) -> Fut,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let runtime = self
            .runtime
            .get_or_init(RuntimeThread::start)
            .as_ref()
            .map_err(|e| Error::Unavailable(Arc::new(std::io::Error::other(e.clone()))))?;
        let (tx, rx) = mpsc::sync_channel(1);
        let fut = f(self.backend.clone());
        runtime.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        // Every call inside is bounded by the timeouts; this bound only
        // guards against a runtime thread that died.
        let inner = &self.backend.0;
        let bound = (inner.connect_timeout + inner.response_timeout) * 2 + Duration::from_secs(1);
        match rx.recv_timeout(bound) {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout),
        }
    }

    /// The step at `now` (internal ns; tests only) or the server's clock.
    pub(super) fn step_at(
        &self,
        key: &str,
        request: &Request,
        now: Option<u64>,
    ) -> Result<Decision, Error> {
        let (key, request) = (key.to_owned(), *request);
        self.call(move |b| async move { b.step_at(&key, &request, now).await })
    }

    /// `key`'s state and the server's time (or `now`, tests only).
    pub(super) fn peek_at(&self, key: &str, now: Option<u64>) -> Result<(u64, u64), Error> {
        let key = key.to_owned();
        self.call(move |b| async move { b.peek_at(&key, now).await })
    }
}

impl Remote for Blocking {
    const ASYNC_TAKE: &'static str = "AsyncPostgresLimiter::take";

    fn step(&self, key: &str, request: &Request) -> Result<Decision, Error> {
        self.step_at(key, request, None)
    }

    fn peek(&self, key: &str) -> Result<(u64, u64), Error> {
        self.peek_at(key, None)
    }
}

/// A limiter whose state lives in a PostgreSQL table, so that every process
/// using the same database, table and key shares one limit.
///
/// Calls name a key (`"api"`, `"user:42"`): each key is its own limit at this
/// limiter's rate and slack, one row of the table. The calls and their
/// meaning are [`RedisLimiter`](crate::redis::RedisLimiter)'s (with the
/// `redis` feature) and [`AtomicLimiter`](crate::AtomicLimiter)'s, plus an
/// [`Error`] on failure. See [the module docs](super) for the model, the
/// schema, pruning, transactions and failures; its async face is
/// `AsyncPostgresLimiter::from(limiter)`.
///
/// It is cheap to clone (clones share the pool and the runtime thread) and
/// `Send + Sync`.
#[derive(Clone)]
pub struct PostgresLimiter {
    pub(super) core: Core<Blocking>,
}

impl PostgresLimiter {
    /// Creates the table and its index if they are missing (the SQL is
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
        let unlogged = self.core.backend().unlogged;
        self.core
            .backend()
            .call(move |b| async move { b.install(unlogged).await })
    }

    /// The SQL [`install`](Self::install) runs, for a DBA to review or run.
    pub fn schema_sql(&self) -> String {
        let b = self.core.backend();
        let (table, index) = sql::schema(&b.backend.0.table, b.unlogged);
        format!("{table}\n{index}")
    }

    /// Deletes every row at rest now, in batches (each walks the `rest_at`
    /// index and touches at most a batch of rows, so no call scans the
    /// table); how many it deleted. Rows at rest decide exactly as absent
    /// ones, so pruning never changes a decision.
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    pub fn prune(&self) -> Result<u64, Error> {
        self.core.backend().call(|b| async move { b.prune().await })
    }

    /// The same limiter (same pool, table and policy) at another rate and
    /// slack: for keys that need their own limit. Every process must use
    /// the same limit for a key.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when `slack` intervals of `rate` span
    /// over 146 years.
    pub fn with_limit(
        &self,
        rate: Rate,
        slack: impl Into<Slack>,
    ) -> Result<PostgresLimiter, BuildError> {
        Ok(PostgresLimiter {
            core: self.core.with_limit(rate, slack.into())?,
        })
    }

    /// Blocks until the next permit of `key`'s limit comes up, and returns
    /// its slot as the server's Unix time.
    ///
    /// # Errors
    /// A failure of the server ([`Error::Unavailable`], [`Error::Timeout`],
    /// [`Error::Script`]) under [`FailPolicy::Closed`]; under
    /// [`FailPolicy::Open`] it returns at once with the local Unix time.
    pub fn take(&self, key: &str) -> Result<Duration, Error> {
        self.take_n(key, 1)
    }

    /// Blocks until `cost` permits of `key`'s limit are paid for, as one
    /// request, and returns its slot as the server's Unix time.
    ///
    /// # Errors
    /// [`TakeError::CostTooLarge`](crate::TakeError::CostTooLarge) (as
    /// [`Error::Refused`]); server failures as [`take`](Self::take).
    pub fn take_n(&self, key: &str, cost: u64) -> Result<Duration, Error> {
        self.core.take(key, cost, Admit::Always)
    }

    /// Takes a permit of `key`'s limit if one is free now; never waits for
    /// one. A refusal writes nothing.
    ///
    /// # Errors
    /// [`TakeError::RetryAfter`](crate::TakeError::RetryAfter) (as
    /// [`Error::Refused`]); server failures as [`take`](Self::take).
    pub fn try_take(&self, key: &str) -> Result<(), Error> {
        self.try_take_n(key, 1)
    }

    /// Takes `cost` permits of `key`'s limit if they are free now.
    ///
    /// # Errors
    /// As [`try_take`](Self::try_take), and
    /// [`TakeError::ExceedsBurst`](crate::TakeError::ExceedsBurst),
    /// [`TakeError::CostTooLarge`](crate::TakeError::CostTooLarge).
    pub fn try_take_n(&self, key: &str, cost: u64) -> Result<(), Error> {
        self.core.try_take(key, cost)
    }

    /// Takes a permit of `key`'s limit and waits for it only if its slot is
    /// at most `max_wait` away; otherwise fails at once, writing nothing.
    ///
    /// # Errors
    /// [`TakeError::QueueFull`](crate::TakeError::QueueFull) (as
    /// [`Error::Refused`]); server failures as [`take`](Self::take).
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

    /// Whether [`try_take_n(key, cost)`](Self::try_take_n) would succeed
    /// now. A plain `SELECT`: it writes and locks nothing.
    ///
    /// # Errors
    /// Server failures under [`FailPolicy::Closed`]; under
    /// [`FailPolicy::Open`] they answer `true`.
    pub fn can_take(&self, key: &str, cost: u64) -> Result<bool, Error> {
        self.core.can_take(key, cost)
    }

    /// How many permits of `key`'s limit one request could take now without
    /// waiting, from 0 to `slack + 1`.
    ///
    /// # Errors
    /// Server failures (whatever the policy).
    pub fn available(&self, key: &str) -> Result<u64, Error> {
        self.core.peek(key, schedule::available)
    }

    /// How long until a permit of `key`'s limit is free (zero: now).
    ///
    /// # Errors
    /// Server failures (whatever the policy).
    pub fn next_free(&self, key: &str) -> Result<Duration, Error> {
        self.core.peek(key, |tat, now, p| {
            Duration::from_nanos(schedule::next_free(tat, now, p))
        })
    }

    /// Forgets `key`'s state (deletes its row): it comes back at rest, with
    /// its whole burst, for every process sharing it. `true` when it had a
    /// row. An async take booked before the reset and then dropped gives
    /// nothing back (its give-back only restores a row that still holds
    /// its state).
    ///
    /// # Errors
    /// Server failures whatever the policy: a reset that failed must not
    /// pass for done. Retrying it is safe.
    pub fn reset(&self, key: &str) -> Result<bool, Error> {
        let key = key.to_owned();
        self.core
            .backend()
            .call(move |b| async move { b.reset(&key).await })
    }

    /// One `SELECT 1` round trip on one of the pool's connections: a health
    /// check, and the floor a call's round trip is measured against.
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    pub fn ping(&self) -> Result<(), Error> {
        self.core.backend().call(|b| async move { b.ping().await })
    }

    /// The rate in force.
    pub fn rate(&self) -> Rate {
        self.core.rate
    }

    /// The slack, in permits: the burst is `slack + 1`.
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
        &self.core.backend().backend.0.table.name
    }

    /// The pool the limiter's calls use (its own, or the one handed in).
    pub fn pool(&self) -> &Pool {
        &self.core.backend().backend.0.pool
    }

    /// What the limiter decided, all keys and `with_limit` siblings
    /// together, or `None` unless its builder asked
    /// ([`PostgresBuilder::stats`]). See [`Stats`].
    pub fn stats(&self) -> Option<Stats> {
        self.core.shared.meter.read()
    }
}

impl Counted for PostgresLimiter {
    fn stats(&self) -> Option<Stats> {
        self.core.shared.meter.read()
    }
}

impl fmt::Debug for PostgresLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresLimiter")
            .field("rate", &self.rate())
            .field("slack", &self.slack())
            .field("table", &self.table())
            .field("fail_policy", &self.fail_policy())
            .finish_non_exhaustive()
    }
}
