//! [`Pacer`]: the one in-process limiter type, over a [`Store`]. It reads the
//! clock once, runs the step in its store, maps a refusal to a
//! [`Error`], and waits for the slot in `wait`.
//! [`AtomicLimiter`] and [`MutexLimiter`] are it over the two stores.

use std::fmt;
use std::time::Duration;

use crate::clock::{Clock, DefaultClock};
use crate::limiter::take::{State, Taken, Within};
use crate::model::schedule::{self, Deny, Params, ORIGIN};
use crate::observe::stats::{Counting, Meter, Stats};
use crate::primitive::{lock, AtomicU64, Mutex, Ordering};
use crate::store::{AtomicStore, MutexStore, Store, WarmStore};
use crate::values::error::{BuildError, Delay, Error};
use crate::values::limit::Limit;
use crate::values::rate::Rate;
use crate::values::slack::Slack;
use crate::wait::{Ask, Wait};

#[cfg(feature = "tokio")]
mod async_wait;
mod reserve;

/// A lock-free pacing limiter: `take()` before each unit of work returns when
/// that unit may go, so units leave at a steady rate with a bounded burst.
///
/// Its state is one cache-line-padded `AtomicU64` updated by a CAS loop:
/// load, decide, `compare_exchange`, and on a lost race decide again on the
/// word that won, so no update is lost and no slot is handed out twice. Its
/// methods are [`Pacer`]'s.
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
/// # Progress
/// Takes are lock-free, except during the few instructions of a
/// [`set_limit`](Pacer::set_limit) (or `set_rate`, `set_slack`): it holds
/// the state word while it rebases it and publishes the new parameters, so
/// that the change is exact whatever runs beside it, and a take that meets
/// it blocks on a lock the change holds for just those instructions. Takes
/// never touch a lock otherwise.
pub type AtomicLimiter<C = DefaultClock> = Pacer<AtomicStore, C>;

/// A pacing limiter with its state under a `Mutex`: the same methods and the
/// same decisions as [`AtomicLimiter`], which is faster under contention.
/// The lock is held only to decide, never while a caller waits.
///
/// ```
/// use paceline::{MutexLimiter, Rate};
///
/// let limiter = MutexLimiter::new(Rate::per_second(100));
/// assert!(limiter.try_take().is_ok());
/// assert!(limiter.try_take().is_err()); // no credit before the first permit
/// ```
pub type MutexLimiter<C = DefaultClock> = Pacer<MutexStore, C>;

/// A limiter with Guava's warm-up: made by `.warm_up(period)` on an
/// [`AtomicLimiter`] or [`MutexLimiter`] builder (see
/// [`Builder::warm_up`](crate::Builder::warm_up) and the model in
/// [`warm_up`](crate::model::warm_up)). The same methods; it keeps two words of
/// state (`tat` and the coldness) under a lock.
pub type WarmUpLimiter<C = DefaultClock> = Pacer<WarmStore, C>;

/// A limiter's configuration as a builder collects it. (`pub` only so the
/// sealed `Build` trait may name it; it cannot be named from outside.)
#[derive(Clone, Debug)]
pub struct Config {
    /// The rate.
    pub rate: Rate,
    /// The slack.
    pub slack: Slack,
    /// How takes wait.
    pub wait: Wait,
    /// Whether the limiter starts with its slack banked.
    pub full_credit: bool,
    /// The warm-up period, ns (0: none; only a `WarmUpLimiter`'s builder
    /// sets it).
    pub warm_up: u64,
    /// Whether and how it counts what it decides.
    pub(crate) counting: Counting,
}

