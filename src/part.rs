//! [`Part`]: what a limit offers an all-or-nothing request
//! ([`all`](crate::all)): book, give back, wait. Here, below both the
//! direct limiters and the keyed one, which implement it; `all` only
//! composes.

use crate::error::TakeError;
use crate::schedule::{Admit, Grant};

/// A limit that can take part in an all-or-nothing request: a direct
/// limiter, or one key of a keyed limiter (`KeyedLimiter::bucket`).
/// Sealed: its methods are paceline's own.
pub trait Part: sealed::Part {}

impl<T: sealed::Part + ?Sized> Part for T {}

/// A part's booking, as its give-back and its wait need it. (`pub` in a
/// private module: the sealed trait names it, no user can.)
#[derive(Clone, Copy, Debug)]
pub struct Held {
    /// The part's clock at the decision.
    pub(crate) now: u64,
    pub(crate) grant: Grant,
    /// The part's count of changes (or of its shard's moves) before the
    /// decision: a give-back is refused if it moved.
    pub(crate) check: u64,
}

pub(crate) mod sealed {
    use super::{Admit, Held, TakeError};

    pub trait Part {
        /// Books `cost` permits if `admit` allows.
        fn reserve(&self, cost: u64, admit: Admit) -> Result<Held, TakeError>;
        /// Undoes `held` if nobody has booked since.
        fn give_back(&self, held: Held);
        /// Blocks until `held`'s slot, on the part's clock.
        fn wait(&self, held: &Held);
    }
}
