//! A [`Pacer`]'s answers to the crate's async wait (`src/wait/tokio.rs`)
//! and its held takes (`src/wait/held.rs`): decided at once, undone by
//! [`Pacer::give_back`].

use std::future::{ready, Future};
use std::time::Duration;

use super::{Pacer, Reservation};
use crate::clock::Clock;
use crate::error::TakeError;
use crate::schedule::{Admit, ORIGIN};
use crate::store::Store;
use crate::wait::held::Peek;
use crate::wait::tokio::{Reserve, Reserved};
use crate::wait::{Ask, Wait};

/// An in-process limiter's decisions for the async wait: answered at once,
/// and undone by [`Pacer::give_back`].
impl<S: Store, C: Clock> Reserve for Pacer<S, C> {
    type Clock = C;
    type Ticket = Reservation;
    type Error = TakeError;

    fn clock(&self) -> &C {
        Pacer::clock(self)
    }

    fn wait(&self) -> Wait {
        self.wait_strategy()
    }

    fn reserve(
        &self,
        cost: u64,
        admit: Admit,
        ask: Ask,
    ) -> impl Future<Output = Result<Reserved<Reservation>, TakeError>> + Send {
        ready(
            self.reserve_cancellable(cost, admit, ask)
                .map(|(now, reservation)| {
                    let slot = reservation.grant.slot;
                    Reserved {
                        now,
                        slot,
                        went_at: Duration::from_nanos(slot.max(now) - ORIGIN),
                        ticket: Some(reservation),
                    }
                }),
        )
    }

    fn refusal(error: &TakeError) -> Option<&TakeError> {
        Some(error)
    }

    fn give_back(&self, reservation: Reservation) {
        Pacer::give_back(self, reservation);
    }
}

impl<S: Store, C: Clock> Peek for Pacer<S, C> {
    fn wait_for(&self, cost: u64, admit: Admit) -> Result<u64, TakeError> {
        Pacer::wait_for(self, cost, admit)
    }

    fn count_refused(&self) {
        Pacer::count_refused(self);
    }
}
