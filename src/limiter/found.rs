//! What a take found: the limit's [`State`] at one instant, and a granted
//! take's [`Taken`] (when its permit went, and the state it left).
//! Re-exported from [`take`](crate::limiter::take), where the interface lives.

use std::num::NonZeroU64;
use std::time::Duration;

use crate::model::schedule::{self, Params, ORIGIN};
use crate::model::warm_up::{self, WarmState};
use crate::model::window;
use crate::values::limit::Limit;
use crate::values::rate::Rate;

/// A limit's state at one instant: what a request could take, when the next
/// permit is free, and the limit in force. Returned by
/// [`Take::state`](crate::Take::state); a [`Taken`] carries the state right after its take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    available: u64,
    next_free: Duration,
    limit: Option<Limit>,
    /// The time until whole again, where the limiter said it (a window's
    /// end); else computed from the limit.
    reset: Option<Duration>,
}

impl State {
    /// `available` permits free now, the next free `next_free` from now,
    /// under `limit` (`None`: no limit).
    pub const fn new(available: u64, next_free: Duration, limit: Option<Limit>) -> State {
        State {
            available,
            next_free,
            limit,
            reset: None,
        }
    }

    /// A window word at `now` (Unix time, ns) under `params` and `limit`
    /// (the quota per window they are): what is left in the current window,
    /// when a permit is next free (never: `u64::MAX` ns), and that window's
    /// end as the reset (zero while it has counted nothing), as
    /// [`window::left`] reads them.
    pub(crate) fn of_window(word: u64, now: u64, params: window::Params, limit: Limit) -> State {
        let (available, next_free, reset) = window::left(word, now, params);
        State {
            available,
            next_free: Duration::from_nanos(next_free),
            limit: Some(limit),
            reset: Some(Duration::from_nanos(reset)),
        }
    }

    /// A state `tat` at `now` under `params` and `rate`, as the interface
    /// reports it: one reading of a schedule, whether a take's or a look's.
    pub(crate) fn of_reading(tat: u64, now: u64, params: Params, rate: Rate) -> State {
        State::new(
            schedule::available(tat, now, params),
            Duration::from_nanos(schedule::next_free(tat, now, params)),
            Some(Limit::new(rate, params.slack())),
        )
    }

    /// How many permits one request could take now without waiting: from 0
    /// to the burst (`slack + 1`); `u64::MAX` when nothing limits.
    pub fn available(&self) -> u64 {
        self.available
    }

    /// How long until a permit is free (zero: one is free now).
    pub fn next_free(&self) -> Duration {
        self.next_free
    }

    /// The limit in force, its slack in permits ([`Limit::burst`] is
    /// `slack + 1`); `None` for [`Unlimited`](crate::Unlimited).
    pub fn limit(&self) -> Option<Limit> {
        self.limit
    }

    /// How long until the bucket is whole again: `(burst - available)`
    /// intervals (zero when nothing limits); for a limit counted by window,
    /// until the window ends (zero when it has counted nothing). What the
    /// IETF draft's `RateLimit` field calls the reset.
    pub fn reset(&self) -> Duration {
        if let Some(reset) = self.reset {
            return reset;
        }
        match self.limit {
            Some(limit) => {
                let missing = limit.burst().saturating_sub(self.available);
                let missing = u32::try_from(missing).unwrap_or(u32::MAX);
                limit.rate().interval().saturating_mul(missing)
            }
            None => Duration::ZERO,
        }
    }
}

/// What a granted take found: when its permit went ([`at`](Self::at)) and
/// what is left right after it ([`available`](Self::available),
/// [`next_free`](Self::next_free), [`reset`](Self::reset)), so a caller
/// that reports the limit (the HTTP layer's `RateLimit` fields, a metrics
/// label) never asks again. The limit itself is the limiter's own
/// knowledge: [`Take::limit_for`](crate::Take::limit_for).
///
/// For an in-process limiter it is read from the take's own new state; for
/// a remote one it is the server's answer to this very take. `Copy`, six
/// words: what is left is computed from the state when asked for, so a
/// take that never asks pays nothing for it. One word is never 0, so a
/// `Result<Taken, Error>` marks an error there and is six words too.
#[derive(Clone, Copy)]
pub struct Taken {
    /// When the permit went, ns on the deciding clock (see [`at`](Self::at)).
    at: u64,
    /// With `interval` > 0, a reading at `at`: the state `tat` under
    /// `interval` and `tau` (with `warm_up` > 0, a warm-up's, its coldness
    /// `cold`). With `interval` 0, what is left as its limiter gave it:
    /// `tat` available, the next free in `cold` ns, whole again in `tau` ns.
    tat: u64,
    interval: u64,
    tau: u64,
    cold: u64,
    /// The warm-up period plus 1 (never 0: the `Result`'s niche).
    warm_up: NonZeroU64,
}

