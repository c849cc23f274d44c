//! [`MemoryBackend`]: a remote limiter's backend kept in this process's
//! memory, a map of keys to state words stepped under a lock. For tests:
//! it runs [`schedule::step`] as a server would, on a clock of its own
//! (a [`ManualClock`](crate::clock::ManualClock) makes it deterministic), counts
//! its round trips, and can be switched off to play a server that is down.
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
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{Decision, Error, Remote, Request};
use crate::clock::{internal_now, Clock, DefaultClock};
use crate::model::schedule::{self, FULL};
use crate::store::Booking;

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
        MemoryBackend {
            inner: Arc::new(Inner {
                states: Mutex::new(HashMap::new()),
                clock,
                round_trips: AtomicU64::new(0),
                down: AtomicBool::new(false),
            }),
        }
    }

    /// How many calls reached the "server" (steps, peeks, give-backs,
    /// resets), each one round trip of a real backend.
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
        self.states().len()
    }

    /// Whether no key holds a state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts a round trip, or fails it when down.
    fn call(&self) -> Result<(), Error> {
        self.inner.round_trips.fetch_add(1, Relaxed);
        if self.inner.down.load(Relaxed) {
            return Err(Error::unavailable(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "the in-memory backend is set down",
            )));
        }
        Ok(())
    }

    fn states(&self) -> MutexGuard<'_, HashMap<String, u64>> {
        self.inner
            .states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> u64 {
        internal_now(&self.inner.clock)
    }

    fn step_now(&self, key: &str, request: &Request) -> Result<Decision, Error> {
        self.call()?;
        let now = self.now();
        let mut states = self.states();
        let prev = states.get(key).copied();
        let tat = prev.unwrap_or(FULL);
        let p = request.params;
        match schedule::step(tat, now, request.cost, p, request.admit) {
            Err(deny) => Ok(Decision::Denied(deny)),
            Ok(grant) => {
                if request.cost > 0 {
                    states.insert(key.to_owned(), grant.next);
                }
                let wrote = (request.cost > 0).then_some(grant.next);
                Ok(request.granted(now, grant.slot, prev, wrote))
            }
        }
    }

    fn peek_now(&self, key: &str) -> Result<(u64, u64), Error> {
        self.call()?;
        let now = self.now();
        Ok((self.states().get(key).copied().unwrap_or(FULL), now))
    }

    fn give_back_now(&self, key: &str, undo: Booking) -> Result<bool, Error> {
        self.call()?;
        let mut states = self.states();
        if states.get(key) != Some(&undo.next) {
            return Ok(false);
        }
        match undo.prev {
            Some(prev) => states.insert(key.to_owned(), prev),
            None => states.remove(key),
        };
        Ok(true)
    }

    fn reset_now(&self, key: &str) -> Result<bool, Error> {
        self.call()?;
        Ok(self.states().remove(key).is_some())
    }
}

impl<C: Clock + Clone + 'static> Remote for MemoryBackend<C> {
    #[cfg(feature = "tokio")]
    type Async = MemoryBackend<C>;

    #[cfg(feature = "tokio")]
    fn to_async(&self) -> MemoryBackend<C> {
        self.clone()
    }

    fn step(&self, key: &str, request: &Request) -> Result<Decision, Error> {
        self.step_now(key, request)
    }

    fn peek(&self, key: &str) -> Result<(u64, u64), Error> {
        self.peek_now(key)
    }

    fn reset(&self, key: &str) -> Result<bool, Error> {
        self.reset_now(key)
    }

    fn undo(&self, key: &str, _tau: u64, undo: Booking) -> Result<bool, Error> {
        self.give_back_now(key, undo)
    }
}

#[cfg(feature = "tokio")]
impl<C: Clock + Clone + 'static> super::AsyncRemote for MemoryBackend<C> {
    async fn step(&self, key: &str, request: &Request) -> Result<Decision, Error> {
        self.step_now(key, request)
    }

    async fn peek(&self, key: &str) -> Result<(u64, u64), Error> {
        self.peek_now(key)
    }

    async fn undo(&self, key: &str, _tau: u64, undo: Booking) -> Result<bool, Error> {
        self.give_back_now(key, undo)
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        self.reset_now(key)
    }
}

impl<C> fmt::Debug for MemoryBackend<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("round_trips", &self.inner.round_trips.load(Relaxed))
            .finish_non_exhaustive()
    }
}
