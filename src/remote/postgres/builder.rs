//! [`PostgresBuilder`]: where a [`PostgresLimiter`] connects (a connection
//! string, a config, or the application's pool), its table, limit, pool and
//! pruning, and how its calls fail and wait.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::Host;
use tokio_postgres::NoTls;

use super::backend::{AsyncPostgresBackend, Inner};
use super::limiter::{PostgresBackend, PostgresLimiter};
use super::sql::{Sql, Table};
use crate::remote::builder::RemoteBuilder;
use crate::remote::health::{Gate, Heard};
use crate::remote::Error;
use crate::values::rate::Rate;

/// The table unless the builder names another.
pub const DEFAULT_TABLE: &str = "paceline_limits";

/// Admitted writes between two prune batches while they come back full,
/// unless the builder sets another; after a batch that was not (nothing
/// more at rest), twice as many each time, up to eight times as many.
pub const DEFAULT_PRUNE_EVERY: u64 = 32;

/// Rows one prune batch deletes at most, unless the builder sets another:
/// four times [`DEFAULT_PRUNE_EVERY`], so pruning outpaces new keys.
pub const DEFAULT_PRUNE_BATCH: u64 = 128;

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
/// [`PostgresLimiter::from_config`] or [`PostgresLimiter::from_pool`]. The
/// settings every remote limiter has are [`RemoteBuilder`]'s; PostgreSQL
/// adds its table, pool and pruning. For async calls, build the limiter and
/// take its async face, `AsyncPostgresLimiter::from(limiter)` (features
/// `postgres` and `tokio`).
pub type PostgresBuilder = RemoteBuilder<PostgresSettings>;

/// What only a PostgreSQL limiter's builder sets: where its connections
/// come from, its table, pool and pruning (see [`PostgresBuilder`]).
pub struct PostgresSettings {
    source: Result<Source, Error>,
    table: String,
    statement_timeout: Option<Duration>,
    pool_size: usize,
    unlogged: bool,
    prune_every: u64,
    prune_batch: u64,
}

impl fmt::Debug for PostgresSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresSettings")
            .field("table", &self.table)
            .field("pool_size", &self.pool_size)
            .field("unlogged", &self.unlogged)
            .finish_non_exhaustive()
    }
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
        PostgresBuilder::postgres(config.map(|c| Source::Config(Box::new(c))), rate)
    }

    /// A builder for a limiter at `rate` on the server `config` names (its
    /// own pool, no TLS; see [`builder`](Self::builder)).
    pub fn from_config(config: tokio_postgres::Config, rate: Rate) -> PostgresBuilder {
        PostgresBuilder::postgres(Ok(Source::Config(Box::new(config))), rate)
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
        PostgresBuilder::postgres(Ok(Source::Pool(pool)), rate)
    }
}

impl PostgresBuilder {
    fn postgres(source: Result<Source, Error>, rate: Rate) -> PostgresBuilder {
        RemoteBuilder::new(
            rate,
            PostgresSettings {
                source,
                table: DEFAULT_TABLE.to_owned(),
                statement_timeout: None,
                pool_size: DEFAULT_POOL_SIZE,
                unlogged: false,
                prune_every: DEFAULT_PRUNE_EVERY,
                prune_batch: DEFAULT_PRUNE_BATCH,
            },
        )
    }

    crate::values::setters! {
        /// The table the limits live in (default [`DEFAULT_TABLE`]): `name` or
        /// `schema.name`, each part used as given (quoted, so case is kept).
        table(table: impl Into<String>) => server.table;
        /// The server's `statement_timeout` (and `lock_timeout`) on the
        /// limiter's own connections (default: the response timeout): a step
        /// stuck behind a lock is cancelled by the server, and the connection
        /// stays in use. Not for [`from_pool`](PostgresLimiter::from_pool).
        statement_timeout(timeout: Duration) => server.statement_timeout;
        /// Connections in the limiter's own pool (default
        /// [`DEFAULT_POOL_SIZE`]). Not for [`from_pool`](PostgresLimiter::from_pool).
        pool_size(size: usize) => server.pool_size;
        /// Whether [`install`](PostgresLimiter::install) creates the table
        /// `UNLOGGED` (default `false`): no WAL, so faster commits, but a crash
        /// of the server empties it and standbys do not have it (see the
        /// module's "What a crash forgets").
        unlogged(unlogged: bool) => server.unlogged;
    }