/// The one in-process limiter: a [`Store`] of the state word, a [`Clock`],
/// and how to wait. Name it as [`AtomicLimiter`] (lock-free, the one to
/// use) or [`MutexLimiter`]; the async face is `paceline::tokio::AsyncLimiter`.
///
/// Every call reads the clock once and runs [`schedule::step`] on the store,
/// so both stores decide alike. The semantics are uber-go/ratelimit's, plus a
/// non-blocking [`try_take`](Self::try_take), a bounded wait
/// ([`take_timeout`](Self::take_timeout)), weighted costs, a question that
/// consumes nothing ([`can_take`](Self::can_take)) and live changes of rate
/// and slack ([`set_limit`](Self::set_limit)).
///
/// Share it between threads by reference or in an `Arc`; it is `Send + Sync`.
///
/// # What `take` returns
/// The time of the permit's slot on the limiter's clock, as a `Duration`
/// since the clock's origin (for the default clock, the limiter's
/// creation): when the permit was scheduled to go, which is when `take`
/// returned, give or take the wait's lateness. A permit that was free at
/// once returns the time of the call.
///
/// # Memory ordering
/// A limiter orders permits, not memory: `take` returning is not a
/// synchronization point with any other thread's `take`.
pub struct Pacer<S: Store, C: Clock = DefaultClock> {
    store: S,
    clock: C,
    wait: Wait,
    /// The rate and the slack as given, for introspection; the store holds
    /// their parameters. Also held by `undo`, so that no change lands
    /// between its check of `generation` and its CAS.
    limit: Mutex<Limit>,
    /// The generation: how many changes of the parameters, and resets, have
    /// completed. An undo of a booking decided before a change is refused
    /// (see [`Booking`](crate::store::Booking)).
    generation: AtomicU64,
    /// Its own number, which its bookings carry (a settle elsewhere fails).
    pub(crate) id: u64,
    /// The state the limiter was built with, which [`reset`](Self::reset)
    /// puts back: `FRESH`, or `FULL` with `full_credit`.
    start: u64,
    /// What it decided, if its builder asked ([`stats`](Self::stats)).
    meter: Meter,
    /// Wakes async takes waiting for their slot to come within the horizon
    /// when a change or a reset is in force, so they ask again
    /// (`src/wait/tokio.rs`). Never touched by a take.
    #[cfg(feature = "tokio")]
    pub(crate) changed: ::tokio::sync::Notify,
}

impl<S: Store, C: Clock> Pacer<S, C> {
    pub(crate) fn from_config(config: Config, clock: C) -> Result<Self, BuildError> {
        let params = params(config.rate, config.slack)?;
        if config.warm_up > crate::model::warm_up::MAX_WARM_UP {
            return Err(BuildError::WarmUpTooLong {
                warm_up: Duration::from_nanos(config.warm_up),
            });
        }
        let tat = if config.full_credit {
            schedule::FULL
        } else {
            schedule::FRESH
        };
        Ok(Pacer {
            store: S::new(tat, params, config.warm_up),
            clock,
            wait: config.wait,
            limit: Mutex::new(Limit::new(config.rate, config.slack)),
            generation: AtomicU64::new(0),
            id: crate::limiter::booked::owner(),
            start: tat,
            meter: Meter::new(&config.counting),
            #[cfg(feature = "tokio")]
            changed: ::tokio::sync::Notify::new(),
        })
    }

    /// Blocks until the next permit's slot, like uber's `Take()`, and
    /// answers what the take found: [`Taken::at`] is the slot's clock time
    /// (see [What `take` returns](Self#what-take-returns)). A permit
    /// covered by banked credit returns at once.
    ///
    /// It cannot fail, so it answers a [`Taken`], not a `Result`:
    /// `limiter.take();` before each unit of work. Never panics. How it
    /// waits is the builder's [`wait`](crate::Builder::wait) strategy.
    /// (Past about 438 years of clock time nothing can be scheduled, and it
    /// waits for good.)
    #[inline]
    pub fn take(&self) -> Taken {
        match self.within(1, Within::Any) {
            Ok(taken) => taken,
            // Only past the end of internal time: never admit there.
            Err(_) => Taken::new(self.block(self.now(), u64::MAX), self.state()),
        }
    }

