//! Which call a limit sends: the pacing step's ([`Op::Step`] and its
//! peek and undo) or, for a limit counted by window, the window step's
//! ([`Op::Count`] and its own), each with what the answer's mapping needs.

use super::core::{Asked, Core};
use super::seam::Count;
use super::{Error, Op, Request};
use crate::model::schedule::{Admit, Deny};
use crate::store::Booking;
use crate::wait::Ask;

impl<B> Core<B> {
    /// The step a backend runs for `cost` under `admit`, asked as `ask`
    /// says: the pacing step's [`Op::Step`] or the window step's
    /// [`Op::Count`]; or the refusal that needs no round trip.
    pub(crate) fn step_op(&self, cost: u64, admit: Admit, ask: Ask) -> Result<(Op, Asked), Error> {
        let asked = Asked { cost, admit, ask };
        let Some(params) = self.window else {
            let request = Request {
                ask,
                ..self.request(cost, admit)?
            };
            return Ok((Op::Step(request), asked));
        };
        if cost > params.quota() {
            self.shared.meter.refused();
            let quota = params.quota();
            return Err(Error::refused(Deny::ExceedsBurst, cost, admit, quota - 1));
        }
        let count = Count {
            cost,
            params,
            admit,
            ask,
        };
        Ok((Op::Count(count), asked))
    }

    /// The peek of a key's state under this limit.
    pub(crate) fn peek_op(&self) -> Op {
        match self.window {
            Some(params) => Op::PeekCount(params),
            None => Op::Peek,
        }
    }

    /// The undo of `booking` by the one rule ([`Booking`]).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn undo_op(&self, booking: Booking) -> Op {
        match self.window {
            Some(params) => Op::UndoCount { params, booking },
            None => Op::Undo {
                tau: self.keep,
                booking,
            },
        }
    }
}
