//! [`AsyncRedisLimiter`]: the Redis limiter's calls as futures, for Tokio
//! (features `redis` and `tokio`).
//!
//! The same script, decisions, keys, fail policy and errors as
//! [`RedisLimiter`], through the same seam (`src/remote/limiter.rs`); only
//! the connection and the waiting differ. Calls go over one multiplexed
//! connection (redis-rs's `ConnectionManager`, or its async cluster
//! connection, made on first use; both reconnect by themselves), so any
//! number of tasks share it without queuing behind each other's round trips.
//! Takes wait in the crate's one async wait (`src/wait/tokio.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, FromRedisValue, RedisResult};
use tokio::sync::OnceCell;

use super::conn::{classify, is_reply, Pool, Redirects, Target};
use super::script::{self, Wire};
use crate::primitive::{lock, Mutex};
use crate::remote::health::{Heard, BACKOFF_MAX, BACKOFF_MIN};
use crate::remote::socket::Budget;
use crate::remote::{AsyncBackend, AsyncRemoteLimiter, Done, Error, Op};

/// The async face of a [`RedisLimiter`](super::RedisLimiter): [`AsyncRemoteLimiter`] over
/// [`AsyncRedisBackend`], made by `AsyncRedisLimiter::from(limiter)`; its
/// calls are [`AsyncRemoteLimiter`]'s, plus [`ping`](AsyncRemoteLimiter::ping)
/// and [`prefix`](AsyncRemoteLimiter::prefix).
///
/// ```no_run
/// use paceline::redis::{AsyncRedisLimiter, RedisLimiter};
/// use paceline::Rate;
/// use paceline::AsyncTake;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), paceline::Error> {
/// let limiter = RedisLimiter::builder("redis://127.0.0.1/", Rate::per_second(100)).build()?;
/// let limiter = AsyncRedisLimiter::from(limiter);
/// limiter.take("api").await?; // sleeps (as a task) until the slot
/// # Ok(())
/// # }
/// ```
///
/// Calls go over one multiplexed connection, so any number of tasks share
/// it. A give-back or a settle is never sent twice: on a Redis Cluster,
/// whose client retries a call once after a connection error, they go
/// through a second client that never retries.
pub type AsyncRedisLimiter = AsyncRemoteLimiter<AsyncRedisBackend>;

/// The async Redis backend: one shared connection and the wire format.
pub struct AsyncRedisBackend {
    conn: Conn,
    wire: Wire,
    /// The connect and response timeouts: a call waits on Redis at most
    /// both ([`Budget`]).
    connect: Duration,
    response: Duration,
}

/// The shared connection, made by the first call that needs it (inside the
/// runtime that call runs on; a cluster's asks a node for the slot map: a
/// round trip a conversion should not wait for).
// One per limiter, behind its `Arc`: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Conn {
    Single(Single),
    /// The client calls go through, then for give-backs and settles one
    /// that never retries, each with its connection.
    Cluster([(Box<ClusterClient>, OnceCell<ClusterConnection>); 2]),
}

/// A single server's client, and the connection in use.
struct Single {
    client: Client,
    config: ConnectionManagerConfig,
    /// The connection in use; `None` until the first call, and after one
    /// was found dead.
    live: Mutex<Option<Live>>,
}

impl Conn {
    /// A lazy connection to where `target` leads.
    fn new(target: &Target, connect: Duration, response: Duration) -> Conn {
        match target {
            Target::Single(client) => Conn::Single(Single {
                client: client.clone(),
                config: ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect))
                    .set_response_timeout(Some(response))
                    .set_min_delay(BACKOFF_MIN)
                    .set_max_delay(BACKOFF_MAX)
                    // Reconnects run in the background; calls meanwhile fail.
                    .set_number_of_retries(1),
                live: Mutex::new(None),
            }),
            // The blocking pool's client, with the same timeouts.
            Target::Cluster { client, once } => Conn::Cluster([
                (client.clone(), OnceCell::new()),
                (once.clone(), OnceCell::new()),
            ]),
        }
    }

    /// A call sent at `sent` had no reply within
    /// its time. If nothing at all came back on the connection since, the
    /// link is presumed dead (a black hole: packets vanish and no reset
    /// ever comes, so the connection manager, which reconnects only after
    /// an I/O error, would keep it for as long as TCP retransmits, about
    /// 15 minutes): it is dropped, and the next call connects anew. Calls
    /// still waiting on it keep their own handle until they end.
    fn timed_out(&self, sent: Instant) {
        let Conn::Single(Single { live, .. }) = self else {
            // A cluster connection finds its nodes again by itself.
            return;
        };
        let mut live = lock(live);
        if live.as_ref().is_some_and(|l| l.heard.silent_since(sent)) {
            *live = None;
        }
    }

    /// Sends `cmd` (an `EVALSHA`, a `DEL` or a `PING`) through `wire`: a
    /// script call that meets `NOSCRIPT` loads the script and is sent
    /// again.
    ///
    /// With `once`, a call a cluster client would retry after a connection
    /// error fails instead: a give-back or a settle must not run twice (see
    /// `Op::once`). (A single server's connection never resends a call.)
    async fn query<T: FromRedisValue>(&self, wire: &Wire, cmd: &Cmd, once: bool) -> RedisResult<T> {
        match self {
            Conn::Single(single) => {
                let live = single.live()?;
                let reply = wire.invoke_async(cmd, &mut live.manager.clone()).await;
                if !matches!(&reply, Err(e) if !is_reply(e)) {
                    // An answer, even an error reply: the link works.
                    live.heard.answered();
                }
                reply
            }
            Conn::Cluster(clients) => {
                let (client, conn) = &clients[usize::from(once)];
                let conn = conn
                    .get_or_try_init(|| client.get_async_connection())
                    .await?;
                wire.invoke_async(cmd, &mut conn.clone()).await
            }
        }
    }
}

