//! [`Document`]: one limits document kept on a server the fleet already
//! runs (Redis, PostgreSQL), with a version that only goes up; written
//! whole after a check, watched by every process.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::thread;
use std::time::{Duration, Instant};

use super::document::{check, FleetError, Notes, Store, Versioned, DEFAULT_NAME};
use super::layers::Feed;
use crate::config::watch::Worker;

/// The longest document name, in bytes.
const MAX_NAME_BYTES: usize = 256;

/// How often a watcher reads the document when no change is announced: the
/// safety net for an announcement missed (a reconnect, a dropped message).
const POLL_EVERY: Duration = Duration::from_secs(5);

/// How long a watcher waits in one go, so that dropping it stops it soon.
const SLICE: Duration = Duration::from_millis(100);

/// A server's answer, and a connection's, in time.
const TIMEOUT: Duration = Duration::from_secs(2);

/// A limits document kept on a server: written whole after a
/// [`check`], read, or watched ([`feed`](Self::feed) hands every new
/// version to a layer of [`Layers`](super::Layers)).
///
/// Versions only go up: each write stores the next version atomically, and
/// a watcher hands on only a version above the last it handed on, so a
/// process never goes back to an older set (a document deleted and written
/// anew starts at 1 again and is ignored until it passes the old version:
/// move on with a write, or restart the readers). A writer may ask to
/// write only over the version it read ([`set`](Self::set) with
/// `Some(n)`), so that two operators cannot silently overwrite each other.
pub struct Document {
    store: Box<dyn Store>,
    every: Duration,
    describe: String,
}

impl fmt::Debug for Document {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Document")
            .field("at", &self.describe)
            .field("poll_every", &self.every)
            .finish_non_exhaustive()
    }
}

/// A document name that can be used, or why not.
pub(crate) fn checked_name(name: &str) -> Result<&str, FleetError> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES || name.contains('\0') {
        return Err(FleetError::Config(format!(
            "document name {name:?}: want 1 to {MAX_NAME_BYTES} bytes without NUL"
        )));
    }
    Ok(name)
}

/// `Err` when called on a Tokio runtime's thread, where the blocking
/// client would stop the runtime (or, for PostgreSQL, panic).
pub(crate) fn not_on_runtime() -> Result<(), FleetError> {
    #[cfg(any(feature = "tokio", feature = "postgres"))]
    if ::tokio::runtime::Handle::try_current().is_ok() {
        return Err(FleetError::Config(
            "a Document's calls block: call them from a thread of your own (or \
             tokio::task::spawn_blocking), not a runtime's"
                .into(),
        ));
    }
    Ok(())
}

impl Document {
    pub(crate) fn new(describe: String, store: impl Store + 'static) -> Document {
        Document {
            store: Box::new(store),
            every: POLL_EVERY,
            describe,
        }
    }

    /// The document named `name` (default [`DEFAULT_NAME`]) in the Redis
    /// server at `url`: a hash of `version` and `body` under that key,
    /// each write announced on the channel of the same name. Nothing
    /// connects until the first call.
    ///
    /// # Errors
    /// [`FleetError::Config`] for a URL or name that cannot be used.
    #[cfg(feature = "redis")]
    pub fn redis(url: &str, name: Option<&str>) -> Result<Document, FleetError> {
        let name = checked_name(name.unwrap_or(DEFAULT_NAME))?;
        let store = super::redis::RedisStore::new(&[url.to_owned()], false, name, TIMEOUT)?;
        let describe = format!("{name:?} in Redis at {}", store.at);
        Ok(Document::new(describe, store))
    }

