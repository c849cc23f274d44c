//! [`MemoryBackend`]: a remote limiter's backend kept in this process's
//! memory, a map of keys to state words stepped under a lock. For tests:
//! it runs [`schedule::step`](crate::model::schedule::step) as a server
//! would, on a clock of its own (a
//! [`ManualClock`](crate::clock::ManualClock) makes it deterministic),
//! counts its round trips, and can be switched off to play a server that
//! is down. A limit counted by window runs
//! [`window::step`](crate::model::window::step) the same way, on the
//! clock's Unix time (a clock that knows none is set to the wall clock
//! once, when the backend is made).
//! The property tests run it against the plain step beside the real
//! servers, and the interface suite (`tests/interface.rs`) runs every case
//! on it; it is also the smallest example of a backend.
//!
//! ```
//! use paceline::remote::memory::{MemoryBackend, MemoryLimiter};
//! use paceline::remote::FailPolicy;
//! use paceline::{Limit, Rate, Take};
//!
//! let backend = MemoryBackend::new();
//! let limiter = MemoryLimiter::with_backend(backend.clone(), Limit::new(Rate::per_second(10), 2), FailPolicy::Closed)?;
//! let taken = Take::try_take_n(&limiter, "user:1", 3)?; // a key at rest has its whole burst
//! assert_eq!(taken.available(), 0);
//! assert!(limiter.try_take("user:1").is_err());
//! assert_eq!(backend.round_trips(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::{Backend, Done, Error, Op};
use crate::clock::{internal_now, Clock, DefaultClock, UnixClock};
use crate::model::schedule::{FULL, ORIGIN};
use crate::model::window::EMPTY;
use crate::primitive::{lock, Mutex};

/// A limiter over [`MemoryBackend`].
pub type MemoryLimiter<C = DefaultClock> = super::RemoteLimiter<MemoryBackend<C>>;

/// The async face of a [`MemoryLimiter`] (feature `tokio`).
#[cfg(feature = "tokio")]
pub type AsyncMemoryLimiter<C = DefaultClock> = super::AsyncRemoteLimiter<MemoryBackend<C>>;

/// Keys and their states in memory, behind one `Arc`: clones (and a
/// limiter's async face) share them. An absent key is at rest, as an
/// expired key in Redis.
pub struct MemoryBackend<C = DefaultClock> {
    inner: Arc<Inner<C>>,
}

struct Inner<C> {
    states: Mutex<HashMap<String, u64>>,
    clock: C,
    /// The Unix time of the clock's origin, ns: windows are counted on it.
    unix: u64,
    round_trips: AtomicU64,
    down: AtomicBool,
}

impl MemoryBackend {
    /// An empty backend on its own clock.
    pub fn new() -> Self {
        MemoryBackend::with_clock(DefaultClock::new())
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        MemoryBackend::new()
    }
}

impl<C> Clone for MemoryBackend<C> {
    fn clone(&self) -> Self {
        MemoryBackend {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C: Clock> MemoryBackend<C> {
    /// An empty backend whose "server time" is `clock`.
    pub fn with_clock(clock: C) -> Self {
        let unix =
            (clock.unix_origin()).unwrap_or_else(|| UnixClock.now().saturating_sub(clock.now()));
        MemoryBackend {
            inner: Arc::new(Inner {
                states: Mutex::new(HashMap::new()),
                clock,
                unix,
                round_trips: AtomicU64::new(0),
                down: AtomicBool::new(false),
            }),
        }
    }

    /// How many calls reached the "server" (steps, peeks, give-backs,
    /// settles, resets), each one round trip of a real backend.
    pub fn round_trips(&self) -> u64 {
        self.inner.round_trips.load(Relaxed)
    }

    /// Plays a server that cannot be reached (`true`) or is back: calls
    /// then fail with [`Error::Unavailable`], which a fail policy may admit.
    pub fn set_down(&self, down: bool) {
        self.inner.down.store(down, Relaxed);
    }

    /// How many keys hold a state.
    pub fn len(&self) -> usize {
        lock(&self.inner.states).len()
    }

    /// Whether no key holds a state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<C: Clock + Clone + 'static> Backend for MemoryBackend<C> {
    #[cfg(feature = "tokio")]
    type Async = MemoryBackend<C>;

    #[cfg(feature = "tokio")]
    fn to_async(&self) -> MemoryBackend<C> {
        self.clone()
    }

    /// One round trip, or a failure when down.
    fn call(&self, key: &str, op: Op) -> Result<Done, Error> {
        self.inner.round_trips.fetch_add(1, Relaxed);
        if self.inner.down.load(Relaxed) {
            return Err(Error::unavailable(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "the in-memory backend is set down",
            )));
        }
        let now = internal_now(&self.inner.clock);
        // The window step's clock: Unix time, internal ns.
        let unix = (self.inner.clock.now())
            .saturating_add(self.inner.unix)
            .saturating_add(ORIGIN);
        let mut states = lock(&self.inner.states);
        let prev = states.get(key).copied();
        Ok(match op {
            Op::Step(r) => {
                let (decision, wrote) = r.step(prev, now);
                if let Some(next) = wrote {
                    states.insert(key.to_owned(), next);
                }
                Done::Decision(decision)
            }
            Op::Peek => Done::Peeked(prev.unwrap_or(FULL), now),
            Op::Undo { booking, .. } if prev == Some(booking.next) => {
                match booking.prev {
                    Some(prev) => states.insert(key.to_owned(), prev),
                    None => states.remove(key),
                };
                Done::Flag(true)
            }
            Op::Undo { .. } => Done::Flag(false),
            Op::Settle(settle) => match settle.apply(prev, now) {
                Some(next) => {
                    states.insert(key.to_owned(), next);
                    Done::Peeked(next, now)
                }
                None => Done::Peeked(prev.unwrap_or(FULL), now),
            },
            Op::Reset => Done::Flag(states.remove(key).is_some()),
            Op::Count(count) => {
                let (decision, wrote) = count.step(prev, unix);
                if let Some(next) = wrote {
                    states.insert(key.to_owned(), next);
                }
                Done::Decision(decision)
            }
            Op::PeekCount(_) => Done::Peeked(prev.unwrap_or(EMPTY), unix),
            Op::UndoCount { booking, .. } if prev == Some(booking.next) => {
                match booking.prev {
                    Some(prev) => states.insert(key.to_owned(), prev),
                    None => states.remove(key),
                };
                Done::Flag(true)
            }
            Op::UndoCount { .. } => Done::Flag(false),
            Op::Recount(recount) => match recount.apply(prev, unix) {
                Some(next) => {
                    states.insert(key.to_owned(), next);
                    Done::Peeked(next, unix)
                }
                None => Done::Peeked(prev.unwrap_or(EMPTY), unix),
            },
        })
    }
}

#[cfg(feature = "tokio")]
impl<C: Clock + Clone + 'static> super::AsyncBackend for MemoryBackend<C> {
    async fn call(&self, key: &str, op: Op) -> Result<Done, Error> {
        Backend::call(self, key, op)
    }
}

crate::remote::debug_backend!(MemoryBackend<C>, |b|
    "round_trips": b.inner.round_trips.load(Relaxed));
