//! [`MemcachedBuilder`]: where a [`MemcachedLimiter`] connects, its prefix,
//! pool and clock, its limit, and how its calls fail and wait.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::conn::{Addr, Pool};
use super::limiter::{MemcachedBackend, MemcachedLimiter};
use super::shared::Shared;
use crate::clock::Clock;
use crate::clock::UnixClock;
use crate::remote::builder::RemoteBuilder;
use crate::remote::key::{DIGEST_MARK, MEMCACHED_MAX_KEY};
use crate::remote::Error;
use crate::values::rate::Rate;

/// The key prefix unless the builder sets another: keeps paceline's keys
/// apart from the application's.
pub const DEFAULT_PREFIX: &str = "paceline:";

/// The async face's most connections at once, unless the builder sets
/// another: a call holds one for two round trips, so 16 serve tens of
/// thousands of calls a second on a LAN, far under memcached's default
/// 1024 connections for a fleet of processes.
pub const DEFAULT_POOL_SIZE: usize = 16;

/// Configures a [`MemcachedLimiter`]; made by [`MemcachedLimiter::builder`].
/// The settings every remote limiter has are [`RemoteBuilder`]'s;
/// memcached adds [`prefix`](Self::prefix), [`pool_size`](Self::pool_size)
/// and [`clock`](Self::clock). For async calls, build the limiter and take
/// its async face, `AsyncMemcachedLimiter::from(limiter)` (features
/// `memcached` and `tokio`).
pub type MemcachedBuilder<C = UnixClock> = RemoteBuilder<MemcachedSettings<C>>;

/// What only a memcached limiter's builder sets (see [`MemcachedBuilder`]).
pub struct MemcachedSettings<C = UnixClock> {
    addr: String,
    prefix: String,
    pool_size: usize,
    clock: C,
}

impl<C> fmt::Debug for MemcachedSettings<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemcachedSettings")
            .field("addr", &self.addr)
            .field("prefix", &self.prefix)
            .field("pool_size", &self.pool_size)
            .finish_non_exhaustive()
    }
}

impl MemcachedLimiter {
    /// A builder for a limiter at `rate` on the memcached at `addr`:
    /// `"host:port"`, `"host"` (port 11211), `"[::1]:11211"`, or a unix
    /// socket as `"unix:/path/to/memcached.sock"` or `"/path/…"`. Nothing
    /// connects until the first call, so a limiter can be built while the
    /// server is down.
    pub fn builder(addr: impl Into<String>, rate: Rate) -> MemcachedBuilder {
        RemoteBuilder::new(
            rate,
            MemcachedSettings {
                addr: addr.into(),
                prefix: DEFAULT_PREFIX.to_owned(),
                pool_size: DEFAULT_POOL_SIZE,
                clock: UnixClock,
            },
        )
    }
}

impl<C: Clock + Clone + 'static> MemcachedBuilder<C> {
    crate::values::setters! {
        /// The prefix put before every key (default [`DEFAULT_PREFIX`]):
        /// printable ASCII without spaces, at most 178 bytes (so that a
        /// digested key still fits memcached's 250).
        prefix(prefix: impl Into<String>) => server.prefix;
        /// The most connections the async face opens at once (default
        /// [`DEFAULT_POOL_SIZE`]); a call waits, within its budget, for one to
        /// be free. The blocking face keeps one per thread calling at once.
        pool_size(connections: usize) => server.pool_size;
    }

    /// The clock the limiter decides on, which must read Unix time in
    /// nanoseconds, as every client sharing the server reads it: memcached
    /// lends none (see [the module docs](super#time-the-clients-clocks-decide)).
    /// Default [`UnixClock`], the host's. Tests pass a clock set off on
    /// purpose.
    pub fn clock<D: Clock + Clone + 'static>(self, clock: D) -> MemcachedBuilder<D> {
        let RemoteBuilder { common, server } = self;
        RemoteBuilder {
            common,
            server: MemcachedSettings {
                addr: server.addr,
                prefix: server.prefix,
                pool_size: server.pool_size,
                clock,
            },
        }
    }

    /// The limiter. It does not connect yet: the first call does.
    ///
    /// # Errors
    /// [`Error::Config`] for an address that does not parse, a prefix
    /// memcached cannot hold, a pool of no connections, a slack whose
    /// intervals span over 146 years, or a zero timeout.
    pub fn build(self) -> Result<MemcachedLimiter<C>, Error> {
        let RemoteBuilder { common, server } = self;
        let addr = Addr::parse(&server.addr).map_err(Error::Config)?;
        check_prefix(&server.prefix)?;
        if server.pool_size == 0 {
            return Err(Error::Config("pool_size must be at least 1".into()));
        }
        let (connect, response) = (common.connect_timeout, common.response_timeout);
        let shared = Arc::new(Shared {
            prefix: server.prefix,
            clock: server.clock,
            pool_size: server.pool_size,
            conflicts: AtomicU64::new(0),
        });
        let backend = MemcachedBackend {
            shared,
            pool: Pool::new(addr, connect, response),
        };
        common.limiter(backend, server.addr.trim())
    }
}

/// The longest prefix: a digested key (its mark and 64 hex digits) must
/// still fit after it.
const MAX_PREFIX: usize = MEMCACHED_MAX_KEY - DIGEST_MARK.len() - 64;

fn check_prefix(prefix: &str) -> Result<(), Error> {
    if let Some(b) = prefix.bytes().find(|b| !(b'!'..=b'~').contains(b)) {
        return Err(Error::Config(format!(
            "prefix {prefix:?}: byte {b:#04x} is not printable ASCII without spaces, \
             which memcached keys are"
        )));
    }
    if prefix.len() > MAX_PREFIX {
        return Err(Error::Config(format!(
            "prefix of {} bytes: at most {MAX_PREFIX}, so that a digested key still fits \
             memcached's {MEMCACHED_MAX_KEY}",
            prefix.len()
        )));
    }
    Ok(())
}
