//! What every in-process limiter does around its store: read the clock once,
//! run the step against the state, turn a refusal into a [`TakeError`], and
//! wait for the slot. [`AtomicLimiter`](crate::AtomicLimiter) and
//! [`MutexLimiter`](crate::MutexLimiter) are this over two [`Store`]s.

use std::time::Duration;

use crate::clock::{Clock, Wait};
use crate::error::{BuildError, TakeError};
use crate::primitive::{lock, AtomicU64, Mutex, Ordering};
use crate::rate::Rate;
use crate::schedule::{self, Admit, Deny, Grant, Params, ORIGIN};

/// Where the state word lives, and how it is updated atomically.
pub(crate) trait Store {
    /// A store holding `tat` with `params`.
    fn new(tat: u64, params: Params) -> Self;

    /// Runs [`schedule::step`] on the current state and stores its result
    /// atomically with respect to every other update.
    fn update(&self, now: u64, cost: u64, admit: Admit) -> Result<Grant, Deny>;

    /// Reads the state and the configuration it is paced by, consistently
    /// enough for a question that consumes nothing.
    fn peek(&self) -> (u64, Params);

    /// Sets the interval later steps use, and [rebases](schedule::rebase)
    /// the state so the next slot is one new interval after the last one.
    /// Calls are serialized by the caller (`Core::set_rate`'s lock).
    fn set_params(&self, params: Params);

    /// Puts `grant` back (state `grant.next` → `grant.prev`) if no one has
    /// updated the state since; `true` when it did.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // see `Core::give_back`
    fn give_back(&self, grant: Grant) -> bool;
}

/// A limiter's configuration as a builder collects it. (`pub` only so the
/// sealed `Build` trait may name it; this module is private.)
#[derive(Clone, Debug)]
pub struct Config<C> {
    /// The rate.
    pub rate: Rate,
    /// The slack, in permits.
    pub slack: u64,
    /// How blocking calls wait.
    pub wait: Wait,
    /// Whether the limiter starts with its slack banked.
    pub full_credit: bool,
    /// The clock.
    pub clock: C,
}

/// uber-go/ratelimit's default slack: ten permits may be banked.
pub(crate) const DEFAULT_SLACK: u64 = 10;

/// The limiter proper: a store, a clock, and how to wait.
pub(crate) struct Core<S, C> {
    pub(crate) store: S,
    pub(crate) clock: C,
    wait: Wait,
    slack: u64,
    /// The rate as given, for introspection; the store holds its interval.
    /// Also held by `give_back`, so that no rate change lands between its
    /// check of `rate_changes` and its CAS.
    rate: Mutex<Rate>,
    /// How many rate changes have completed. A give-back of a reservation
    /// decided before a rate change is refused: the rebase may have moved the
    /// state to a word that later takes bring back to the reservation's
    /// `next` (ABA), and undoing it then would hand a slot out twice.
    rate_changes: AtomicU64,
}

/// A reserved slot that may be given back ([`Core::give_back`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// The grant.
    pub grant: Grant,
    /// `Core::rate_changes` read before the grant was decided.
    rate_changes: u64,
}

impl<S: Store, C: Clock> Core<S, C> {
    pub(crate) fn new(config: Config<C>) -> Result<Self, BuildError> {
        let params = params(config.rate, config.slack)?;
        let tat = if config.full_credit {
            schedule::FULL
        } else {
            schedule::FRESH
        };
        Ok(Core {
            store: S::new(tat, params),
            clock: config.clock,
            wait: config.wait,
            slack: config.slack,
            rate: Mutex::new(config.rate),
            rate_changes: AtomicU64::new(0),
        })
    }

