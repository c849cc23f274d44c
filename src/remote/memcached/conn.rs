//! Connections to memcached: the address, the blocking connection, and
//! what both faces share, the pool and the loop that drives a machine on
//! a connection, written once as futures over a [`Link`]: tokio's on the
//! async face, and on the blocking face the blocking connection, whose
//! futures never pend and are polled once on the caller's thread
//! ([`ready`]), with no runtime.
//!
//! A [`Pool`] keeps idle connections (one per caller that ran at the same
//! time). A call takes one, or opens one within the connect timeout; each
//! reply must come within the response timeout, or within what is left of
//! the call's budget (connect plus response timeout, from its start) when
//! that is less. After an I/O error, a timeout or a garbled reply the
//! connection is dropped, and so are the idle ones (they lead to the same
//! server, which just failed). While the server stays unreachable,
//! reconnects are spaced by a doubling backoff (the remote limiters' one
//! [`Gate`]) and calls in between fail at once with the last error.
//! A call on a reused connection that fails before it stored anything (the
//! server restarted since) runs once more on a fresh one.

use std::future::Future;
use std::io::{self, BufRead, BufReader, Read, Write};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
#[cfg(unix)]
use std::path::PathBuf;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::cas::{self, Machine, Next, Reply, MAX_CONFLICTS};
use super::proto::{self, Failure, Head, MAX_LINE, MAX_STATE_LEN};
use super::shared::error;
use crate::clock::Clock;
use crate::primitive::lock;
pub(crate) use crate::remote::pool::Pool;
use crate::remote::socket::{tcp, Budget, Socket, Timed};
use crate::remote::Done;

/// memcached's port unless the address names another.
pub const DEFAULT_PORT: u16 = 11211;

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Addr {
    /// `host:port` (or `host`, on [`DEFAULT_PORT`]).
    Tcp(String),
    /// `unix:/path` or `/path` (on unix systems).
    #[cfg(unix)]
    Unix(PathBuf),
}

impl Addr {
    /// Reads `host:port`, `host`, `[v6]:port`, `unix:/path` or `/path`.
    pub(crate) fn parse(addr: &str) -> Result<Addr, String> {
        let addr = addr.trim();
        if let Some(path) = addr
            .strip_prefix("unix:")
            .or_else(|| addr.starts_with('/').then_some(addr))
        {
            if path.is_empty() {
                return Err(format!("memcached address {addr:?}: no socket path"));
            }
            #[cfg(not(unix))]
            return Err(format!(
                "memcached address {addr:?}: a unix socket needs a unix system"
            ));
            #[cfg(unix)]
            return Ok(Addr::Unix(PathBuf::from(path)));
        }
        if addr.is_empty() || addr.contains(char::is_whitespace) || addr.contains('/') {
            return Err(format!(
                "memcached address {addr:?}: want host:port, host, or unix:/path"
            ));
        }
        // A port given: the last colon after any `]` (IPv6 in brackets).
        let has_port = match addr.rfind(']') {
            Some(close) => addr[close..].contains(':'),
            None => addr.matches(':').count() == 1,
        };
        if has_port {
            let port = addr.rsplit(':').next().unwrap_or("");
            if port.parse::<u16>().is_err() {
                return Err(format!("memcached address {addr:?}: bad port {port:?}"));
            }
            Ok(Addr::Tcp(addr.to_owned()))
        } else if addr.contains(':') {
            // A bare IPv6 address.
            Ok(Addr::Tcp(format!("[{addr}]:{DEFAULT_PORT}")))
        } else {
            Ok(Addr::Tcp(format!("{addr}:{DEFAULT_PORT}")))
        }
    }
}

/// One connection: a buffered reader over the socket.
pub(crate) struct Conn {
    io: BufReader<Timed>,
    line: Vec<u8>,
}

/// The blocking connection: its futures never pend (see [`ready`]).
impl Link for Conn {
    async fn open(addr: &Addr, within: Duration, response: Duration) -> io::Result<Conn> {
        let socket: Socket = match addr {
            #[cfg(unix)]
            Addr::Unix(path) => Box::new(UnixStream::connect(path)?),
            Addr::Tcp(hostport) => Box::new(tcp(hostport.as_str(), Instant::now() + within)?),
        };
        socket.set_write_timeout(response)?;
        let deadline = Instant::now() + response;
        Ok(Conn {
            io: BufReader::with_capacity(512, Timed { socket, deadline }),
            line: Vec::with_capacity(64),
        })
    }

    async fn call(&mut self, command: &[u8], within: Duration) -> Result<Reply, Failure> {
        let timed = self.io.get_mut();
        timed.deadline = Instant::now() + within;
        timed.socket.write_all(command)?;
        self.line.clear();
        (&mut self.io)
            .take(MAX_LINE)
            .read_until(b'\n', &mut self.line)?;
        let head = head_of(&self.line)?;
        let value = match head {
            Head::Value { len, .. } => Some(self.value(len)?),
            _ => None,
        };
        Ok(Reply { head, value })
    }

    async fn pause(pause: Duration) {
        std::thread::sleep(pause);
    }
}

