//! [`AsyncLimiter`]: the lock-free limiter with `async` takes.
//!
//! # Implementation details
//!
//! An async take is the blocking one split in two: reserve the slot with the
//! same CAS step as [`AtomicLimiter`](crate::AtomicLimiter) (one `update` on
//! the shared [`Core`]), then sleep on Tokio's timer until the clock reads
//! the slot. Each waiter owns its slot from the moment it reserves, so
//! waiters are released in reservation order (to the timer's millisecond),
//! none retries and none wakes another.
//!
//! A waiter dropped before its slot holds a [`GiveBack`] guard that runs the
//! store's `give_back`: a CAS from the grant's `next` back to its `prev`. It
//! succeeds only while the state is still exactly `next`, that is when no
//! one has reserved since (or everyone who did has given back in turn); then
//! the limiter is as if the dropped call had never been made. A rate change
//! in between also keeps the slot spent: its rebase can make the state repeat
//! a word, so "still exactly `next`" would no longer prove that no one
//! reserved since. Otherwise the
//! CAS fails and the slot stays spent: later waiters keep theirs, and the
//! schedule never hands out a slot twice.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::tokio::time::Instant;

use crate::atomic::AtomicState;
use crate::builder::{sealed::Build, Builder};
use crate::clock::{Clock, Wait};
use crate::error::{BuildError, TakeError};
use crate::pacer::{nanos, Config, Core, Reservation};
use crate::rate::Rate;
use crate::schedule::{Admit, ORIGIN};

use super::TokioClock;

/// The longest single timer sleep (one day). A longer wait sleeps again, so a
/// slot years away never asks Tokio for a deadline it cannot represent.
const MAX_SLEEP_NS: u64 = 86_400 * 1_000_000_000;

/// A lock-free pacing limiter for async code: `limiter.take().await` before
/// each unit of work completes when that unit may go, without blocking the
/// runtime's thread.
///
/// It makes exactly [`AtomicLimiter`](crate::AtomicLimiter)'s decisions (the
/// same state word and CAS step, uber-go/ratelimit's semantics) and differs
/// in how a caller waits: on Tokio's timer instead of by blocking. It has no
/// blocking `take` and does not implement [`Limiter`](crate::Limiter), so a
/// blocking wait cannot be called on it by accident.
///
/// Clones share one limiter (an `Arc` inside): clone it into each task.
/// (A handle rather than `Arc<AsyncLimiter>` because async code mostly
/// moves the limiter into `'static` tasks and streams, which then need no
/// wrapping at each use; the blocking limiters are shared by reference.)
///
/// ```compile_fail
/// use paceline::{tokio::AsyncLimiter, Limiter, Rate};
///
/// // No blocking wait on a runtime thread: it is not a `Limiter` ...
/// let blocking: &dyn Limiter = &AsyncLimiter::new(Rate::per_second(10));
/// ```
///
/// ```compile_fail
/// use paceline::{tokio::AsyncLimiter, Rate};
///
/// // ... and its `take` is a future, not a `Duration`.
/// let slot: std::time::Duration = AsyncLimiter::new(Rate::per_second(10)).take();
/// ```
///
/// ```
/// use paceline::tokio::AsyncLimiter;
/// use paceline::Rate;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let limiter = AsyncLimiter::new(Rate::per_second(100));
/// let tasks: Vec<_> = (0..4)
///     .map(|_| {
///         let limiter = limiter.clone();
///         tokio::spawn(async move {
///             for _ in 0..25 {
///                 limiter.take().await; // 100 permits in all, 10 ms apart
///                 // ... one request ...
///             }
///         })
///     })
///     .collect();
/// for task in tasks {
///     task.await.unwrap();
/// }
/// # }
/// ```
///
/// # Waiting
///
/// With the default [`Wait::Sleep`] a waiter sleeps on Tokio's timer, which
/// has 1 ms granularity: permits due within one millisecond are released
/// together at its end (see the [module docs](super#timer-granularity)).
/// [`Wait::Precise { spin }`](Wait::Precise) sleeps until `spin` before the
/// slot and then yields to the runtime in a loop until the slot
/// (microsecond precision at the price of CPU; use a `spin` of at least
/// 2 ms, [`PRECISE`](super::PRECISE)).
///
/// # Panics
///
/// Only as any Tokio timer does: a take that has to wait sleeps on Tokio's
/// timer, which panics outside a Tokio runtime or in one built without its
/// time driver (`enable_time` or `enable_all`). Nothing else panics.
///
/// # Memory ordering
///
/// A limiter orders permits, not memory: a take completing is not a
/// synchronization point with any other task's take.
///
/// # Clocks
///
/// The default clock, [`TokioClock`], follows Tokio's paused time in tests.
/// Another real-time clock ([`DefaultClock`](crate::DefaultClock),
/// [`StdClock`](crate::StdClock)) may be set with the builder; waits still
/// sleep on Tokio's timer, for as long as that clock says is left.
pub struct AsyncLimiter<C: Clock = TokioClock> {
    core: Arc<Core<AtomicState, C>>,
}

