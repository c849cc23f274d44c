//! One shard of a keyed limiter's map: the entries, the step on one, and the
//! sweeps that drop entries at rest or evict the nearest to it.

use std::borrow::Borrow;
use std::sync::Arc;

use hashbrown::HashTable;

use super::classes::{rest_time, Class, Resolved};
use crate::error::TakeError;
use crate::primitive::{AtomicU32, AtomicU64, Ordering};
use crate::schedule::{Admit, Grant};
use crate::store::atomic;
use crate::wait::Ask;

/// One tracked key's bucket and counters: 24 bytes.
pub(super) struct Entry {
    /// The state word, as in `AtomicLimiter` but unpadded.
    pub(super) tat: AtomicU64,
    /// Calls admitted (a cost of `n` counts once), modulo 2^32: each wrap
    /// adds 2^32 to the shard's `wrapped_admitted`.
    pub(super) admitted: AtomicU32,
    /// Calls refused, modulo 2^32 likewise.
    pub(super) refused: AtomicU32,
    /// The last call, in units of 2^[`IDLE_SHIFT`] ns of internal time,
    /// modulo 2^32 (about 52 days).
    pub(super) last: AtomicU32,
    /// Index into the shard's class table.
    pub(super) class: u32,
}

/// Idle time is kept in units of 2^20 ns (about 1 ms): enough for an admin
/// page, and it fits the last-use time in 32 bits.
pub(super) const IDLE_SHIFT: u32 = 20;

/// `now` in idle units, modulo 2^32.
#[inline]
pub(super) fn coarse(now: u64) -> u32 {
    (now >> IDLE_SHIFT) as u32
}

/// One shard of the map, under its `RwLock`.
pub(super) struct Shard<K> {
    /// Keys and buckets, placed by the limiter's hash (computed once per
    /// call, for the shard and the slot alike).
    pub(super) map: HashTable<(K, Entry)>,
    /// The class table the entries' `class` indices refer to
    /// (`resolved.classes`, one pointer closer).
    pub(super) classes: Arc<[Class]>,
    /// The overrides new entries are resolved with.
    pub(super) resolved: Arc<Resolved<K>>,
    /// The limiter's `epoch` when `resolved` was taken.
    pub(super) epoch: u64,
    /// No entry can come to rest (plus grace) before this internal time.
    pub(super) earliest_rest: u64,
    /// Sweep when an insert finds this many entries.
    pub(super) sweep_at: usize,
    /// Counters of entries no longer in `map`.
    pub(super) retired_admitted: u64,
    pub(super) retired_refused: u64,
    /// 2^32 for each wrap of an entry's counter (rare: no contention).
    pub(super) wrapped_admitted: AtomicU64,
    pub(super) wrapped_refused: AtomicU64,
    pub(super) pruned: u64,
    pub(super) evicted: u64,
    /// Keys forgotten by [`reset`](super::KeyedLimiter::reset).
    pub(super) reset: u64,
    /// Bumped each time entries are rebased to a new class table,
    /// evicted or reset, so that an async give-back decided before refuses (see
    /// `give_back`). Sweeps need not: they drop only entries at rest, and an
    /// entry with a pending grant is not at rest before the grant's slot.
    pub(super) moves: u64,
}

/// The entry of `key` (hashed to `hash`) in `map`.
#[inline]
pub(super) fn find<'a, K, Q>(
    map: &'a HashTable<(K, Entry)>,
    hash: u64,
    key: &Q,
) -> Option<&'a Entry>
where
    K: Borrow<Q>,
    Q: Eq + ?Sized,
{
    map.find(hash, |(k, _)| k.borrow() == key).map(|(_, e)| e)
}

