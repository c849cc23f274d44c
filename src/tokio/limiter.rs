//! [`AsyncLimiter`]: the lock-free limiter with `async` takes.
//!
//! An async take is the blocking one split in two: decide with the same CAS
//! step as [`AtomicLimiter`](crate::AtomicLimiter) (the shared
//! [`Pacer`]), then wait on Tokio's timer in the crate's one async wait,
//! which also holds the give-back guard and the horizon that keeps the
//! capacity of cancelled takes (`src/wait/tokio.rs`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::tokio::sync::Mutex as Gate;

use crate::clock::Clock;
use crate::limiter::builder::{sealed::Build, Builder, ClockChoice};
use crate::limiter::pacer::{AtomicLimiter, Config, Pacer};
use crate::limiter::take::{Booked, State, Taken, Within};
use crate::model::schedule::ORIGIN;
use crate::observe::stats::{Counted, Stats};
use crate::values::error::{BuildError, Error};
use crate::values::rate::Rate;
use crate::wait::held::{self, Line};
use crate::wait::tokio::{self as wait, Reserved};
use crate::wait::Ask;

use super::TokioClock;

/// A lock-free pacing limiter for async code: `limiter.take().await` before
/// each unit of work completes when that unit may go, without blocking the
/// runtime's thread.
///
/// It makes exactly [`AtomicLimiter`](crate::AtomicLimiter)'s decisions (the
/// same state word and CAS step, uber-go/ratelimit's semantics) and differs
/// in how a caller waits: on Tokio's timer instead of by blocking. It has no
/// blocking `take` and does not implement [`Take`](crate::Take), so a
/// blocking wait cannot be called on it by accident.
///
/// Clones share one limiter (an `Arc` inside): clone it into each task.
/// (A handle rather than `Arc<AsyncLimiter>` because async code mostly
/// moves the limiter into `'static` tasks and streams, which then need no
/// wrapping at each use; the blocking limiters are shared by reference.)
///
/// ```compile_fail
/// use paceline::{tokio::AsyncLimiter, Rate, Take};
///
/// // No blocking wait on a runtime thread: it is not a `Take` ...
/// let blocking: &dyn Take = &AsyncLimiter::new(Rate::per_second(10));
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
/// With the default [`Wait::Sleep`](crate::Wait::Sleep) a waiter sleeps on Tokio's timer, which
/// has 1 ms granularity: permits due within one millisecond are released
/// together at its end (see the guide on [Tokio's timer granularity](crate::guide::waiting#tokios-timer-granularity)).
/// [`Wait::Precise { spin }`](crate::Wait::Precise) sleeps until `spin` before the
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
/// Another real-time clock ([`DefaultClock`](crate::clock::DefaultClock),
/// [`StdClock`](crate::clock::StdClock)) may be set with the builder; waits still
/// sleep on Tokio's timer, for as long as that clock says is left.
pub struct AsyncLimiter<C: Clock = TokioClock> {
    inner: Arc<Inner<C>>,
}

/// What the clones share: the limiter (whose changes wake the waiting
/// takes), the line unbounded takes wait in for their slot to come within
/// the horizon, and the cost promised to bounded takes held until then.
struct Inner<C: Clock> {
    limiter: AtomicLimiter<C>,
    gate: Gate<()>,
    line: Line,
}

impl AsyncLimiter {
    /// A limiter at `rate` with uber's default slack of 10, on the
    /// [`TokioClock`], waiting on Tokio's timer.
    ///
    /// # Panics
    /// If ten intervals of `rate` exceed 146 years (an interval over about
    /// 14 years); [`builder`](Self::builder) reports that as an error.
    pub fn new(rate: Rate) -> AsyncLimiter {
        Self::builder(rate)
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
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
    /// assert_eq!(limiter.limiter().slack(), 25);
    /// # Ok::<(), paceline::BuildError>(())
    /// ```
    pub fn builder(rate: Rate) -> Builder<AsyncLimiter> {
        Builder::new(rate, ClockChoice::Given(TokioClock::new()))
    }
}

impl<C: Clock> AsyncLimiter<C> {
    /// The limiter under this face: its settings and their changes
    /// (`set_limit`, `set_rate`, `set_slack`, `apply`, `reset`: waiting
    /// tasks wake and ask again once one is in force), its questions
    /// (`rate`, `slack`, `limit`, `available`, `next_free`, `stats`) and
    /// its clock. (Its blocking takes would block the runtime's thread:
    /// use this type's.)
    pub fn limiter(&self) -> &AtomicLimiter<C> {
        &self.inner.limiter
    }

