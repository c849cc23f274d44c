//! What a lease (`src/lease/`) asks of a remote limit: a batch through the
//! step with the grant's undo, failures returned as they are, and the
//! unspent part of a batch given back by the give-back rule.

use super::core::{Core, Granted};
use super::{Error, Remote, Undo};
use crate::schedule::Admit;

/// The blocking calls a lease makes.
impl<B: Remote> Core<B> {
    /// A lease's batch: `cost` permits if free now, decided by the step in
    /// the server, with what undoes the grant. A failure is returned as it
    /// is, whatever the fail policy (the lease applies its own, once it has
    /// spent what it holds); a refusal and a grant count as any take's.
    pub(crate) fn lend(&self, key: &str, cost: u64) -> Result<Option<Undo>, Error> {
        let request = self.request(cost, Admit::Within(0))?;
        match self.shared.backend.step(key, &request) {
            Ok(decision) => Ok(self.settle(Ok(decision), &request)?.and_then(Granted::undo)),
            Err(e) => {
                self.shared.meter.failed();
                Err(e)
            }
        }
    }

    /// Gives back `unspent` permits of a batch `lend` granted (`undo`):
    /// the key goes to `undo.next - unspent * T` (to `undo.prev` when
    /// nothing was spent) only if it still holds `undo.next`, in one
    /// atomic call. Never retried.
    pub(crate) fn give_back_unspent(
        &self,
        key: &str,
        undo: Undo,
        unspent: u64,
        cost: u64,
    ) -> Result<bool, Error> {
        let back = unspent.saturating_mul(self.params.interval());
        let prev = if unspent >= cost {
            undo.prev
        } else {
            Some(undo.next.saturating_sub(back))
        };
        self.shared.backend.give_back(
            key,
            self.params.tau(),
            Undo {
                prev,
                next: undo.next,
            },
        )
    }
}
