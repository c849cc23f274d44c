//! The async face of [`KeyedLimiter`] (feature `tokio`).

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::shard::find;
use super::{read, KeyedLimiter};
use crate::clock::Clock;
use crate::error::TakeError;
use crate::schedule::{Admit, Grant, ORIGIN};

/// The async face (feature `tokio`): the same decisions, waiting on Tokio's
/// timer instead of blocking the thread.
impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// [`take`](Self::take) for async code: reserves the key's next slot and
    /// sleeps on Tokio's timer until it.
    ///
    /// ```
    /// use paceline::{KeyedLimiter, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), paceline::TakeError> {
    /// let limiter = KeyedLimiter::<&str>::new(Rate::per_second(1000));
    /// limiter.take_async(&"tenant-a").await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the future before its slot gives the slot back if no one has
    /// reserved on this key since (and no rate change or eviction has moved
    /// its shard's keys since); otherwise the slot is spent. Either way the
    /// call counts as admitted in [`stats`](Self::stats).
    ///
    /// # Errors
    /// [`TakeError::TooManyKeys`].
    pub async fn take_async<Q>(&self, key: &Q) -> Result<Duration, TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.take_n_async(key, 1).await
    }

    /// [`take_n`](Self::take_n) for async code.
    ///
    /// # Cancel safety
    /// As [`take_async`](Self::take_async).
    ///
    /// # Errors
    /// [`TakeError::CostTooLarge`]; [`TakeError::TooManyKeys`].
    pub async fn take_n_async<Q>(&self, key: &Q, cost: u64) -> Result<Duration, TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let decided = self.decide(key, cost, Admit::Always)?;
        self.sleep_to(key, decided).await
    }

    /// [`take_timeout`](Self::take_timeout) for async code: fails at once if
    /// the key's next slot is more than `max_wait` away, else sleeps until it.
    ///
    /// # Cancel safety
    /// As [`take_async`](Self::take_async).
    ///
    /// # Errors
    /// [`TakeError::QueueFull`]; [`TakeError::TooManyKeys`].
    pub async fn take_timeout_async<Q>(
        &self,
        key: &Q,
        max_wait: Duration,
    ) -> Result<Duration, TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.take_n_timeout_async(key, 1, max_wait).await
    }

    /// [`take_n_timeout`](Self::take_n_timeout) for async code: fails at once
    /// if the slot is more than `max_wait` away, else sleeps until it.
    ///
    /// # Cancel safety
    /// As [`take_async`](Self::take_async).
    ///
    /// # Errors
    /// [`TakeError::QueueFull`]; [`TakeError::ExceedsBurst`];
    /// [`TakeError::CostTooLarge`]; [`TakeError::TooManyKeys`].
    pub async fn take_n_timeout_async<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let decided = self.decide_timeout(key, cost, max_wait)?;
        self.sleep_to(key, decided).await
    }

    /// Sleeps on Tokio's timer until `grant.slot`, giving it back if dropped
    /// first.
    async fn sleep_to<Q>(
        &self,
        key: &Q,
        (now, grant, moves): (u64, Grant, u64),
    ) -> Result<Duration, TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if grant.slot > now {
            let mut pending = Pending {
                limiter: self,
                key: key.to_owned(),
                grant,
                moves,
                armed: true,
            };
            tokio::time::sleep(Duration::from_nanos(grant.slot - now)).await;
            pending.armed = false;
        }
        Ok(Duration::from_nanos(grant.slot.max(now) - ORIGIN))
    }

    /// Puts `grant` back on `key` (`next` → `prev`) if nobody has updated the
    /// key since; `true` when it did. Not if its shard's entries were moved
    /// (`moves`) since the grant: a rebased or re-created `tat` may come back
    /// to `grant.next` by chance, and undoing it then would erase slots
    /// handed out since.
    fn give_back(&self, key: &K, grant: Grant, moves: u64) -> bool {
        let (hash, lock) = self.shard(key);
        let shard = read(lock);
        if shard.moves != moves {
            return false;
        }
        find(&shard.map, hash, key).is_some_and(|e| {
            e.tat
                .compare_exchange(grant.next, grant.prev, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        })
    }
}

/// A reserved slot an async caller is sleeping towards; dropped before the
/// slot (the future was cancelled), it gives the slot back.
struct Pending<'a, K: Hash + Eq + Clone, C: Clock> {
    limiter: &'a KeyedLimiter<K, C>,
    key: K,
    grant: Grant,
    /// The shard's `moves` at the grant.
    moves: u64,
    /// Cleared once the slot is reached.
    armed: bool,
}

impl<K: Hash + Eq + Clone, C: Clock> Drop for Pending<'_, K, C> {
    fn drop(&mut self) {
        if self.armed {
            self.limiter.give_back(&self.key, self.grant, self.moves);
        }
    }
}
