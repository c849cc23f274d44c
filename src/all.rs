//! All or nothing over several limits: a request goes only if every limit
//! admits it, and then it has taken from each (a per-user limit and a
//! global one, say).
//!
//! [`All`] is those limits as one limiter: it answers the take
//! interface ([`Take`]), for any key, which it ignores, as a
//! direct limiter does.
//!
//! ```
//! # #[cfg(feature = "keyed")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use paceline::all::All;
//! use paceline::{AtomicLimiter, KeyedLimiter, Rate, Take};
//!
//! let global = AtomicLimiter::builder(Rate::per_second(1))
//!     .slack(2)
//!     .full_credit(true) // a burst of 3 at once
//!     .build()?;
//! let per_user = KeyedLimiter::<String>::builder(Rate::per_second(1))
//!     .slack(1) // a burst of 2 per user
//!     .build()?;
//!
//! let alice = per_user.bucket("alice");
//! let both = All::new([&alice, &global]);
//! both.try_take(&())?;
//! both.try_take(&())?;
//! // alice's burst of 2 is spent: refused, and the global limit keeps its permit.
//! assert!(both.try_take(&()).is_err());
//! assert_eq!(global.available(), 1);
//! All::new([&per_user.bucket("bob"), &global]).try_take(&())?; // the global permit left
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "keyed"))]
//! # fn main() {}
//! ```
//!
//! The parts ([`Part`]) are any direct limiter ([`AtomicLimiter`],
//! [`MutexLimiter`], [`WarmUpLimiter`]) and one key of a
//! [`KeyedLimiter`](crate::KeyedLimiter), from its `bucket(&key)`; their
//! clocks may differ.
//!
//! # How it decides
//!
//! The parts are asked in order, each with its own step, as a lone call
//! would. If one refuses, the parts before it are given back what they
//! granted, in reverse order, and the call fails with that part's refusal.
//! So nothing is ever admitted that any one limit would not have admitted
//! alone: each limit's [window
//! bound](crate::guide::model#slack-and-burst-the-window-bound) holds,
//! whatever runs beside.
//!
//! # What a race costs
//!
//! A give-back undoes a grant only if nobody has taken from that limit
//! since (the same exact undo as a cancelled async take, never a
//! subtraction, which could let a later caller exceed the bound). If
//! another caller took from it between this call's grant and its
//! give-back, the permits stay spent: that limit loses at most the
//! request's cost in capacity for that one refusal, and is never over its
//! bound. Such a loss needs a refusal by a later part while another caller
//! takes from an earlier one in the few nanoseconds between.
//!
//! So **put the most contended limit last**: a refusal by the last part
//! has nothing after it to undo, and a refusal by a later part gives back
//! an earlier, quieter one (one user's bucket), which nobody else is
//! likely to have touched. A part's refusal is counted in its `stats()`
//! as usual, and a give-back as [`Stats::cancelled`](crate::observe::stats::Stats::cancelled).
//!
//! A blocking take books every part first, then waits for the latest of
//! the slots: a part whose slot came earlier sees its permit used late,
//! which never breaks its bound.
//!
//! [`AtomicLimiter`]: crate::AtomicLimiter
//! [`MutexLimiter`]: crate::MutexLimiter
//! [`WarmUpLimiter`]: crate::WarmUpLimiter

use std::time::Duration;

use crate::limiter::take::{Error, State, Take, Taken, Within};
use crate::model::schedule::ORIGIN;
use crate::store::Booking;
use crate::values::limit::Limit;

pub use crate::limiter::part::Part;

/// Several limits as one limiter: a take goes only if every part admits it
/// (see [the module docs](self)). Every call of [`Take`] answers for all
/// the parts, for any key, which it ignores:
///
/// - a take books every part in order, gives the earlier ones back on a
///   refusal and fails with that part's refusal, as it would alone
///   ([`Error::RetryAfter`], [`Error::QueueFull`],
///   [`Error::ExceedsBurst`], [`Error::TooManyKeys`], ...); a waiting
///   take then waits for the latest of the slots, each on its part's
///   clock, and [`Taken::at`] is that latest slot's time;
/// - what a take found, [`state`](Take::state) and
///   [`limit_for`](Take::limit_for) are the binding part's: the one with
///   the fewest permits free (of equals, the one whose next is furthest);
/// - [`can_take`](Take::can_take) is whether every part could.
#[derive(Clone, Copy)]
pub struct All<'a, const N: usize> {
    parts: [&'a dyn Part; N],
}

impl<'a, const N: usize> All<'a, N> {
    /// The limits `parts` as one, asked in this order (put the most
    /// contended last: see [what a race costs](self#what-a-race-costs)).
    pub fn new(parts: [&'a dyn Part; N]) -> All<'a, N> {
        All { parts }
    }

    /// Books `cost` on each part in order; on a refusal, undoes the ones
    /// booked, last first, and returns the refusal.
    fn book(&self, cost: u64, within: Within) -> Result<Vec<Booking>, Error> {
        let mut booked = Vec::with_capacity(self.parts.len());
        for part in &self.parts {
            match part.book(cost, within.admit()) {
                Ok(b) => booked.push(b),
                Err(refusal) => {
                    for (part, b) in self.parts.iter().zip(&booked).rev() {
                        part.undo(b);
                    }
                    return Err(within.refusal(refusal));
                }
            }
        }
        Ok(booked)
    }

    /// The binding part's state: the fewest permits free, then the
    /// furthest next.
    fn binding(&self) -> State {
        let states = self.parts.iter().map(|part| part.state());
        states
            .min_by_key(|s| (s.available(), std::cmp::Reverse(s.next_free())))
            .unwrap_or(State::new(u64::MAX, Duration::ZERO, None))
    }
}

impl<K: ?Sized, const N: usize> Take<K> for All<'_, N> {
    fn take_within(&self, _key: &K, cost: u64, within: Within) -> Result<Taken, Error> {
        let booked = self.book(cost, within)?;
        let mut at = ORIGIN;
        for (part, b) in self.parts.iter().zip(&booked) {
            // Each on its own clock: in all, until the latest.
            part.wait(b);
            at = at.max(b.slot.max(b.now));
        }
        Ok(Taken::new(
            Duration::from_nanos(at - ORIGIN),
            self.binding(),
        ))
    }

    fn can_take(&self, _key: &K, cost: u64) -> Result<bool, Error> {
        Ok(self.parts.iter().all(|part| part.can_take(cost)))
    }

    fn state(&self, _key: &K) -> Result<State, Error> {
        Ok(self.binding())
    }

    fn limit_for(&self, _key: &K) -> Option<Limit> {
        self.binding().limit()
    }
}

impl<const N: usize> std::fmt::Debug for All<'_, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("All").field("parts", &N).finish()
    }
}
