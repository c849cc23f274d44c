//! One shard of a keyed limiter's map: the entries, the step on one, and the
//! sweeps that drop entries at rest or evict the nearest to it.

use std::borrow::Borrow;
use std::sync::Arc;

use hashbrown::HashTable;

use super::classes::{rest_time, Class, Resolved};
use super::windowed::{Left, Windowed};
use super::{KeyOf, ADMITTED, REFUSED};
use crate::model::schedule::{Admit, Grant, Params};
use crate::observe::stripes::Counters;
use crate::primitive::{AtomicU32, AtomicU64, Ordering};
use crate::store::{atomic, Booking};
use crate::values::error::Error;
use crate::wait::Ask;

/// One tracked key's bucket and bookkeeping: 16 bytes.
///
/// The state word is all a grant writes. The bookkeeping sits in `last`
/// and `meta`, which a grant only reads (for the class) and writes at most
/// once per idle unit (about a millisecond) with a plain store, so that
/// threads on one hot key meet only on `tat`, as on a lone limiter, and a
/// key back after a millisecond costs no second locked instruction. The
/// totals a grant counts go to the limiter's striped counters, not to the
/// entry.
pub(super) struct Entry {
    /// The state word, as in `AtomicLimiter` but unpadded: a pacing
    /// class's `tat`, or a window class's window word (the entry's class
    /// says which).
    pub(super) tat: AtomicU64,
    /// The last use, in units of 2^[`IDLE_SHIFT`] ns of internal time,
    /// modulo 2^32 (about 52 days); a reading a little behind it leaves it.
    /// Stored plainly (a load, a compare, a store): two threads storing at
    /// once may leave the earlier of their two readings, a millisecond's
    /// difference on an admin page's idle time, which nothing else reads.
    last: AtomicU32,
    /// The class and the refusals, packed:
    ///
    /// | bits | field | |
    /// |---|---|---|
    /// | 0..20 | class | index into the shard's class table, below [`MAX_CLASSES`] |
    /// | 20..32 | refused | calls refused since the key was tracked, saturating at [`REFUSED_MAX`] |
    ///
    /// The class changes only under the shard's write lock; refusals under
    /// the read lock, by CAS, never on a grant's path.
    meta: AtomicU32,
}

/// Idle time is kept in units of 2^20 ns (about 1 ms): enough for an admin
/// page, and it fits the last-use time in 32 bits.
pub(super) const IDLE_SHIFT: u32 = 20;

/// The class index's width: room for a million overrides, more than any
/// table of limits needs (a change past it fails with
/// [`BuildError::TooManyOverrides`](crate::BuildError::TooManyOverrides)).
const CLASS_BITS: u32 = 20;
/// Class tables hold at most this many classes (the default and the
/// overrides).
pub(super) const MAX_CLASSES: usize = 1 << CLASS_BITS;
/// A key's own refusal count stops here (the limiter's totals count every
/// refusal): a row on an admin page needs "many", not how many.
pub(super) const REFUSED_MAX: u64 = (1 << (32 - CLASS_BITS)) - 1;

/// `now` in idle units, modulo 2^32.
#[inline]
pub(super) fn coarse(now: u64) -> u32 {
    (now >> IDLE_SHIFT) as u32
}

/// A reading this many idle units (about a second) behind the last use
/// stored is taken for a clock read a little behind another core's, and
/// left out; one further behind can only be a later use modulo 2^32 (a key
/// idle for over 26 days), and is stored.
const BEHIND: u32 = 1 << 10;

/// Whether the idle unit `at` is a later use than `last`.
#[inline]
fn after(at: u32, last: u32) -> bool {
    at != last && last.wrapping_sub(at) > BEHIND
}

impl Entry {
    /// A new entry of `class` whose state is `tat`, last used at `now`.
    pub(super) fn new(tat: u64, class: u32, now: u64) -> Entry {
        Entry {
            tat: AtomicU64::new(tat),
            last: AtomicU32::new(coarse(now)),
            meta: AtomicU32::new(pack(class, 0)),
        }
    }

    /// The entry's class index. Relaxed: the class changes only under the
    /// shard's write lock, and every reader holds its read lock.
    #[inline]
    pub(super) fn class(&self) -> u32 {
        class_of(self.meta.load(Ordering::Relaxed))
    }

    /// Moves the entry to `class`. Under the shard's write lock only.
    pub(super) fn set_class(&mut self, class: u32) {
        let refused = refused_of(self.meta.load(Ordering::Relaxed));
        self.meta.store(pack(class, refused), Ordering::Relaxed);
    }

    /// The last use, in idle units.
    pub(super) fn last(&self) -> u32 {
        self.last.load(Ordering::Relaxed)
    }

