//! How a [`Pacer`] decides and waits: the clock read, the step run in its
//! store, a refusal mapped to a [`Error`], a reservation an async take or
//! an all-or-nothing request may give back, and the blocking wait.

use std::time::Duration;

use super::Pacer;
use crate::clock::{internal_now, Clock};
use crate::limiter::take::{Booked, Taken, Within};
use crate::model::schedule::{Admit, Deny};
use crate::observe::stats::{Counted, Stats};
use crate::primitive::{lock, Ordering};
use crate::store::{Booking, Store};
use crate::values::error::Error;
use crate::wait::{self, Ask};

impl<S: Store, C: Clock> Pacer<S, C> {
    /// The clock's reading in internal time.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        internal_now(&self.clock)
    }

    /// The error for a refusal, counted if `ask` says so: out of the take
    /// path's way, and reading the burst only for the one error that names
    /// it.
    #[cold]
    #[inline(never)]
    pub(crate) fn refused(&self, deny: Deny, cost: u64, admit: Admit, ask: Ask) -> Error {
        let slack = match deny {
            Deny::ExceedsBurst => self.store.burst(self.now()) - 1,
            _ => 0,
        };
        let refusal = Error::refused(deny, cost, admit, slack);
        if ask.counts(&refusal) {
            self.meter.refused();
        }
        refusal
    }

    /// Reserves a slot for `cost` permits if `admit` allows, without
    /// waiting, counting a refusal only if `ask` says it is the caller's
    /// answer; and keeps what [`undo`](Self::undo) needs to undo it: the
    /// [`Booking`].
    #[inline]
    pub(crate) fn book_slot(&self, cost: u64, admit: Admit, ask: Ask) -> Result<Booking, Error> {
        // Read before the step. `set_limit` counts a change only after its
        // rebase (release), so a booking that reads the new generation was
        // decided on the rebased state; one that reads the old may have
        // been decided either side, and its undo is refused if the
        // generation moved (conservative: the slot stays spent).
        let generation = self.generation.load(Ordering::Acquire);
        let now = self.now();
        match self.store.update(now, cost, admit) {
            Ok((grant, _)) => {
                self.meter.admitted(cost, grant.slot.saturating_sub(now));
                Ok(Booking::of(grant, now, cost, generation))
            }
            Err(deny) => Err(self.refused(deny, cost, admit, ask)),
        }
    }

    /// Undoes `booking` by the one rule ([`Booking`]): only while no one
    /// has booked since and the generation is the booking's, so the next
    /// request gets its slot; otherwise the slot stays spent and the
    /// schedule is unchanged. `true` when it was undone. For async waiters
    /// dropped before their slot, and all-or-nothing requests another limit
    /// refused.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // an async take's give-back
    pub(crate) fn undo(&self, booking: &Booking) -> bool {
        self.meter.cancelled();
        // Under the lock `set_limit` holds: no rebase between check and CAS.
        let _limit = lock(&self.limit);
        if self.generation.load(Ordering::Relaxed) != booking.generation {
            return false;
        }
        booking
            .grant()
            .is_some_and(|grant| self.store.give_back(grant))
    }

    /// Settles `booking` with its `actual` cost
    /// ([`schedule::settle`](crate::model::schedule::settle)): an excess
    /// is charged at once, in the limit in force; a refund only while the
    /// generation is the booking's, checked under the limit's lock as an
    /// undo is, so no change or reset lands between the check and the
    /// store's CAS (across one, the estimate stands). The state found and
    /// left; `None` when a refund was dropped.
    pub(crate) fn settle_booking(&self, booking: &Booking, actual: u64) -> Option<(u64, u64)> {
        let settle = || {
            let now = || self.now();
            self.store
                .settle(now, booking.went(), booking.cost(), actual)
        };
        if actual >= booking.cost() {
            return Some(settle());
        }
        let _limit = lock(&self.limit);
        (self.generation.load(Ordering::Relaxed) == booking.generation).then(settle)
    }

    /// Takes `cost` permits, waiting as `within` allows, as an estimate to
    /// [`settle`](Self::settle) once the actual cost is known
    /// ([`Take::book`](crate::Take::book)).
    ///
    /// # Errors
    /// As [`take_n`](Self::take_n), [`try_take_n`](Self::try_take_n) or
    /// [`take_n_timeout`](Self::take_n_timeout), as `within` says.
    pub fn book(&self, cost: u64, within: Within) -> Result<Booked, Error> {
        let booking = self.book_slot(cost, within.admit(), Ask::Answer);
        let booking = booking.map_err(|e| within.refusal(e))?;
        let at = self.block(booking.now, booking.slot);
        let taken = Taken::new(at, self.state());
        Ok(Booked::new(taken, cost, Some(booking), self.id))
    }

    /// Settles `booked` with its `actual` cost: the difference goes back,
    /// capped, or the excess is charged now, never refused
    /// ([`Take::settle`](crate::Take::settle); a refund across a change of
    /// the limit or a reset is dropped).
    ///
    /// # Errors
    /// [`Error::Config`] for a booking this limiter did not make; nothing
    /// changes then.
    pub fn settle(&self, booked: Booked, actual: u64) -> Result<(), Error> {
        if let Some(booking) = booked.check(self.id)? {
            if actual == 0 {
                self.meter.cancelled();
            }
            self.settle_booking(&booking, actual);
        }
        Ok(())
    }

    /// Waits until `slot`, then answers `taken`: a take's wait, out of line.
    #[cold]
    #[inline(never)]
    pub(super) fn wait_for_slot(&self, now: u64, slot: u64, taken: Taken) -> Taken {
        self.block(now, slot);
        taken
    }

    /// Waits until `slot` and returns the clock time the permit went at.
    #[inline]
    pub(crate) fn block(&self, now: u64, slot: u64) -> Duration {
        wait::block(
            self.wait,
            &self.clock,
            now,
            slot,
            "paceline::tokio::AsyncLimiter::take(..).await",
        )
    }

    /// Loom builds only (`--cfg paceline_loom`), for `loom-tests/`: books
    /// `cost` permits without waiting, as an async take does.
    #[cfg(paceline_loom)]
    #[doc(hidden)]
    pub fn __book(&self, cost: u64, admit: Admit) -> Result<Booking, Error> {
        self.book_slot(cost, admit, Ask::Answer)
    }

    /// Loom builds only (`--cfg paceline_loom`), for `loom-tests/`:
    /// [`undo`](Self::undo), as a dropped async take runs it; `true` when
    /// the booking was undone.
    #[cfg(paceline_loom)]
    #[doc(hidden)]
    pub fn __undo(&self, booking: Booking) -> bool {
        self.undo(&booking)
    }

    /// Loom builds only (`--cfg paceline_loom`), for `loom-tests/`:
    /// [`settle`](Self::settle); the state found and left, `None` when a
    /// refund was dropped.
    #[cfg(paceline_loom)]
    #[doc(hidden)]
    pub fn __settle(&self, booking: Booking, actual: u64) -> Option<(u64, u64)> {
        self.settle_booking(&booking, actual)
    }
}