impl Conn {
    /// A value of `len` bytes and its `\r\n`: a state, or the length of a
    /// value that is not one (read past, not kept).
    fn value(&mut self, len: usize) -> Result<Result<u64, usize>, Failure> {
        if len <= MAX_STATE_LEN {
            let mut buf = [0u8; MAX_STATE_LEN + 2];
            let buf = &mut buf[..len + 2];
            self.io.read_exact(buf)?;
            return value_of(buf, len);
        }
        let want = len as u64 + 2;
        let got = io::copy(&mut (&mut self.io).take(want), &mut io::sink())?;
        if got != want {
            return Err(Failure::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        Ok(Err(len))
    }
}

/// A state read as `len` bytes and `\r\n` in `buf`.
pub(crate) fn value_of(buf: &[u8], len: usize) -> Result<Result<u64, usize>, Failure> {
    if &buf[len..] != b"\r\n" {
        return Err(Failure::Garbled("a value not ended by CRLF".into()));
    }
    Ok(proto::state(&buf[..len]).ok_or(len))
}

/// The head of a reply line as read (at most [`MAX_LINE`] bytes); a line
/// cut short is the connection closed (EOF), or a line too long.
pub(crate) fn head_of(line: &[u8]) -> Result<Head, Failure> {
    if line.ends_with(b"\n") {
        return proto::head(line);
    }
    Err(if (line.len() as u64) < MAX_LINE {
        Failure::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "memcached closed the connection",
        ))
    } else {
        Failure::Garbled(format!("a reply line over {MAX_LINE} bytes"))
    })
}

/// A connection the [`Pool`] drives machines on: the blocking [`Conn`],
/// whose futures never pend, or the async face's tokio one (`aio.rs`).
pub(crate) trait Link: Sized {
    /// A connection to `addr` within `within`, its writes bounded by
    /// `response`.
    fn open(
        addr: &Addr,
        within: Duration,
        response: Duration,
    ) -> impl Future<Output = io::Result<Self>>;

    /// Sends `command` and reads its reply within `within`.
    fn call(
        &mut self,
        command: &[u8],
        within: Duration,
    ) -> impl Future<Output = Result<Reply, Failure>>;

    /// Waits `pause` after a lost race.
    fn pause(pause: Duration) -> impl Future<Output = ()>;
}

/// The answer of `f`, a future that never pends: the blocking face drives
/// the pool's one loop over its blocking connection so, on the caller's
/// thread, with no runtime (every `.await` in it is on a blocking call).
pub(crate) fn ready<T>(f: impl Future<Output = T>) -> T {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(f).poll(&mut cx) {
        Poll::Ready(answer) => answer,
        Poll::Pending => unreachable!("a blocking connection's call never pends"),
    }
}

/// Runs a machine on `conn` to its answer.
async fn drive<L: Link, C: Clock>(
    conn: &mut L,
    m: &mut Machine<'_, C>,
    budget: &Budget,
) -> Result<Done, Failure> {
    m.begin();
    loop {
        let within = budget.reply_within();
        let reply = conn.call(m.out(), within).await.map_err(|f| {
            // A failure after lost races whose reply did not come within
            // what the budget left is the contention's: the server
            // answered every call before.
            if m.conflicts > 0 && within < budget.response && f.is_timeout() {
                Failure::Contended {
                    conflicts: m.conflicts,
                    in_step: false,
                }
            } else {
                f
            }
        })?;
        match m.reply(reply) {
            Next::Send => {}
            Next::Done(done) => return done,
            Next::Conflict => {
                // The pause before a conflict's retry, unless the call gives
                // up: after MAX_CONFLICTS, or when the budget has no room.
                let pause = cas::pause(m.conflicts);
                if m.conflicts >= MAX_CONFLICTS || !budget.fits(pause) {
                    return Err(Failure::Contended {
                        conflicts: m.conflicts,
                        in_step: true,
                    });
                }
                L::pause(pause).await;
                m.begin();
            }
        }
    }
}

/// The connections of kind `L` to where an address leads.
impl<L: Link> Pool<Addr, L> {
    /// Runs `m` on a connection to its answer within `budget` (see the
    /// module docs); the CAS races it lost are in `m.conflicts`.
    pub(crate) async fn run<C: Clock>(
        &self,
        m: &mut Machine<'_, C>,
        budget: &Budget,
    ) -> Result<Done, Failure> {
        let reused = lock(&self.idle).pop();
        let mut retry = reused.is_some();
        let mut conn = match reused {
            Some(conn) => conn,
            None => self.connect(budget).await?,
        };
        loop {
            match drive(&mut conn, m, budget).await {
                Err(f) if !f.in_step() => {
                    drop(conn);
                    lock(&self.idle).clear();
                    // A connection that sat idle across a server restart
                    // fails on its first use: it says nothing about the
                    // server now. Sent again only if nothing was stored.
                    if !retry || m.wrote || f.is_timeout() || !matches!(f, Failure::Io(_)) {
                        return Err(f);
                    }
                    retry = false;
                    conn = self.connect(budget).await?;
                }
                answer => {
                    lock(&self.idle).push(conn);
                    return answer;
                }
            }
        }
    }

    /// A new connection within the connect timeout and what the budget
    /// leaves, unless the backoff after a failed one still runs.
    async fn connect(&self, budget: &Budget) -> Result<L, Failure> {
        if let Some(last) = self.gate.closed() {
            return Err(Failure::Connect(last));
        }
        let within = budget.left().min(self.connect_timeout);
        let opened = L::open(&self.target, within, self.response_timeout).await;
        let opened = opened.map_err(|e| error(Failure::Io(e), ""));
        self.gate.record(opened).map_err(Failure::Connect)
    }
}
