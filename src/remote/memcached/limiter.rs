//! [`MemcachedBackend`], the blocking backend: each call a [`Machine`] run
//! on a pooled connection; what both faces share; and the calls only
//! memcached has.

use std::error::Error as StdError;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use super::cas::{Done, Failure, Machine, Op};
use super::conn::{Addr, Pool};
use super::UnixClock;
use crate::clock::Clock;
use crate::remote::key;
use crate::remote::{Decision, Error, Remote, RemoteLimiter, Request};

/// A limiter whose state lives in memcached, so that every process using
/// the same server and key shares one limit: [`RemoteLimiter`] over
/// [`MemcachedBackend`], on the clock `C` (the host's Unix time unless the
/// builder sets another). Made by
/// [`builder`](RemoteLimiter::builder); its calls are [`RemoteLimiter`]'s,
/// plus [`ping`](RemoteLimiter::ping), [`prefix`](RemoteLimiter::prefix)
/// and [`cas_conflicts`](RemoteLimiter::cas_conflicts). See [the module
/// docs](super) for the model, time and failures; its async face is
/// `AsyncMemcachedLimiter::from(limiter)`.
///
/// ```no_run
/// # use paceline::{memcached::MemcachedLimiter, Rate};
/// let users = MemcachedLimiter::builder("127.0.0.1:11211", Rate::per_second(10)).build()?;
/// let partners = users.with_limit(Rate::per_second(500), 50)?;
/// users.take("user:42")?;
/// partners.take("user:7")?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type MemcachedLimiter<C = UnixClock> = RemoteLimiter<MemcachedBackend<C>>;

/// What the blocking and async backends of one limiter share.
pub(super) struct Shared<C> {
    pub(super) addr: Addr,
    pub(super) prefix: String,
    pub(super) clock: C,
    /// The async face's timeouts (the blocking pool keeps its own).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(super) connect_timeout: Duration,
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(super) response_timeout: Duration,
    /// The async face's most connections at once.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(super) pool_size: usize,
    /// CAS races lost, both faces together.
    pub(super) conflicts: AtomicU64,
}

impl<C> Shared<C> {
    /// The key memcached stores `key` under.
    pub(super) fn stored(&self, key: &str) -> String {
        key::memcached(&self.prefix, key)
    }

    /// Counts a call's lost races, and maps its failure to the error.
    pub(super) fn settle(
        &self,
        stored: &str,
        conflicts: u32,
        result: Result<Done, Failure>,
    ) -> Result<Done, Error> {
        if conflicts > 0 {
            self.conflicts.fetch_add(u64::from(conflicts), Relaxed);
        }
        result.map_err(|f| error(f, stored))
    }
}

/// The blocking memcached backend: a pool of connections and what the
/// async face shares.
pub struct MemcachedBackend<C = UnixClock> {
    pub(super) shared: Arc<Shared<C>>,
    pub(super) pool: Pool,
}

impl<C: Clock> MemcachedBackend<C> {
    fn run(&self, key: &str, op: Op) -> Result<Done, Error> {
        let stored = self.shared.stored(key);
        let mut m = Machine::new(&stored, op, &self.shared.clock);
        let result = self.pool.run(&mut m);
        self.shared.settle(&stored, m.conflicts, result)
    }
}

impl<C: Clock + Clone + 'static> Remote for MemcachedBackend<C> {
    #[cfg(feature = "tokio")]
    type Async = super::aio::AsyncMemcachedBackend<C>;

    #[cfg(feature = "tokio")]
    fn to_async(&self) -> Self::Async {
        super::aio::AsyncMemcachedBackend::new(Arc::clone(&self.shared))
    }

    fn step(&self, key: &str, request: &Request) -> Result<Decision, Error> {
        match self.run(key, Op::Step(*request))? {
            Done::Decision(d) => Ok(d),
            other => Err(mismatch(other)),
        }
    }

    fn peek(&self, key: &str) -> Result<(u64, u64), Error> {
        match self.run(key, Op::Peek)? {
            Done::Peeked(tat, now) => Ok((tat, now)),
            other => Err(mismatch(other)),
        }
    }

    /// One `md` of the key (twice is once).
    fn reset(&self, key: &str) -> Result<bool, Error> {
        match self.run(key, Op::Reset)? {
            Done::Flag(deleted) => Ok(deleted),
            other => Err(mismatch(other)),
        }
    }
}

impl<C: Clock + Clone + 'static> MemcachedLimiter<C> {
    /// One `mg` round trip (a get of a key nobody stores) on one of the
    /// limiter's connections: a health check, and the floor a call's round
    /// trips are measured against. Connects if no connection is open.
    ///
    /// # Errors
    /// Server failures, whatever the policy.
    pub fn ping(&self) -> Result<(), Error> {
        self.backend().run(PING_KEY, Op::Peek).map(drop)
    }

    /// The prefix put before every key.
    pub fn prefix(&self) -> &str {
        &self.backend().shared.prefix
    }

    /// How many CAS races this limiter's calls lost (a client wrote the key
    /// between a call's read and its store, and the call read again), its
    /// async face's included. Under contention, a measure of what it cost.
    pub fn cas_conflicts(&self) -> u64 {
        self.backend().shared.conflicts.load(Relaxed)
    }
}

/// The key [`ping`](MemcachedLimiter::ping) reads (after the prefix).
pub(super) const PING_KEY: &str = "~ping";

/// A machine answered another kind of call than asked (cannot happen).
pub(super) fn mismatch(done: Done) -> Error {
    Error::Script(Arc::new(Said(format!(
        "an answer of another call: {done:?}"
    ))))
}

/// The error a caller sees for a call's failure on `stored`.
pub(super) fn error(f: Failure, stored: &str) -> Error {
    let said = |s: String| Error::Script(Arc::new(Said(s)));
    match f {
        Failure::Connect(e) => e,
        Failure::Io(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Error::Timeout
        }
        Failure::Io(e) => Error::Unavailable(Arc::new(e)),
        Failure::Garbled(s) => said(format!("memcached's reply is not the meta protocol: {s}")),
        Failure::Server(s) => said(format!("memcached answered {s:?} on key {stored:?}")),
        Failure::Foreign(len) => said(format!(
            "key {stored:?} holds a value of {len} bytes that is not a paceline state"
        )),
        Failure::Contended { conflicts, .. } => said(format!(
            "key {stored:?}: {conflicts} CAS races lost within the call's budget \
             (more clients write it at once than its round trips can serve)"
        )),
    }
}

/// A memcached error, in words: the cause of an [`Error::Script`].
#[derive(Debug)]
pub(super) struct Said(pub(super) String);

impl fmt::Display for Said {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Said {}

impl<C> fmt::Debug for MemcachedBackend<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemcachedBackend")
            .field("addr", &self.shared.addr)
            .field("prefix", &self.shared.prefix)
            .finish_non_exhaustive()
    }
}
