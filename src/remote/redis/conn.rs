//! Connections to Redis that come back by themselves.
//!
//! A [`Pool`] keeps idle connections (one per caller that ran at the same
//! time, so threads sharing a limiter do not queue on one socket). A call
//! takes one, or opens one within the connect timeout; every call on a
//! single server over TCP or a unix socket ends within the response
//! timeout, however slowly its reply comes (`src/remote/redis/link.rs`).
//! After an I/O error or a
//! timeout the connection is dropped, and so are the idle ones (they lead to
//! the same server, which just failed); the next call reconnects. While the
//! server stays unreachable, reconnects are spaced by a doubling backoff
//! (the remote limiters' one [`Gate`]), and calls in between fail at once
//! with the last error instead of each waiting out a connect timeout.
//!
//! Cluster connections route each call by its one key and follow a
//! `MOVED`/`ASK` redirection once themselves. While a slot moves, a call
//! can be redirected back and forth for a while (when the source node
//! learns of the move before the target does, each sends the call to the
//! other until the target learns it too: ~100 ms): a redirected call ran
//! nowhere, so it is sent again, after a pause that doubles from
//! [`REDIRECT_PAUSE_MIN`] to [`REDIRECT_PAUSE_MAX`], at most
//! [`MAX_RESENDS`] times and only while the call's budget (connect plus
//! response timeout, from its start) leaves a quarter of the response
//! timeout for the reply; the resend's reply must come within what is
//! left. A call still redirected then fails with the
//! redirection, an [`Error::Script`]: the server answered, so no fail
//! policy admits it.

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection};
use redis::{
    Client, Connection, ConnectionInfo, ConnectionLike, ErrorKind, RedisError, RedisResult,
    ServerErrorKind,
};

use super::link::Link;
use crate::primitive::lock;
use crate::remote::socket::Budget;
use crate::remote::Error;

/// The first pause before sending a redirected call again: a slot's move
/// usually completes within milliseconds.
pub(crate) const REDIRECT_PAUSE_MIN: Duration = Duration::from_millis(1);

/// The longest pause between two sends of a redirected call: a move that
/// takes ~100 ms is followed within ~30 ms of its end, in about ten sends.
pub(crate) const REDIRECT_PAUSE_MAX: Duration = Duration::from_millis(32);

/// The most times one call is sent again after a redirection: with the
/// pauses above, ~380 ms of them, well past a move's ~100 ms, so a node
/// that keeps redirecting (a cluster misconfigured) fails the call soon.
pub(crate) const MAX_RESENDS: u32 = 16;

/// Where the connections go.
pub(crate) enum Target {
    /// One server (or a proxy).
    Single(Client),
    /// A Redis Cluster (boxed: twice the size of a single client).
    Cluster {
        /// The client calls go through: it retries a call once (after a
        /// redirection, or a connection error).
        client: Box<ClusterClient>,
        /// The same nodes and timeouts, never retrying: for a give-back
        /// or a settle, which must not run twice (see `Op::once`).
        once: Box<ClusterClient>,
    },
}

impl Target {
    /// Where `nodes` lead: the one server they name, or (`cluster`) the
    /// Redis Cluster they (some or all of its nodes) belong to, with these
    /// timeouts. Also the fleet's documents'. A cluster's clients retry a
    /// call: once for calls (a redirection after a resharding or failover,
    /// and a call never waits out many timeouts; redis-rs's own default
    /// retries a call 16 times, backing off between them), never for
    /// give-backs. A call redirected again is sent again by [`Pool::run`],
    /// within the call's budget: a resharding fails no call.
    pub(crate) fn new(
        nodes: Vec<ConnectionInfo>,
        cluster: bool,
        connect: Duration,
        response: Duration,
    ) -> RedisResult<Target> {
        if let (false, Some(node)) = (cluster, nodes.first()) {
            return Client::open(node.clone()).map(Target::Single);
        }
        let client = |retries| {
            ClusterClientBuilder::new(nodes.clone())
                .connection_timeout(connect)
                .response_timeout(response)
                .retries(retries)
                .build()
                .map(Box::new)
        };
        Ok(Target::Cluster {
            client: client(1)?,
            once: client(0)?,
        })
    }
}