/// A step on a tracked entry of `shard`, counting the outcome.
#[inline]
pub(super) fn on_entry<K>(
    shard: &Shard<K>,
    entry: &Entry,
    now: u64,
    cost: u64,
    admit: Admit,
    ask: Ask,
) -> Result<(u64, Grant), TakeError> {
    // The index was set under this shard's lock against this very table.
    let class = &shard.classes[entry.class as usize];
    entry.last.store(coarse(now), Ordering::Relaxed);
    let params = class.params();
    match atomic::update_fixed(&entry.tat, params, now, cost, admit) {
        Ok(grant) => {
            if entry.admitted.fetch_add(1, Ordering::Relaxed) == u32::MAX {
                shard.wrapped_admitted.fetch_add(1 << 32, Ordering::Relaxed);
            }
            Ok((now, grant))
        }
        Err(deny) => {
            let refusal = TakeError::refused(deny, cost, admit, params.slack());
            // Counted only as the caller's answer (the fetch_add short-circuits).
            if ask.counts(&refusal) && entry.refused.fetch_add(1, Ordering::Relaxed) == u32::MAX {
                shard.wrapped_refused.fetch_add(1 << 32, Ordering::Relaxed);
            }
            Err(refusal)
        }
    }
}

/// Drops the entries of `shard` at rest at `now`, notes when the next one
/// can come to rest, and returns how many it dropped (the caller gives them
/// back to the limiter's count of tracked keys).
#[must_use = "the dropped entries leave the limiter's count"]
pub(super) fn sweep<K>(shard: &mut Shard<K>, now: u64) -> usize {
    let classes = Arc::clone(&shard.classes);
    let mut earliest = u64::MAX;
    let (mut admitted, mut refused, mut pruned) = (0, 0, 0u64);
    shard.map.retain(|(_, e)| {
        let class = &classes[e.class as usize];
        let rest = rest_time(e.tat.load(Ordering::Relaxed), class.params());
        if rest <= now {
            admitted += u64::from(e.admitted.load(Ordering::Relaxed));
            refused += u64::from(e.refused.load(Ordering::Relaxed));
            pruned += 1;
            false
        } else {
            earliest = earliest.min(rest);
            true
        }
    });
    shard.earliest_rest = earliest;
    shard.retired_admitted += admitted;
    shard.retired_refused += refused;
    shard.pruned += pruned;
    pruned as usize
}

/// Forgets `key`'s entry (hashed to `hash`), keeping its counters in the
/// shard's totals; `true` when there was one. Bumps `moves`, as an
/// eviction does: the key comes back as a new one would, and its new `tat`
/// may come back to a grant's `next` by chance.
pub(super) fn forget<K, Q>(shard: &mut Shard<K>, hash: u64, key: &Q) -> bool
where
    K: Borrow<Q>,
    Q: Eq + ?Sized,
{
    let Ok(entry) = shard.map.find_entry(hash, |(k, _)| k.borrow() == key) else {
        return false;
    };
    let ((_, e), _) = entry.remove();
    shard.retired_admitted += u64::from(e.admitted.load(Ordering::Relaxed));
    shard.retired_refused += u64::from(e.refused.load(Ordering::Relaxed));
    shard.reset += 1;
    shard.moves += 1;
    true
}

/// Evicts at least `count` (and at least one, unless `shard` is empty)
/// entries of `shard` nearest to rest, and returns how many.
#[must_use = "the evicted entries leave the limiter's count"]
pub(super) fn evict<K>(shard: &mut Shard<K>, count: usize) -> usize {
    let classes = Arc::clone(&shard.classes);
    let rest = |e: &Entry| {
        let class = &classes[e.class as usize];
        rest_time(e.tat.load(Ordering::Relaxed), class.params())
    };
    let mut times: Vec<u64> = shard.map.iter().map(|(_, e)| rest(e)).collect();
    if times.is_empty() {
        return 0;
    }
    let nth = count.clamp(1, times.len()) - 1;
    let (_, &mut threshold, _) = times.select_nth_unstable(nth);
    let (mut admitted, mut refused, mut evicted) = (0, 0, 0u64);
    let mut earliest = u64::MAX;
    shard.map.retain(|(_, e)| {
        let rest = rest(e);
        if rest <= threshold {
            admitted += u64::from(e.admitted.load(Ordering::Relaxed));
            refused += u64::from(e.refused.load(Ordering::Relaxed));
            evicted += 1;
            false
        } else {
            earliest = earliest.min(rest);
            true
        }
    });
    // The nearest to rest are gone: no sweep is due before the next.
    shard.earliest_rest = earliest;
    shard.retired_admitted += admitted;
    shard.retired_refused += refused;
    shard.evicted += evicted;
    shard.moves += 1;
    evicted as usize
}
