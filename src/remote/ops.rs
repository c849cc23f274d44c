//! Which call a limit sends: the pacing step's ([`Op::Step`] and its
//! peek and undo) or, for a limit counted by window, the window step's
//! ([`Op::Count`] and its own), each with what the answer's mapping needs.

use super::core::Core;
use super::seam::Count;
use super::{Error, Op, Request};
use crate::model::schedule::{Admit, Deny};
use crate::model::window;
use crate::store::Booking;
use crate::values::error::BuildError;
use crate::values::limit::Limit;
use crate::wait::Ask;

use super::core::Common;

/// What a take asked, for the mapping of its answer: the cost, which
/// requests are admitted, and why it asks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked {
    pub(crate) cost: u64,
    pub(crate) admit: Admit,
    pub(crate) ask: Ask,
}

/// The window parameters of a limit `common` counts by window, checked:
/// `None` for a paced one. A slack set beside a quota is refused by name:
/// the quota is the burst.
pub(super) fn counted(common: &Common) -> Result<Option<window::Params>, BuildError> {
    let Some((quota, w)) = common.window else {
        return Ok(None);
    };
    let limit = Limit::per_window(quota, w)?;
    if common.slack != limit.slack() {
        return Err(BuildError::WindowNotPaced {
            limit: limit.to_string(),
            by: "a slack",
        });
    }
    Ok(Some(window::Params::new(quota, w)?))
}

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
