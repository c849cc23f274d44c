//! A key not yet tracked: its first decision, its entry's insert, and the
//! ceiling on tracked keys (`KeyedLimiter::decide_new` and the sweeps and
//! evictions it may run to make room).
//!
//! The ceiling is on the whole map: one atomic count of tracked keys, which
//! an insert raises (a CAS that never passes `max_keys`) before it adds its
//! entry, and a sweep or an eviction lowers. So the map fills to exactly
//! `max_keys` before [`WhenFull`] acts, whatever the number of shards and
//! however the keys hash. (Per-shard caps of `max_keys / shards` made the
//! first shard to fill act for all: at 3-20 % of a ceiling of 64, about half
//! of 1 000, 80 % of 10 000.)
//!
//! A shard sweeps itself when an insert finds its table full: it drops
//! entries at rest, and the table grows only if that freed less than half
//! of it (and shrinks if it is now three quarters empty). Keys at rest thus
//! cost nothing until their room is needed, and a key that comes back
//! before then is still a cheap hit. A sweep is bounded by the shard's size
//! (about a thousand entries) and amortized O(1) per insert, like a `Vec`'s
//! growth; it never stops the other shards. A shard also remembers the
//! earliest time any of its entries can come to rest and does not sweep
//! before it.
//!
//! An insert that finds the map at its ceiling drops keys at rest first: its
//! own shard's, then, if a hint (a lower bound on when any key can come to
//! rest) says some may be, every other shard's that it can lock without
//! waiting. Only a map full of busy keys leaves the choice to [`WhenFull`];
//! `Evict` evicts from the new key's shard, or from another when that one is
//! empty. The room a sweep or an eviction frees passes to the insert that
//! made it (the count goes down by all it freed but one), so a concurrent
//! insert cannot take it in between. An insert holds one shard's lock and
//! takes others' only with `try_write`, so two inserts never wait on each
//! other.

use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use super::classes::rest_time;
use super::shard::{evict, find, on_entry, sweep, Decided, Entry, Shard};
use super::{KeyOf, KeyedLimiter, ADMITTED, MIN_SWEEP, PRUNE_GRACE, REFUSED, UNTRACKED};
use crate::clock::Clock;
use crate::model::schedule::Admit;
use crate::primitive::{read, write, Ordering, RwLock};
use crate::values::error::Error;
use crate::wait::Ask;

/// When a full shard evicts, it evicts this fraction (1/8) of its entries at
/// once, so the next inserts find room without another scan.
const EVICT_SHIFT: u32 = 3;

