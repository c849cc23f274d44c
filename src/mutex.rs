//! [`MutexLimiter`]: the same limiter with its state under a `Mutex`.
//!
//! It makes the same decisions as [`AtomicLimiter`](crate::AtomicLimiter)
//! (both run [`schedule::step`]) and exists for comparison and for platforms
//! without 64-bit atomics. The lock is held only for the step itself, never
//! while a caller waits for its slot; under contention it is slower than the
//! CAS loop, and a holder preempted mid-step stalls everyone.

use std::fmt;

use crate::builder::Builder;
use crate::clock::{Clock, DefaultClock};
use crate::error::BuildError;
use crate::pacer::{Config, Core, Store};
use crate::primitive::{lock, Mutex};
use crate::rate::Rate;
use crate::schedule::{self, Admit, Deny, Grant, Params};

/// The mutex store: the state word and its parameters under one lock.
pub(crate) struct MutexState {
    inner: Mutex<(u64, Params)>,
}

impl Store for MutexState {
    fn new(tat: u64, params: Params) -> Self {
        MutexState {
            inner: Mutex::new((tat, params)),
        }
    }

    #[inline]
    fn update(&self, now: u64, cost: u64, admit: Admit) -> Result<Grant, Deny> {
        let mut state = lock(&self.inner);
        let grant = schedule::step(state.0, now, cost, state.1, admit)?;
        state.0 = grant.next;
        Ok(grant)
    }

    fn peek(&self) -> (u64, Params) {
        *lock(&self.inner)
    }

    fn set_params(&self, params: Params) {
        let mut state = lock(&self.inner);
        state.0 = schedule::rebase(state.0, state.1, params);
        state.1 = params;
    }

    fn give_back(&self, grant: Grant) -> bool {
        let mut state = lock(&self.inner);
        if state.0 == grant.next {
            state.0 = grant.prev;
            true
        } else {
            false
        }
    }
}

/// A pacing limiter with its state under a `Mutex`: the same API and the same
/// decisions as [`AtomicLimiter`](crate::AtomicLimiter), which is faster under
/// contention. The lock is held only to decide, never while a caller waits.
///
/// ```
/// use paceline::{MutexLimiter, Rate};
///
/// let limiter = MutexLimiter::new(Rate::per_second(100));
/// assert!(limiter.try_take().is_ok());
/// assert!(limiter.try_take().is_err()); // no credit before the first permit
/// ```
pub struct MutexLimiter<C: Clock = DefaultClock> {
    core: Core<MutexState, C>,
}

impl MutexLimiter {
    /// A limiter at `rate` with slack 10 on the [`DefaultClock`].
    ///
    /// # Panics
    /// As [`AtomicLimiter::new`](crate::AtomicLimiter::new): only if ten
    /// intervals of `rate` exceed 146 years.
    pub fn new(rate: Rate) -> MutexLimiter {
        match Self::builder(rate).build() {
            Ok(limiter) => limiter,
            Err(e) => panic!("{e}"),
        }
    }

    /// A builder for a limiter at `rate`; see
    /// [`AtomicLimiter::builder`](crate::AtomicLimiter::builder).
    pub fn builder(rate: Rate) -> Builder<MutexLimiter> {
        Builder::with_default_clock(rate, DefaultClock::new)
    }
}

impl<C: Clock> MutexLimiter<C> {
    pub(crate) fn from_config(config: Config<C>) -> Result<Self, BuildError> {
        Ok(MutexLimiter {
            core: Core::new(config)?,
        })
    }
}

crate::limiter::impl_methods!(MutexLimiter);

impl<C: Clock> fmt::Debug for MutexLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MutexLimiter")
            .field("rate", &self.rate())
            .field("slack", &self.slack())
            .field("available", &self.available())
            .finish()
    }
}