    /// Pruning: after every `every` admitted writes, a task deletes at most
    /// `batch` rows at rest (defaults [`DEFAULT_PRUNE_EVERY`],
    /// [`DEFAULT_PRUNE_BATCH`]); after a batch that deleted fewer (nothing
    /// more was at rest), the next comes after twice as many writes, up to
    /// `8 * every`, and a full one brings it back to `every`. `every = 0`
    /// turns it off (then call [`prune`](PostgresLimiter::prune) yourself).
    pub fn prune(mut self, every: u64, batch: u64) -> Self {
        self.server.prune_every = every;
        self.server.prune_batch = batch;
        self
    }

    /// The limiter. It does not connect yet: the first call does.
    ///
    /// # Errors
    /// [`Error::Config`] for a connection string that does not parse, a bad
    /// table name, a slack whose intervals span over 146 years, a zero
    /// timeout, pool size or prune batch.
    pub fn build(self) -> Result<PostgresLimiter, Error> {
        let RemoteBuilder { common, server } = self;
        let (connect_timeout, response_timeout) = (common.connect_timeout, common.response_timeout);
        if server.statement_timeout.is_some_and(|t| t.as_millis() == 0) {
            return Err(Error::Config(
                "statement_timeout must be at least 1 ms".into(),
            ));
        }
        if server.pool_size == 0 {
            return Err(Error::Config("pool_size must be at least 1".into()));
        }
        let batch = server.prune_batch;
        let batch = i64::try_from(batch)
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| Error::Config(format!("prune batch {batch}: want 1 to 2^63 - 1")))?;
        let table = Table::new(&server.table)?;
        let (pool, own_pool, server_at) = match server.source? {
            Source::Pool(pool) => (pool, false, "the application's pool".to_owned()),
            Source::Config(mut config) => {
                let at = address(&config);
                let statement = server.statement_timeout.unwrap_or(response_timeout);
                own_config(&mut config, connect_timeout, statement);
                config.keepalives_idle(Duration::from_secs(10));
                let manager = Manager::from_config(
                    *config,
                    NoTls,
                    ManagerConfig {
                        recycling_method: RecyclingMethod::Fast,
                    },
                );
                let pool = Pool::builder(manager)
                    .max_size(server.pool_size)
                    // The most recently used connection first: a caller
                    // taking one call after another keeps one server
                    // backend busy and warm. First in, first out made the
                    // calls take turns on the pool's connections as soon
                    // as a prune had opened a second one, and a granted
                    // take cost a quarter more (`benches/postgres.rs`).
                    .queue_mode(deadpool_postgres::QueueMode::Lifo)
                    .runtime(Runtime::Tokio1)
                    .wait_timeout(Some(connect_timeout))
                    .create_timeout(Some(connect_timeout))
                    .recycle_timeout(Some(connect_timeout))
                    .build()
                    .map_err(|e| Error::Config(e.to_string()))?;
                (pool, true, at)
            }
        };
        let inner = Inner {
            pool,
            sql: Sql::new(&table),
            table,
            unlogged: server.unlogged,
            connect_timeout,
            response_timeout,
            prune_every: server.prune_every,
            prune_batch: batch,
            writes: AtomicU64::new(0),
            next_prune: AtomicU64::new(server.prune_every),
            prune_shift: AtomicU32::new(0),
            gate: Gate::default(),
            heard: Heard::new(),
        };
        let backend = PostgresBackend {
            backend: AsyncPostgresBackend(Arc::new(inner)),
            own_pool,
            runtime: OnceLock::new(),
        };
        common.limiter(backend, &server_at)
    }
}

/// Where `config` connects, never with its password: each host and port
/// (a unix socket as its file). Also the fleet's documents'.
pub(crate) fn address(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    let port = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    let hosts = config.get_hosts().iter().enumerate();
    let at = hosts.map(|(i, host)| match host {
        Host::Tcp(name) => format!("{name}:{}", port(i)),
        #[cfg(unix)]
        Host::Unix(dir) => format!("{}/.s.PGSQL.{}", dir.display(), port(i)),
    });
    at.collect::<Vec<_>>().join(", ")
}

/// Sets what paceline's own connections run with: unless `config` sets them,
/// the connect timeout and the application name `paceline`; and, after any
/// options it gives, statement and lock timeouts of `statement` (at least
/// 1 ms), so that the server too gives up on a call the client gave up on.
/// Also the fleet's documents'.
pub(crate) fn own_config(
    config: &mut tokio_postgres::Config,
    connect: Duration,
    statement: Duration,
) {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(connect);
    }
    if config.get_application_name().is_none() {
        config.application_name("paceline");
    }
    let ms = statement.as_millis().max(1);
    let theirs = config.get_options().unwrap_or_default();
    let options = format!("{theirs} -c statement_timeout={ms} -c lock_timeout={ms}");
    config.options(options.trim_start());
}