/// What a [`KeyedLimiter`] does with a new key when it already tracks
/// `max_keys` keys and none of them is at rest.
///
/// Keys at rest are always dropped first (that changes no decision). The
/// choice is only about keys that still carry debt:
///
/// | policy | memory | new keys | tracked keys |
/// |---|---|---|---|
/// | `Evict` (default) | bounded | always limited | an evicted key forgets its debt |
/// | `Refuse` | bounded | refused (`TooManyKeys`) | exact |
/// | `Admit` | bounded | admitted unlimited | exact |
///
/// In short: `Evict` never locks anyone out and keeps every key limited, at
/// the price of letting a flood of new keys push busy keys out early (each
/// forgets the debt it still carried, and may be admitted that much too
/// soon); `Refuse` fails closed and `Admit` fails open. Memory stays under the ceiling in all three.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WhenFull {
    /// Drop the eighth of the new key's shard's keys nearest to rest
    /// (smallest remaining debt; another shard's if that one is empty),
    /// then track the new key. A flood of one-off keys mostly evicts
    /// itself, since a key used once is a key nearly at rest; a busy key that
    /// is evicted regains at most its burst early. New keys stay limited.
    #[default]
    Evict,
    /// Refuse the new key's request with [`Error::TooManyKeys`]: tracked
    /// keys keep exact decisions, but once an attacker fills the map, new
    /// legitimate keys are locked out until keys come to rest (fail closed).
    Refuse,
    /// Admit the new key's request as if it were at rest, without tracking
    /// it: tracked keys stay exact and nobody is locked out, but untracked
    /// keys are not limited while the map is full (fail open).
    Admit,
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// A key not (yet) tracked: decide on a bucket at rest, and track the key
    /// if the decision stores something.
    #[cold]
    pub(super) fn decide_new<Q: KeyOf<K> + ?Sized>(
        &self,
        lock: &RwLock<Shard<K>>,
        hash: u64,
        key: &Q,
        cost: u64,
        admit: Admit,
        ask: Ask,
    ) -> Result<Decided, Error> {
        let mut guard = write(lock);
        let now = self.now();
        let shard = &mut *guard;
        // Another thread may have tracked it meanwhile.
        if let Some(entry) = find(&shard.map, hash, key) {
            return on_entry(shard, &self.counts, entry, || now, cost, admit, ask);
        }
        // Acquire: pairs with `publish`'s release, so a new epoch comes
        // with the table published before it.
        let epoch = self.epoch.load(Ordering::Acquire);
        if shard.epoch != epoch {
            // An override change is on its way to this shard: apply it here
            // first so the new entry's class refers to this shard's table.
            let resolved = Arc::clone(&read(&self.resolved));
            self.reresolve(shard, &resolved, now);
            shard.epoch = epoch;
        }
        let class = self.resolve(&shard.resolved, key);
        let c = &shard.classes[class as usize];
        let grant = match c.decide(c.initial(), now, cost, admit) {
            // When it will be at rest, read while the class is at hand.
            Ok(grant) => (grant, rest_time(grant.next, c)),
            Err(refusal) => {
                if ask.counts(&refusal) {
                    self.counts.add(REFUSED, 1);
                }
                return Err(refusal);
            }
        };
        let (grant, rest) = grant;
        if grant.next == grant.prev {
            // A cost of 0: nothing to remember, but a call admitted all the
            // same, as it counts on a tracked key.
            self.counts.add(ADMITTED, 1);
            return Ok(Decided::on(shard, class, now, grant));
        }
        if shard.map.len() >= shard.sweep_at {
            self.tidy(shard, now);
        }
        if !self.claim(lock, shard, now) {
            return match self.when_full {
                WhenFull::Refuse => {
                    self.counts.add(REFUSED, 1);
                    Err(Error::TooManyKeys {
                        max_keys: self.max_keys,
                    })
                }
                // `Admit` decides as at rest; so does `Evict` in the rare
                // case that it found nothing to evict (see `claim`).
                WhenFull::Admit | WhenFull::Evict => {
                    self.counts.add_each([(ADMITTED, 1), (UNTRACKED, 1)]);
                    Ok(Decided::on(shard, class, now, grant))
                }
            };
        }
        shard.earliest_rest = shard.earliest_rest.min(rest);
        // Relaxed: a hint read under no lock (see `claim`); updated while
        // this shard is locked, so a sweep that reads it after this sees the
        // entry.
        if rest < self.next_rest.load(Ordering::Relaxed) {
            self.next_rest.fetch_min(rest, Ordering::Relaxed);
        }
        let entry = Entry::new(grant.next, class, now);
        self.counts.add(ADMITTED, 1);
        let hasher = &self.hasher;
        shard
            .map
            .insert_unique(hash, (key.to_owned(), entry), |(k, _)| hasher.hash_one(k));
        Ok(Decided::on(shard, class, now, grant))
    }

    /// Called when an insert finds `shard` at its sweep mark: drops its
    /// entries at rest (if any may be) and sizes its table for what is left.
    /// The ceiling is not this shard's concern: see [`claim`](Self::claim).
    fn tidy(&self, shard: &mut Shard<K>, now: u64) {
        if now >= shard.earliest_rest {
            self.release(sweep(shard, now));
        }
        let len = shard.map.len();
        let mut room = shard.map.capacity();
        if len.saturating_mul(4) < room && room > 2 * MIN_SWEEP {
            // Mostly idle now: give memory back.
            let hasher = &self.hasher;
            shard
                .map
                .shrink_to(len.saturating_mul(2).max(MIN_SWEEP), |(k, _)| {
                    hasher.hash_one(k)
                });
            room = shard.map.capacity();
        }
        // Sweep again when the table is full (keys at rest cost nothing
        // until their room is needed), or, if this sweep freed less than
        // half of it, once it has doubled.
        let next = if len.saturating_mul(2) > room {
            room.saturating_mul(2)
        } else {
            room
        };
        shard.sweep_at = next.max(MIN_SWEEP).max(len + 1);
    }

    /// Counts one more tracked key against `max_keys` for an insert into
    /// `shard` (locked for writing, through `lock`); `false` if the map is
    /// full and [`WhenFull`] says not to make room.
    ///
    /// At the ceiling it drops keys at rest first: `shard`'s, then, if the
    /// hint `next_rest` says some may be at rest, every other shard's it
    /// can lock without waiting. Only then does it evict (under
    /// [`WhenFull::Evict`]): `shard`'s eighth nearest to rest, or, when
    /// `shard` is empty, another's. What a sweep or an eviction frees is
    /// handed over whole, less the one key claimed, so no other insert can
    /// take the room in between.
    fn claim(&self, lock: &RwLock<Shard<K>>, shard: &mut Shard<K>, now: u64) -> bool {
        // Relaxed: the count only has to be exact, and every change to it is
        // one RMW; the entries it counts are published by the shard locks.
        let below = |count| (count < self.max_keys).then_some(count + 1);
        let claimed = self
            .tracked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, below);
        if claimed.is_ok() {
            return true;
        }
        // Full. Keys at rest go first, this shard's...
        if now >= shard.earliest_rest && self.hand_over(sweep(shard, now)) {
            return true;
        }
        // ... then the others', if any may be at rest.
        if now >= self.next_rest.load(Ordering::Relaxed) && self.sweep_others(lock, now) {
            return true;
        }
        if self.when_full != WhenFull::Evict {
            return false;
        }
        let len = shard.map.len();
        if len > 0 {
            return self.hand_over(evict(shard, len >> EVICT_SHIFT));
        }
        // This shard is empty (the ceiling is on the whole map): evict from
        // another. Holding this shard's lock, take others' only without
        // waiting, so two inserts cannot wait on each other.
        for other in self.shards.iter() {
            if std::ptr::eq(&**other, lock) {
                continue;
            }
            if let Ok(mut other) = other.try_write() {
                let len = other.map.len();
                if len > 0 {
                    return self.hand_over(evict(&mut other, len >> EVICT_SHIFT));
                }
            }
        }
        // Every other shard with keys was locked by another thread at that
        // instant: vanishingly rare, and the caller admits untracked.
        false
    }

    /// Sweeps every shard but `lock`'s that it can lock without waiting,
    /// refreshes the `next_rest` hint, and claims one of the freed keys.
    #[cold]
    fn sweep_others(&self, lock: &RwLock<Shard<K>>, now: u64) -> bool {
        let seen = self.next_rest.load(Ordering::Relaxed);
        let (mut freed, mut next) = (0, u64::MAX);
        for other in self.shards.iter() {
            if std::ptr::eq(&**other, lock) {
                continue;
            }
            match other.try_write() {
                Ok(mut other) => {
                    if now >= other.earliest_rest {
                        freed += sweep(&mut other, now);
                    }
                    next = next.min(other.earliest_rest);
                }
                // Busy: look again a grace later, so that contention
                // cannot make every insert at the ceiling sweep.
                Err(_) => next = next.min(now.saturating_add(PRUNE_GRACE)),
            }
        }
        // (This shard's own earliest rest is past `now`: the caller swept it.)
        // Lost to a lower value stored meanwhile (an insert), the hint stays
        // the lower: it may only come early, which costs a sweep.
        let _ = self
            .next_rest
            .compare_exchange(seen, next, Ordering::Relaxed, Ordering::Relaxed);
        self.hand_over(freed)
    }

    /// Gives `freed` dropped keys back to the count but one, which the caller
    /// takes; `false` (giving nothing back) if `freed` is 0.
    fn hand_over(&self, freed: usize) -> bool {
        self.release(freed.saturating_sub(1));
        freed > 0
    }

    /// Gives `freed` dropped keys back to the count of tracked keys.
    pub(super) fn release(&self, freed: usize) {
        if freed > 0 {
            self.tracked.fetch_sub(freed, Ordering::Relaxed);
        }
    }
}
