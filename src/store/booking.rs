//! [`Booking`]: what a take booked, and the one rule that undoes it.
//!
//! Every kind books the same way: a take at clock `t` for a key decides
//! from the key's state `prev` and writes `next`, and its booking keeps
//! `(cost, prev, slot, next, generation)`; the key stays with whoever
//! undoes it (the limiter, the part, the async take). Undoing it is one
//! rule for every store, in process or in a server: put `prev` back only while the
//! state is still `next` and the generation (bumped by a reset, a change of
//! rate or slack, a move of the key) is the one the booking read; otherwise
//! the slot stays spent. A future dropped before its slot, an
//! all-or-nothing request that another limit refused, a lease handing back
//! a batch and a remote give-back all go through it.
//!
//! Why the generation as well as the compare: a change of rate rebases the
//! state, and a reset puts it back to how it was built; later takes may
//! then bring it back to the very word a booking wrote (ABA), and undoing
//! that booking would hand a slot out twice. A store whose server cannot
//! keep a generation (Redis, PostgreSQL, memcached) compares the state in
//! the server and books generation 0: a limit change there makes another
//! limiter object, whose bookings are its own.

use crate::model::schedule::Grant;

/// A take's booking: what it found and wrote, and what undoes it.
///
/// Made by a limiter when it books a slot, and handed back to the same
/// limiter to undo it (a lease returning a batch it did not spend is the
/// public case: [`Lender`](crate::lease::Lender)). Its fields are the
/// limiter's own; a booking from one limiter means nothing to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Booking {
    /// The permits booked.
    pub(crate) cost: u64,
    /// The deciding clock's reading at the decision (internal ns; a
    /// server's clock for a remote store).
    pub(crate) now: u64,
    /// When the request may proceed (may be before `now`: banked credit).
    pub(crate) slot: u64,
    /// The state the take decided from; `None` when a server held none for
    /// the key (at rest: undoing deletes it).
    pub(crate) prev: Option<u64>,
    /// The state the take wrote (for a cost of 0, which writes nothing, the
    /// state its slot implies).
    pub(crate) next: u64,
    /// The store's generation read before the decision.
    pub(crate) generation: u64,
}

impl Booking {
    /// An in-process store's booking of `grant` at `now`.
    #[inline]
    pub(crate) fn of(grant: Grant, now: u64, cost: u64, generation: u64) -> Booking {
        let booking = Booking::granted(now, grant.slot, cost, Some(grant.prev), grant.next);
        Booking {
            generation,
            ..booking
        }
    }

    /// A server's booking of `cost` permits at `slot`, decided at the
    /// server's `now`: the key's state `prev` (`None`: it had none) replaced
    /// by `next`. A cost of 0 writes nothing: `next` is then the state its
    /// slot implies. A server keeps no generation (see the module docs).
    pub(crate) fn granted(now: u64, slot: u64, cost: u64, prev: Option<u64>, next: u64) -> Booking {
        Booking {
            cost,
            now,
            slot,
            prev,
            next,
            generation: 0,
        }
    }

    /// The permits booked.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Loom builds only (`--cfg paceline_loom`), for `loom-tests/`: the
    /// step's grant an in-process booking holds.
    #[cfg(paceline_loom)]
    #[doc(hidden)]
    pub fn __grant(&self) -> Option<Grant> {
        self.grant()
    }

    /// The step's grant the booking holds; `None` when the state it replaced
    /// was no state at all (a server's absent key).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // an async take's give-back
    pub(crate) fn grant(&self) -> Option<Grant> {
        Some(Grant {
            prev: self.prev?,
            slot: self.slot,
            next: self.next,
        })
    }

    /// Whether undoing it can change anything: it wrote something.
    pub(crate) fn wrote(&self) -> bool {
        self.cost > 0
    }

    /// How long after the decision the permit may go, ns.
    pub(crate) fn wait(&self) -> u64 {
        self.slot.saturating_sub(self.now)
    }

    /// When the permit went: its slot, or the decision if that was later
    /// (banked credit). What a settle reckons its time limit from.
    pub(crate) fn went(&self) -> u64 {
        self.slot.max(self.now)
    }
}
