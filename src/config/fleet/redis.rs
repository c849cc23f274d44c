//! The Redis [`Store`]: a document as a hash (`version`, `body`) under its
//! name, written by a script that bumps the version and publishes it on the
//! channel of the same name. On a Redis Cluster the commands go to the
//! key's node, and the subscription to any node that answers: a `PUBLISH`
//! reaches every node's subscribers.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use redis::{Client, Connection};

use super::document::{server, FleetError, Notes, Store, Versioned};
use crate::config::watch::Worker;
use crate::remote::redis::{address, Pool, Target};

/// Writes `ARGV[1]` as the next version, only over version `ARGV[2]` if it
/// is not empty; publishes the new version. `{1, version}`, or `{0,
/// found}` when the version asked for is not the one stored.
const SET: &str = r"
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= v then
  return {0, v}
end
v = v + 1
redis.call('HSET', KEYS[1], 'version', v, 'body', ARGV[1])
redis.call('PUBLISH', KEYS[1], v)
return {1, v}
";

/// A document on Redis: its commands through a limiter's connection pool
/// (the same timeouts, reconnects and redirections), its subscription on
/// a thread of its own.
pub(crate) struct RedisStore {
    /// Where the server (or the nodes given) is, without a password.
    pub(crate) at: String,
    pool: Pool,
    /// Where to subscribe, in order: the one server, or the nodes given of
    /// a cluster (the first that answers).
    nodes: Vec<Client>,
    key: String,
    script: redis::Script,
    /// The subscription's thread (redis' blocking `PubSub` borrows its
    /// connection, and reads with a timeout there skip no message),
    /// stopped when dropped: it sees it within one read, and unsubscribes.
    sub: Option<Worker>,
}

/// How long the subscription's thread waits in one read.
const READ_SLICE: Duration = Duration::from_millis(100);

fn open(url: &str) -> Result<Client, FleetError> {
    Client::open(url).map_err(|e| FleetError::Config(format!("Redis URL {url:?}: {e}")))
}

impl RedisStore {
    /// The document `key` on the Redis at `urls`: one server, or
    /// (`cluster`) the Redis Cluster they (some or all of its nodes)
    /// belong to.
    pub(crate) fn new(
        urls: &[String],
        cluster: bool,
        key: &str,
        timeout: Duration,
    ) -> Result<RedisStore, FleetError> {
        let nodes: Vec<Client> = urls.iter().map(|url| open(url)).collect::<Result<_, _>>()?;
        // (No node: a cluster's client refuses to be built.)
        let infos: Vec<_> = nodes
            .iter()
            .map(|n| n.get_connection_info().clone())
            .collect();
        let at = address(&infos);
        let target = Target::new(infos, cluster, timeout, timeout)
            .map_err(|e| FleetError::Config(format!("Redis: {e}")))?;
        Ok(RedisStore {
            at,
            pool: Pool::new(target, timeout, timeout),
            nodes,
            key: key.to_owned(),
            script: redis::Script::new(SET),
            sub: None,
        })
    }

    /// A connection to subscribe on: to the first of `nodes` that answers,
    /// every call on it bounded by the timeout (the pool's).
    fn connect_to_subscribe(&self) -> Result<Connection, FleetError> {
        let mut last = None;
        for node in &self.nodes {
            match self.pool.single(node) {
                Ok(conn) => return Ok(conn),
                Err(e) => last = Some(server(e)),
            }
        }
        Err(last.expect("a document has at least one node"))
    }
}

impl Store for RedisStore {
    fn get(&mut self) -> Result<Option<Versioned>, FleetError> {
        let (version, body): (Option<String>, Option<String>) = self
            .pool
            .run(false, |c| {
                redis::cmd("HMGET")
                    .arg(&self.key)
                    .arg("version")
                    .arg("body")
                    .query(c)
            })
            .map_err(server)?;
        let Some(v) = version else {
            return Ok(None);
        };
        let version = v.parse::<u64>().map_err(|_| {
            FleetError::Server(format!("{:?}: version {v:?} is not a count", self.key))
        })?;
        let text = body.unwrap_or_default();
        Ok(Some(Versioned { version, text }))
    }

    fn set(&mut self, text: &str, if_version: Option<u64>) -> Result<u64, FleetError> {
        let (written, version): (u8, u64) = self
            .pool
            .run(false, |c| {
                let expected = if_version.map(|v| v.to_string()).unwrap_or_default();
                self.script.key(&self.key).arg(text).arg(expected).invoke(c)
            })
            .map_err(server)?;
        match written {
            1 => Ok(version),
            _ => Err(FleetError::Conflict {
                expected: if_version.unwrap_or(0),
                found: version,
            }),
        }
    }

    fn listen(&mut self) -> Result<Notes, FleetError> {
        self.sub = None;
        let mut conn = self.connect_to_subscribe()?;
        let (tx, notes) = mpsc::channel();
        let key = self.key.clone();
        // (Stopped on every way out but success: a thread that subscribes
        // late stops too.)
        let worker = Worker::spawn("paceline-fleet-redis", move |stopped| {
            let mut sub = conn.as_pubsub();
            // The first note says whether it subscribed.
            let subscribed = sub
                .subscribe(&key)
                .and_then(|()| sub.set_read_timeout(Some(READ_SLICE)));
            let ok = subscribed.is_ok();
            let _ = tx.send(subscribed.map_err(server));
            while ok && !stopped.load(Ordering::Acquire) {
                let note = match sub.get_message() {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_timeout() => continue,
                    Err(e) => Err(server(e)),
                };
                let end = note.is_err();
                if tx.send(note).is_err() || end {
                    break;
                }
            }
        })
        .map_err(|e| FleetError::Server(format!("cannot start a thread: {e}")))?;
        (notes.recv_timeout(self.pool.response_timeout + READ_SLICE))
            .map_err(|_| FleetError::Server("subscribing timed out".into()))??;
        self.sub = Some(worker);
        Ok(notes)
    }
}
