//! A keyed limiter's answers to the take interface: each key its own limit
//! (its override's, if it has one).

use std::borrow::Borrow;
use std::hash::Hash;

use super::shard::WINDOW;
use super::{KeyOf, KeyedLimiter};
use crate::clock::Clock;
use crate::limiter::take::{Booked, Error, State, Take, Taken, Within};
use crate::model::schedule::{Admit, ORIGIN};
use crate::values::limit::Limit;
use crate::wait::Ask;

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// Who books on `key`: this limiter, and the key.
    pub(crate) fn owner_of<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        crate::limiter::booked::owner_of(self.id, key)
    }

    /// `key`'s state now, as [`Take::state`] reports it.
    pub(crate) fn state_of<Q: KeyOf<K> + ?Sized>(&self, key: &Q) -> State {
        let (tat, now, class, rate) = self.peek(key);
        class.state(tat, now, rate)
    }
}

impl<K, Q, C> Take<Q> for KeyedLimiter<K, C>
where
    K: Hash + Eq + Clone + Borrow<Q> + Send + Sync,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    C: Clock,
{
    #[inline]
    fn take_within(&self, key: &Q, cost: u64, within: Within) -> Result<Taken, Error> {
        if let Within::Now = within {
            // The decision and the state it left (from the new state word
            // and the entry's class and limit, which the decision carries),
            // in one lookup under one lock, as the HTTP layer's admitted
            // path needs it.
            let d = self.decide_asked(key, cost, Admit::Within(0), Ask::Answer)?;
            let at = d.grant.slot.max(d.now).saturating_sub(ORIGIN);
            if d.params.interval() == WINDOW.interval() {
                // A window key: what its new word leaves, read under the
                // decision's lock.
                let l = d.left;
                return Ok(Taken::left(at, l.available, l.next_free, l.reset));
            }
            return Ok(Taken::reading(at, d.grant.next, d.params, 0, 0));
        }
        let booking = self.decide(key, cost, within.admit());
        let booking = booking.map_err(|e| within.refusal(e))?;
        let at = self.wait_for(booking.now, booking.slot);
        Ok(Taken::new(at, self.state_of(key)))
    }

    fn can_take(&self, key: &Q, cost: u64) -> Result<bool, Error> {
        Ok(self.wait_ahead(key, cost, Admit::Within(0)).is_ok())
    }

    fn state(&self, key: &Q) -> Result<State, Error> {
        Ok(self.state_of(key))
    }

    /// The limit in force for `key` (its override's, its parent's, or the
    /// default): [`limit_of`](KeyedLimiter::limit_of)'s.
    fn limit_for(&self, key: &Q) -> Option<Limit> {
        Some(self.limit_of(key))
    }

    fn book(&self, key: &Q, cost: u64, within: Within) -> Result<Booked, Error> {
        let booking = self.decide(key, cost, within.admit());
        let booking = booking.map_err(|e| within.refusal(e))?;
        let at = self.wait_for(booking.now, booking.slot);
        let taken = Taken::new(at, self.state_of(key));
        Ok(Booked::new(taken, cost, Some(booking), self.owner_of(key)))
    }

    /// Settles on `key`'s entry by the CAS of a take; a refund only while
    /// the key is tracked and no change of the limits, reset or eviction
    /// came between (otherwise the estimate stands); an excess on a key no
    /// longer tracked is charged by a take of it.
    fn settle(&self, key: &Q, booked: Booked, actual: u64) -> Result<(), Error> {
        if let Some(booking) = booked.check(self.owner_of(key))? {
            if actual == 0 {
                self.meter.cancelled();
            }
            self.settle_booking(key, &booking, actual);
        }
        Ok(())
    }
}