    /// Blocks until `cost` permits are paid for, as one request ("pay
    /// first": the whole cost must fit before it proceeds, so a large
    /// request waits instead of overdrawing the burst). A cost above the
    /// burst (`slack + 1`) waits, even at rest, until its extra permits have
    /// accrued, and then goes as one unit. A cost of 0 returns at once and
    /// changes nothing.
    ///
    /// # Errors
    /// [`Error::CostTooLarge`] when `cost` intervals span over 146 years;
    /// nothing is stored.
    #[inline]
    pub fn take_n(&self, cost: u64) -> Result<Taken, Error> {
        self.within(cost, Within::Any)
    }

    /// Takes a permit if one is free now; never blocks. A refusal stores
    /// nothing.
    ///
    /// # Errors
    /// [`Error::RetryAfter`] with how long until it would be admitted.
    #[inline(always)]
    pub fn try_take(&self) -> Result<Taken, Error> {
        self.within(1, Within::Now)
    }

    /// Takes `cost` permits if they are free now; never blocks. A refusal
    /// stores nothing.
    ///
    /// # Errors
    /// [`Error::RetryAfter`]; [`Error::ExceedsBurst`] when
    /// `cost > slack + 1`, which no wait makes possible;
    /// [`Error::CostTooLarge`].
    #[inline]
    pub fn try_take_n(&self, cost: u64) -> Result<Taken, Error> {
        self.within(cost, Within::Now)
    }

    /// Takes a permit and waits for it only if its slot is at most
    /// `max_wait` away; otherwise fails at once, storing nothing: the queue
    /// ahead is longer than the caller may wait.
    ///
    /// # Errors
    /// [`Error::QueueFull`] with the wait it would have needed.
    #[inline]
    pub fn take_timeout(&self, max_wait: Duration) -> Result<Taken, Error> {
        self.within(1, Within::Max(max_wait))
    }

    /// [`take_timeout`](Self::take_timeout) for `cost` permits.
    ///
    /// # Errors
    /// [`Error::QueueFull`]; [`Error::ExceedsBurst`] when even a
    /// limiter at rest could not admit `cost` within `max_wait`;
    /// [`Error::CostTooLarge`].
    #[inline]
    pub fn take_n_timeout(&self, cost: u64, max_wait: Duration) -> Result<Taken, Error> {
        self.within(cost, Within::Max(max_wait))
    }

    /// The one take every call above is: `cost` permits, waiting as
    /// `within` allows. What it found is read from the state it stored.
    #[inline(always)]
    pub(crate) fn within(&self, cost: u64, within: Within) -> Result<Taken, Error> {
        let now = self.now();
        let admit = within.admit();
        // Not through `reserve`: its larger result would be built and
        // copied on the hottest path.
        let (grant, params, cold, warm_up) = match self.store.update_warm(now, cost, admit) {
            Ok(found) => found,
            // A try's refusal, built in place: made in the out-of-line
            // `refused`, it was written in pieces and read back whole, and
            // the load waited for the stores to drain (a store-forwarding
            // stall that doubled the refusal's cost).
            Err(Deny::Wait(wait)) if matches!(within, Within::Now) => {
                self.meter.refused();
                return Err(Error::RetryAfter(Delay(wait)));
            }
            Err(deny) => return Err(within.refusal(self.refused(deny, cost, admit, Ask::Answer))),
        };
        self.meter.admitted(cost, grant.slot.saturating_sub(now));
        let at = grant.slot.max(now);
        let taken = Taken::reading(at - ORIGIN, grant.next, params, cold, warm_up);
        // Only a slot ahead waits, out of line: a permit free at once calls
        // nothing, so nothing is spilled around a call and copied back.
        if !matches!(within, Within::Now) && grant.slot > now {
            return Ok(self.wait_for_slot(now, grant.slot, taken));
        }
        Ok(taken)
    }

    /// Whether [`try_take_n(cost)`](Self::try_take_n) would succeed now.
    /// Consumes nothing (another thread may take first). It cannot fail,
    /// so it answers a `bool`.
    pub fn can_take(&self, cost: u64) -> bool {
        let now = self.now();
        self.store.can_take(now, cost)
    }