impl Single {
    /// The connection in use, made (lazily: it connects on first use) if
    /// there is none.
    fn live(&self) -> RedisResult<Live> {
        let mut live = lock(&self.live);
        if let Some(live) = &*live {
            return Ok(live.clone());
        }
        let manager = (self.client).get_connection_manager_lazy(self.config.clone())?;
        let heard = Arc::new(Heard::new());
        Ok(live.insert(Live { manager, heard }).clone())
    }
}

/// A single server's connection (a multiplexed one that reconnects by
/// itself after an I/O error), and what shows it alive.
#[derive(Clone)]
struct Live {
    manager: ConnectionManager,
    /// Since it was made, when a reply last came on it.
    heard: Arc<Heard>,
}

impl AsyncRedisBackend {
    /// The async twin of a blocking backend whose pool is `blocking`,
    /// with its prefix: the same target and timeouts, over one multiplexed
    /// connection of its own (made by the first call, in the runtime that
    /// call runs on). (The blocking backend calls it: this file does not
    /// name that one.)
    pub(super) fn twin(blocking: &Pool, prefix: &str) -> AsyncRedisBackend {
        let (connect, response) = (blocking.connect_timeout, blocking.response_timeout);
        AsyncRedisBackend {
            conn: Conn::new(&blocking.target, connect, response),
            wire: Wire::new(prefix.to_owned()),
            connect,
            response,
        }
    }

    /// A cluster's redirection is followed as the blocking calls follow
    /// it (see `src/remote/redis/conn.rs`): sent again after a pause, while
    /// the budget leaves room for the reply; a redirection is never a
    /// timeout or an outage (no fail policy admits it). Even a give-back or
    /// a settle follows it: a redirected call ran nowhere. With `once`, never
    /// retried otherwise (see [`Conn::query`]).
    async fn run<T: FromRedisValue>(&self, cmd: &Cmd, once: bool) -> Result<T, Error> {
        let mut redirects = Redirects::new(Budget::new(self.connect, self.response));
        loop {
            let left = redirects.budget.left();
            // (A single server's connection first, if none: it counts as
            // made before the call is sent.)
            if let Conn::Single(single) = &self.conn {
                single.live().map_err(classify)?;
            }
            let sent = Instant::now();
            match tokio::time::timeout(left, self.conn.query(&self.wire, cmd, once)).await {
                Err(_) => {
                    self.conn.timed_out(sent);
                    return Err(Error::Timeout);
                }
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(e)) => match redirects.follow(&e) {
                    Some(pause) if matches!(self.conn, Conn::Cluster(_)) => {
                        tokio::time::sleep(pause).await
                    }
                    _ => {
                        // (The connection's own response timeout, the
                        // same as ours, may end the call first.)
                        if e.is_timeout() {
                            self.conn.timed_out(sent);
                        }
                        return Err(classify(e));
                    }
                },
            }
        }
    }
}

impl AsyncBackend for AsyncRedisBackend {
    /// As the blocking backend's; a give-back or a settle is never
    /// retried (run twice, a give-back could erase a booking made in
    /// between from the state the first run restored, a settle would
    /// refund or charge twice).
    async fn call(&self, key: &str, op: Op) -> Result<Done, Error> {
        script::check(&op)?;
        let cmd = self.wire.command(key, &op, None);
        let once = op.once();
        let reply: redis::Value = self.run(&cmd, once).await?;
        script::done(&reply, &op, false).map(|(done, _ttl)| done)
    }
}

impl AsyncRedisLimiter {
    /// One `PING` round trip on the limiter's connection.
    ///
    /// # Errors
    /// Redis failures, whatever the policy.
    pub async fn ping(&self) -> Result<(), Error> {
        self.backend()
            .run::<String>(&redis::cmd("PING"), false)
            .await
            .map(drop)
    }

    /// The prefix put before every key.
    pub fn prefix(&self) -> &str {
        self.backend().wire.prefix()
    }
}

crate::remote::debug_backend!(AsyncRedisBackend, |b| "prefix": b.wire.prefix());
