//! [`KeyedLimiter`]: one bucket per key (user, IP, tenant), sparse, bounded
//! and observable; a class of keys may count a quota per window instead
//! ([`Limit::per_window`](crate::Limit::per_window)). What it promises
//! (rest and pruning, the ceiling, overrides and rate changes, a key at rest
//! getting the full new burst, window keys) is the guide's
//! [keyed limits](crate::guide::keyed) chapter.
//!
//! # Implementation details
//!
//! Each tracked key has one unpadded `AtomicU64`, its `tat`, updated by the
//! same step and CAS as [`AtomicLimiter`](crate::AtomicLimiter)'s
//! (`atomic::update_fixed`: a key's rate changes only under its shard's
//! write lock). The keys live in a power of two of locked shards, each a
//! hashbrown `HashTable<(K, Entry)>` padded to its own cache line; one
//! foldhash picks both the shard and the slot. A call on a tracked key holds
//! its shard's read lock while it reads the clock and runs the CAS, and
//! releases it before waiting; only a new key takes the write lock. The
//! lock is striped (crossbeam's `ShardedLock`, see `crate::primitive`): a
//! read locks only its own thread's stripe, so threads on one hot key meet
//! on the entry's state word alone, as on a lone limiter, while a write
//! (a new key, a sweep, a rate change) locks all eight stripes. Atomics
//! and locks come from `crate::primitive`, so the loom models
//! (`loom-tests/`, `keyed_*.rs`) run this very code. The invariants:
//!
//! - An entry at rest for [`PRUNE_GRACE`] decides as an absent key (which
//!   starts with full credit, `schedule::FULL`), so a sweep may drop it; the
//!   clock is read under the shard lock, so no call decides with a reading
//!   older than the sweep that dropped its key.
//! - Rates live in a table of classes (class 0 the default); an entry
//!   stores its class, resolved when it is created. A change publishes a
//!   new table and bumps an epoch; each shard moves to it under its write
//!   lock, [`rebase`](crate::model::schedule::rebase)ing its busy entries
//!   and setting those at rest for the grace
//!   ([`schedule::at_rest`](crate::model::schedule::at_rest)) to `FULL`, so
//!   a shard's entries are always read with the table they were resolved
//!   against. No CAS on an entry overlaps its rebase (steps and give-backs
//!   run under the read lock); a give-back needs the shard's generation it
//!   was granted under, since a rebased `tat` may come back to the grant's
//!   `next` by chance.
//! - A class paces or counts by window (`classes.rs`' `Class`); the entry's
//!   class says which its word is: a `tat`, or the window word of
//!   [`model::window`](crate::model::window), stepped and settled by the
//!   window store's own CAS loop (`store::window::update_word`, the loop
//!   the loom models of `WindowStore` run), on Unix time: the clock's
//!   internal reading mapped by the Unix time of its origin, taken once at
//!   the build (`windowed.rs`). Every time a window entry hands back is
//!   mapped back to internal time, so waits, bookings, undo and the async
//!   takes are the pacing entries' own. A window entry is at rest once its
//!   window has ended, plus [`PRUNE_GRACE`]: it then decides as an absent
//!   key (an empty window). A change between two windows runs
//!   [`window::rebase`](crate::model::window::rebase) under the write lock
//!   as pacing runs `schedule::rebase` (a change of quota keeps the word,
//!   so no spent count is refunded), and one between pacing and a window
//!   starts the key in its new kind as a new key (`FULL`, `EMPTY`). Pacing
//!   keys pay one branch on the class for this.
//!
//! By file: this one (the type, its calls on a tracked key), `insert.rs` (a
//! new key, the ceiling, sweeps and evictions, [`WhenFull`]), `shard.rs`,
//! `classes.rs` (a class, pacing or a window, and moves between classes),
//! `windowed.rs` (a window class: its step, settle, state, rest and the
//! map to Unix time), `rates.rs` (overrides, rate changes), `builder.rs`,
//! `inspect.rs`, `async_calls.rs` (Tokio), and `persist.rs` and `saver.rs`
//! (feature `persist`: the state saved to a file and loaded back).

