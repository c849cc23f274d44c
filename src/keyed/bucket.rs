//! [`Bucket`]: one key of a [`KeyedLimiter`], as a part of an
//! all-or-nothing request ([`all`](crate::all)).

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;

use super::KeyedLimiter;
use crate::clock::Clock;
use crate::limiter::part::sealed::Part;
use crate::limiter::take::State;
use crate::model::schedule::Admit;
use crate::store::Booking;
use crate::values::error::Error;

/// One key of a [`KeyedLimiter`], made by [`KeyedLimiter::bucket`]: a
/// [`Part`](crate::all::Part) of an all-or-nothing request.
pub struct Bucket<'a, K, Q: ?Sized, C: Clock> {
    pub(super) limiter: &'a KeyedLimiter<K, C>,
    pub(super) key: &'a Q,
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// `key`'s bucket, to take from together with other limits through
    /// [`All`](crate::all::All): `All::new([&per_user.bucket("alice"), &global])`.
    pub fn bucket<'a, Q>(&'a self, key: &'a Q) -> Bucket<'a, K, Q, C>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        Bucket { limiter: self, key }
    }
}

impl<K, Q, C> Part for Bucket<'_, K, Q, C>
where
    K: Hash + Eq + Clone + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    C: Clock,
{
    fn book(&self, cost: u64, admit: Admit) -> Result<Booking, Error> {
        self.limiter.decide(self.key, cost, admit)
    }

    fn undo(&self, booking: &Booking) {
        self.limiter.undo(self.key, booking);
    }

    fn wait(&self, booking: &Booking) {
        self.limiter.wait_for(booking.now, booking.slot);
    }

    fn can_take(&self, cost: u64) -> bool {
        self.limiter
            .wait_ahead(self.key, cost, Admit::Within(0))
            .is_ok()
    }

    fn state(&self) -> State {
        self.limiter.state_of(self.key)
    }
}

impl<K, Q: fmt::Debug + ?Sized, C: Clock> fmt::Debug for Bucket<'_, K, Q, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bucket")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}
