//! [`AtomicLimiter`]: the lock-free limiter.
//!
//! # Implementation details
//!
//! The whole state is one `u64`, `tat` (see [`schedule`](crate::schedule)'s
//! model), in a cache-line-padded `AtomicU64` so that threads hammering it do
//! not also invalidate their neighbours' data. An update is a CAS loop:
//! load, run the pure step, `compare_exchange_weak` the new word in, and on
//! failure run the step again on the word that won. The loop may retry; it
//! never loses an update (each success replaces exactly the word its step
//! read) and never hands two callers the same slot (two successes from one
//! word are impossible).
//!
//! The interval sits in a second atomic that only `set_rate` writes; a step
//! reads it once per attempt, after `tat`, so each grant is paced by one rate
//! or the other, and once a grant is paced at a new rate no later one is
//! paced at the old (see [`update`]'s memory ordering). `set_rate` first
//! rebases `tat` (a CAS loop of its own) so that the next slot is one new
//! interval after the last one handed out, then stores the interval. The
//! ordering argument needs `tat` never to repeat a word: a `give_back` (async
//! cancellation) can make it repeat, and then a CAS decided on the old
//! interval may succeed after a grant at the new one (ABA;
//! `loom-tests/tests/give_back.rs`). Grants stay distinct and each is paced by
//! one rate or the other.

use std::fmt;

use crossbeam_utils::CachePadded;

use crate::builder::Builder;
use crate::clock::{Clock, DefaultClock};
use crate::error::BuildError;
use crate::pacer::{Config, Core, Store};
use crate::primitive::{AtomicU64, Ordering};
use crate::rate::Rate;
use crate::schedule::{self, Admit, Deny, Grant, Params};

/// Runs the step against `cell` in a CAS loop until it stores or refuses.
///
/// # Memory ordering
/// The read-modify-writes of `tat` are totally ordered whatever the ordering
/// argument, and that alone makes grants distinct and loses no update. The
/// acquire loads and the release CAS of `tat` are for the interval: a step that
/// reads the `tat` another step stored also sees the interval that step used
/// (or a newer one), so after a rate change no grant goes back to the old
/// rate once one has been paced at the new rate (loom found that with
/// `Relaxed`). For the same reason `set_rate`, which rebases a `tat` it reads
/// with `Acquire` before it stores the new interval, rebases each booking
/// made at the old interval exactly once. On x86 these compile to the same
/// instructions as `Relaxed`.
#[inline]
pub(crate) fn update(
    cell: &AtomicU64,
    interval: &AtomicU64,
    slack: u64,
    now: u64,
    cost: u64,
    admit: Admit,
) -> Result<Grant, Deny> {
    let mut tat = cell.load(Ordering::Acquire);
    loop {
        let params = Params::new_unchecked(interval.load(Ordering::Relaxed), slack);
        let grant = schedule::step(tat, now, cost, params, admit)?;
        // Nothing to store (a cost of 0)? Asked of `cost`, not of the new
        // word, so that a constant cost folds it away.
        if cost == 0 {
            return Ok(grant);
        }
        match cell.compare_exchange_weak(tat, grant.next, Ordering::Release, Ordering::Acquire) {
            Ok(_) => return Ok(grant),
            // Someone else moved the state (or a spurious failure): decide
            // again on the word that is there now.
            Err(actual) => tat = actual,
        }
    }
}

/// The atomic store: `tat` padded to its own cache line, the interval beside.
pub(crate) struct AtomicState {
    tat: CachePadded<AtomicU64>,
    interval: AtomicU64,
    slack: u64,
}

impl Store for AtomicState {
    fn new(tat: u64, params: Params) -> Self {
        AtomicState {
            tat: CachePadded::new(AtomicU64::new(tat)),
            interval: AtomicU64::new(params.interval()),
            slack: params.slack(),
        }
    }

    #[inline]
    fn update(&self, now: u64, cost: u64, admit: Admit) -> Result<Grant, Deny> {
        update(&self.tat, &self.interval, self.slack, now, cost, admit)
    }