#[cfg(feature = "tokio")]
pub(crate) mod async_calls;
mod bucket;
mod builder;
mod classes;
mod decide;
mod insert;
mod inspect;
#[cfg(feature = "persist")]
mod persist;
mod rates;
#[cfg(feature = "persist")]
mod saver;
mod shard;
#[cfg(feature = "persist")]
mod state_file;
mod take;
mod windowed;

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::clock::{Clock, DefaultClock};
use crate::observe::stats::Meter;
use crate::observe::stripes::Counters;
use crate::primitive::{write, AtomicU64, AtomicUsize, Mutex, RwLock};
use crate::wait::Wait;

#[cfg(feature = "tokio")]
pub use async_calls::AsyncKeyedLimiter;
pub use bucket::Bucket;
pub use builder::KeyedBuilder;
pub use insert::WhenFull;
pub use inspect::{KeyState, KeyedStats, WindowCount};
#[cfg(feature = "persist")]
pub use persist::Loaded;
pub use rates::path_parent;
#[cfg(feature = "persist")]
pub use saver::{Saver, MIN_SAVE_PERIOD};
#[cfg(feature = "persist")]
pub use state_file::{FORMAT, VERSION};

use classes::Resolved;
use shard::{forget, Shard};

/// An entry is dropped only this long (ns) after it came to rest: TSC readings
/// of different cores may disagree by a little, and 1 ms is far more than
/// they do, while small enough not to keep idle keys around.
pub const PRUNE_GRACE: u64 = 1_000_000;

/// The default ceiling on tracked keys: a million, at most about 60 MB with
/// 8-byte keys (a 16-byte entry plus the key, in tables at least half full),
/// besides the shards' locks: about 1.2 KB per shard, one shard per
/// thousand keys of the ceiling (at least 64), so 1.2 MB at this one.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// The index of calls admitted in `counts`.
const ADMITTED: usize = 0;
/// The index of calls refused in `counts`.
const REFUSED: usize = 1;
/// The index of calls admitted without a bucket ([`WhenFull::Admit`]) in
/// `counts` (counted in [`ADMITTED`] too).
const UNTRACKED: usize = 2;
/// The index of override lookups cut at [`MAX_PARENT_STEPS`] parents in
/// `counts`.
const WALKS_CUT: usize = 3;

/// A shard aims at this many keys at most, which bounds one sweep to a few
/// microseconds.
const KEYS_PER_SHARD: usize = 1024;

/// At least this many shards (when the ceiling allows), so that threads on
/// different keys rarely meet on one lock.
const MIN_SHARDS: usize = 64;

/// At most this many shards: past a few thousand, more only costs memory.
const MAX_SHARDS: usize = 1 << 14;

/// A key's override lookup follows at most this many parents (see
/// [`KeyedBuilder::parent`]): far deeper than any hierarchy of overrides, and
/// it bounds a walk that a cyclic parent function would make endless while
/// a shard's write lock is held.
pub const MAX_PARENT_STEPS: usize = 64;

/// A shard sweeps no earlier than at this many entries.
const MIN_SWEEP: usize = 32;

/// The keys' hasher. foldhash's quality variant: the fast one maps sequential
/// keys (IPs, ids) to shards in a near-periodic pattern. Randomly seeded, so
/// that no one can aim keys at one shard; under loom a fixed seed, since a
/// model must replay the same execution each time (the random seed comes
/// from the stack's address).
#[cfg(not(paceline_loom))]
type KeyHasher = foldhash::quality::RandomState;
#[cfg(paceline_loom)]
type KeyHasher = foldhash::quality::FixedState;

/// The overrides' hasher (an admin path: the fast variant), seeded as
/// [`KeyHasher`].
#[cfg(not(paceline_loom))]
type OverrideHasher = foldhash::fast::RandomState;
#[cfg(paceline_loom)]
type OverrideHasher = foldhash::fast::FixedState;

/// A key as the limiter's own calls take it: `K` itself, or a borrowed form
/// of it, as a `HashMap<K, _>` is asked (`str` for `String` keys). The
/// public calls state the bounds it stands for (`K: Borrow<Q>`, which also
/// lets a caller's `&"10.0.0.7".parse()?` infer its type); each is one bound
/// here.
pub(crate) trait KeyOf<K>: Hash + Eq + ToOwned<Owned = K> {
    /// Whether `key` is this key.
    fn is(&self, key: &K) -> bool;

