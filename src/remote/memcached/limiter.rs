//! [`MemcachedBackend`], the blocking backend: each call a [`Machine`] run
//! on a pooled connection; and the calls only memcached has.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::cas::Machine;
use super::conn::{ready, Addr, Conn, Pool};
use super::shared::{Shared, PING_KEY};
use crate::clock::Clock;
use crate::clock::UnixClock;
use crate::remote::{key, Backend, Done, Error, Op, RemoteLimiter};

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
/// # use paceline::Take;
/// let users = MemcachedLimiter::builder("127.0.0.1:11211", Rate::per_second(10)).build()?;
/// let partners = users.with_limit(Rate::per_second(500), 50)?;
/// users.take("user:42")?;
/// partners.take("user:7")?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type MemcachedLimiter<C = UnixClock> = RemoteLimiter<MemcachedBackend<C>>;

/// The blocking memcached backend: a pool of connections and what the
/// async face shares.
pub struct MemcachedBackend<C = UnixClock> {
    pub(super) shared: Arc<Shared<C>>,
    pub(super) pool: Pool<Addr, Conn>,
}

impl<C: Clock + Clone + 'static> Backend for MemcachedBackend<C> {
    #[cfg(feature = "tokio")]
    type Async = super::aio::AsyncMemcachedBackend<C>;

    #[cfg(feature = "tokio")]
    fn to_async(&self) -> Self::Async {
        super::aio::AsyncMemcachedBackend::new(Arc::clone(&self.shared), &self.pool)
    }

    /// The machine's call: a read, then for a grant a `cas` (or `add`);
    /// for an undo a `cas` back to the state before only if the key still
    /// holds the grant's; for a reset one `md` (twice is once).
    fn call(&self, key: &str, op: Op) -> Result<Done, Error> {
        let stored = key::memcached(&self.shared.prefix, key);
        let mut m = Machine::new(&stored, op, &self.shared.clock);
        let result = ready(self.pool.run(&mut m, &self.pool.budget()));
        self.shared.settle(&stored, m.conflicts, result)
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
        self.core.call(PING_KEY, Op::Peek).map(drop)
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

crate::remote::debug_backend!(MemcachedBackend<C>, |b|
    "addr": b.pool.target, "prefix": b.shared.prefix);
