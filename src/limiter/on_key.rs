//! [`OnKey`]: one key of a keyed or remote limiter, as a direct limiter.

use std::future::Future;

use crate::limiter::take::{AsyncTake, Booked, Error, State, Take, Taken, Within};
use crate::values::limit::Limit;

/// One key of a keyed or remote limiter, as a direct limiter: every call
/// takes from that key's limit (its own rate and slack, overrides
/// included), and the key it is handed (`()`) is ignored.
///
/// It answers [`Take`] when `L` answers `Take<K>` (a `&KeyedLimiter<K>`, an
/// `Arc` of one, a `RedisLimiter` with a `String` key), and [`AsyncTake`]
/// when `L` answers `AsyncTake<K>` (an `AsyncKeyedLimiter<K>`, an
/// `AsyncRedisLimiter`). So a fitting written for one limit takes one key of
/// any limiter: a paced byte stream per tenant
/// ([`io`](crate::io), which re-exports it), a `PaceLayer` on one Redis key.
///
/// ```
/// # #[cfg(feature = "keyed")]
/// # fn main() -> Result<(), paceline::Error> {
/// use paceline::{KeyedLimiter, take::OnKey, Rate, Take};
///
/// let per_tenant = KeyedLimiter::<String>::new(Rate::per_second(10));
/// let tenant_a = OnKey::new(&per_tenant, "a".to_string());
/// tenant_a.try_take(&())?;
/// assert_eq!(per_tenant.state(&"a".to_string())?.available(), 10); // of 11
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "keyed"))]
/// # fn main() {}
/// ```
#[derive(Clone, Debug)]
pub struct OnKey<L, K> {
    limiter: L,
    key: K,
}

impl<L, K> OnKey<L, K> {
    /// Takes through `limiter` on `key`.
    pub fn new(limiter: L, key: K) -> Self {
        OnKey { limiter, key }
    }

    /// The limiter.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    /// The limiter, to change it in place (a lease sets its limit).
    pub fn limiter_mut(&mut self) -> &mut L {
        &mut self.limiter
    }

    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<L: Take<K>, K: Send + Sync> Take for OnKey<L, K> {
    fn take_within(&self, _: &(), cost: u64, within: Within) -> Result<Taken, Error> {
        self.limiter.take_within(&self.key, cost, within)
    }
    fn can_take(&self, _: &(), cost: u64) -> Result<bool, Error> {
        self.limiter.can_take(&self.key, cost)
    }
    fn state(&self, _: &()) -> Result<State, Error> {
        self.limiter.state(&self.key)
    }
    fn limit_for(&self, _: &()) -> Option<Limit> {
        self.limiter.limit_for(&self.key)
    }
    fn book(&self, _: &(), cost: u64, within: Within) -> Result<Booked, Error> {
        self.limiter.book(&self.key, cost, within)
    }
    fn settle(&self, _: &(), booked: Booked, actual: u64) -> Result<(), Error> {
        self.limiter.settle(&self.key, booked, actual)
    }
}

impl<L: AsyncTake<K>, K: Send + Sync> AsyncTake for OnKey<L, K> {
    fn take_within(
        &self,
        _: &(),
        cost: u64,
        within: Within,
    ) -> impl Future<Output = Result<Taken, Error>> + Send {
        self.limiter.take_within(&self.key, cost, within)
    }
    fn can_take(&self, _: &(), cost: u64) -> impl Future<Output = Result<bool, Error>> + Send {
        self.limiter.can_take(&self.key, cost)
    }
    fn state(&self, _: &()) -> impl Future<Output = Result<State, Error>> + Send {
        self.limiter.state(&self.key)
    }
    fn limit_for(&self, _: &()) -> Option<Limit> {
        self.limiter.limit_for(&self.key)
    }
    fn try_take_n_now(&self, _: &(), cost: u64) -> Option<Result<Taken, Error>> {
        self.limiter.try_take_n_now(&self.key, cost)
    }
    fn book(
        &self,
        _: &(),
        cost: u64,
        within: Within,
    ) -> impl Future<Output = Result<Booked, Error>> + Send {
        self.limiter.book(&self.key, cost, within)
    }
    fn settle(
        &self,
        _: &(),
        booked: Booked,
        actual: u64,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.limiter.settle(&self.key, booked, actual)
    }
}