    /// This key's value in `map`.
    fn get_in<'m, V, S: BuildHasher>(&self, map: &'m HashMap<K, V, S>) -> Option<&'m V>;
}

impl<K: Borrow<Q> + Hash + Eq, Q: Hash + Eq + ToOwned<Owned = K> + ?Sized> KeyOf<K> for Q {
    #[inline]
    fn is(&self, key: &K) -> bool {
        key.borrow() == self
    }

    fn get_in<'m, V, S: BuildHasher>(&self, map: &'m HashMap<K, V, S>) -> Option<&'m V> {
        map.get(self)
    }
}

/// A rate limiter with one bucket per key: per user, per IP, per tenant.
///
/// Each key is paced exactly as a lone [`AtomicLimiter`](crate::AtomicLimiter)
/// built with `.full_credit(true)` and the key's rate and slack would pace it:
/// a new key may burst `slack + 1` permits at once, then one per interval.
/// Across a rate change too, but for one point: a key at rest (for
/// [`PRUNE_GRACE`]) stays at rest (a lone limiter's banked time is rebased
/// with its schedule).
/// Keys whose buckets are back at rest are dropped automatically (that
/// changes no decision, for a clock that never reads more than
/// [`PRUNE_GRACE`] behind: see the [module doc](crate::keyed)), and the
/// number of tracked keys never exceeds [`max_keys`](KeyedBuilder::max_keys);
/// [`WhenFull`] says what happens when every tracked key is busy.
///
/// ```
/// use paceline::{KeyedLimiter, Rate};
/// use std::net::{IpAddr, Ipv4Addr};
/// use paceline::Take;
///
/// let limiter = KeyedLimiter::<IpAddr>::new(Rate::per_second(5)); // slack 10
/// let alice = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7));
/// let bob = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 8));
/// for _ in 0..11 {
///     assert!(limiter.try_take(&alice).is_ok()); // a burst of slack + 1
/// }
/// assert!(limiter.try_take(&alice).is_err()); // alice must wait 200 ms
/// assert!(limiter.try_take(&bob).is_ok()); // bob has his own bucket
/// ```
///
/// Keys may be looked up by a borrowed form, as in a `HashMap`: a
/// `KeyedLimiter<String>` answers `try_take("api/upload")`.
///
/// The default or any override may instead count a quota per window of
/// the wall clock ([`Limit::per_window`](crate::Limit::per_window)): each
/// key of it then gets the quota in each window, counted, not paced (the
/// guide's [window keys](crate::guide::keyed#window-keys)).
///
/// Unlike the direct limiters, `take` returns a `Result`: a key may be
/// refused when the map is full under [`WhenFull::Refuse`].
///
/// # Memory ordering
/// As for `AtomicLimiter`: permits are ordered, memory is not.
pub struct KeyedLimiter<K, C: Clock = DefaultClock> {
    shards: Box<[CachePadded<RwLock<Shard<K>>>]>,
    /// Picks the shard and the slot (see [`KeyHasher`]).
    hasher: KeyHasher,
    mask: usize,
    max_keys: usize,
    /// Keys tracked in all shards, never above `max_keys`: an insert claims
    /// one first (see `claim`), a sweep or an eviction gives them back.
    tracked: CachePadded<AtomicUsize>,
    /// No tracked key can come to rest (plus grace) before this internal
    /// time: a lower bound, so that an insert at the ceiling sweeps the
    /// other shards only when that may free something.
    next_rest: AtomicU64,
    when_full: WhenFull,
    parent: Option<fn(&K) -> Option<K>>,
    resolved: RwLock<Arc<Resolved<K>>>,
    /// Bumped after each new class table is published, so that an insert
    /// checks for one with a plain load instead of locking `resolved`.
    epoch: AtomicU64,
    /// Serializes override changes (never taken on a take path).
    admin: Mutex<()>,
    clock: C,
    wait: Wait,
    /// Calls admitted and refused, on tracked keys or not, calls admitted
    /// without a bucket, and override lookups cut ([`ADMITTED`],
    /// [`REFUSED`], [`UNTRACKED`], [`WALKS_CUT`]): striped by thread, so
    /// that the threads of one hot key, which already meet on its state
    /// word, do not meet again on a counter. A sum is exact once the calls
    /// it counts have returned.
    counts: Counters<4>,
    /// Requests, permits and wait, all keys together, if the builder asked.
    meter: Meter,
    /// Its own number, which its bookings carry with their key's hash.
    id: u64,
    /// The Unix time (ns) of the clock's origin, taken at the build: what
    /// window classes count on (`windowed.rs`).
    origin: u64,
    /// Wakes async takes waiting for their slot to come within the horizon
    /// when a change of rates or overrides is in force, or a key is reset,
    /// so they ask again (`src/wait/tokio.rs`). Never touched by a take.
    #[cfg(feature = "tokio")]
    changed: ::tokio::sync::Notify,
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// How many permits of the key one request could take now without
    /// waiting: at most `slack + 1` (a key not tracked has them all).
    /// Consumes nothing and tracks no key.
    ///
    /// ```
    /// use paceline::{KeyedLimiter, Rate};
    /// use paceline::Take;
    ///
    /// let limiter = KeyedLimiter::<u32>::new(Rate::per_second(10)); // slack 10
    /// assert_eq!(limiter.available(&7), 11);
    /// limiter.try_take_n(&7, 4)?;
    /// assert_eq!(limiter.available(&7), 7);
    /// # Ok::<(), paceline::Error>(())
    /// ```
    pub fn available<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.state_of(key).available()
    }

    /// How long until a permit of the key is free (zero: one is free now).
    /// Consumes nothing and tracks no key.
    pub fn next_free<Q>(&self, key: &Q) -> Duration
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.state_of(key).next_free()
    }

    /// Forgets `key`: its bucket is dropped, and it comes back as a new key
    /// would, with its whole burst (`slack + 1` at once); `true` when the
    /// key was tracked (a key not tracked is at rest already, and nothing
    /// changes). Its rate (an override) stays. Like
    /// [`Pacer::reset`](crate::limiter::Pacer::reset), a deliberate refill: the
    /// key's [window bound](crate::guide::model#slack-and-burst-the-window-bound)
    /// holds from the reset on, not across it.
    ///
    /// Safe while other threads take the key: each take lands wholly before
    /// the reset or wholly after (takes run under the shard's read lock,
    /// the reset under its write lock). Slots already handed out stand; an
    /// async take booked before the reset and then dropped gives nothing
    /// back (nor does one booked on another key of the same shard, as after
    /// an eviction). The key's calls stay counted in
    /// [`keyed_stats`](Self::keyed_stats)' `admitted` and `refused`, which also count
    /// the reset; a [`snapshot`](Self::snapshot) no longer lists the key.
    ///
    /// ```
    /// use paceline::{KeyedLimiter, clock::ManualClock, Rate};
    /// use paceline::Take;
    ///
    /// let limiter = KeyedLimiter::<&str>::builder(Rate::per_minute(1))
    ///     .slack(2)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// limiter.try_take_n(&"alice", 3)?;
    /// assert!(limiter.try_take(&"alice").is_err()); // a minute to wait
    /// assert!(limiter.reset(&"alice"));
    /// assert_eq!(limiter.available(&"alice"), 3); // as a new key
    /// assert!(!limiter.reset(&"bob")); // never tracked
    /// assert_eq!(limiter.keyed_stats().reset, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (hash, lock) = self.shard(key);
        let forgot = forget(&mut write(lock), hash, key);
        if forgot {
            self.release(1);
            #[cfg(feature = "tokio")]
            self.changed.notify_waiters();
        }
        forgot
    }
}

