//! The PostgreSQL [`Store`]: documents as rows of `paceline_documents`
//! (name, version, body), each write one transaction that bumps the
//! version and announces it with `NOTIFY paceline_documents`.

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::mpsc;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, Client, NoTls};

use super::document::{server, FleetError, Notes, Store, Versioned};
use crate::remote::postgres::{address, own_config, RuntimeThread};

/// The table, and the channel its writes are announced on.
const TABLE: &str = "paceline_documents";

const CREATE: &str = "CREATE TABLE IF NOT EXISTS paceline_documents (
    name text PRIMARY KEY,
    version bigint NOT NULL,
    body text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
)";

pub(crate) struct PgStore {
    /// Where the server is, without a password.
    pub(crate) at: String,
    config: tokio_postgres::Config,
    name: String,
    timeout: Duration,
    /// A private runtime on a thread of its own (as a blocking PostgreSQL
    /// limiter's), which also drives the connection between calls.
    runtime: RuntimeThread,
    /// The connection in use. One that listens may be replaced in passing
    /// (see `call`): its announcements then end, and the watcher listens
    /// again.
    session: Option<Session>,
}

/// One connection: its client, and the announcements of the document its
/// connection task hands on, until `listen` takes them.
struct Session {
    client: Client,
    notes: Option<Notes>,
}

impl PgStore {
    pub(crate) fn new(conn: &str, name: &str, timeout: Duration) -> Result<PgStore, FleetError> {
        let mut config = tokio_postgres::Config::from_str(conn)
            .map_err(|e| FleetError::Config(format!("connection string: {e}")))?;
        own_config(&mut config, timeout, timeout);
        let runtime = RuntimeThread::start().map_err(FleetError::Config)?;
        Ok(PgStore {
            at: address(&config),
            config,
            name: name.to_owned(),
            timeout,
            runtime,
            session: None,
        })
    }

    /// `f`'s output, run on the runtime within the timeout; when that runs
    /// out, the error says `what` timed out.
    fn wait<T>(&self, what: &str, f: impl Future<Output = T>) -> Result<T, FleetError> {
        // The timer is made on the runtime (it needs its clock).
        let timed = async { tokio::time::timeout(self.timeout, f).await };
        (self.runtime.handle.block_on(timed))
            .map_err(|_| FleetError::Server(format!("{what} timed out")))
    }

    /// A new session: a connection, and a task on the runtime that drives
    /// it and hands on each announcement; the task ends with the
    /// connection, and then `notes` says so.
    fn connect(&self) -> Result<Session, FleetError> {
        let (client, mut connection) = self
            .wait("connecting", self.config.connect(NoTls))?
            .map_err(server)?;
        let (tx, notes) = mpsc::channel();
        let name = self.name.clone();
        self.runtime.handle.spawn(async move {
            while let Some(Ok(message)) =
                std::future::poll_fn(|cx| connection.poll_message(cx)).await
            {
                if let AsyncMessage::Notification(n) = message {
                    // Another document's news is not ours.
                    let ours = n
                        .payload()
                        .split_once(':')
                        .is_some_and(|(_, of)| of == name);
                    if ours && tx.send(Ok(())).is_err() {
                        break;
                    }
                }
            }
        });
        Ok(Session {
            client,
            notes: Some(notes),
        })
    }

    /// Runs `f` with the client and the document's name, within the
    /// timeout, connecting first if need be; a failure that is not the
    /// server's answer drops the session (the next call connects anew). A
    /// session that had served before and is found closed (the server
    /// restarted since) is replaced, and `f` runs once more.
    fn call<T>(
        &mut self,
        f: impl for<'c> Fn(&'c mut Client, &'c str) -> Pending<'c, T>,
    ) -> Result<T, FleetError> {
        let reused = self.session.is_some();
        let mut session = self.session.take().map_or_else(|| self.connect(), Ok)?;
        let run = |session: &mut Session| self.wait("a query", f(&mut session.client, &self.name));
        let mut out = run(&mut session);
        if reused && matches!(&out, Ok(Err(e)) if e.is_closed()) {
            session = self.connect()?;
            out = run(&mut session);
        }
        let out = out?;
        // Kept unless it closed or failed below the server's answer.
        let broke = |e: &tokio_postgres::Error| e.is_closed() || e.as_db_error().is_none();
        if !out.as_ref().is_err_and(broke) {
            self.session = Some(session);
        }
        out.map_err(server)
    }
}