impl AsyncLimiter {
    /// A limiter at `rate` with uber's default slack of 10, on the
    /// [`TokioClock`], waiting on Tokio's timer.
    ///
    /// # Panics
    /// If ten intervals of `rate` exceed 146 years (an interval over about
    /// 14 years); [`builder`](Self::builder) reports that as an error.
    pub fn new(rate: Rate) -> AsyncLimiter {
        match Self::builder(rate).build() {
            Ok(limiter) => limiter,
            Err(e) => panic!("{e}"),
        }
    }

    /// A builder for a limiter at `rate`, to set its slack, clock, wait
    /// strategy or initial credit; the same [`Builder`] as
    /// [`AtomicLimiter::builder`](crate::AtomicLimiter::builder).
    ///
    /// ```
    /// use paceline::tokio::AsyncLimiter;
    /// use paceline::Rate;
    ///
    /// let limiter = AsyncLimiter::builder(Rate::per_second(5_000))
    ///     .slack(25) // bank 5 ms: covers the timer's ~1 ms lateness
    ///     .build()?;
    /// assert_eq!(limiter.slack(), 25);
    /// # Ok::<(), paceline::BuildError>(())
    /// ```
    pub fn builder(rate: Rate) -> Builder<AsyncLimiter> {
        Builder::new(rate, TokioClock::new())
    }
}

impl<C: Clock> AsyncLimiter<C> {
    pub(crate) fn from_config(config: Config<C>) -> Result<Self, BuildError> {
        Ok(AsyncLimiter {
            core: Arc::new(Core::new(config)?),
        })
    }

    /// Waits until the next permit's slot, and returns the clock time it was
    /// scheduled at (since the clock's origin). A permit covered by banked
    /// credit completes at the first poll.
    ///
    /// The slot is reserved when the future is first polled.
    ///
    /// # Cancel safety
    /// Dropping the future before its slot gives the slot back if no one
    /// has reserved since (the next caller gets it, as if this call had never
    /// been made) and the rate has not changed since; otherwise the slot is
    /// spent, and later waiters keep theirs. Once the slot has passed, the permit counts as taken.
    pub async fn take(&self) -> Duration {
        match self.core.reserve_cancellable(1, Admit::Always) {
            Ok((now, reservation)) => wait_for(&self.core, now, reservation).await,
            // Unreachable: a cost of 1 always fits (interval <= MAX_SPAN).
            Err(_) => Duration::from_nanos(self.core.clock.now()),
        }
    }

    /// Waits until `cost` permits are paid for, as one request ("pay first":
    /// the whole cost must fit before it proceeds). A cost of 0 completes at
    /// once and changes nothing.
    ///
    /// # Errors
    /// [`TakeError::CostTooLarge`] when `cost` intervals span over 146 years;
    /// nothing is stored.
    ///
    /// # Cancel safety
    /// As [`take`](Self::take): dropped before its slot, the whole cost is
    /// given back if no one has reserved since; otherwise it is spent.
    pub async fn take_n(&self, cost: u64) -> Result<Duration, TakeError> {
        let (now, reservation) = self.core.reserve_cancellable(cost, Admit::Always)?;
        Ok(wait_for(&self.core, now, reservation).await)
    }

    /// Takes a permit and waits for it only if its slot is at most `max_wait`
    /// away; otherwise fails at once, storing nothing: the queue ahead is
    /// longer than the caller may wait.
    ///
    /// # Errors
    /// [`TakeError::QueueFull`] with the wait it would have needed.
    ///
    /// # Cancel safety
    /// As [`take`](Self::take): dropped before its slot, the slot is given
    /// back if no one has reserved since; otherwise it is spent. A refused
    /// call stored nothing, so there is nothing to give back.
    pub async fn take_timeout(&self, max_wait: Duration) -> Result<Duration, TakeError> {
        self.take_n_timeout(1, max_wait).await
    }

    /// [`take_timeout`](Self::take_timeout) for `cost` permits.
    ///
    /// # Errors
    /// [`TakeError::QueueFull`]; [`TakeError::ExceedsBurst`] when even a
    /// limiter at rest could not admit `cost` within `max_wait`;
    /// [`TakeError::CostTooLarge`].
    ///
    /// # Cancel safety
    /// As [`take`](Self::take).
    pub async fn take_n_timeout(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, TakeError> {
        let (now, reservation) = self
            .core
            .reserve_cancellable(cost, Admit::Within(nanos(max_wait)))?;
        Ok(wait_for(&self.core, now, reservation).await)
    }

    /// Takes a permit if one is free now; never waits. A refusal stores
    /// nothing.
    ///
    /// # Errors
    /// [`TakeError::RetryAfter`] with how long until it would be admitted.
    #[inline]
    pub fn try_take(&self) -> Result<(), TakeError> {
        self.core.try_take_n(1)
    }

    /// Takes `cost` permits if they are free now; never waits. A refusal
    /// stores nothing.
    ///
    /// # Errors
    /// [`TakeError::RetryAfter`]; [`TakeError::ExceedsBurst`] when
    /// `cost > slack + 1`, which no wait makes possible;
    /// [`TakeError::CostTooLarge`].
    #[inline]
    pub fn try_take_n(&self, cost: u64) -> Result<(), TakeError> {
        self.core.try_take_n(cost)
    }

    /// Whether [`try_take_n(cost)`](Self::try_take_n) would succeed now.
    /// Consumes nothing (another task may take first).
    pub fn can_take(&self, cost: u64) -> bool {
        self.core.can_take(cost)
    }

    /// Changes the rate from now on: slots already handed out (including
    /// those tasks are waiting for) stand, later requests are spaced by the
    /// new interval.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when the slack at the new rate banks
    /// over 146 years; the rate is then unchanged.
    pub fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        self.core.set_rate(rate)
    }

