//! [`AsyncLimiter`]'s answers to the take interface: one limit for every
//! key.

use super::AsyncLimiter;
use crate::clock::Clock;
use crate::limiter::take::{AsyncTake, Error, State, Take, Taken, Within};
use crate::values::limit::Limit;

/// One limit for any key, which it ignores; the tries decide at once
/// ([`try_take_n_now`](AsyncTake::try_take_n_now)).
impl<K: ?Sized + Sync, C: Clock> AsyncTake<K> for AsyncLimiter<C> {
    async fn take_within(&self, key: &K, cost: u64, within: Within) -> Result<Taken, Error> {
        let at = match within {
            Within::Now => return Take::try_take_n(self.limiter(), key, cost),
            Within::Any => AsyncLimiter::take_n(self, cost).await?,
            Within::Max(max_wait) => AsyncLimiter::take_n_timeout(self, cost, max_wait).await?,
        };
        Ok(Taken::new(at, self.limiter().state_now()))
    }

    async fn can_take(&self, _key: &K, cost: u64) -> Result<bool, Error> {
        Ok(AsyncLimiter::can_take(self, cost))
    }

    async fn state(&self, _key: &K) -> Result<State, Error> {
        Ok(self.limiter().state_now())
    }

    fn limit_for(&self, key: &K) -> Option<Limit> {
        Take::limit_for(self.limiter(), key)
    }

    fn try_take_n_now(&self, key: &K, cost: u64) -> Option<Result<Taken, Error>> {
        Some(Take::try_take_n(self.limiter(), key, cost))
    }
}