    /// Calls refused since the key was tracked, up to [`REFUSED_MAX`].
    pub(super) fn refused(&self) -> u64 {
        refused_of(self.meta.load(Ordering::Relaxed))
    }

    /// Notes a use at `now`, and one more refusal if `refused` (the step's,
    /// or one decided outside it: a held async take's). A use within the
    /// idle unit already stored (every call but about one a millisecond on
    /// a busy key) writes nothing: a load, no store, on a grant.
    #[inline]
    pub(super) fn touch(&self, now: u64, refused: bool) {
        let at = coarse(now);
        // Relaxed: bookkeeping for a look inside, ordered with nothing.
        if after(at, self.last.load(Ordering::Relaxed)) {
            self.last.store(at, Ordering::Relaxed);
        }
        if refused {
            self.count_refusal();
        }
    }

    /// One more refusal, saturating: a CAS loop that keeps the class.
    #[cold]
    fn count_refusal(&self) {
        let more = |meta| {
            let refused = refused_of(meta);
            (refused < REFUSED_MAX).then(|| pack(class_of(meta), refused + 1))
        };
        let _ = self
            .meta
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, more);
    }
}

#[inline]
fn pack(class: u32, refused: u64) -> u32 {
    class_of(class) | ((refused.min(REFUSED_MAX) as u32) << CLASS_BITS)
}

#[inline]
fn class_of(meta: u32) -> u32 {
    meta & (MAX_CLASSES as u32 - 1)
}

#[inline]
fn refused_of(meta: u32) -> u64 {
    u64::from(meta >> CLASS_BITS)
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
    pub(super) pruned: u64,
    pub(super) evicted: u64,
    /// Keys forgotten by [`reset`](super::KeyedLimiter::reset).
    pub(super) reset: u64,
    /// The shard's generation: bumped each time entries are rebased to a
    /// new class table, evicted or reset, so that an undo of a booking
    /// decided before refuses (see [`Booking`](crate::store::Booking) and
    /// `undo`). Sweeps need not: they drop only entries at rest, and an
    /// entry with a pending grant is not at rest before the grant's slot.
    pub(super) generation: u64,
}

/// A decision on a key, with what a caller reporting the key's state needs
/// besides: its shard's generation at the decision, and a pacing entry's
/// parameters ([`WINDOW`] for a window entry, whose state a caller reads
/// again: a window's parameters, or even an `Option` around a pacing
/// entry's, made every decision longer to hand back, and a pacing take
/// about 2 % slower in `benches/keyed.rs`). Its times (`now`, the grant's
/// slot) are internal time, a window's too.
pub(super) struct Decided {
    pub(super) now: u64,
    pub(super) grant: Grant,
    pub(super) generation: u64,
    pub(super) params: Params,
    /// A window entry's decision: what its new word leaves (zero for a
    /// pacing entry's, whose `params` say it).
    pub(super) left: Left,
}

/// [`Decided::params`] of a window entry's decision: an interval of 0,
/// which no pacing class has ([`Params::new`] refuses it).
pub(super) const WINDOW: Params = Params::from_tau_unchecked(0, 0);

impl Decided {
    /// `grant` decided at `now` on an entry of `class` in `shard`.
    #[inline]
    pub(super) fn on<K>(shard: &Shard<K>, class: u32, now: u64, grant: Grant) -> Decided {
        let (params, left) = match &shard.classes[class as usize] {
            Class::Paced(params) => (*params, Left::default()),
            Class::Window(w) => (WINDOW, w.left(grant.next, now)),
        };
        Decided {
            now,
            grant,
            generation: shard.generation,
            params,
            left,
        }
    }

    /// The booking of this decision, for `cost` permits.
    #[inline]
    pub(super) fn booking(&self, cost: u64) -> Booking {
        Booking::of(self.grant, self.now, cost, self.generation)
    }
}

/// The entry of `key` (hashed to `hash`) in `map`.
#[inline]
pub(super) fn find<'a, K, Q: KeyOf<K> + ?Sized>(
    map: &'a HashTable<(K, Entry)>,
    hash: u64,
    key: &Q,
) -> Option<&'a Entry> {
    map.find(hash, |(k, _)| key.is(k)).map(|(_, e)| e)
}

