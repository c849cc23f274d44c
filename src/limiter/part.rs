//! [`Part`]: what a limit offers an all-or-nothing request
//! ([`all`](crate::all)): book, undo, wait. Here, below both the
//! direct limiters and the keyed one, which implement it; `all` only
//! composes.

use crate::limiter::take::State;
use crate::model::schedule::Admit;
use crate::store::Booking;
use crate::values::error::Error;

/// A limit that can take part in an all-or-nothing request: a direct
/// limiter, or one key of a keyed limiter (`KeyedLimiter::bucket`).
/// Sealed: its methods are paceline's own.
pub trait Part: sealed::Part + Send + Sync {}

impl<T: sealed::Part + Send + Sync + ?Sized> Part for T {}

pub(crate) mod sealed {
    use super::{Admit, Booking, Error, State};

    pub trait Part {
        /// Books `cost` permits if `admit` allows.
        fn book(&self, cost: u64, admit: Admit) -> Result<Booking, Error>;
        /// Undoes `booking` by the one rule ([`Booking`]).
        fn undo(&self, booking: &Booking);
        /// Blocks until `booking`'s slot, on the part's clock.
        fn wait(&self, booking: &Booking);
        /// Whether `cost` permits are free now; consumes nothing.
        fn can_take(&self, cost: u64) -> bool;
        /// The state now.
        fn state(&self) -> State;
    }
}