    /// Waits until the next permit's slot, and answers what the take found
    /// ([`Taken::at`]: the clock time the slot was scheduled at, since the
    /// clock's origin). A permit covered by banked credit completes at the
    /// first poll. It cannot fail, so it answers a [`Taken`], not a
    /// `Result`: `limiter.take().await;` before each unit of work.
    ///
    /// The slot is reserved when the future is first polled.
    ///
    /// # Cancel safety
    /// Cancel safe: it books its slot only within 10 ms of it, and dropped
    /// after booking it gives the slot back while no one has booked since
    /// ([cancel safety](crate::guide::waiting#cancel-safety)). Prefer
    /// [`take_timeout`](Self::take_timeout) to a `timeout` around `take`:
    /// it is refused at once, booking nothing, when the queue is longer
    /// than you would wait.
    pub async fn take(&self) -> Taken {
        match self.within(1, Within::Any).await {
            Ok(taken) => taken,
            // Only past the end of internal time can a cost of 1 fail: wait
            // there for good rather than admit.
            Err(_) => {
                wait::sleep_until(self.limiter().clock(), u64::MAX).await;
                Taken::new(
                    Duration::from_nanos(u64::MAX - ORIGIN),
                    self.limiter().state(),
                )
            }
        }
    }

    /// Waits until `cost` permits are paid for, as one request ("pay first":
    /// the whole cost must fit before it proceeds). A cost of 0 completes at
    /// once and changes nothing.
    ///
    /// # Errors
    /// [`Error::CostTooLarge`] when `cost` intervals span over 146 years;
    /// nothing is stored.
    ///
    /// # Cancel safety
    /// As [`take`](Self::take), for the whole cost.
    pub async fn take_n(&self, cost: u64) -> Result<Taken, Error> {
        self.within(cost, Within::Any).await
    }

    /// Takes a permit and waits for it only if its slot is at most `max_wait`
    /// away; otherwise fails at once, storing nothing: the queue ahead is
    /// longer than the caller may wait. The queue counts the takes held
    /// before this one that have not booked yet (see [the
    /// line](crate::guide::waiting#the-10-ms-horizon)).
    ///
    /// # Errors
    /// [`Error::QueueFull`] with the wait it would have needed (also,
    /// rarely, after waiting: when takes that do not queue, an unbounded
    /// `take` or a `try_take`, have since booked so much ahead of it that
    /// its slot is now past `max_wait`).
    ///
    /// # Cancel safety
    /// Cancel safe: until it books it holds a place in line, which it
    /// leaves when dropped, costing those after it nothing; then as
    /// [`take`](Self::take) ([cancel safety](crate::guide::waiting#cancel-safety)).
    /// A refused call stored nothing.
    pub async fn take_timeout(&self, max_wait: Duration) -> Result<Taken, Error> {
        self.within(1, Within::Max(max_wait)).await
    }

    /// [`take_timeout`](Self::take_timeout) for `cost` permits.
    ///
    /// # Errors
    /// [`Error::QueueFull`]; [`Error::ExceedsBurst`] when even a
    /// limiter at rest could not admit `cost` within `max_wait`;
    /// [`Error::CostTooLarge`].
    ///
    /// # Cancel safety
    /// As [`take`](Self::take).
    pub async fn take_n_timeout(&self, cost: u64, max_wait: Duration) -> Result<Taken, Error> {
        self.within(cost, Within::Max(max_wait)).await
    }

    /// Takes a permit if one is free now; never waits (it completes at its
    /// first poll). A refusal stores nothing.
    ///
    /// # Errors
    /// [`Error::RetryAfter`] with how long until it would be admitted.
    pub async fn try_take(&self) -> Result<Taken, Error> {
        self.limiter().try_take()
    }

    /// Takes `cost` permits if they are free now; never waits. A refusal
    /// stores nothing.
    ///
    /// # Errors
    /// [`Error::RetryAfter`]; [`Error::ExceedsBurst`] when
    /// `cost > slack + 1`, which no wait makes possible;
    /// [`Error::CostTooLarge`].
    pub async fn try_take_n(&self, cost: u64) -> Result<Taken, Error> {
        self.limiter().try_take_n(cost)
    }