pub(crate) enum Conn {
    /// A single server over TCP or a unix socket: calls end by a deadline.
    Link(Link),
    /// A single server over what `Link` does not do (TLS, RESP3): redis-rs's
    /// connection, whose timeouts bound each read rather than a reply.
    Single(Connection),
    // Boxed: four times the size of a single connection.
    Cluster(Box<ClusterConnection>),
    /// A connection of the cluster's client that never retries, for the
    /// calls that must run at most once.
    ClusterOnce(Box<ClusterConnection>),
}

impl Conn {
    fn as_dyn(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Conn::Link(c) => c,
            Conn::Single(c) => c,
            Conn::Cluster(c) | Conn::ClusterOnce(c) => &mut **c,
        }
    }

    /// Whether it serves the calls that must run at most once: any but a
    /// cluster's retrying one.
    fn serves(&self, once: bool) -> bool {
        !matches!(
            (self, once),
            (Conn::Cluster(_), true) | (Conn::ClusterOnce(_), false)
        )
    }

    /// The cluster connection, if it is one.
    fn cluster(&self) -> Option<&ClusterConnection> {
        match self {
            Conn::Cluster(c) | Conn::ClusterOnce(c) => Some(&**c),
            _ => None,
        }
    }
}

/// The blocking connections to where a target leads.
pub(crate) type Pool = crate::remote::pool::Pool<Target, Conn>;

