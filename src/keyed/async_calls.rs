//! [`AsyncKeyedLimiter`]: a [`KeyedLimiter`]'s takes as futures (feature
//! `tokio`). The decisions are the keyed limiter's own; the waiting is the
//! crate's one async wait (`src/wait/tokio.rs`): a take loops on the
//! limiter's clock until it reads the slot, books an unbounded take's slot
//! only within the horizon, and gives a cancelled booking back while its
//! slot is still ahead.

use std::borrow::Borrow;
use std::fmt;
use std::future::{ready, Future};
use std::hash::Hash;
use std::sync::Arc;

use super::{Bucket, KeyOf, KeyedLimiter};
use crate::clock::{Clock, DefaultClock};
use crate::limiter::take::{AsyncTake, Booked, Error, State, Take, Taken, Within};
use crate::model::schedule::Admit;
use crate::observe::stats::{Counted, Stats};
use crate::store::Booking;
use crate::values::limit::Limit;
use crate::values::rate::Rate;
use crate::wait::held::{self, Line, Peek};
use crate::wait::tokio::{self as wait, Reserve, Reserved};
use crate::wait::{Ask, Wait};

/// A [`KeyedLimiter`] whose takes are futures: `limiter.take(&ip).await`.
/// The async face of the keyed limiter, made from a built one with
/// [`AsyncKeyedLimiter::from`] (or [`new`](Self::new)).
///
/// ```
/// use paceline::tokio::AsyncKeyedLimiter;
/// use paceline::{KeyedLimiter, Rate};
/// use paceline::AsyncTake;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = AsyncKeyedLimiter::from(
///     KeyedLimiter::<String>::builder(Rate::per_second(1000)).slack(20).build()?,
/// );
/// limiter.take("tenant-a").await?; // sleeps (as a task) until the key's slot
/// # Ok(())
/// # }
/// ```
///
/// Its takes are [`AsyncTake`]'s, per key. Clones share one limiter (an
/// `Arc` inside). The settings and the look inside (overrides, `stats`,
/// `snapshot`) are the keyed limiter's, through [`limiter`](Self::limiter).
///
/// # Cancel safety
/// Cancel safe, as [`AsyncLimiter`](crate::tokio::AsyncLimiter)'s takes,
/// per key: a give-back also needs no change, eviction or reset to have
/// moved the key's shard since; a bounded take (`take_timeout`) holds its
/// place in the key's line, counted by the takes behind it until it books
/// ([cancel safety](crate::guide::waiting#cancel-safety)).
pub struct AsyncKeyedLimiter<K, C: Clock = DefaultClock> {
    inner: Arc<KeyedLimiter<K, C>>,
    /// The cost promised to bounded takes held until their slot is within
    /// the horizon, per key (`src/wait/held.rs`).
    line: Arc<Line>,
}

impl<K: Hash + Eq + Clone> AsyncKeyedLimiter<K> {
    /// A keyed limiter at `rate` for every key, slack 10, on the
    /// [`DefaultClock`].
    ///
    /// # Panics
    /// As [`KeyedLimiter::new`].
    pub fn new(rate: Rate) -> Self {
        AsyncKeyedLimiter::from(KeyedLimiter::new(rate))
    }
}

impl<K, C: Clock> From<KeyedLimiter<K, C>> for AsyncKeyedLimiter<K, C> {
    /// The async face of `limiter`.
    fn from(limiter: KeyedLimiter<K, C>) -> Self {
        AsyncKeyedLimiter {
            inner: Arc::new(limiter),
            line: Arc::default(),
        }
    }
}

impl<K: Hash + Eq + Clone + Send + Sync, C: Clock> AsyncKeyedLimiter<K, C> {
    /// The keyed limiter: its settings (rates, overrides), its questions
    /// that consume nothing, its look inside, and
    /// [`reset`](KeyedLimiter::reset) (tasks waiting for slots they booked
    /// on a key reset keep them; one booked before the reset and then
    /// dropped gives nothing back). (Its blocking takes would block the
    /// runtime's thread: use this type's.)
    pub fn limiter(&self) -> &KeyedLimiter<K, C> {
        &self.inner
    }
}

#[cfg(feature = "persist")]
impl<K, C: Clock> AsyncKeyedLimiter<K, C> {
    /// The keyed limiter as its clones share it: what a saver's thread
    /// holds (`keyed/saver.rs`).
    pub(super) fn shared(&self) -> &Arc<KeyedLimiter<K, C>> {
        &self.inner
    }
}

