//! How a keyed limiter decides: the hot path on a tracked key (its shard's
//! read lock, the clock, the entry's CAS), the look that stores nothing,
//! the give-back of an async take dropped before its slot, and what a
//! decision carries back to a caller reporting the key's state.

use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use super::classes::Class;
use super::shard::{find, on_entry, Decided, Shard};
use super::{KeyOf, KeyedLimiter};
use crate::clock::{internal_now, Clock};
use crate::model::schedule::Admit;
use crate::primitive::{read, Ordering, RwLock};
use crate::store::Booking;
use crate::values::error::Error;
use crate::values::rate::Rate;
use crate::wait::{self, Ask};

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// The key's state, the clock and the key's class and rate, read under
    /// its shard's read lock; a key not tracked is at rest (its class's
    /// [`initial`](Class::initial) word) in the class it would be tracked
    /// in.
    pub(super) fn peek<Q: KeyOf<K> + ?Sized>(&self, key: &Q) -> (u64, u64, Class, Rate) {
        let (hash, lock) = self.shard(key);
        let shard = read(lock);
        let now = self.now();
        let (tat, class) = match find(&shard.map, hash, key) {
            Some(e) => (Some(e.tat.load(Ordering::Relaxed)), e.class()),
            // As the shard would resolve it now (an override change on
            // its way to this shard is not seen yet, as for its entries).
            None => (None, self.resolve(&shard.resolved, key)),
        };
        let class = class as usize;
        let rate = shard.resolved.settings[class].limit.rate();
        let class = shard.classes[class].clone();
        (tat.unwrap_or(class.initial()), now, class, rate)
    }

    /// The clock's reading in internal time.
    #[inline]
    pub(super) fn now(&self) -> u64 {
        internal_now(&self.clock)
    }

    /// The key's hash and its shard. The shard takes bits 32 and up: the
    /// table inside uses the low bits for the slot and the top 7 as tags.
    #[inline]
    pub(super) fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> (u64, &RwLock<Shard<K>>) {
        let hash = self.hasher.hash_one(key);
        (hash, &self.shards[(hash >> 32) as usize & self.mask])
    }

    #[inline]
    pub(super) fn wait_for(&self, now: u64, slot: u64) -> Duration {
        wait::block(
            self.wait,
            &self.clock,
            now,
            slot,
            "paceline::tokio::AsyncKeyedLimiter::take(..).await",
        )
    }

    /// The hot path: a tracked key under its shard's read lock. Returns the
    /// booking: the clock reading, the grant and the shard's generation at
    /// the decision (an undo must find it unchanged).
    #[inline]
    pub(super) fn decide<Q: KeyOf<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u64,
        admit: Admit,
    ) -> Result<Booking, Error> {
        self.decide_asked(key, cost, admit, Ask::Answer)
            .map(|d| d.booking(cost))
    }

    /// [`decide`](Self::decide), counting a refusal (in the meter and the
    /// limiter's totals and the key's refusal count) only if `ask` says it
    /// is the caller's answer.
    #[inline]
    pub(super) fn decide_asked<Q: KeyOf<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u64,
        admit: Admit,
        ask: Ask,
    ) -> Result<Decided, Error> {
        // Counted by value, each arm passing its answer on: a match on a
        // reference to the whole answer had it written in pieces and read
        // back whole (a store-forwarding stall on every take).
        match self.decide_uncounted(key, cost, admit, ask) {
            Ok(d) => {
                self.meter
                    .admitted(cost, d.grant.slot.saturating_sub(d.now));
                Ok(d)
            }
            Err(refusal) => {
                if ask.counts(&refusal) {
                    self.meter.refused();
                }
                Err(refusal)
            }
        }
    }

    /// [`decide_asked`](Self::decide_asked), before the meter counts it.
    #[inline]
    pub(super) fn decide_uncounted<Q: KeyOf<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u64,
        admit: Admit,
        ask: Ask,
    ) -> Result<Decided, Error> {
        let (hash, lock) = self.shard(key);
        {
            let shard = read(lock);
            if let Some(entry) = find(&shard.map, hash, key) {
                // The clock is read under the lock: see the module doc's "Rest".
                return on_entry(&shard, &self.counts, entry, || self.now(), cost, admit, ask);
            }
        }
        self.decide_new(lock, hash, key, cost, admit, ask)
    }

    /// Undoes `booking` on `key` by the one rule ([`Booking`]): `next` →
    /// `prev` if nobody has updated the key since; `true` when it did. Not
    /// if its shard's generation moved (a rate change, an eviction, a reset)
    /// since the booking: a rebased or re-created `tat` may come back to
    /// `next` by chance, and undoing it then would erase slots handed out
    /// since. For async takes dropped before their slot, and all-or-nothing
    /// takes another limit refused.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // an async take's give-back
    pub(crate) fn undo<Q: KeyOf<K> + ?Sized>(&self, key: &Q, booking: &Booking) -> bool {
        self.meter.cancelled();
        let Some(grant) = booking.grant() else {
            return false;
        };
        let (hash, lock) = self.shard(key);
        let shard = read(lock);
        if shard.generation != booking.generation {
            return false;
        }
        find(&shard.map, hash, key).is_some_and(|e| {
            e.tat
                .compare_exchange(grant.next, grant.prev, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Settles `booking` on `key` with its `actual` cost
    /// ([`schedule::settle`](crate::model::schedule::settle)), on the key's
    /// entry under its shard's read lock, by the CAS of a take. A refund
    /// only while the shard's generation is the booking's (changes, resets
    /// and evictions take the write lock) and the key is tracked (one that
    /// came to rest has nothing to give back); otherwise the estimate
    /// stands. An excess is charged all the same, in the key's limit in
    /// force; on a key no longer tracked, by a take of the excess, as a
    /// first take would. The state found and left; `None` when nothing was
    /// settled.
    pub(crate) fn settle_booking<Q: KeyOf<K> + ?Sized>(
        &self,
        key: &Q,
        booking: &Booking,
        actual: u64,
    ) -> Option<(u64, u64)> {
        let (hash, lock) = self.shard(key);
        let excess = actual.saturating_sub(booking.cost());
        {
            let shard = read(lock);
            if actual >= booking.cost() || shard.generation == booking.generation {
                if let Some(entry) = find(&shard.map, hash, key) {
                    let settled = (booking.went(), booking.cost(), actual);
                    let now = || self.now();
                    return Some(match &shard.classes[entry.class() as usize] {
                        Class::Paced(params) => {
                            crate::store::atomic::settle_fixed(&entry.tat, *params, now, settled)
                        }
                        Class::Window(w) => w.settle(&entry.tat, now, settled),
                    });
                }
            }
        }
        let taken =
            (excess > 0).then(|| self.decide_uncounted(key, excess, Admit::Always, Ask::Answer));
        taken
            .and_then(Result::ok)
            .map(|d| (d.grant.prev, d.grant.next))
    }

    /// Loom builds only (`--cfg paceline_loom`), for `loom-tests/`: books
    /// `cost` permits on `key` without waiting, as an async take does.
    #[cfg(paceline_loom)]
    #[doc(hidden)]
    pub fn __book<Q>(&self, key: &Q, cost: u64, admit: Admit) -> Result<Booking, Error>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.decide(key, cost, admit)
    }

    /// Loom builds only (`--cfg paceline_loom`), for `loom-tests/`:
    /// [`undo`](Self::undo), as a dropped async take runs it; `true` when
    /// the booking was undone.
    #[cfg(paceline_loom)]
    #[doc(hidden)]
    pub fn __undo<Q>(&self, key: &Q, booking: Booking) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.undo(key, &booking)
    }

    /// Loom builds only (`--cfg paceline_loom`), for `loom-tests/`:
    /// [`settle`](Self::settle).
    #[cfg(paceline_loom)]
    #[doc(hidden)]
    pub fn __settle<Q>(&self, key: &Q, booking: Booking, actual: u64) -> Option<(u64, u64)>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.settle_booking(key, &booking, actual)
    }

    /// How long a request of `cost` on `key` would wait now (ns) under
    /// `admit`, storing nothing, counting nothing and tracking no key (a
    /// held async take's look; `is_ok` under `Admit::Within(0)`:
    /// [`Take::can_take`](crate::Take::can_take)). Under a full map with
    /// [`WhenFull::Refuse`](super::WhenFull::Refuse) a new key answers as if
    /// it were tracked.
    pub(super) fn wait_ahead<Q: KeyOf<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u64,
        admit: Admit,
    ) -> Result<u64, Error> {
        let (tat, now, class, _) = self.peek(key);
        class
            .decide(tat, now, cost, admit)
            .map(|grant| grant.slot.saturating_sub(now))
    }

    /// Counts a refusal of `key` decided outside the step (a held async
    /// take's), in the meter and the key's totals.
    #[cfg(feature = "tokio")]
    pub(super) fn count_refused<Q: KeyOf<K> + ?Sized>(&self, key: &Q) {
        self.meter.refused();
        let (hash, lock) = self.shard(key);
        let shard = read(lock);
        if let Some(e) = find(&shard.map, hash, key) {
            e.touch(self.now(), true);
        }
        self.counts.add(super::REFUSED, 1);
    }
}