    fn peek(&self) -> (u64, Params) {
        // `tat` first, as in `update`: the interval read is then at least
        // the one that paced it.
        let tat = self.tat.load(Ordering::Acquire);
        let params = Params::new_unchecked(self.interval.load(Ordering::Relaxed), self.slack);
        (tat, params)
    }

    fn set_params(&self, params: Params) {
        let old = Params::new_unchecked(self.interval.load(Ordering::Relaxed), self.slack);
        // Rebase first, publish the interval after: until the store, every
        // step books at the old interval, so every `tat` this loop reads was
        // booked at it (see `update`'s memory ordering) and is rebased once.
        // A step that reads the rebased word and the old interval books one
        // more slot at the old spacing: paced by one rate or the other.
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let next = schedule::rebase(tat, old, params);
            if next == tat {
                break;
            }
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => tat = actual,
            }
        }
        self.interval.store(params.interval(), Ordering::Relaxed);
    }

    fn give_back(&self, grant: Grant) -> bool {
        self.tat
            .compare_exchange(grant.next, grant.prev, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

/// A lock-free pacing limiter: `take()` before each unit of work returns when
/// that unit may go, so units leave at a steady rate with a bounded burst.
///
/// Its state is one cache-line-padded `AtomicU64` updated by a CAS loop: load,
/// decide, `compare_exchange`, and on a lost race decide again on the word
/// that won, so no update is lost and no slot is handed out twice. The
/// semantics are
/// uber-go/ratelimit's, plus a non-blocking [`try_take`](Self::try_take), a
/// bounded wait ([`take_timeout`](Self::take_timeout)), weighted costs, a
/// question that consumes nothing ([`can_take`](Self::can_take)) and live
/// rate changes ([`set_rate`](Self::set_rate)).
///
/// ```
/// use paceline::{AtomicLimiter, Rate};
///
/// let limiter = AtomicLimiter::new(Rate::per_second(1000));
/// let start = std::time::Instant::now();
/// for _ in 0..11 {
///     limiter.take(); // the first 11 at 1 ms spacing: ~10 ms in all
/// }
/// assert!(start.elapsed() >= std::time::Duration::from_millis(10));
/// ```
///
/// Share it between threads by reference or in an `Arc`; it is `Send + Sync`.
///
/// # Memory ordering
/// A limiter orders permits, not memory: `take` returning is not a
/// synchronization point with any other thread's `take`.
pub struct AtomicLimiter<C: Clock = DefaultClock> {
    core: Core<AtomicState, C>,
}

impl AtomicLimiter {
    /// A limiter at `rate` with uber's default slack of 10, on the
    /// [`DefaultClock`], waiting by sleeping.
    ///
    /// # Panics
    /// If ten intervals of `rate` exceed 146 years (an interval over about
    /// 14 years); [`builder`](Self::builder) reports that as an error.
    pub fn new(rate: Rate) -> AtomicLimiter {
        match Self::builder(rate).build() {
            Ok(limiter) => limiter,
            Err(e) => panic!("{e}"),
        }
    }

    /// A builder for a limiter at `rate`, to set its slack, clock, wait
    /// strategy or initial credit.
    ///
    /// ```
    /// use paceline::{AtomicLimiter, ManualClock, Rate, Wait};
    ///
    /// let limiter = AtomicLimiter::builder("500/s".parse()?)
    ///     .slack(0)                 // uber's WithoutSlack
    ///     .wait(Wait::PRECISE)      // sleep, then spin the last 150 µs
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(rate: Rate) -> Builder<AtomicLimiter> {
        Builder::with_default_clock(rate, DefaultClock::new)
    }
}

impl<C: Clock> AtomicLimiter<C> {
    pub(crate) fn from_config(config: Config<C>) -> Result<Self, BuildError> {
        Ok(AtomicLimiter {
            core: Core::new(config)?,
        })
    }
}

crate::limiter::impl_methods!(AtomicLimiter);

impl<C: Clock> fmt::Debug for AtomicLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AtomicLimiter")
            .field("rate", &self.rate())
            .field("slack", &self.slack())
            .field("available", &self.available())
            .finish()
    }
}