/// A query's future, borrowing the client.
type Pending<'c, T> = Pin<Box<dyn Future<Output = Result<T, tokio_postgres::Error>> + Send + 'c>>;

impl Store for PgStore {
    fn get(&mut self) -> Result<Option<Versioned>, FleetError> {
        let row = self.call(|client, name| {
            Box::pin(async move {
                let sql = "SELECT version, body FROM paceline_documents WHERE name = $1";
                match client.query_opt(sql, &[&name]).await {
                    // No table yet: no document yet.
                    Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(None),
                    other => other,
                }
            })
        })?;
        row.map(|row| {
            let version: i64 = row.try_get(0).map_err(server)?;
            Ok(Versioned {
                version: u64::try_from(version).map_err(|_| {
                    FleetError::Server(format!("{:?}: version {version} is negative", self.name))
                })?,
                text: row.try_get(1).map_err(server)?,
            })
        })
        .transpose()
    }

    fn set(&mut self, text: &str, if_version: Option<u64>) -> Result<u64, FleetError> {
        let expected = if_version
            .map(|v| {
                i64::try_from(v)
                    .map_err(|_| FleetError::Config(format!("version {v}: want at most 2^63 - 1")))
            })
            .transpose()?;
        let text = text.to_owned();
        let outcome = self.call(|client, name| {
            let text = text.clone();
            Box::pin(async move {
                let tx = client.transaction().await?;
                // Writers take turns (writes are an operator's, and rare):
                // the first insert of a name too (a row lock needs a row),
                // and the table's creation.
                tx.execute(
                    "SELECT pg_advisory_xact_lock(hashtext('paceline_documents'))",
                    &[],
                )
                .await?;
                // Created only when missing: `CREATE ... IF NOT EXISTS` asks
                // for the schema's CREATE right even when the table is there.
                let exists: bool = tx
                    .query_one("SELECT to_regclass('paceline_documents') IS NOT NULL", &[])
                    .await?
                    .get(0);
                if !exists {
                    tx.batch_execute(CREATE).await?;
                }
                let stored: i64 = tx
                    .query_opt(
                        "SELECT version FROM paceline_documents WHERE name = $1 FOR UPDATE",
                        &[&name],
                    )
                    .await?
                    .map_or(0, |row| row.get(0));
                if expected.is_some_and(|e| e != stored) {
                    return Ok(Err(stored));
                }
                let version = stored + 1;
                tx.execute(
                    "INSERT INTO paceline_documents (name, version, body) VALUES ($1, $2, $3) \
                     ON CONFLICT (name) DO UPDATE SET version = $2, body = $3, updated_at = now()",
                    &[&name, &version, &text],
                )
                .await?;
                let payload = format!("{version}:{name}");
                tx.execute("SELECT pg_notify($1, $2)", &[&TABLE, &payload])
                    .await?;
                tx.commit().await?;
                Ok(Ok(version))
            })
        });
        outcome?
            .map(i64::unsigned_abs)
            .map_err(|found| FleetError::Conflict {
                expected: if_version.unwrap_or(0),
                found: found.unsigned_abs(),
            })
    }

    fn listen(&mut self) -> Result<Notes, FleetError> {
        self.session = None;
        self.call(|client, _| Box::pin(client.batch_execute("LISTEN paceline_documents")))?;
        // (The session that answered is kept.)
        let notes = self.session.as_mut().and_then(|s| s.notes.take());
        notes.ok_or_else(|| FleetError::Server("not listening".into()))
    }
}