impl<S: Store, C: Clock> Counted for Pacer<S, C> {
    fn stats(&self) -> Option<Stats> {
        self.meter.read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::builder::Builder;
    use crate::{AtomicLimiter, MutexLimiter, Rate};

    /// A refund applies while no change or reset came between the booking
    /// and the settle; across one the estimate stands. An excess is
    /// charged all the same, in the limit in force.
    fn refunds_stop_at_a_change_or_a_reset<S: Store>(builder: Builder<Pacer<S>>) {
        let clock = ManualClock::new();
        let l = builder
            .slack(4)
            .full_credit(true)
            .clock(clock)
            .build()
            .unwrap();
        let (within, ask) = (Admit::Within(0), Ask::Answer);
        let b = l.book_slot(5, within, ask).unwrap();
        assert_eq!(l.available(), 0);
        assert!(l.settle_booking(&b, 2).is_some());
        assert_eq!(l.available(), 3, "the burst less the 2 spent");

        let b = l.book_slot(3, within, ask).unwrap();
        l.set_slack(5).unwrap();
        let (tat, _) = l.store.peek();
        assert_eq!(l.settle_booking(&b, 0), None, "a refund across a change");
        assert_eq!(l.settle_booking(&b, 3), Some((tat, tat)));
        let (found, left) = l.settle_booking(&b, 5).unwrap();
        assert_eq!((found, left), (tat, tat + 2 * 100_000_000));

        let b = l.book_slot(1, Admit::Always, ask).unwrap();
        l.reset();
        let (tat, _) = l.store.peek();
        assert_eq!(l.settle_booking(&b, 0), None, "a refund across a reset");
        assert!(l.settle_booking(&b, 2).unwrap().1 > tat);
    }

    #[test]
    fn atomic_limiter_refunds_stop_at_a_change_or_a_reset() {
        refunds_stop_at_a_change_or_a_reset(AtomicLimiter::builder(Rate::per_second(10)));
    }

    #[test]
    fn mutex_limiter_refunds_stop_at_a_change_or_a_reset() {
        refunds_stop_at_a_change_or_a_reset(MutexLimiter::builder(Rate::per_second(10)));
    }
}
