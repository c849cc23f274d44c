//! What a take found: the limit's [`State`] at one instant, and a granted
//! take's [`Taken`] (when its permit went, and the state it left).
//! Re-exported from [`take`](crate::limiter::take), where the interface lives.

use std::time::Duration;

use crate::model::schedule::{self, Params};
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
}

impl State {
    /// `available` permits free now, the next free `next_free` from now,
    /// under `limit` (`None`: no limit).
    pub const fn new(available: u64, next_free: Duration, limit: Option<Limit>) -> State {
        State {
            available,
            next_free,
            limit,
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
    /// intervals (zero when nothing limits). What the IETF draft's
    /// `RateLimit` field calls the reset.
    pub fn reset(&self) -> Duration {
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
/// the limit's [`State`] right after it, so a caller that reports the limit
/// (the HTTP layer's `RateLimit` fields, a metrics label) never asks again.
///
/// For an in-process limiter the state is read just after the decision
/// (another thread may take in between); for a remote one it is the
/// server's answer to this very take.
#[derive(Clone, Copy)]
pub struct Taken {
    at: Duration,
    after: After,
}

/// The state a take left: as its limiter gave it, or the reading it is
/// computed from when asked (an in-process keyed take's: two divisions
/// that the HTTP layer's admitted path, without `RateLimit` fields on
/// every response, never needs).
#[derive(Clone, Copy)]
#[cfg_attr(not(feature = "keyed"), allow(dead_code))]
enum After {
    State(State),
    Reading {
        tat: u64,
        now: u64,
        params: Params,
        rate: Rate,
    },
}

impl Taken {
    /// A permit that went `at` (see [the time a take
    /// returns](crate::limiter::take#the-time-a-take-returns)), leaving `after`.
    pub const fn new(at: Duration, after: State) -> Taken {
        Taken {
            at,
            after: After::State(after),
        }
    }

    /// A permit that went `at`, leaving the state `tat` at `now` under
    /// `params` and `rate`, computed when asked for.
    #[cfg_attr(not(feature = "keyed"), allow(dead_code))]
    pub(crate) const fn reading(
        at: Duration,
        tat: u64,
        now: u64,
        params: Params,
        rate: Rate,
    ) -> Taken {
        Taken {
            at,
            after: After::Reading {
                tat,
                now,
                params,
                rate,
            },
        }
    }

    /// When the permit went, on the limiter's clock, since its origin.
    pub fn at(&self) -> Duration {
        self.at
    }

    /// The limit's state right after the take.
    pub fn state(&self) -> State {
        match self.after {
            After::State(state) => state,
            After::Reading {
                tat,
                now,
                params,
                rate,
            } => State::of_reading(tat, now, params, rate),
        }
    }

    /// [`State::available`] after the take.
    pub fn available(&self) -> u64 {
        self.state().available
    }

    /// [`State::next_free`] after the take.
    pub fn next_free(&self) -> Duration {
        self.state().next_free
    }

    /// The limit the take was decided by ([`State::limit`]).
    pub fn limit(&self) -> Option<Limit> {
        self.state().limit
    }
}

impl PartialEq for Taken {
    fn eq(&self, other: &Taken) -> bool {
        self.at == other.at && self.state() == other.state()
    }
}

impl Eq for Taken {}

impl std::fmt::Debug for Taken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taken")
            .field("at", &self.at)
            .field("after", &self.state())
            .finish()
    }
}
