//! [`AsyncLimiter`]'s answers to the take interface: one limit for every
//! key.

use super::AsyncLimiter;
use crate::clock::Clock;
use crate::limiter::take::{AsyncTake, Booked, Error, State, Taken, Within};
use crate::values::limit::Limit;

/// One limit for any key, which it ignores; the tries decide at once
/// ([`try_take_n_now`](AsyncTake::try_take_n_now)).
impl<K: ?Sized + Sync, C: Clock> AsyncTake<K> for AsyncLimiter<C> {
    async fn take_within(&self, _key: &K, cost: u64, within: Within) -> Result<Taken, Error> {
        self.within(cost, within).await
    }

    async fn can_take(&self, _key: &K, cost: u64) -> Result<bool, Error> {
        Ok(self.limiter().can_take(cost))
    }

    async fn state(&self, _key: &K) -> Result<State, Error> {
        Ok(self.limiter().state())
    }

    fn limit_for(&self, _key: &K) -> Option<Limit> {
        Some(self.limiter().limit())
    }

    fn try_take_n_now(&self, _key: &K, cost: u64) -> Option<Result<Taken, Error>> {
        Some(self.limiter().within(cost, Within::Now))
    }

    async fn book(&self, _key: &K, cost: u64, within: Within) -> Result<Booked, Error> {
        AsyncLimiter::book(self, cost, within).await
    }

    async fn settle(&self, _key: &K, booked: Booked, actual: u64) -> Result<(), Error> {
        self.limiter().settle(booked, actual)
    }
}
