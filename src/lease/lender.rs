//! [`Lender`]: what a lease asks of the limiter it draws on, beyond the
//! [`Take`] interface: to run at the lease's reduced limit, and (where the
//! limiter can) to hand back what a batch did not spend.

use std::fmt;

use crate::clock::{Clock, UnixClock};
use crate::limiter::pacer::{self, Pacer};
use crate::limiter::take::{OnKey, Take};
use crate::remote::{Backend, Error, FailPolicy, RemoteLimiter};
use crate::store::{Booking, Store};
use crate::values::error::BuildError;
use crate::values::limit::Limit;

/// A limiter a [`Leased`](super::Leased) draws its batches from: one limit
/// (a direct limiter, or one key of a keyed or remote one through
/// [`OnKey`]) that can be set to another limit in place.
///
/// The provided methods fit any [`Take`]: a batch is a
/// [`try_take_n`](Take::try_take_n) of its size (the one step, cost `n`),
/// nothing is given back, and failures are left to the limiter's own
/// policy. The remote limiters (one key of a `RemoteLimiter`) override them:
/// their batches can be given back (the give-back rule: only while the key
/// still holds the batch's state) and their failures reach the lease,
/// which applies the policy only after spending what it holds.
pub trait Lender: Take {
    /// The clock a lease on it is timed on ([`Leased::new`](super::Leased::new)):
    /// the one its own takes' times are on, so that a lease's
    /// [`Taken::at`](crate::Taken::at) means what the limiter's does.
    type Clock: Clock;

    /// A reading of [`Clock`](Lender::Clock) for a lease: an in-process
    /// limiter's own clock; Unix time for a remote one.
    fn lease_clock(&self) -> Self::Clock;

    /// Puts the limit to `reduced` (the lease's) in place. A state it
    /// writes must last until at rest at `stated` (the limit the bound is
    /// stated for, at which a taker without a lease may take the key), for
    /// a store that forgets a key at rest (a remote one).
    ///
    /// # Errors
    /// As the limiter's own change of limit.
    fn relimit(&mut self, reduced: Limit, stated: Limit) -> Result<(), BuildError>;

    /// Takes a batch of `cost` permits if they are free now, through the
    /// limit's one step at cost `cost`; a refusal stores nothing. Returns
    /// the batch's [`Booking`] where the limiter can give some of it back,
    /// `None` where it cannot.
    ///
    /// # Errors
    /// As [`Take::try_take_n`].
    fn lend(&self, cost: u64) -> Result<Option<Booking>, Error> {
        self.try_take_n(&(), cost).map(|_| None)
    }

    /// Gives back `unspent` of the permits `booking` holds, by the one
    /// give-back rule ([`Booking`]): only if the limit still holds that
    /// batch's state (no one took since); `Ok(false)` when it does not, or
    /// cannot give back.
    ///
    /// # Errors
    /// A remote limiter's failures.
    fn give_back(&self, booking: &Booking, unspent: u64) -> Result<bool, Error> {
        let _ = (booking, unspent);
        Ok(false)
    }

    /// What the lease does when `lend` fails: the limiter's policy when it
    /// returns its failures (remote limiters), else
    /// [`FailPolicy::Closed`] (the limiter applied its own already).
    fn fail_policy(&self) -> FailPolicy {
        FailPolicy::Closed
    }
}

/// An in-process limiter (mainly for tests: a lease saves nothing here).
impl<S: Store, C: Clock + Clone> Lender for Pacer<S, C> {
    type Clock = C;

    fn lease_clock(&self) -> C {
        self.clock().clone()
    }

    /// (It forgets no state: `stated` changes nothing.)
    fn relimit(&mut self, reduced: Limit, _: Limit) -> Result<(), BuildError> {
        self.apply(reduced)
    }
}

/// One key of a remote limiter: the point of a lease.
impl<B: Backend, K: fmt::Display + Send + Sync> Lender for OnKey<RemoteLimiter<B>, K> {
    type Clock = UnixClock;

    fn lease_clock(&self) -> UnixClock {
        UnixClock
    }

    /// The key's states live until at rest at `stated` (and at `reduced`):
    /// a taker at the stated limit finds them, never a key forgotten early.
    fn relimit(&mut self, reduced: Limit, stated: Limit) -> Result<(), BuildError> {
        let mut relimited = self.limiter().with_limit(reduced.rate(), reduced.slack())?;
        let stated = pacer::params(stated.rate(), stated.slack())?.tau();
        relimited.core.keep = relimited.core.keep.max(stated);
        *self.limiter_mut() = relimited;
        Ok(())
    }

    fn lend(&self, cost: u64) -> Result<Option<Booking>, Error> {
        self.limiter().core.lend(&self.key().to_string(), cost)
    }

    fn give_back(&self, booking: &Booking, unspent: u64) -> Result<bool, Error> {
        if unspent == 0 {
            return Ok(false);
        }
        self.limiter()
            .core
            .give_back_unspent(&self.key().to_string(), booking, unspent)
    }

    fn fail_policy(&self) -> FailPolicy {
        self.limiter().fail_policy()
    }
}