impl<K, C: Clock> Clone for AsyncKeyedLimiter<K, C> {
    fn clone(&self) -> Self {
        AsyncKeyedLimiter {
            inner: Arc::clone(&self.inner),
            line: Arc::clone(&self.line),
        }
    }
}

/// All keys together, if counting: see [`KeyedStats::requests`](super::KeyedStats::requests).
impl<K, C: Clock> Counted for AsyncKeyedLimiter<K, C> {
    fn stats(&self) -> Option<Stats> {
        Counted::stats(&*self.inner)
    }
}

impl<K, C: Clock> fmt::Debug for AsyncKeyedLimiter<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AsyncKeyedLimiter")
            .field(&self.inner)
            .finish()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync, C: Clock> AsyncKeyedLimiter<K, C> {
    /// Books `cost` permits on `key` and waits for their slot, as `within`
    /// allows.
    async fn reserve<Q>(&self, key: &Q, cost: u64, within: Within) -> Result<Reserved, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    {
        let (bucket, changed) = (self.inner.bucket(key), &self.inner.changed);
        match within {
            Within::Now => bucket.reserve(cost, within.admit(), Ask::Answer).await,
            Within::Any => wait::take(&bucket, cost, None, Some(changed)).await,
            Within::Max(max_wait) => {
                let place = self.line.place(key);
                held::take_held(&bucket, cost, max_wait, &self.line, place, changed)
                    .await
                    .map_err(|e| e.timed_out(max_wait))
            }
        }
    }
}

/// Each key its own limit, as [`KeyedLimiter`]'s [`Take`] answers; the
/// tries decide at once ([`try_take_n_now`](AsyncTake::try_take_n_now)).
impl<K, Q, C> AsyncTake<Q> for AsyncKeyedLimiter<K, C>
where
    K: Hash + Eq + Clone + Send + Sync + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    C: Clock,
{
    async fn take_within(&self, key: &Q, cost: u64, within: Within) -> Result<Taken, Error> {
        if let Within::Now = within {
            return Take::try_take_n(&*self.inner, key, cost);
        }
        let reserved = self.reserve(key, cost, within).await?;
        Ok(Taken::new(reserved.went_at, self.inner.state_of(key)))
    }

    async fn book(&self, key: &Q, cost: u64, within: Within) -> Result<Booked, Error> {
        let reserved = self.reserve(key, cost, within).await?;
        let taken = Taken::new(reserved.went_at, self.inner.state_of(key));
        let owner = self.inner.owner_of(key);
        Ok(Booked::new(taken, cost, reserved.booking, owner))
    }

    async fn settle(&self, key: &Q, booked: Booked, actual: u64) -> Result<(), Error> {
        Take::settle(&*self.inner, key, booked, actual)
    }

    async fn can_take(&self, key: &Q, cost: u64) -> Result<bool, Error> {
        Ok(self.inner.wait_ahead(key, cost, Admit::Within(0)).is_ok())
    }

    async fn state(&self, key: &Q) -> Result<State, Error> {
        Ok(self.inner.state_of(key))
    }

    fn limit_for(&self, key: &Q) -> Option<Limit> {
        Take::limit_for(&*self.inner, key)
    }

    fn try_take_n_now(&self, key: &Q, cost: u64) -> Option<Result<Taken, Error>> {
        Some(Take::try_take_n(&*self.inner, key, cost))
    }
}

/// One key of a keyed limiter, as the async wait sees it.
impl<K, Q, C> Reserve for Bucket<'_, K, Q, C>
where
    K: Hash + Eq + Clone + Send + Sync,
    Q: KeyOf<K> + Sync + ?Sized,
    C: Clock,
{
    type Clock = C;

    fn clock(&self) -> &C {
        &self.limiter.clock
    }

    fn wait(&self) -> Wait {
        self.limiter.wait
    }

    fn reserve(
        &self,
        cost: u64,
        admit: Admit,
        ask: Ask,
    ) -> impl Future<Output = Result<Reserved, Error>> + Send {
        ready(
            self.limiter
                .decide_asked(self.key, cost, admit, ask)
                .map(|d| Reserved::booked(d.booking(cost))),
        )
    }

    fn undo(&self, booking: Booking) {
        self.limiter.undo(self.key, &booking);
    }
}

impl<K, Q, C> Peek for Bucket<'_, K, Q, C>
where
    K: Hash + Eq + Clone + Send + Sync,
    Q: KeyOf<K> + Sync + ?Sized,
    C: Clock,
{
    fn wait_for(&self, cost: u64, admit: Admit) -> Result<u64, Error> {
        self.limiter.wait_ahead(self.key, cost, admit)
    }

    fn count_refused(&self) {
        self.limiter.count_refused(self.key);
    }
}
