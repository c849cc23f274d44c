//! The backend both faces share: a pool, the statements for one table, and
//! the calls as futures (each bounded by the limiter's timeouts, each one
//! autocommit statement on a connection of the pool).

use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::{Object, Pool, PoolError};
use tokio::time::timeout;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::sql::{self, decode, encode, Sql, Table};
use crate::remote::health::{Gate, Heard};
use crate::remote::key;
use crate::remote::{Done, Error, Op, Settle};

/// A key and a word: a peek's, and a give-back's to an absent key.
const KEY_WORD_TYPES: [Type; 2] = [Type::TEXT, Type::INT8];
const GIVE_TYPES: [Type; 5] = [Type::TEXT, Type::INT8, Type::INT8, Type::INT8, Type::INT8];
/// A settle's: the key, now, six `u64`s as text, the two `rest_at`
/// constants.
const SETTLE_TYPES: [Type; 10] = [
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
];

/// Everything a limiter's calls need, behind one `Arc`.
pub(crate) struct Inner {
    pub(crate) pool: Pool,
    pub(crate) table: Table,
    /// Whether `install` makes the table `UNLOGGED`.
    pub(crate) unlogged: bool,
    pub(crate) sql: Sql,
    /// The longest a call waits for a connection, then for its reply.
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// Prune a batch every this many admitted writes (0: never by itself).
    pub(crate) prune_every: u64,
    /// Rows per prune batch.
    pub(crate) prune_batch: i64,
    /// Admitted writes so far (for the prune schedule).
    pub(crate) writes: AtomicU64,
    /// The count of writes at which the next batch is due.
    pub(crate) next_prune: AtomicU64,
    /// How far the schedule has backed off: the next batch comes after
    /// `prune_every << prune_shift` writes (at most [`PRUNE_BACKOFF`]).
    pub(crate) prune_shift: AtomicU32,
    /// After a failed connect: calls fail at once until the backoff ends.
    pub(crate) gate: Gate,
    /// When the server last answered a statement on any connection: a
    /// call that times out when nothing has come back since it was sent
    /// finds the link (or the server) dead, and so are the idle connections.
    pub(crate) heard: Heard,
}

/// How far the prune schedule backs off while batches find the table
/// pruned: a batch every `prune_every << PRUNE_BACKOFF` writes at most.
pub(crate) const PRUNE_BACKOFF: u32 = 3;

/// The async PostgreSQL backend: the pool and the statements for one
/// table, each call one autocommit statement bounded by the timeouts. A
/// cheap handle (clones share it).
#[derive(Clone)]
pub struct AsyncPostgresBackend(pub(crate) Arc<Inner>);

/// The error a caller sees for a failure of the pool.
fn pool_error(e: PoolError) -> Error {
    match e {
        PoolError::Timeout(_) => Error::Timeout,
        PoolError::Backend(e) => classify(e),
        e => Error::unavailable(e),
    }
}

/// The error a caller sees for a failure of a statement. A statement or
/// lock timeout on the server is a [`Error::Timeout`]; a connection that
/// broke (or a server shutting down) is [`Error::Unavailable`]; any other
/// error the server answered is [`Error::Script`].
pub(crate) fn classify(e: tokio_postgres::Error) -> Error {
    match e.code() {
        Some(c) if *c == SqlState::QUERY_CANCELED || *c == SqlState::LOCK_NOT_AVAILABLE => {
            Error::Timeout
        }
        Some(c) if c.code().starts_with("08") || c.code().starts_with("57P") => {
            Error::unavailable(e)
        }
        Some(_) => Error::script(e),
        None => Error::unavailable(e),
    }
}

impl AsyncPostgresBackend {
    /// Runs `f` on a connection of the pool, within the connect timeout (for
    /// the connection) and the response timeout (for `f`). A connection
    /// that timed out is taken out of the pool and closed (its protocol
    /// state is mid-statement); one that broke takes the idle ones with it
    /// (after a restart of the server every idle one is dead), and so does
    /// one that timed out while no statement on any connection was answered
    /// since it was sent: the link is dead (a black hole, where no reset
    /// ever comes), and each idle connection would otherwise cost a caller
    /// a timeout of its own.
    pub(crate) async fn run<T, F, Fut>(&self, f: F) -> Result<T, Error>
    where
        F: FnOnce(Arc<Object>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let inner = &self.0;
        if let Some(last) = inner.gate.closed() {
            return Err(last);
        }
        let conn = match timeout(inner.connect_timeout, inner.pool.get()).await {
            Err(_) => return Err(Error::Timeout),
            Ok(Err(e)) => {
                let e = pool_error(e);
                if matches!(e, Error::Unavailable(_)) {
                    // The idle connections go too (kept: none).
                    inner.pool.retain(|_, _| false);
                    inner.gate.failed(&e);
                }
                return Err(e);
            }
            Ok(Ok(conn)) => {
                inner.gate.opened();
                Arc::new(conn)
            }
        };
        let sent = Instant::now();
        let Ok(result) = timeout(inner.response_timeout, f(Arc::clone(&conn))).await else {
            discard(conn);
            if inner.heard.silent_since(sent) {
                inner.pool.retain(|_, _| false);
            }
            return Err(Error::Timeout);
        };
        let result = result.map_err(classify);
        if matches!(result, Err(Error::Unavailable(_))) {
            discard(conn);
            inner.pool.retain(|_, _| false);
        } else {
            // The server answered (if with an error).
            inner.heard.answered();
        }
        result
    }