    /// The state now: what a request could take, when the next permit is
    /// free, and the limit in force.
    pub fn state(&self) -> State {
        State::new(self.available(), self.next_free(), Some(self.limit()))
    }

    /// How many permits one request could take now without waiting, from 0
    /// to `slack + 1`.
    pub fn available(&self) -> u64 {
        let now = self.now();
        self.store.available(now)
    }

    /// How long until a permit is free (zero: one is free now).
    pub fn next_free(&self) -> Duration {
        let now = self.now();
        let (tat, params) = self.store.peek();
        Duration::from_nanos(schedule::next_free(tat, now, params))
    }

    /// Changes the rate and the slack from now on, as one unit. Safe to call
    /// while other threads take; each grant is paced by the old limit or
    /// the new, and once one grant is paced by the new, no grant reserved
    /// after it is paced by the old.
    ///
    /// - Slots already handed out stand; if the limiter is in debt (slots
    ///   booked ahead), the next is one new interval after the last of
    ///   them, but never sooner than the debt allows.
    /// - Banked credit is conserved in permits, never refilled: a speed-up
    ///   gives no more permits at once than the limiter held.
    ///
    /// ```
    /// use paceline::{AtomicLimiter, clock::ManualClock, Rate};
    ///
    /// let limiter = AtomicLimiter::builder(Rate::per_second(1))
    ///     .full_credit(true)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// limiter.try_take_n(10)?; // 10 of the 11 banked
    /// limiter.set_limit(Rate::per_second(1000), 10)?;
    /// assert_eq!(limiter.available(), 1); // the one left, not 11 more
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when the slack at the rate banks over
    /// 146 years; nothing changes then.
    pub fn set_limit(&self, rate: Rate, slack: impl Into<Slack>) -> Result<(), BuildError> {
        self.apply(Limit::new(rate, slack))
    }

    /// [`set_limit`](Self::set_limit) from a [`Limit`], as a configuration
    /// file states one (see [`Limits`](crate::Limits)).
    ///
    /// ```
    /// use paceline::{AtomicLimiter, Limit, Rate};
    /// use std::time::Duration;
    ///
    /// let limiter = AtomicLimiter::new(Rate::per_second(10));
    /// let limit = Limit::new(Rate::per_second(1000), Duration::from_millis(5));
    /// limiter.apply(limit)?;
    /// // The limit in force, its slack of 5 ms resolved to 5 permits.
    /// assert_eq!(limiter.limit(), Limit::new(limit.rate(), 5));
    /// # Ok::<(), paceline::BuildError>(())
    /// ```
    ///
    /// # Errors
    /// As [`set_limit`](Self::set_limit).
    pub fn apply(&self, limit: Limit) -> Result<(), BuildError> {
        self.change(|_| limit)
    }

    /// The limit in force, its slack in permits at the rate in force (a
    /// slack set as a time is resolved), as every kind's `limit_for`
    /// reports it: one read of the limit's lock.
    pub fn limit(&self) -> Limit {
        let limit = *lock(&self.limit);
        Limit::new(limit.rate(), limit.slack().permits_at(limit.rate()))
    }