    /// The document named `name` (default [`DEFAULT_NAME`]) on the Redis
    /// Cluster that `nodes` (the URLs of some or all of its nodes) belong
    /// to, as [`redis`](Self::redis) keeps it on one server: the commands go
    /// to the node that holds the name's slot, the watcher subscribes on
    /// the first node that answers (an announcement reaches every node).
    /// Nothing connects until the first call.
    ///
    /// # Errors
    /// [`FleetError::Config`] for no node, or a URL or name that cannot be
    /// used.
    #[cfg(feature = "redis")]
    pub fn redis_cluster<I, S>(nodes: I, name: Option<&str>) -> Result<Document, FleetError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let name = checked_name(name.unwrap_or(DEFAULT_NAME))?;
        let nodes: Vec<String> = nodes.into_iter().map(|n| n.as_ref().to_owned()).collect();
        let store = super::redis::RedisStore::new(&nodes, true, name, TIMEOUT)?;
        let describe = format!("{name:?} in a Redis Cluster at {}", store.at);
        Ok(Document::new(describe, store))
    }

    /// The document named `name` (default [`DEFAULT_NAME`]) in the
    /// PostgreSQL server `conn` names (libpq string or URL): a row of the
    /// table `paceline_documents` (created by the first write), each write
    /// announced with `NOTIFY paceline_documents`. Nothing connects until
    /// the first call.
    ///
    /// # Errors
    /// [`FleetError::Config`] for a connection string or name that cannot
    /// be used.
    #[cfg(feature = "postgres")]
    pub fn postgres(conn: &str, name: Option<&str>) -> Result<Document, FleetError> {
        let name = checked_name(name.unwrap_or(DEFAULT_NAME))?;
        let store = super::postgres::PgStore::new(conn, name, TIMEOUT)?;
        let describe = format!("{name:?} in PostgreSQL at {}", store.at);
        Ok(Document::new(describe, store))
    }

    /// How often a watcher reads the document when no change is announced
    /// (default 5 s; at least 10 ms): the safety net for a missed
    /// announcement. A change announced is read at once.
    #[must_use]
    pub fn poll_every(mut self, every: Duration) -> Document {
        self.every = every.max(Duration::from_millis(10));
        self
    }

    /// The document as stored now, `None` if there is none.
    ///
    /// # Errors
    /// [`FleetError::Server`] when the server cannot be reached in time.
    pub fn get(&mut self) -> Result<Option<Versioned>, FleetError> {
        not_on_runtime()?;
        self.store.get().map_err(|e| self.named(e))
    }

    /// Stores `text` as the next version, after checking it whole
    /// ([`check`]): a broken document is refused before any server sees
    /// it. With `if_version: Some(n)`, only if the stored version is `n`
    /// (0: only if there is no document yet). Returns the version written;
    /// every watcher is told.
    ///
    /// # Errors
    /// [`FleetError::Invalid`] for a broken document,
    /// [`FleetError::Conflict`] when the version is not `n`; nothing is
    /// stored then. [`FleetError::Server`] when the server cannot be
    /// reached in time.
    pub fn set(&mut self, text: &str, if_version: Option<u64>) -> Result<u64, FleetError> {
        check(text)?;
        not_on_runtime()?;
        self.store.set(text, if_version).map_err(|e| self.named(e))
    }

    /// A server's failure, naming the document and where its server is.
    fn named(&self, e: FleetError) -> FleetError {
        match e {
            FleetError::Server(why) => FleetError::Server(format!("{}: {why}", self.describe)),
            e => e,
        }
    }

    /// Watches the document on a thread of its own until the returned
    /// [`Watching`] is dropped: `on` gets each version above the last it
    /// got, soon after it is written (an announcement) or at the latest
    /// one [`poll_every`](Self::poll_every) later, and the first error of
    /// each outage (the server away); the watcher reconnects by itself.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn watch(
        self,
        on: impl FnMut(Result<Versioned, FleetError>) + Send + 'static,
    ) -> std::io::Result<Watching> {
        let worker = Worker::spawn("paceline-fleet", move |stop| run(self, stop, on))?;
        Ok(Watching { _worker: worker })
    }

    /// [`watch`](Self::watch), each version offered to `feed`'s layer
    /// ([`Feed::offer_text`]: a broken document is reported there and
    /// ignored), each outage reported there ([`Feed::fail`]).
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn feed(self, feed: Feed) -> std::io::Result<Watching> {
        self.watch(move |read| {
            // Either outcome is kept in the layer's status and sent as an
            // event; there is nothing more to do with it here.
            let _ = match read {
                Ok(v) => feed.offer_text(v.version, &v.text).map(drop),
                Err(e) => Err(feed.fail(e)),
            };
        })
    }
}

/// A document being watched; dropping it stops the watcher and its
/// subscription's thread, if any (each within about 100 ms, or a server's
/// timeout while it is being reached), and waits for them.
#[derive(Debug)]
pub struct Watching {
    _worker: Worker,
}

/// The watcher's loop: listen, read, wait for an announcement or the poll;
/// on a failure report it (once per outage), back off, start again.
fn run(mut doc: Document, stop: &AtomicBool, mut on: impl FnMut(Result<Versioned, FleetError>)) {
    let mut last: Option<u64> = None;
    // The subscription, kept from one round to the next while they go well.
    let mut notes: Option<Notes> = None;
    let mut down = false;
    let mut backoff = Duration::from_millis(50);
    while !stop.load(Ordering::Acquire) {
        let round = (|| -> Result<Notes, FleetError> {
            let news = notes.take().map_or_else(|| doc.store.listen(), Ok)?;
            // Read after subscribing: a write before is read now, one after
            // is announced.
            if let Some(v) = doc.store.get()? {
                if last.is_none_or(|l| v.version > l) {
                    last = Some(v.version);
                    on(Ok(v));
                }
            }
            let until = Instant::now() + doc.every;
            while !stop.load(Ordering::Acquire) {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match news.recv_timeout(left.min(SLICE)) {
                    // Any announcement is news: the document is read again,
                    // whatever it says.
                    Ok(Ok(())) => break,
                    Ok(Err(e)) => return Err(e),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        return Err(FleetError::Server("the subscription ended".into()))
                    }
                }
            }
            Ok(news)
        })();
        match round {
            Ok(news) => {
                notes = Some(news);
                if down {
                    crate::observe::event::info!(document = %doc.describe, "paceline: limits server back");
                }
                down = false;
                backoff = Duration::from_millis(50);
            }
            Err(e) => {
                if !down {
                    let e = doc.named(e);
                    crate::observe::event::warning!(document = %doc.describe, error = %e, "paceline: limits server lost");
                    on(Err(e));
                    down = true;
                }
                let until = Instant::now() + backoff;
                while !stop.load(Ordering::Acquire) && Instant::now() < until {
                    thread::sleep(SLICE.min(backoff));
                }
                backoff = (backoff * 2).min(doc.every);
            }
        }
    }
}
