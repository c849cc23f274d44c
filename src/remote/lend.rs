//! What a lease (`src/lease/`) asks of a remote limit: a batch through the
//! step with the grant's undo, failures returned as they are, and the
//! unspent part of a batch given back by the give-back rule.

use super::core::Core;
use super::{Backend, Error, Op};
use crate::model::schedule::Admit;
use crate::store::Booking;
use crate::wait::Ask;

/// The blocking calls a lease makes.
impl<B: Backend> Core<B> {
    /// A lease's batch: `cost` permits if free now, decided by the step in
    /// the server, with what undoes the grant. A failure is returned as it
    /// is, whatever the fail policy (the lease applies its own, once it has
    /// spent what it holds); a refusal and a grant count as any take's.
    pub(crate) fn lend(&self, key: &str, cost: u64) -> Result<Option<Booking>, Error> {
        let (op, asked) = self.step_op(cost, Admit::Within(0), Ask::Answer)?;
        let done = self
            .call(key, op)
            .inspect_err(|_| self.shared.meter.failed())?;
        Ok(self.settle(done.decision(), &asked)?.filter(Booking::wrote))
    }

    /// Gives back `unspent` permits of a batch `lend` booked: the one rule
    /// ([`Booking`]) with the state to put back moved forward by what was
    /// spent: the key goes to `booking.next - unspent * T` (to
    /// `booking.prev` when nothing was spent) only if it still holds
    /// `booking.next`, in one atomic call. Never retried.
    pub(crate) fn give_back_unspent(
        &self,
        key: &str,
        booking: &Booking,
        unspent: u64,
    ) -> Result<bool, Error> {
        let back = unspent.saturating_mul(self.params.interval());
        let mut partial = *booking;
        if unspent < booking.cost {
            partial.prev = Some(booking.next.saturating_sub(back));
        }
        let undo = Op::Undo {
            tau: self.keep,
            booking: partial,
        };
        self.call(key, undo)?.flag()
    }
}