impl<K, C: Clock> fmt::Debug for KeyedLimiter<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("shards", &self.shards.len())
            .field("max_keys", &self.max_keys)
            .field("when_full", &self.when_full)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::shard::find;
    use super::*;
    use crate::limiter::take::Take;
    use crate::primitive::read;
    use crate::{clock::ManualClock, Rate};

    #[test]
    fn a_key_refused_past_its_count_still_totals_exactly() {
        let l = KeyedLimiter::<u32>::builder(Rate::per_hour(1))
            .slack(0)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        l.try_take(&7).unwrap();
        let refusals = KeyState::<()>::REFUSED_MAX + 10;
        for _ in 0..refusals {
            l.try_take(&7).unwrap_err();
        }
        // The key's own count stops; the totals do not.
        assert_eq!(l.snapshot()[0].refused, KeyState::<()>::REFUSED_MAX);
        let stats = l.keyed_stats();
        assert_eq!((stats.admitted, stats.refused), (1, refusals));
        // The class beside the count is untouched.
        let (hash, lock) = l.shard(&7);
        assert_eq!(find(&read(lock).map, hash, &7).unwrap().class(), 0);
    }

    #[test]
    fn a_last_use_only_moves_forward_and_keeps_the_class() {
        let e = shard::Entry::new(0, 5, 10 << shard::IDLE_SHIFT);
        e.touch(3 << shard::IDLE_SHIFT, true); // a reading behind: no step back
        assert_eq!((e.last(), e.class(), e.refused()), (10, 5, 1));
        e.touch(12 << shard::IDLE_SHIFT, true);
        assert_eq!((e.last(), e.class(), e.refused()), (12, 5, 2));
        // Far "behind" modulo 2^32 is a key idle for weeks: a later use.
        e.touch(
            u64::from(12u32.wrapping_sub(1 << 20)) << shard::IDLE_SHIFT,
            true,
        );
        assert_eq!(e.last(), 12u32.wrapping_sub(1 << 20));
    }

    #[test]
    fn too_many_overrides_fail_clearly() {
        let max = KeyedLimiter::<String>::MAX_OVERRIDES;
        assert_eq!(max + 1, shard::MAX_CLASSES);
        assert_eq!(rates::check_overrides(max), Ok(()));
        let err = rates::check_overrides(max + 1).unwrap_err();
        assert_eq!(
            err,
            crate::BuildError::TooManyOverrides {
                overrides: max + 1,
                max
            }
        );
        assert!(err.to_string().contains("at most 1048575"), "{err}");
        // The last class an override can have is stored whole.
        let mut e = shard::Entry::new(0, 0, 0);
        e.set_class(max as u32);
        e.touch(0, true);
        assert_eq!((e.class(), e.refused()), (max as u32, 1));
    }

    /// A key settles on its entry as the pure step does. A refund across a
    /// change of rate (the shard's generation moved) or on a key no longer
    /// tracked is dropped; an excess on a key no longer tracked is a take
    /// of the excess.
    #[test]
    fn a_key_settles_on_its_entry_as_the_pure_step() {
        use crate::model::schedule::{self, Admit, Params, FULL};
        let l = KeyedLimiter::<u32>::builder(Rate::per_second(10))
            .slack(4)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let p = Params::new(100_000_000, 4).unwrap();
        let b = l.decide(&7, 5, Admit::Within(0)).unwrap();
        let want = schedule::settle(b.next, l.now(), b.went(), 5, 2, p);
        assert_eq!(l.settle_booking(&7, &b, 2), Some((b.next, want)));
        assert_eq!(l.available(&7), 3, "the burst less the 2 spent");

        let b = l.decide(&7, 3, Admit::Within(0)).unwrap();
        l.set_rate(Rate::per_second(20)).unwrap();
        assert_eq!(
            l.settle_booking(&7, &b, 0),
            None,
            "a refund across a change"
        );
        l.reset(&7);
        assert_eq!(
            l.settle_booking(&7, &b, 3),
            None,
            "nothing to settle on no entry"
        );
        let p = Params::new(50_000_000, 4).unwrap();
        let take = schedule::step(FULL, l.now(), 2, p, Admit::Always).unwrap();
        assert_eq!(l.settle_booking(&7, &b, 5), Some((FULL, take.next)));
    }

    /// A tracked `u64` key's slot in the map (key and entry) is 24 bytes:
    /// what brings a million `u64` keys under 64 bytes each of RSS
    /// (`benches/keyed.rs`).
    #[test]
    fn a_u64_keys_slot_is_24_bytes() {
        assert_eq!(std::mem::size_of::<shard::Entry>(), 16);
        assert!(std::mem::size_of::<(u64, shard::Entry)>() <= 24);
    }

    /// A class in a shard's table is 24 bytes, a window's parameters
    /// behind a pointer: what keeps a pacing take's lookup as cheap as
    /// before windows (`benches/keyed.rs`).
    #[test]
    fn a_class_is_24_bytes() {
        assert_eq!(std::mem::size_of::<classes::Class>(), 24);
    }
}