    /// Runs `sql` (prepared once per connection, with `types`) on `params`
    /// through [`run`](Self::run); the rows it changed.
    pub(crate) async fn exec(
        &self,
        sql: &str,
        types: &[Type],
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, Error> {
        self.run(|c| async move {
            let st = c.prepare_typed_cached(sql, types).await?;
            c.execute(&st, params).await
        })
        .await
    }

    /// As [`exec`](Self::exec), for a statement that returns one row.
    pub(crate) async fn row(
        &self,
        sql: &str,
        types: &[Type],
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error> {
        self.run(|c| async move {
            let st = c.prepare_typed_cached(sql, types).await?;
            c.query_one(&st, params).await
        })
        .await
    }

    /// Counts an admitted write, and when a batch is due prunes one in a
    /// task of its own: every `prune_every` writes while batches come back
    /// full (rows at rest may be waiting), and after one that was not (the
    /// table held no more at rest), twice as many writes each time, up to
    /// `prune_every << PRUNE_BACKOFF`: a batch that finds nothing costs a
    /// statement, and on a busy table most would.
    pub(super) fn wrote(&self) {
        let inner = &self.0;
        let every = inner.prune_every;
        if every == 0 {
            return;
        }
        let n = inner.writes.fetch_add(1, Ordering::Relaxed) + 1;
        let due = inner.next_prune.load(Ordering::Relaxed);
        if n < due {
            return;
        }
        let shift = inner.prune_shift.load(Ordering::Relaxed);
        let next = n.saturating_add(every.saturating_mul(1 << shift));
        // One caller takes the batch.
        if inner
            .next_prune
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let me = self.clone();
            rt.spawn(async move {
                let inner = &me.0;
                let full = matches!(me.prune_batch().await, Ok(n) if n >= inner.prune_batch as u64);
                if full {
                    inner.prune_shift.store(0, Ordering::Relaxed);
                    let soon = inner.writes.load(Ordering::Relaxed).saturating_add(every);
                    inner.next_prune.fetch_min(soon, Ordering::Relaxed);
                } else {
                    inner
                        .prune_shift
                        .store((shift + 1).min(PRUNE_BACKOFF), Ordering::Relaxed);
                }
            });
        }
    }

    /// Deletes at most one batch of rows at rest; how many it deleted.
    pub(crate) async fn prune_batch(&self) -> Result<u64, Error> {
        let sql = &self.0.sql;
        self.exec(&sql.prune, &[Type::INT8], &[&self.0.prune_batch])
            .await
    }

    /// Batches until one deletes less than a batch: every row at rest now.
    pub(crate) async fn prune(&self) -> Result<u64, Error> {
        let mut total = 0;
        loop {
            let n = self.prune_batch().await?;
            total += n;
            if n < self.0.prune_batch as u64 {
                return Ok(total);
            }
        }
    }

    /// Runs `op` on `key`: at the server's clock, or at `now` (internal ns;
    /// tests only).
    /// An undo is one conditional `UPDATE` of the key's row, back to the
    /// state before (or a `DELETE`, when it was absent), only if it still
    /// holds the grant's; a reset one `DELETE` (twice is once).
    pub(crate) async fn call_at(&self, key: &str, op: Op, now: Option<u64>) -> Result<Done, Error> {
        // The row's key (src/remote/key.rs): as given, or its digest.
        let stored = key::postgres(key);
        let key: &str = &stored;
        let sql = &self.0.sql;
        let changed = match op {
            Op::Step(request) => {
                return Ok(Done::Decision(self.step_at(key, &request, now).await?))
            }
            Op::Peek => {
                let (tat, now) = self.peek_at(key, now).await?;
                return Ok(Done::Peeked(tat, now));
            }
            Op::Undo { tau, booking } => {
                let next = encode(booking.next);
                match booking.prev.map(encode) {
                    Some(prev) => {
                        let (secs, rem) = sql::rest_consts(tau);
                        let params: [&(dyn ToSql + Sync); 5] = [&key, &next, &prev, &secs, &rem];
                        self.exec(&sql.give_back, &GIVE_TYPES, &params).await?
                    }
                    None => {
                        self.exec(&sql.give_back_absent, &KEY_WORD_TYPES, &[&key, &next])
                            .await?
                    }
                }
            }
            Op::Settle(settle) => {
                let (tat, now) = self.settle_at(key, &settle, now).await?;
                return Ok(Done::Peeked(tat, now));
            }
            Op::Reset => self.exec(&sql.reset, &[Type::TEXT], &[&key]).await?,
            Op::Count(count) => return Ok(Done::Decision(self.count_at(key, &count, now).await?)),
            Op::PeekCount(_) => return self.peek_count_at(key, now).await,
            Op::UndoCount { params, booking } => {
                return self.undo_count(key, params, booking).await
            }
            Op::Recount(recount) => return self.recount_at(key, &recount, now).await,
        };
        Ok(Done::Flag(changed > 0))
    }

    /// Settles on the row `key` (as stored) by the settle's function: the
    /// state it left and the server's time (or `now`, in tests).
    async fn settle_at(
        &self,
        key: &str,
        settle: &Settle,
        now: Option<u64>,
    ) -> Result<(u64, u64), Error> {
        let (give, reach) = settle.refund_spans();
        let p = settle.params;
        let [went, give, reach, t, span, tau] = [
            settle.went,
            give,
            reach,
            p.interval(),
            settle.excess_span(),
            p.tau(),
        ]
        .map(|n| n.to_string());
        let (secs, rem) = sql::rest_consts(settle.keep);
        let now = now.map(encode);
        let params: [&(dyn ToSql + Sync); 10] = [
            &key, &now, &went, &give, &reach, &t, &span, &tau, &secs, &rem,
        ];
        let row = (self.row(&self.0.sql.settle, &SETTLE_TYPES, &params)).await?;
        let reply: Vec<Option<i64>> = row.try_get(0).map_err(Error::script)?;
        match reply.as_slice() {
            &[Some(now), Some(tat)] => Ok((decode(tat), decode(now))),
            _ => Err(Error::script(format!(
                "the settle's function answered {reply:?}, not [now, tat]: \
                 run install() (or schema_sql()'s SQL) again"
            ))),
        }
    }

    /// The state of the row `key` (as stored) and the server's time (or
    /// `now`, in tests).
    pub(crate) async fn peek_at(&self, key: &str, now: Option<u64>) -> Result<(u64, u64), Error> {
        let now = now.map(encode);
        let row = self
            .row(&self.0.sql.peek, &KEY_WORD_TYPES, &[&key, &now])
            .await?;
        let now: i64 = row.try_get(0).map_err(Error::script)?;
        let tat: Option<i64> = row.try_get(1).map_err(Error::script)?;
        Ok((
            tat.map_or(crate::model::schedule::FULL, decode),
            decode(now),
        ))
    }

    /// One `SELECT 1` round trip.
    pub(crate) async fn ping(&self) -> Result<(), Error> {
        self.row("SELECT 1", &[], &[]).await.map(drop)
    }

    /// Creates the table if missing, checks its columns, creates the
    /// index if missing and the step's and the settle's functions (or
    /// replaces them): one
    /// transaction, under an advisory lock.
    pub(crate) async fn install(&self) -> Result<(), Error> {
        let [table, index, step, settle, count] = sql::schema(&self.0.table, self.0.unlogged);
        let name = self.0.table.quoted.clone();
        let found: Option<Vec<(String, String)>> = self
            .run(|c| async move {
                let steps = async {
                    c.batch_execute(&format!(
                        "BEGIN; SELECT pg_advisory_xact_lock({}); {table}",
                        sql::INSTALL_LOCK
                    ))
                    .await?;
                    let rows = c
                        .query(
                            "SELECT attname::text, format_type(atttypid, atttypmod) \
                             FROM pg_attribute WHERE attrelid = to_regclass($1) \
                             AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                            &[&name],
                        )
                        .await?;
                    let found: Vec<(String, String)> =
                        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
                    let columns = found.iter().map(|(n, t)| (n.as_str(), t.as_str()));
                    if columns.ne(sql::COLUMNS) {
                        c.batch_execute("ROLLBACK").await?;
                        return Ok(Some(found));
                    }
                    c.batch_execute(&format!("{index} {step} {settle} {count} COMMIT;"))
                        .await?;
                    Ok(None)
                };
                let result = steps.await;
                if result.is_err() {
                    // A failed step leaves its transaction open.
                    let _ = c.batch_execute("ROLLBACK").await;
                }
                result
            })
            .await?;
        match found {
            None => Ok(()),
            Some(found) => Err(Error::Config(format!(
                "table {} exists with columns {found:?}, not paceline's {:?}",
                self.0.table.quoted,
                sql::COLUMNS
            ))),
        }
    }
}

/// Takes a connection out of its pool for good and closes it.
fn discard(conn: Arc<Object>) {
    if let Ok(conn) = Arc::try_unwrap(conn) {
        drop(Object::take(conn));
    }
}