impl Pool {
    /// Runs `f` on a connection. A Redis error reply leaves the connection in
    /// use; any other failure drops it and the idle ones. A call on a reused
    /// connection that finds it dropped (the server restarted since) runs
    /// once more on a fresh one, unless `once`: a call that must run at
    /// most once (see `Op::once`) is never sent again after a failure that
    /// may have reached the server, and on a cluster goes through the
    /// client that never retries. A cluster's redirection is followed
    /// within the call's budget (see the module docs): a redirected call
    /// ran nowhere.
    pub(crate) fn run<T>(
        &self,
        once: bool,
        mut f: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> Result<T, Error> {
        let mut redirects = Redirects::new(self.budget());
        let reused = {
            let mut idle = lock(&self.idle);
            let at = idle.iter().rposition(|c| c.serves(once));
            at.map(|at| idle.swap_remove(at))
        };
        // Whether a failure may be the connection's alone, and earns one
        // more try on a fresh one.
        let mut retry = reused.is_some() && !once;
        let mut conn = reused.map_or_else(|| self.connect(once), Ok)?;
        loop {
            match f(conn.as_dyn()) {
                Ok(v) => {
                    self.keep(conn, &redirects);
                    return Ok(v);
                }
                Err(e) if is_reply(&e) => {
                    if let Some(c) = conn.cluster() {
                        if let Some(pause) = redirects.follow(&e) {
                            std::thread::sleep(pause);
                            // The resend's reply is due within the budget.
                            if c.set_read_timeout(Some(redirects.budget.left())).is_ok() {
                                continue;
                            }
                        }
                    }
                    self.keep(conn, &redirects);
                    return Err(Error::script(e));
                }
                Err(e) => {
                    drop(conn);
                    lock(&self.idle).clear();
                    if !retry || e.is_timeout() {
                        return Err(classify(e));
                    }
                    // A connection that sat idle across a server restart
                    // fails on its first use: it says nothing about the
                    // server now.
                    retry = false;
                    conn = self.connect(once)?;
                }
            }
        }
    }

    /// Puts `conn` back among the idle ones, with its own read timeout again
    /// if a redirected call shortened it.
    fn keep(&self, conn: Conn, redirects: &Redirects) {
        // (After any redirection followed.)
        if let (Some(c), true) = (conn.cluster(), redirects.resends > 0) {
            if c.set_read_timeout(Some(self.response_timeout)).is_err() {
                // (Not for a timeout above zero.) Dropped, not kept short.
                return;
            }
        }
        lock(&self.idle).push(conn);
    }

    /// A new connection (`once`: one that serves the calls that must run
    /// at most once), unless the backoff after a failed one still runs.
    fn connect(&self, once: bool) -> Result<Conn, Error> {
        match self.gate.closed() {
            Some(last) => Err(last),
            None => self.gate.record(self.open(once).map_err(classify)),
        }
    }

    /// redis-rs's own connection to the server `client` names, within the
    /// connect timeout, each read and write on it within the response
    /// timeout. Also what a fleet's document subscribes on.
    pub(crate) fn single(&self, client: &Client) -> RedisResult<Connection> {
        let conn = client.get_connection_with_timeout(self.connect_timeout)?;
        conn.set_read_timeout(Some(self.response_timeout))?;
        conn.set_write_timeout(Some(self.response_timeout))?;
        Ok(conn)
    }

    fn open(&self, once: bool) -> RedisResult<Conn> {
        match &self.target {
            Target::Single(client) if Link::serves(client.get_connection_info()) => {
                let info = client.get_connection_info();
                Link::open(info, self.connect_timeout, self.response_timeout).map(Conn::Link)
            }
            Target::Single(client) => self.single(client).map(Conn::Single),
            Target::Cluster {
                client,
                once: never,
            } => {
                let client = if once { never } else { client };
                let conn = client.get_connection()?;
                conn.set_read_timeout(Some(self.response_timeout))?;
                conn.set_write_timeout(Some(self.response_timeout))?;
                Ok(if once {
                    Conn::ClusterOnce(Box::new(conn))
                } else {
                    Conn::Cluster(Box::new(conn))
                })
            }
        }
    }
}

/// One call's cluster redirections: how long to pause before each resend,
/// and when to stop (see the module docs).
pub(crate) struct Redirects {
    /// The call's budget, from its start.
    pub(crate) budget: Budget,
    pause: Duration,
    resends: u32,
}

impl Redirects {
    /// For a call with `budget`.
    pub(crate) fn new(budget: Budget) -> Redirects {
        Redirects {
            budget,
            pause: REDIRECT_PAUSE_MIN,
            resends: 0,
        }
    }

    /// The pause before sending the call again after `e`; `None` when `e`
    /// is not a redirection, after [`MAX_RESENDS`], or when the budget has
    /// no room for a resend (the pause and a quarter of a response timeout
    /// for its reply).
    pub(crate) fn follow(&mut self, e: &RedisError) -> Option<Duration> {
        let pause = self.pause;
        if !is_redirect(e) || self.resends == MAX_RESENDS || !self.budget.fits(pause) {
            return None;
        }
        self.pause = pause.saturating_mul(2).min(REDIRECT_PAUSE_MAX);
        self.resends += 1;
        Some(pause)
    }
}

/// Whether a cluster node redirected the call (its key's slot moved or is
/// moving): the call ran nowhere, and may be sent again.
fn is_redirect(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
    )
}

/// Whether Redis answered with an error (the connection is still good).
pub(crate) fn is_reply(e: &RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
}

/// The error a caller sees for a failure that cost the connection. A
/// refused `AUTH` (a wrong password or user) is the server answering, not
/// a server that cannot answer: [`Error::Script`], which no fail policy
/// admits, as PostgreSQL's refused login is (else a careless operator's
/// typo under [`FailPolicy::Open`](crate::FailPolicy::Open) would admit
/// every call unmetered).
pub(crate) fn classify(e: RedisError) -> Error {
    if e.is_timeout() {
        Error::Timeout
    } else if is_reply(&e) || e.kind() == ErrorKind::AuthenticationFailed {
        Error::script(e)
    } else {
        Error::unavailable(e)
    }
}
