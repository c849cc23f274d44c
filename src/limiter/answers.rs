//! The direct limiters' answers to the take interface: [`Pacer`] (every
//! `AtomicLimiter`, `MutexLimiter`, `WarmUpLimiter`) and [`Unlimited`], for
//! any key, which they ignore.

use std::time::Duration;

use crate::clock::Clock;
use crate::limiter::pacer::Pacer;
use crate::limiter::take::{Booked, Error, State, Take, Taken, Within};
use crate::limiter::unlimited::Unlimited;
use crate::store::Store;
use crate::values::limit::Limit;

impl<K: ?Sized, S: Store, C: Clock> Take<K> for Pacer<S, C> {
    #[inline(always)]
    fn take_within(&self, _key: &K, cost: u64, within: Within) -> Result<Taken, Error> {
        self.within(cost, within)
    }

    fn can_take(&self, _key: &K, cost: u64) -> Result<bool, Error> {
        Ok(Pacer::can_take(self, cost))
    }

    fn state(&self, _key: &K) -> Result<State, Error> {
        Ok(Pacer::state(self))
    }

    fn limit_for(&self, _key: &K) -> Option<Limit> {
        Some(self.limit())
    }

    fn book(&self, _key: &K, cost: u64, within: Within) -> Result<Booked, Error> {
        Pacer::book(self, cost, within)
    }

    fn settle(&self, _key: &K, booked: Booked, actual: u64) -> Result<(), Error> {
        Pacer::settle(self, booked, actual)
    }
}

/// What [`Unlimited`] reports: everything free, nothing limiting.
const FREE: State = State::new(u64::MAX, Duration::ZERO, None);

impl<K: ?Sized> Take<K> for Unlimited {
    fn take_within(&self, _key: &K, _cost: u64, _within: Within) -> Result<Taken, Error> {
        Ok(Taken::new(Duration::ZERO, FREE))
    }
    fn can_take(&self, _key: &K, _cost: u64) -> Result<bool, Error> {
        Ok(true)
    }
    fn state(&self, _key: &K) -> Result<State, Error> {
        Ok(FREE)
    }
    fn limit_for(&self, _key: &K) -> Option<Limit> {
        None
    }
}

#[cfg(feature = "tokio")]
impl<K: ?Sized + Sync> crate::limiter::take::AsyncTake<K> for Unlimited {
    async fn take_within(&self, _key: &K, _cost: u64, _within: Within) -> Result<Taken, Error> {
        Ok(Taken::new(Duration::ZERO, FREE))
    }
    async fn can_take(&self, _key: &K, _cost: u64) -> Result<bool, Error> {
        Ok(true)
    }
    async fn state(&self, _key: &K) -> Result<State, Error> {
        Ok(FREE)
    }
    fn limit_for(&self, _key: &K) -> Option<Limit> {
        None
    }
    fn try_take_n_now(&self, _key: &K, _cost: u64) -> Option<Result<Taken, Error>> {
        Some(Ok(Taken::new(Duration::ZERO, FREE)))
    }
}
