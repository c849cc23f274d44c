//! [`Bucket`]: one key of a [`KeyedLimiter`], as a part of an
//! all-or-nothing request ([`all`](crate::all)).

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;

use super::KeyedLimiter;
use crate::clock::Clock;
use crate::limiter::take::{Booked, Error, State, Take, Taken, Within};
use crate::values::limit::Limit;

/// One key of a [`KeyedLimiter`], made by [`KeyedLimiter::bucket`]: a
/// part of an all-or-nothing request, or a limit of its own.
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

/// The key's limit, as a direct limiter's: every call takes from the key,
/// and the unit key it is handed is ignored.
impl<K, Q, C> Take for Bucket<'_, K, Q, C>
where
    K: Hash + Eq + Clone + Borrow<Q> + Send + Sync,
    Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    C: Clock,
{
    fn take_within(&self, _: &(), cost: u64, within: Within) -> Result<Taken, Error> {
        self.limiter.take_within(self.key, cost, within)
    }

    fn can_take(&self, _: &(), cost: u64) -> Result<bool, Error> {
        Take::can_take(self.limiter, self.key, cost)
    }

    fn state(&self, _: &()) -> Result<State, Error> {
        Ok(self.limiter.state_of(self.key))
    }

    fn limit_for(&self, _: &()) -> Option<Limit> {
        Take::limit_for(self.limiter, self.key)
    }

    fn book(&self, _: &(), cost: u64, within: Within) -> Result<Booked, Error> {
        Take::book(self.limiter, self.key, cost, within)
    }

    fn settle(&self, _: &(), booked: Booked, actual: u64) -> Result<(), Error> {
        Take::settle(self.limiter, self.key, booked, actual)
    }
}

impl<K, Q: fmt::Debug + ?Sized, C: Clock> fmt::Debug for Bucket<'_, K, Q, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bucket")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}