    /// [`set_limit`](Self::set_limit) with the slack in force.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`]; the rate is then unchanged.
    pub fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        self.change(|limit| Limit::new(rate, limit.slack()))
    }

    /// [`set_limit`](Self::set_limit) with the rate in force.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`]; the slack is then unchanged.
    pub fn set_slack(&self, slack: impl Into<Slack>) -> Result<(), BuildError> {
        self.change(|limit| Limit::new(limit.rate(), slack))
    }

    /// Replaces the limit in force with `new(limit)`, all under the limit's
    /// lock: a `set_rate` racing a `set_slack` keeps the other's half.
    fn change(&self, new: impl FnOnce(Limit) -> Limit) -> Result<(), BuildError> {
        // The lock keeps `rate()`, `slack()` and the store changing together.
        let mut limit = lock(&self.limit);
        let new = new(*limit);
        new.paced(S::LIMITER)?;
        let params = params(new.rate(), new.slack())?;
        self.store.set_params(self.now(), params);
        *limit = new;
        // Counted after the rebase: see `book`.
        self.generation.fetch_add(1, Ordering::Release);
        #[cfg(feature = "tokio")]
        self.changed.notify_waiters();
        Ok(())
    }

    /// Puts the limiter back to how it was built: no credit (a fresh
    /// limiter's first permit goes at once, the next one interval later),
    /// or its whole burst if built with
    /// [`full_credit`](crate::Builder::full_credit); fully cold again for a
    /// [`WarmUpLimiter`]. The rate and slack in force stay.
    ///
    /// A reset is a deliberate refill: it forgets the slots handed out and
    /// the debt booked ahead, so a full-credit limiter admits its whole
    /// burst again at once, and the [window
    /// bound](crate::guide::model#slack-and-burst-the-window-bound) holds
    /// from the reset on, not across it. Slots already
    /// handed out stand (their callers still wait for them), and a
    /// cancelled async take booked before the reset gives nothing back.
    /// Safe to call while other threads take: each take lands wholly before
    /// the reset or wholly after.
    ///
    /// ```
    /// use paceline::{AtomicLimiter, clock::ManualClock, Rate};
    ///
    /// let limiter = AtomicLimiter::builder(Rate::per_second(1))
    ///     .slack(2)
    ///     .full_credit(true)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// limiter.try_take_n(3)?;
    /// assert!(limiter.try_take().is_err()); // the burst is spent
    /// limiter.reset();
    /// assert_eq!(limiter.available(), 3); // whole again, as when built
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset(&self) {
        // Under the limit's lock, as a change: serialized with changes and
        // with undos' check of the generation.
        let _limit = lock(&self.limit);
        self.store.reset(self.start);
        // Counted after the reset, as a change is after its rebase: a
        // booking that reads the new count was decided after it.
        self.generation.fetch_add(1, Ordering::Release);
        #[cfg(feature = "tokio")]
        self.changed.notify_waiters();
    }

    /// The rate in force.
    pub fn rate(&self) -> Rate {
        lock(&self.limit).rate()
    }

    /// The slack in force, in permits at the rate in force: the burst is
    /// `slack + 1`. (A [`Slack`] in time is resolved to whole permits.)
    pub fn slack(&self) -> u64 {
        self.limit().slack().min_permits()
    }

    /// What it decided since it was built (a [`reset`](Self::reset) does
    /// not zero the counts), or `None` unless its builder asked with
    /// [`stats(true)`](crate::Builder::stats). See [`Stats`].
    ///
    /// ```
    /// use paceline::{AtomicLimiter, Rate};
    ///
    /// let limiter = AtomicLimiter::builder(Rate::per_second(10)).stats(true).build()?;
    /// limiter.try_take()?;
    /// assert!(limiter.try_take().is_err());
    /// let stats = limiter.stats().unwrap();
    /// assert_eq!((stats.admitted, stats.refused), (1, 1));
    /// assert_eq!(AtomicLimiter::new(Rate::per_second(10)).stats(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> Option<Stats> {
        self.meter.read()
    }

    /// How the takes wait.
    pub fn wait_strategy(&self) -> Wait {
        self.wait
    }

    /// The limiter's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// Validated step parameters for `rate` with `slack`.
pub(crate) fn params(rate: Rate, slack: Slack) -> Result<Params, BuildError> {
    let slack = slack.permits_at(rate);
    Params::new(rate.interval_ns(), slack).ok_or(BuildError::SlackTooLarge {
        slack,
        interval: rate.interval(),
    })
}

impl<S: Store, C: Clock> fmt::Debug for Pacer<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(S::LIMITER)
            .field("rate", &self.rate())
            .field("slack", &self.slack())
            .field("available", &self.available())
            .finish()
    }
}
