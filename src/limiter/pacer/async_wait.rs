//! A [`Pacer`]'s answers to the crate's async wait (`src/wait/tokio.rs`)
//! and its held takes (`src/wait/held.rs`): decided at once, undone by
//! [`Pacer::undo`].

use std::future::{ready, Future};

use super::Pacer;
use crate::clock::Clock;
use crate::model::schedule::Admit;
use crate::store::{Booking, Store};
use crate::values::error::Error;
use crate::wait::held::Peek;
use crate::wait::tokio::{Reserve, Reserved};
use crate::wait::{Ask, Wait};

/// An in-process limiter's decisions for the async wait: answered at once,
/// and undone by [`Pacer::undo`].
impl<S: Store, C: Clock> Reserve for Pacer<S, C> {
    type Clock = C;

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
    ) -> impl Future<Output = Result<Reserved, Error>> + Send {
        ready(self.book_slot(cost, admit, ask).map(Reserved::booked))
    }

    fn undo(&self, booking: Booking) {
        Pacer::undo(self, &booking);
    }
}

impl<S: Store, C: Clock> Peek for Pacer<S, C> {
    fn wait_for(&self, cost: u64, admit: Admit) -> Result<u64, Error> {
        let now = self.now();
        let (tat, params) = self.store.peek();
        match crate::model::schedule::step(tat, now, cost, params, admit) {
            Ok(grant) => Ok(grant.slot.saturating_sub(now)),
            Err(deny) => {
                let slack = self.store.burst(now).saturating_sub(1);
                Err(Error::refused(deny, cost, admit, slack))
            }
        }
    }

    fn count_refused(&self) {
        self.meter.refused();
    }
}
