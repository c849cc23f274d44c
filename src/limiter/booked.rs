//! [`Booked`]: a take booked at an estimate, to settle with its actual
//! cost once the call it paced is done.

use std::hash::{BuildHasher, Hash};

use crate::limiter::found::Taken;
use crate::store::Booking;
use crate::values::error::Error;

/// A take booked at an estimate ([`Take::book`](crate::Take::book)), to
/// settle with its actual cost once the call it paced has answered
/// ([`Take::settle`](crate::Take::settle)): an LLM call booked at its
/// prompt's tokens and settled at the usage its answer reports, say.
/// Consumed by the settle, so a booking settles once.
///
/// - **Less than booked**: the difference goes back to the schedule, even
///   when others have booked since: never more than was booked, never
///   banking past the burst (a booking older than the burst's span has
///   nothing left to give back).
/// - **More**: the excess is charged at the settle, as debt that later
///   takes wait behind; never a refusal, since the call has happened.
/// - **Dropped unsettled**: the estimate stands.
///
/// Over settled costs, any window of `w` holds at most `S + 1 + w / T`
/// permits plus the largest excess not yet settled, and the long-run rate
/// is exact (the [model](crate::guide::model#settling-a-cost-after-the-call)
/// says why). A refund across a change of the limit or a reset is dropped:
/// the estimate stands.
#[derive(Debug)]
pub struct Booked {
    taken: Taken,
    cost: u64,
    /// What the settle runs on; `None` when there is none (a limiter of
    /// your own; a remote take that the fail-open policy admitted, or of a
    /// cost of 0 on the async face): a settle then charges only an excess
    /// and drops a refund.
    pub(crate) booking: Option<Booking>,
    /// Who booked it: a limiter's own number, with the key's hash mixed in.
    owner: u64,
}

impl Booked {
    /// A booking of `cost` that found `taken`, settled on `booking` by the
    /// limiter (and key) `owner` names.
    pub(crate) fn new(taken: Taken, cost: u64, booking: Option<Booking>, owner: u64) -> Booked {
        Booked {
            taken,
            cost,
            booking,
            owner,
        }
    }

    /// A booking a limiter of your own made by a take
    /// ([`Take::book`](crate::Take::book)'s default): its settle charges
    /// an excess by a take and drops a refund.
    pub fn taken_only(taken: Taken, cost: u64) -> Booked {
        Booked::new(taken, cost, None, 0)
    }

    /// What the take found: when its permit went, what was left.
    pub fn taken(&self) -> Taken {
        self.taken
    }

    /// The estimate booked, in permits.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The booking, if `owner` made it; a settle anywhere else is refused
    /// with a [`Error::Config`] naming the mistake, and changes nothing.
    pub(crate) fn check(self, owner: u64) -> Result<Option<Booking>, Error> {
        if self.owner == owner {
            return Ok(self.booking);
        }
        Err(Error::Config(format!(
            "a booking of {} settled on a limiter or key that did not book it: \
             settle it where it was booked",
            self.cost
        )))
    }
}

/// A number of its own for a limiter that books: no two limiters in the
/// process share one. (std's atomic, not the model checker's: it orders
/// nothing, it only counts.)
pub(crate) fn owner() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// `owner` with `key`'s hash mixed in: a booking settles on its own key.
#[cfg_attr(not(feature = "keyed"), allow(dead_code))] // the kinds with keys
pub(crate) fn owner_of<Q: Hash + ?Sized>(owner: u64, key: &Q) -> u64 {
    let hash = std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(key);
    owner.rotate_left(32) ^ hash
}
