//! [`AsyncMemcachedLimiter`]: the memcached limiter's calls as futures
//! (features `memcached` and `tokio`).
//!
//! The same machine, keys, clock, fail policy and errors as
//! [`MemcachedLimiter`](super::MemcachedLimiter); only the connections
//! differ: tokio sockets in a pool of at most
//! [`pool_size`](super::MemcachedBuilder::pool_size) connections, each
//! serving one call at a time (a call is two or three round trips that
//! must not interleave with another's). A call waits for a connection
//! within its budget. A future dropped mid-call drops its connection (a
//! reply may still be on the wire), never hands it back.

use std::fmt;
use std::io;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Semaphore;

use super::cas::{Failure, Machine, Next, Reply};
use super::conn::{connect_error, contended, eof_or_garbled, value_of, Addr, Budget};
use super::proto::{self, Head, MAX_LINE, MAX_STATE_LEN};
use super::shared::{Shared, PING_KEY};
use crate::clock::Clock;
use crate::clock::UnixClock;
use crate::primitive::{lock, Mutex};
use crate::remote::health::Gate;
use crate::remote::{AsyncRemote, AsyncRemoteLimiter, Done, Error, Op};

/// The async face of a [`MemcachedLimiter`](super::MemcachedLimiter):
/// [`AsyncRemoteLimiter`] over [`AsyncMemcachedBackend`], made by
/// `AsyncMemcachedLimiter::from(limiter)`; its calls are
/// [`AsyncRemoteLimiter`]'s, plus [`ping`](AsyncRemoteLimiter::ping) and
/// [`cas_conflicts`](AsyncRemoteLimiter::cas_conflicts).
///
/// ```no_run
/// use paceline::memcached::{AsyncMemcachedLimiter, MemcachedLimiter};
/// use paceline::Rate;
/// use paceline::AsyncTake;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), paceline::Error> {
/// let limiter = MemcachedLimiter::builder("127.0.0.1:11211", Rate::per_second(100)).build()?;
/// let limiter = AsyncMemcachedLimiter::from(limiter);
/// limiter.take("api").await?; // sleeps (as a task) until the slot
/// # Ok(())
/// # }
/// ```
///
/// A give-back (a take cancelled after booking) reads the key and, if it
/// still holds the booking's state, stores the state before it over the
/// CAS token just read (or deletes the key over it, when it was absent):
/// it changes nothing if anyone took since.
pub type AsyncMemcachedLimiter<C = UnixClock> = AsyncRemoteLimiter<AsyncMemcachedBackend<C>>;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One async connection.
struct AsyncConn {
    io: BufReader<Box<dyn Io>>,
    line: Vec<u8>,
}

impl AsyncConn {
    async fn open(addr: &Addr) -> io::Result<AsyncConn> {
        let io: Box<dyn Io> = match addr {
            Addr::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
            Addr::Tcp(hostport) => {
                let s = tokio::net::TcpStream::connect(hostport.as_str()).await?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
        };
        Ok(AsyncConn {
            io: BufReader::with_capacity(512, io),
            line: Vec::with_capacity(64),
        })
    }

    /// Sends `command` and reads its reply (the caller bounds the time).
    async fn call(&mut self, command: &[u8]) -> Result<Reply, Failure> {
        self.io.get_mut().write_all(command).await?;
        self.line.clear();
        (&mut self.io)
            .take(MAX_LINE)
            .read_until(b'\n', &mut self.line)
            .await?;
        if !self.line.ends_with(b"\n") {
            return Err(eof_or_garbled(&self.line));
        }
        let head = proto::head(&self.line)?;
        let value = match head {
            Head::Value { len, .. } if len <= MAX_STATE_LEN => {
                let mut buf = [0u8; MAX_STATE_LEN + 2];
                let buf = &mut buf[..len + 2];
                self.io.read_exact(buf).await?;
                Some(value_of(buf, len)?)
            }
            Head::Value { len, .. } => {
                let want = len as u64 + 2;
                let got =
                    tokio::io::copy(&mut (&mut self.io).take(want), &mut tokio::io::sink()).await?;
                if got != want {
                    return Err(Failure::Io(io::ErrorKind::UnexpectedEof.into()));
                }
                Some(Err(len))
            }
            _ => None,
        };
        Ok(Reply { head, value })
    }
}

fn timed_out() -> Failure {
    Failure::Io(io::Error::new(
        io::ErrorKind::TimedOut,
        "memcached did not answer in time",
    ))
}

/// The async pool: idle connections, at most `pool_size` in use.
struct AsyncPool {
    idle: Mutex<Vec<AsyncConn>>,
    gate: Gate,
    permits: Semaphore,
}

/// The async memcached backend: the limiter's shared settings and a pool
/// of tokio connections, made on first use in the runtime the call runs on.
pub struct AsyncMemcachedBackend<C = UnixClock> {
    shared: Arc<Shared<C>>,
    pool: AsyncPool,
}

impl<C: Clock> AsyncMemcachedBackend<C> {
    pub(super) fn new(shared: Arc<Shared<C>>) -> Self {
        let permits = Semaphore::new(shared.pool_size);
        AsyncMemcachedBackend {
            shared,
            pool: AsyncPool {
                idle: Mutex::new(Vec::new()),
                gate: Gate::new(),
                permits,
            },
        }
    }