    /// The clock's reading in internal time.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.clock.now().saturating_add(ORIGIN)
    }

    /// Reserves a slot for `cost` permits if `admit` allows, without waiting.
    #[inline]
    pub(crate) fn reserve(&self, cost: u64, admit: Admit) -> Result<(u64, Grant), TakeError> {
        let now = self.now();
        match self.store.update(now, cost, admit) {
            Ok(grant) => Ok((now, grant)),
            Err(deny) => Err(self.error(deny, cost, admit)),
        }
    }

    /// [`reserve`](Self::reserve), keeping what [`give_back`](Self::give_back)
    /// needs to undo it.
    #[cfg_attr(not(any(feature = "tokio", paceline_loom)), allow(dead_code))]
    #[inline]
    pub(crate) fn reserve_cancellable(
        &self,
        cost: u64,
        admit: Admit,
    ) -> Result<(u64, Reservation), TakeError> {
        // Read before the step. `set_rate` counts a change only after its
        // rebase (release), so a reservation that reads the new count was
        // decided on the rebased state; one that reads the old count may
        // have been decided either side, and its give-back is refused if the
        // count moved (conservative: the slot stays spent).
        let rate_changes = self.rate_changes.load(Ordering::Acquire);
        let (now, grant) = self.reserve(cost, admit)?;
        Ok((
            now,
            Reservation {
                grant,
                rate_changes,
            },
        ))
    }

    /// Undoes a reservation if no one has reserved since and the rate has
    /// not changed since, so the next request gets its slot; otherwise the
    /// slot stays spent and the schedule is unchanged. `true` when it was
    /// undone. For async waiters dropped before their slot.
    #[cfg_attr(not(any(feature = "tokio", paceline_loom)), allow(dead_code))]
    pub(crate) fn give_back(&self, reservation: Reservation) -> bool {
        // Under the lock `set_rate` holds: no rebase between check and CAS.
        let _rate = lock(&self.rate);
        if self.rate_changes.load(Ordering::Relaxed) != reservation.rate_changes {
            return false;
        }
        self.store.give_back(reservation.grant)
    }

    #[cold]
    fn error(&self, deny: Deny, cost: u64, admit: Admit) -> TakeError {
        error(deny, cost, admit, self.slack)
    }

    /// Waits until `slot` and returns the clock time the permit went at.
    #[inline]
    pub(crate) fn wait_for(&self, now: u64, slot: u64) -> Duration {
        wait_for(self.wait, &self.clock, now, slot)
    }

    #[inline]
    pub(crate) fn take(&self) -> Duration {
        let now = self.now();
        match self.store.update(now, 1, Admit::Always) {
            Ok(grant) => self.wait_for(now, grant.slot),
            // Unreachable: a cost of 1 always fits (interval <= MAX_SPAN).
            Err(_) => Duration::from_nanos(now - ORIGIN),
        }
    }

    pub(crate) fn take_n(&self, cost: u64) -> Result<Duration, TakeError> {
        let (now, grant) = self.reserve(cost, Admit::Always)?;
        Ok(self.wait_for(now, grant.slot))
    }

    #[inline]
    pub(crate) fn try_take_n(&self, cost: u64) -> Result<(), TakeError> {
        self.reserve(cost, Admit::Within(0)).map(drop)
    }

    pub(crate) fn take_n_timeout(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, TakeError> {
        let (now, grant) = self
            .reserve(cost, Admit::Within(nanos(max_wait)))
            .map_err(|e| timed_out(e, max_wait))?;
        Ok(self.wait_for(now, grant.slot))
    }

    pub(crate) fn can_take(&self, cost: u64) -> bool {
        let now = self.now();
        let (tat, params) = self.store.peek();
        schedule::step(tat, now, cost, params, Admit::Within(0)).is_ok()
    }

    pub(crate) fn available(&self) -> u64 {
        let now = self.now();
        let (tat, params) = self.store.peek();
        schedule::available(tat, now, params)
    }

    pub(crate) fn next_free(&self) -> Duration {
        let now = self.now();
        let (tat, params) = self.store.peek();
        Duration::from_nanos(schedule::next_free(tat, now, params))
    }

    pub(crate) fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        let params = params(rate, self.slack)?;
        // The lock keeps `rate()` and the store's interval changing together.
        let mut current = lock(&self.rate);
        self.store.set_params(params);
        *current = rate;
        // Counted after the rebase: see `reserve_cancellable`.
        self.rate_changes.fetch_add(1, Ordering::Release);
        Ok(())
    }

    pub(crate) fn rate(&self) -> Rate {
        *lock(&self.rate)
    }

    pub(crate) fn slack(&self) -> u64 {
        self.slack
    }

    pub(crate) fn wait_strategy(&self) -> Wait {
        self.wait
    }
}

/// Validated step parameters for `rate` with `slack`.
pub(crate) fn params(rate: Rate, slack: u64) -> Result<Params, BuildError> {
    Params::new(rate.interval_ns(), slack).ok_or(BuildError::SlackTooLarge {
        slack,
        interval: rate.interval(),
    })
}

/// The error for a request of `cost` refused with `deny` under `admit`, on
/// a limiter with `slack` (shared with the keyed limiter).
#[cold]
pub(crate) fn error(deny: Deny, cost: u64, admit: Admit, slack: u64) -> TakeError {
    match (deny, admit) {
        (Deny::Wait(wait), Admit::Within(0)) => TakeError::RetryAfter(Duration::from_nanos(wait)),
        (Deny::Wait(wait), Admit::Within(max)) => TakeError::QueueFull {
            wait: Duration::from_nanos(wait),
            max_wait: Duration::from_nanos(max),
        },
        (Deny::ExceedsBurst, _) => TakeError::ExceedsBurst {
            cost,
            burst: slack.saturating_add(1),
        },
        // `Always` admits every cost that fits; nothing else refuses it.
        (Deny::CostTooLarge, _) | (Deny::Wait(_), Admit::Always) => {
            TakeError::CostTooLarge { cost }
        }
    }
}

/// A `take_timeout`'s refusal: `Within(0)` is also `try_take`'s, but a
/// timeout's refusal is the full queue's, whatever wait it allowed.
pub(crate) fn timed_out(e: TakeError, max_wait: Duration) -> TakeError {
    match e {
        TakeError::RetryAfter(wait) => TakeError::QueueFull { wait, max_wait },
        e => e,
    }
}

/// Waits with `wait` on `clock` from `now` until `slot` (internal times) and
/// returns the clock time the permit went at (shared with the keyed limiter).
#[inline]
pub(crate) fn wait_for<C: Clock>(wait: Wait, clock: &C, now: u64, slot: u64) -> Duration {
    if slot > now {
        wait.wait_until(clock, slot - ORIGIN);
    }
    Duration::from_nanos(slot.max(now) - ORIGIN)
}

/// A `Duration` in nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