    /// The rate in force.
    pub fn rate(&self) -> Rate {
        self.core.rate()
    }

    /// The slack, in permits: the burst is `slack + 1`.
    pub fn slack(&self) -> u64 {
        self.core.slack()
    }

    /// How a waiter waits: [`Wait::Sleep`] on Tokio's timer, or
    /// [`Wait::Precise`].
    pub fn wait_strategy(&self) -> Wait {
        self.core.wait_strategy()
    }

    /// How many permits one request could take now without waiting, from 0
    /// to `slack + 1`.
    pub fn available(&self) -> u64 {
        self.core.available()
    }

    /// How long until a permit is free (zero: one is free now).
    pub fn next_free(&self) -> Duration {
        self.core.next_free()
    }

    /// The limiter's clock.
    pub fn clock(&self) -> &C {
        &self.core.clock
    }

    /// The shared state, for the stream adapter.
    pub(super) fn core(&self) -> &Arc<Core<AtomicState, C>> {
        &self.core
    }
}

impl<C: Clock> Clone for AsyncLimiter<C> {
    /// Another handle on the same limiter: both take from one schedule.
    fn clone(&self) -> Self {
        AsyncLimiter {
            core: Arc::clone(&self.core),
        }
    }
}

impl<C: Clock> fmt::Debug for AsyncLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncLimiter")
            .field("rate", &self.rate())
            .field("slack", &self.slack())
            .field("available", &self.available())
            .finish()
    }
}

impl<C: Clock> Build for AsyncLimiter<C> {
    type Clock = C;
    type With<C2: Clock> = AsyncLimiter<C2>;
    fn build(config: Config<C>) -> Result<Self, BuildError> {
        AsyncLimiter::from_config(config)
    }
}

/// Waits until `reservation`'s slot (reserved at internal time `now`) and
/// returns its clock time. Dropped before the slot, gives the slot back if no
/// one has reserved (and the rate has not changed) since.
pub(super) async fn wait_for<C: Clock>(
    core: &Core<AtomicState, C>,
    now: u64,
    reservation: Reservation,
) -> Duration {
    let slot = reservation.grant.slot;
    if slot > now {
        let mut guard = GiveBack {
            core,
            reservation: Some(reservation),
        };
        match core.wait_strategy() {
            Wait::Sleep => sleep_to(core, slot).await,
            Wait::Precise { spin } => {
                sleep_to(core, slot.saturating_sub(nanos(spin))).await;
                spin_to(core, slot).await;
            }
        }
        // The slot is reached: the permit is spent.
        guard.reservation = None;
    }
    Duration::from_nanos(slot.max(now) - ORIGIN)
}

/// Sleeps on Tokio's timer until the clock reads at least `target`
/// (internal time). Never returns early; returns late by the timer's
/// lateness (up to about a millisecond and a half in real time, none under
/// paused time when the clock is a [`TokioClock`]).
async fn sleep_to<C: Clock>(core: &Core<AtomicState, C>, target: u64) {
    loop {
        let now = core.now();
        if now >= target {
            return;
        }
        let left = Duration::from_nanos((target - now).min(MAX_SLEEP_NS));
        ::tokio::time::sleep_until(Instant::now() + left).await;
    }
}

/// Yields to the runtime in a loop until the clock reads at least `target`.
async fn spin_to<C: Clock>(core: &Core<AtomicState, C>, target: u64) {
    let mut last = core.now();
    while last < target {
        ::tokio::task::yield_now().await;
        let now = core.now();
        if now == last {
            // The clock did not move across a yield: Tokio's time is paused
            // (or the clock is manual). Spinning would never end, and the
            // timer is exact there.
            return sleep_to(core, target).await;
        }
        last = now;
    }
}

/// Gives a reserved slot back if dropped before it (see the module docs).
struct GiveBack<'a, C: Clock> {
    core: &'a Core<AtomicState, C>,
    /// `None` once the slot is reached.
    reservation: Option<Reservation>,
}

impl<C: Clock> Drop for GiveBack<'_, C> {
    fn drop(&mut self) {
        if let Some(reservation) = self.reservation {
            if self.core.now() < reservation.grant.slot {
                // Fails, leaving the slot spent, if anyone reserved since
                // or the rate changed since.
                self.core.give_back(reservation);
            }
        }
    }
}
