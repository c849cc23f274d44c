//! How a [`Pacer`] decides and waits: the clock read, the step run in its
//! store, a refusal mapped to a [`TakeError`], a reservation an async take or
//! an all-or-nothing request may give back, and the blocking wait.

use std::time::Duration;

use super::{Pacer, Reservation};
use crate::clock::{internal_now, Clock};
use crate::error::TakeError;
use crate::part::Held;
use crate::primitive::{lock, Ordering};
use crate::schedule::{Admit, Deny, Grant};
use crate::stats::{Counted, Stats};
use crate::store::Store;
use crate::wait::{self, Ask};

impl<S: Store, C: Clock> Pacer<S, C> {
    /// The clock's reading in internal time.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        internal_now(&self.clock)
    }

    /// Reserves a slot for `cost` permits if `admit` allows, without waiting.
    #[inline]
    pub(crate) fn reserve(&self, cost: u64, admit: Admit) -> Result<(u64, Grant), TakeError> {
        self.reserve_asked(cost, admit, Ask::Answer)
    }

    /// [`reserve`](Self::reserve), counting a refusal only if `ask` says it
    /// is the caller's answer.
    #[inline]
    pub(crate) fn reserve_asked(
        &self,
        cost: u64,
        admit: Admit,
        ask: Ask,
    ) -> Result<(u64, Grant), TakeError> {
        let now = self.now();
        match self.store.update(now, cost, admit) {
            Ok(grant) => {
                self.meter.admitted(cost, grant.slot.saturating_sub(now));
                Ok((now, grant))
            }
            Err(deny) => Err(self.refused(deny, cost, admit, ask)),
        }
    }

    /// The error for a refusal, counted if `ask` says so: out of the take
    /// path's way, and reading the burst only for the one error that names
    /// it.
    #[cold]
    #[inline(never)]
    pub(super) fn refused(&self, deny: Deny, cost: u64, admit: Admit, ask: Ask) -> TakeError {
        let slack = match deny {
            Deny::ExceedsBurst => self.store.burst(self.now()) - 1,
            _ => 0,
        };
        let refusal = TakeError::refused(deny, cost, admit, slack);
        if ask.counts(&refusal) {
            self.meter.refused();
        }
        refusal
    }

    /// How long a request of `cost` would wait now (ns) under `admit`,
    /// storing nothing and counting nothing (a held async take's look).
    #[cfg(feature = "tokio")]
    pub(crate) fn wait_for(&self, cost: u64, admit: Admit) -> Result<u64, TakeError> {
        let now = self.now();
        let (tat, params) = self.store.peek();
        match crate::schedule::step(tat, now, cost, params, admit) {
            Ok(grant) => Ok(grant.slot.saturating_sub(now)),
            Err(deny) => {
                let slack = self.store.burst(now).saturating_sub(1);
                Err(TakeError::refused(deny, cost, admit, slack))
            }
        }
    }

    /// Counts a refusal decided outside the step (a held async take's).
    #[cfg(feature = "tokio")]
    pub(crate) fn count_refused(&self) {
        self.meter.refused();
    }

    /// [`reserve`](Self::reserve), keeping what [`give_back`](Self::give_back)
    /// needs to undo it.
    #[inline]
    pub(crate) fn reserve_cancellable(
        &self,
        cost: u64,
        admit: Admit,
        ask: Ask,
    ) -> Result<(u64, Reservation), TakeError> {
        // Read before the step. `set_limit` counts a change only after its
        // rebase (release), so a reservation that reads the new count was
        // decided on the rebased state; one that reads the old count may
        // have been decided either side, and its give-back is refused if the
        // count moved (conservative: the slot stays spent).
        let changes = self.changes.load(Ordering::Acquire);
        let (now, grant) = self.reserve_asked(cost, admit, ask)?;
        Ok((now, Reservation { grant, changes }))
    }

    /// Undoes a reservation if no one has reserved since and the limit has
    /// not changed since, so the next request gets its slot; otherwise the
    /// slot stays spent and the schedule is unchanged. `true` when it was
    /// undone. For async waiters dropped before their slot. (A reset counts
    /// as a change.)
    pub(crate) fn give_back(&self, reservation: Reservation) -> bool {
        self.meter.cancelled();
        // Under the lock `set_limit` holds: no rebase between check and CAS.
        let _limit = lock(&self.limit);
        if self.changes.load(Ordering::Relaxed) != reservation.changes {
            return false;
        }
        self.store.give_back(reservation.grant)
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

    /// Loom builds only (`--cfg paceline_loom`), for `loom-tests/`: reserves
    /// `cost` permits without waiting, as an async take does.
    #[cfg(paceline_loom)]
    #[doc(hidden)]
    pub fn __reserve(&self, cost: u64, admit: Admit) -> Result<Reservation, TakeError> {
        self.reserve_cancellable(cost, admit, Ask::Answer)
            .map(|(_, r)| r)
    }

    /// Loom builds only (`--cfg paceline_loom`), for `loom-tests/`:
    /// [`give_back`](Self::give_back), as a dropped async take runs it;
    /// `true` when the reservation was undone.
    #[cfg(paceline_loom)]
    #[doc(hidden)]
    pub fn __give_back(&self, reservation: Reservation) -> bool {
        self.give_back(reservation)
    }
}

/// A direct limiter as a part of an all-or-nothing request.
impl<S: Store, C: Clock> crate::part::sealed::Part for Pacer<S, C> {
    fn reserve(&self, cost: u64, admit: Admit) -> Result<Held, TakeError> {
        let (now, reservation) = self.reserve_cancellable(cost, admit, Ask::Answer)?;
        Ok(Held {
            now,
            grant: reservation.grant,
            check: reservation.changes,
        })
    }

    fn give_back(&self, held: Held) {
        Pacer::give_back(
            self,
            Reservation {
                grant: held.grant,
                changes: held.check,
            },
        );
    }

    fn wait(&self, held: &Held) {
        self.block(held.now, held.grant.slot);
    }
}

impl<S: Store, C: Clock> Counted for Pacer<S, C> {
    fn stats(&self) -> Option<Stats> {
        self.meter.read()
    }
}