    async fn run(&self, key: &str, op: Op) -> Result<Done, Error> {
        let stored = self.shared.stored(key);
        let mut m = Machine::new(&stored, op, &self.shared.clock);
        let result = self.run_machine(&mut m).await;
        self.shared.settle(&stored, m.conflicts, result)
    }

    /// As the blocking pool's `run` (see `conn.rs`).
    async fn run_machine(&self, m: &mut Machine<'_, C>) -> Result<Done, Failure> {
        let s = &self.shared;
        let budget = Budget::new(s.connect_timeout, s.response_timeout);
        let _permit = tokio::time::timeout(budget.left(), self.pool.permits.acquire())
            .await
            .map_err(|_| timed_out())?
            .map_err(|_| timed_out())?;
        let reused = lock(&self.pool.idle).pop();
        let mut retry = reused.is_some();
        let mut conn = match reused {
            Some(conn) => conn,
            None => self.connect(&budget).await?,
        };
        loop {
            match drive(&mut conn, m, &budget).await {
                Ok(done) => {
                    lock(&self.pool.idle).push(conn);
                    return Ok(done);
                }
                Err(f) if f.in_step() => {
                    lock(&self.pool.idle).push(conn);
                    return Err(f);
                }
                Err(f) => {
                    drop(conn);
                    lock(&self.pool.idle).clear();
                    if !retry || m.wrote || f.is_timeout() || !matches!(f, Failure::Io(_)) {
                        return Err(f);
                    }
                    retry = false;
                    conn = self.connect(&budget).await?;
                }
            }
        }
    }

    async fn connect(&self, budget: &Budget) -> Result<AsyncConn, Failure> {
        if let Some(last) = self.pool.gate.closed() {
            return Err(Failure::Connect(last));
        }
        let within = budget.left().min(self.shared.connect_timeout);
        let opened = match tokio::time::timeout(within, AsyncConn::open(&self.shared.addr)).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(connect_error(e)),
            Err(_) => Err(Error::Timeout),
        };
        self.pool.gate.record(opened).map_err(Failure::Connect)
    }
}

/// Runs a machine on `conn` to its answer, as the blocking driver does.
async fn drive<C: Clock>(
    conn: &mut AsyncConn,
    m: &mut Machine<'_, C>,
    budget: &Budget,
) -> Result<Done, Failure> {
    m.begin();
    loop {
        let within = budget.reply_within();
        let reply = match tokio::time::timeout(within, conn.call(m.out())).await {
            Ok(reply) => reply,
            Err(_) => Err(timed_out()),
        }
        .map_err(|f| contended(f, m.conflicts, within, budget.response))?;
        match m.reply(reply) {
            Next::Send => {}
            Next::Done(done) => return done,
            Next::Conflict => {
                let Some(pause) = budget.retry(m.conflicts) else {
                    return Err(Failure::Contended {
                        conflicts: m.conflicts,
                        in_step: true,
                    });
                };
                if pause.as_millis() == 0 {
                    // (Tokio's timer would round it up to a millisecond.)
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(pause).await;
                }
                m.begin();
            }
        }
    }
}

impl<C: Clock + Clone + 'static> AsyncRemote for AsyncMemcachedBackend<C> {
    async fn call(&self, key: &str, op: Op) -> Result<Done, Error> {
        self.run(key, op).await
    }
}

impl<C: Clock + Clone + 'static> AsyncMemcachedLimiter<C> {
    /// One `mg` round trip, as [`MemcachedLimiter::ping`](super::MemcachedLimiter).
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    pub async fn ping(&self) -> Result<(), Error> {
        self.backend().run(PING_KEY, Op::Peek).await.map(drop)
    }

    /// CAS races lost, its blocking twin's included (see
    /// [`MemcachedLimiter::cas_conflicts`](super::MemcachedLimiter)).
    pub fn cas_conflicts(&self) -> u64 {
        self.backend()
            .shared
            .conflicts
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The prefix put before every key.
    pub fn prefix(&self) -> &str {
        &self.backend().shared.prefix
    }
}

impl<C> fmt::Debug for AsyncMemcachedBackend<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncMemcachedBackend")
            .field("addr", &self.shared.addr)
            .field("prefix", &self.shared.prefix)
            .finish_non_exhaustive()
    }
}