/// A step on a tracked entry of `shard` at the clock reading `now()`,
/// counting the outcome in `counts` (and a refusal in the entry).
///
/// The shard's fields are read before the clock: they share a cache line
/// with its lock, which another core's read lock takes away meanwhile on a
/// hot key.
#[inline]
pub(super) fn on_entry<K>(
    shard: &Shard<K>,
    counts: &Counters<4>,
    entry: &Entry,
    now: impl FnOnce() -> u64,
    cost: u64,
    admit: Admit,
    ask: Ask,
) -> Result<Decided, Error> {
    // The index was set under this shard's lock against this very table.
    let params = match &shard.classes[entry.class() as usize] {
        Class::Paced(params) => *params,
        Class::Window(w) => return on_window(shard, counts, entry, w, now, cost, admit, ask),
    };
    let generation = shard.generation;
    let now = now();
    match atomic::update_fixed(&entry.tat, params, now, cost, admit) {
        Ok(grant) => {
            entry.touch(now, false);
            counts.add(ADMITTED, 1);
            Ok(Decided {
                now,
                grant,
                generation,
                params,
                left: Left::default(),
            })
        }
        Err(deny) => {
            let refusal = Error::refused(deny, cost, admit, params.slack());
            Err(refused(counts, entry, now, refusal, ask))
        }
    }
}

/// [`on_entry`] for an entry counted by window `w`: the window store's CAS
/// loop on the entry's word (`Windowed::update`). Inline: out of line, its
/// answer came back through memory, which cost a window key's take a
/// tenth more than a paced key's; the window step's rare cases are out of
/// line instead (`window::take`).
#[allow(clippy::too_many_arguments)] // `on_entry`'s, passed on
#[inline(always)]
fn on_window<K>(
    shard: &Shard<K>,
    counts: &Counters<4>,
    entry: &Entry,
    w: &Windowed,
    now: impl FnOnce() -> u64,
    cost: u64,
    admit: Admit,
    ask: Ask,
) -> Result<Decided, Error> {
    let generation = shard.generation;
    let now = now();
    match w.update(&entry.tat, now, cost, admit) {
        Ok((grant, left)) => {
            entry.touch(now, false);
            counts.add(ADMITTED, 1);
            Ok(Decided {
                now,
                grant,
                generation,
                params: WINDOW,
                left,
            })
        }
        Err(refusal) => Err(refused(counts, entry, now, refusal, ask)),
    }
}

/// Counts `refusal` on `entry` at `now`, only as the caller's answer.
#[inline]
fn refused(counts: &Counters<4>, entry: &Entry, now: u64, refusal: Error, ask: Ask) -> Error {
    let counted = ask.counts(&refusal);
    entry.touch(now, counted);
    if counted {
        counts.add(REFUSED, 1);
    }
    refusal
}

/// When `e` can be dropped, under the class table `classes`.
fn rest_of(e: &Entry, classes: &[Class]) -> u64 {
    rest_time(e.tat.load(Ordering::Relaxed), &classes[e.class() as usize])
}

/// Drops the entries of `shard` at rest by `until`, notes when the next one
/// can come to rest, and returns how many it dropped.
fn drop_until<K>(shard: &mut Shard<K>, until: u64) -> u64 {
    let classes = Arc::clone(&shard.classes);
    let (len, mut earliest) = (shard.map.len(), u64::MAX);
    shard.map.retain(|(_, e)| {
        let rest = rest_of(e, &classes);
        earliest = earliest.min(if rest > until { rest } else { u64::MAX });
        rest > until
    });
    shard.earliest_rest = earliest;
    (len - shard.map.len()) as u64
}

/// Drops the entries of `shard` at rest at `now`, notes when the next one
/// can come to rest, and returns how many it dropped (the caller gives them
/// back to the limiter's count of tracked keys).
#[must_use = "the dropped entries leave the limiter's count"]
pub(super) fn sweep<K>(shard: &mut Shard<K>, now: u64) -> usize {
    let pruned = drop_until(shard, now);
    shard.pruned += pruned;
    pruned as usize
}

/// Forgets `key`'s entry (hashed to `hash`); `true` when there was one
/// (its calls stay in the limiter's totals, which are not kept per entry). Bumps the generation, as an
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
    entry.remove();
    shard.reset += 1;
    shard.generation += 1;
    true
}

/// Evicts at least `count` (and at least one, unless `shard` is empty)
/// entries of `shard` nearest to rest, and returns how many.
#[must_use = "the evicted entries leave the limiter's count"]
pub(super) fn evict<K>(shard: &mut Shard<K>, count: usize) -> usize {
    let rest = |(_, e): &(K, Entry)| rest_of(e, &shard.classes);
    let mut times: Vec<u64> = shard.map.iter().map(rest).collect();
    if times.is_empty() {
        return 0;
    }
    let nth = count.clamp(1, times.len()) - 1;
    let (_, &mut threshold, _) = times.select_nth_unstable(nth);
    // The nearest to rest go: no sweep is due before the next.
    let evicted = drop_until(shard, threshold);
    shard.evicted += evicted;
    shard.generation += 1;
    evicted as usize
}
