//! [`PostgresBuilder`]: where a [`PostgresLimiter`] connects (a connection
//! string, a config, or the application's pool), its table, limit, pool and
//! pruning, and how its calls fail and wait.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use super::backend::{AsyncPostgresBackend, Inner};
use super::limiter::{PostgresBackend, PostgresLimiter};
use super::sql::Table;
use super::{DEFAULT_PRUNE_BATCH, DEFAULT_PRUNE_EVERY, DEFAULT_TABLE};
use crate::rate::Rate;
use crate::remote::core::Core;
use crate::remote::{
    Error, FailPolicy, RemoteLimiter, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT,
};
use crate::slack::Slack;
use crate::stats::Counting;
use crate::wait::Wait;

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
    /// [`Counted`](crate::stats::Counted) for [`stats::prometheus`](crate::stats::prometheus).
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
            self.unlogged,
        );
        let backend = PostgresBackend {
            backend: AsyncPostgresBackend(Arc::new(inner)),
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
        Ok(RemoteLimiter { core })
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