impl Taken {
    /// A permit that went `at` (see [the time a take
    /// returns](crate::limiter::take#the-time-a-take-returns)), leaving `after`.
    pub fn new(at: Duration, after: State) -> Taken {
        let nanos = crate::wait::nanos;
        Taken::left(
            nanos(at),
            after.available,
            nanos(after.next_free),
            nanos(after.reset()),
        )
    }

    /// A permit that went `at` ns after the clock's origin, leaving
    /// `available` permits, the next free in `next_free` ns and the limit
    /// whole again in `reset` ns: [`new`](Self::new) in ns, which a window
    /// key's answer calls directly.
    #[inline(always)]
    pub(crate) const fn left(at: u64, available: u64, next_free: u64, reset: u64) -> Taken {
        Taken {
            at,
            tat: available,
            interval: 0,
            tau: reset,
            cold: next_free,
            warm_up: NonZeroU64::MIN,
        }
    }

    /// A permit that went `at` ns after the clock's origin, leaving the
    /// state `tat` (and a warm-up's coldness `cold`, of a warm-up period
    /// of `warm_up` ns; both 0 for none) under `params`: read at `at` when
    /// asked for.
    #[inline(always)]
    pub(crate) const fn reading(
        at: u64,
        tat: u64,
        params: Params,
        cold: u64,
        warm_up: u64,
    ) -> Taken {
        Taken {
            at,
            tat,
            interval: params.interval(),
            tau: params.tau(),
            cold,
            warm_up: NonZeroU64::MIN.saturating_add(warm_up),
        }
    }

    /// The reading's parameters and clock reading, if this is one.
    fn reading_at(&self) -> Option<(Params, u64)> {
        (self.interval > 0).then(|| {
            let p = Params::from_tau_unchecked(self.interval, self.tau);
            (p, self.at.saturating_add(ORIGIN))
        })
    }

    /// When the permit went, on the clock that decided it (see [the time a
    /// take returns](crate::limiter::take#the-time-a-take-returns)).
    pub fn at(&self) -> Duration {
        Duration::from_nanos(self.at)
    }

    /// How many permits one request could take right after this take
    /// without waiting ([`State::available`]).
    pub fn available(&self) -> u64 {
        match self.reading_at() {
            Some((p, now)) if self.warm_up > NonZeroU64::MIN => {
                let state = WarmState {
                    tat: self.tat,
                    cold: self.cold,
                };
                warm_up::available(state, now, p, self.warm_up.get() - 1)
            }
            Some((p, now)) => schedule::available(self.tat, now, p),
            None => self.tat,
        }
    }

    /// How long after the take until a permit is free ([`State::next_free`]).
    pub fn next_free(&self) -> Duration {
        Duration::from_nanos(match self.reading_at() {
            Some((p, now)) => schedule::next_free(self.tat, now, p),
            None => self.cold,
        })
    }

    /// How long after the take until the bucket is whole again
    /// ([`State::reset`]).
    pub fn reset(&self) -> Duration {
        Duration::from_nanos(match self.reading_at() {
            Some((p, _)) => {
                let missing = (p.slack() + 1).saturating_sub(self.available());
                missing.saturating_mul(p.interval())
            }
            None => self.tau,
        })
    }
}

impl PartialEq for Taken {
    fn eq(&self, other: &Taken) -> bool {
        let seen = |t: &Taken| (t.at, t.available(), t.next_free(), t.reset());
        seen(self) == seen(other)
    }
}

impl Eq for Taken {}

impl std::fmt::Debug for Taken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taken")
            .field("at", &self.at())
            .field("available", &self.available())
            .field("next_free", &self.next_free())
            .field("reset", &self.reset())
            .finish()
    }
}
