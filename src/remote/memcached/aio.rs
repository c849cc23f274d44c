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

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Semaphore;

use super::cas::{Machine, Reply};
use super::conn::{head_of, value_of, Addr, Link, Pool};
use super::proto::{Failure, Head, MAX_LINE, MAX_STATE_LEN};
use super::shared::{Shared, PING_KEY};
use crate::clock::Clock;
use crate::clock::UnixClock;
use crate::remote::{key, AsyncBackend, AsyncRemoteLimiter, Done, Error, Op};

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

impl Link for AsyncConn {
    async fn open(addr: &Addr, within: Duration, _response: Duration) -> io::Result<Self> {
        let open = async {
            let io: Box<dyn Io> = match addr {
                #[cfg(unix)]
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
        };
        let opened = tokio::time::timeout(within, open).await;
        opened.unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
    }

    async fn call(&mut self, command: &[u8], within: Duration) -> Result<Reply, Failure> {
        let reply = tokio::time::timeout(within, self.exchange(command)).await;
        reply.unwrap_or_else(|_| Err(timed_out()))
    }

    async fn pause(pause: Duration) {
        if pause.as_millis() == 0 {
            // (Tokio's timer would round it up to a millisecond.)
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(pause).await;
        }
    }
}

impl AsyncConn {
    /// Sends `command` and reads its reply (the caller bounds the time).
    async fn exchange(&mut self, command: &[u8]) -> Result<Reply, Failure> {
        self.io.get_mut().write_all(command).await?;
        self.line.clear();
        (&mut self.io)
            .take(MAX_LINE)
            .read_until(b'\n', &mut self.line)
            .await?;
        let head = head_of(&self.line)?;
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

/// The async memcached backend: the limiter's shared settings and a pool
/// of at most `pool_size` tokio connections in use, made on first use in
/// the runtime the call runs on.
pub struct AsyncMemcachedBackend<C = UnixClock> {
    shared: Arc<Shared<C>>,
    pool: Pool<Addr, AsyncConn>,
    permits: Semaphore,
}

impl<C: Clock> AsyncMemcachedBackend<C> {
    /// The async twin of a blocking backend with `shared` and a pool to
    /// where `blocking` leads, with its timeouts.
    pub(super) fn new<L>(shared: Arc<Shared<C>>, blocking: &Pool<Addr, L>) -> Self {
        let (connect, response) = (blocking.connect_timeout, blocking.response_timeout);
        AsyncMemcachedBackend {
            permits: Semaphore::new(shared.pool_size),
            shared,
            pool: Pool::new(blocking.target.clone(), connect, response),
        }
    }
}

impl<C: Clock + Clone + 'static> AsyncBackend for AsyncMemcachedBackend<C> {
    /// As the blocking face's, on a connection in use once one is free
    /// within the call's budget.
    async fn call(&self, key: &str, op: Op) -> Result<Done, Error> {
        let stored = key::memcached(&self.shared.prefix, key);
        let mut m = Machine::new(&stored, op, &self.shared.clock);
        let budget = self.pool.budget();
        let result = match tokio::time::timeout(budget.left(), self.permits.acquire()).await {
            Ok(Ok(_permit)) => self.pool.run(&mut m, &budget).await,
            _ => Err(timed_out()),
        };
        self.shared.settle(&stored, m.conflicts, result)
    }
}

impl<C: Clock + Clone + 'static> AsyncMemcachedLimiter<C> {
    /// One `mg` round trip, as [`MemcachedLimiter::ping`](super::MemcachedLimiter).
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    pub async fn ping(&self) -> Result<(), Error> {
        self.core.call_async(PING_KEY, Op::Peek).await.map(drop)
    }

    /// CAS races lost, its blocking twin's included (see
    /// [`MemcachedLimiter::cas_conflicts`](super::MemcachedLimiter)).
    pub fn cas_conflicts(&self) -> u64 {
        self.backend().shared.conflicts.load(Relaxed)
    }

    /// The prefix put before every key.
    pub fn prefix(&self) -> &str {
        &self.backend().shared.prefix
    }
}

crate::remote::debug_backend!(AsyncMemcachedBackend<C>, |b|
    "addr": b.pool.target, "prefix": b.shared.prefix);
