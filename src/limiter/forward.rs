//! The take interface through a pointer: `&L`, `Arc<dyn Take<K>>` and
//! `Box<dyn Take<K>>` answer as what they point at.

use std::future::Future;
use std::sync::Arc;

use crate::limiter::take::{AsyncTake, Booked, Error, State, Take, Taken, Within};
use crate::values::limit::Limit;

/// `Take` through a pointer: `&L` answers as `L` does, for any `L`; so do
/// `Arc<dyn Take<K>>` and `Box<dyn Take<K>>`, a limiter of any kind held
/// as one. (Not every `Arc<L>`: then, with `Take` imported, a direct
/// limiter's own keyless calls on an `Arc` of it, `limiter.take()`, would
/// find the trait's first. Share a concrete limiter by reference, or by
/// cloning an async face, whose clones share one limit.)
macro_rules! forward_take {
    ($([$($generics:tt)*] $ptr:ty),*) => {$(
        impl<$($generics)*> Take<K> for $ptr {
            fn take_within(&self, key: &K, cost: u64, within: Within) -> Result<Taken, Error> {
                (**self).take_within(key, cost, within)
            }
            fn can_take(&self, key: &K, cost: u64) -> Result<bool, Error> {
                (**self).can_take(key, cost)
            }
            fn state(&self, key: &K) -> Result<State, Error> {
                (**self).state(key)
            }
            fn limit_for(&self, key: &K) -> Option<Limit> {
                (**self).limit_for(key)
            }
            fn book(&self, key: &K, cost: u64, within: Within) -> Result<Booked, Error> {
                (**self).book(key, cost, within)
            }
            fn settle(&self, key: &K, booked: Booked, actual: u64) -> Result<(), Error> {
                (**self).settle(key, booked, actual)
            }
        }
    )*};
}

forward_take!(
    [K: ?Sized, L: Take<K> + ?Sized] &L,
    [K: ?Sized] Arc<dyn Take<K>>,
    [K: ?Sized] Box<dyn Take<K>>
);

/// `AsyncTake` through a reference: `&L` answers as `L` does.
impl<K: ?Sized + Sync, L: AsyncTake<K> + ?Sized> AsyncTake<K> for &L {
    fn take_within(
        &self,
        key: &K,
        cost: u64,
        within: Within,
    ) -> impl Future<Output = Result<Taken, Error>> + Send {
        (**self).take_within(key, cost, within)
    }
    fn can_take(&self, key: &K, cost: u64) -> impl Future<Output = Result<bool, Error>> + Send {
        (**self).can_take(key, cost)
    }
    fn state(&self, key: &K) -> impl Future<Output = Result<State, Error>> + Send {
        (**self).state(key)
    }
    fn limit_for(&self, key: &K) -> Option<Limit> {
        (**self).limit_for(key)
    }
    fn try_take_n_now(&self, key: &K, cost: u64) -> Option<Result<Taken, Error>> {
        (**self).try_take_n_now(key, cost)
    }
    fn book(
        &self,
        key: &K,
        cost: u64,
        within: Within,
    ) -> impl Future<Output = Result<Booked, Error>> + Send {
        (**self).book(key, cost, within)
    }
    fn settle(
        &self,
        key: &K,
        booked: Booked,
        actual: u64,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        (**self).settle(key, booked, actual)
    }
}