    /// Whether [`try_take_n(cost)`](Self::try_take_n) would succeed now.
    /// Consumes nothing (another task may take first); never waits.
    pub async fn can_take(&self, cost: u64) -> bool {
        self.limiter().can_take(cost)
    }

    /// The state now; see [`Pacer::state`]. Never waits.
    pub async fn state(&self) -> State {
        self.limiter().state()
    }

    /// Takes `cost` permits, waiting as `within` allows, as an estimate to
    /// [`settle`](Self::settle) once the actual cost is known
    /// ([`AsyncTake::book`](crate::AsyncTake::book)).
    ///
    /// # Errors
    /// As [`take_n`](Self::take_n), [`try_take_n`](Self::try_take_n) or
    /// [`take_n_timeout`](Self::take_n_timeout), as `within` says.
    ///
    /// # Cancel safety
    /// As [`take`](Self::take): dropped while it waits, it gives its slot
    /// back.
    pub async fn book(&self, cost: u64, within: Within) -> Result<Booked, Error> {
        let reserved = self.reserve(cost, within).await?;
        let taken = Taken::new(reserved.went_at, self.limiter().state());
        Ok(Booked::new(
            taken,
            cost,
            reserved.booking,
            self.limiter().id,
        ))
    }

    /// Settles `booked` with its `actual` cost: [`Pacer::settle`]; never
    /// waits.
    ///
    /// # Errors
    /// [`Error::Config`] for a booking this limiter did not make.
    pub async fn settle(&self, booked: Booked, actual: u64) -> Result<(), Error> {
        self.limiter().settle(booked, actual)
    }

    /// The one take every call above is: `cost` permits, waiting as
    /// `within` allows, on Tokio's timer.
    pub(crate) async fn within(&self, cost: u64, within: Within) -> Result<Taken, Error> {
        if let Within::Now = within {
            return self.limiter().within(cost, within);
        }
        let reserved = self.reserve(cost, within).await?;
        Ok(Taken::new(reserved.went_at, self.limiter().state()))
    }

    /// Books `cost` permits and waits for their slot, as `within` allows.
    async fn reserve(&self, cost: u64, within: Within) -> Result<Reserved, Error> {
        let inner = &*self.inner;
        match within {
            Within::Now => {
                let booking = inner.limiter.book_slot(cost, within.admit(), Ask::Answer);
                booking.map(Reserved::booked)
            }
            Within::Any => {
                let (gate, changed) = (Some(&inner.gate), Some(&inner.limiter.changed));
                wait::take(&inner.limiter, cost, gate, changed).await
            }
            Within::Max(max_wait) => {
                let changed = &inner.limiter.changed;
                held::take_held(&inner.limiter, cost, max_wait, &inner.line, 0, changed)
                    .await
                    .map_err(|e| within.refusal(e))
            }
        }
    }
}

impl<C: Clock> Clone for AsyncLimiter<C> {
    /// Another handle on the same limiter: both take from one schedule.
    fn clone(&self) -> Self {
        AsyncLimiter {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C: Clock> Counted for AsyncLimiter<C> {
    fn stats(&self) -> Option<Stats> {
        self.limiter().stats()
    }
}

impl<C: Clock> fmt::Debug for AsyncLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AsyncLimiter").field(self.limiter()).finish()
    }
}

impl<C: Clock> Build for AsyncLimiter<C> {
    type Clock = C;
    type With<C2: Clock> = AsyncLimiter<C2>;
    fn build(config: Config, clock: C) -> Result<Self, BuildError> {
        Ok(AsyncLimiter::from(Pacer::from_config(config, clock)?))
    }
}

impl<C: Clock> From<AtomicLimiter<C>> for AsyncLimiter<C> {
    /// The async face of `limiter`: its takes wait on Tokio's timer. (Build
    /// it on a [`TokioClock`] for paused-time tests.)
    fn from(limiter: AtomicLimiter<C>) -> Self {
        AsyncLimiter {
            inner: Arc::new(Inner {
                limiter,
                gate: Gate::new(()),
                line: Line::default(),
            }),
        }
    }
}
