//! [`KeyedLimiter`]: one bucket per key (user, IP, tenant), sparse, bounded
//! and observable.
//!
//! # Implementation details
//!
//! Each tracked key has one unpadded `AtomicU64`, its `tat`, updated by the
//! very CAS loop [`AtomicLimiter`](crate::AtomicLimiter) runs
//! (`atomic::update`), so a key decides exactly as a lone limiter would.
//! The keys live in a sharded map: a power of two of `RwLock`s over a
//! hashbrown `HashTable<(K, Entry)>`, each padded to its own cache line. A
//! key is hashed once (foldhash); the hash picks both the shard and the
//! slot. A call on a tracked key takes its shard's read lock, reads the
//! clock, runs the CAS loop on the entry and releases the lock before
//! waiting; only a new key takes the write lock. The design was chosen by
//! measurement against `dashmap`, `scc` and `papaya` (see the commit that
//! introduced this file): it matches dashmap on one hot key and on many
//! keys, and its two dependencies have none of their own.
//!
//! ## Rest, and why dropping a key changes nothing
//!
//! A new key starts with **full credit** (`schedule::FULL`): its first
//! `slack + 1` permits go at once. A key whose `tat <= now - tau` is "at
//! rest": for every later `t`, `max(tat, t - tau) = t - tau`, exactly what
//! `FULL` gives, so an entry at rest decides like an absent key and is
//! dropped. (A fresh, no-credit start could not be pruned this way: no stored
//! state behaves like it.) To also cover a clock read a little behind another
//! core's, an entry is dropped only [`PRUNE_GRACE`] after it came to rest.
//! The clock is read under the shard lock, so a call never decides with a
//! reading older than a sweep that dropped its key.
//!
//! ## Pruning and the ceiling
//!
//! Each shard holds at most `max_keys / shards` entries (so the whole map at
//! most `max_keys`) and sweeps itself when an insert finds its table full:
//! it drops entries at rest, and the table grows only if that freed less than
//! half of it (and shrinks if it is now three quarters empty). Keys at rest
//! thus cost nothing until their room is needed, and a key that comes back
//! before then is still a cheap hit. A sweep is bounded by the shard's size
//! (about a thousand entries) and amortized O(1) per insert, like a `Vec`'s
//! growth; it never stops the other shards. A shard also remembers the earliest time any of
//! its entries can come to rest and does not sweep before it. When a shard is
//! full of busy keys, [`WhenFull`] decides.
//!
//! ## Overrides and rate changes
//!
//! Rates live in a small table of classes (class 0 is the default); an
//! entry stores its class index, resolved once when it is created (walking
//! the key's parents when a [`parent`](KeyedBuilder::parent) function is
//! set). Each shard holds the table its entries refer to. Any change (the
//! default rate, an override set or removed) publishes a new table and
//! bumps an epoch; then each shard, under its write lock, moves to the new
//! table and re-resolves its entries, one shard at a time. An insert that
//! sees a newer epoch than its shard's brings the shard over first. So a
//! shard's entries are always read with the table they were resolved
//! against, and a change takes effect per shard at one instant.
//!
//! When its shard moves to a new table, each entry moves to its new class
//! as a lone `AtomicLimiter` moves across `set_rate`: its `tat` is
//! [`rebase`](schedule::rebase)d, so the slots it handed out stand and its
//! next slot is one *new* interval after the last (after a change from 1/h
//! to 100/s a busy key waits 10 ms, not the rest of the hour). An entry at
//! rest under its old class is set to `FULL` instead: banked credit is kept
//! as time, so at a slower rate (or a larger slack) a rebased bucket at rest
//! could hold fewer permits than a new one, while a dropped key comes back
//! full, and pruning would change decisions. Keys at rest stay at rest.
//!
//! The move is exact under concurrent calls: a shard moves under its write
//! lock, and every step on an entry (and an async give-back) runs under the
//! read lock with the table the entry's class refers to, so no CAS on an
//! entry overlaps its rebase. (An `AtomicLimiter`'s `set_rate` has no such
//! lock and races its takes.) A caller that was granted a slot before the
//! move and is waiting for it keeps it.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::atomic;
use crate::clock::{Clock, DefaultClock, Wait};
use crate::error::{BuildError, TakeError};
use crate::pacer::{self, error, nanos, params, DEFAULT_SLACK};
use crate::rate::Rate;
use crate::schedule::{self, Admit, Grant, Params, FULL, ORIGIN};

/// An entry is dropped only this long (ns) after it came to rest: TSC readings
/// of different cores may disagree by a little, and 1 ms is far more than
/// they do, while small enough not to keep idle keys around.
pub const PRUNE_GRACE: u64 = 1_000_000;

/// The default ceiling on tracked keys: a million, at most about 100 MB with
/// 8-byte keys (a 24-byte entry plus the key, in tables at least half full).
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// A shard aims at this many keys at most, which bounds one sweep to a few
/// microseconds.
const KEYS_PER_SHARD: usize = 1024;

/// At least this many shards (when the ceiling allows), so that threads on
/// different keys rarely meet on one lock.
const MIN_SHARDS: usize = 64;

/// At most this many shards: past a few thousand, more only costs memory.
const MAX_SHARDS: usize = 1 << 14;

/// A shard sweeps no earlier than at this many entries.
const MIN_SWEEP: usize = 32;

/// When a full shard evicts, it evicts this fraction (1/8) of its entries at
/// once, so the next inserts find room without another scan.
const EVICT_SHIFT: u32 = 3;

/// What a [`KeyedLimiter`] does with a new key when its shard already holds
/// its share of `max_keys` and none of them is at rest.
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
    /// Drop the shard's eighth of keys nearest to rest (smallest remaining
    /// debt), then track the new key. A flood of one-off keys mostly evicts
    /// itself, since a key used once is a key nearly at rest; a busy key that
    /// is evicted regains at most its burst early. New keys stay limited.
    #[default]
    Evict,
    /// Refuse the new key's request with [`TakeError::TooManyKeys`]: tracked
    /// keys keep exact decisions, but once an attacker fills the map, new
    /// legitimate keys are locked out until keys come to rest (fail closed).
    Refuse,
    /// Admit the new key's request as if it were at rest, without tracking
    /// it: tracked keys stay exact and nobody is locked out, but untracked
    /// keys are not limited while the map is full (fail open).
    Admit,
}

/// The parameters of one class of keys: the default or one override.
struct Class {
    /// `T`, ns. Never changes (a change publishes a new table); an atomic
    /// only because `atomic::update` reads the interval from one.
    interval: AtomicU64,
    /// `S`.
    slack: u64,
}

impl Class {
    fn new(p: Params) -> Class {
        Class {
            interval: AtomicU64::new(p.interval()),
            slack: p.slack(),
        }
    }

    #[inline]
    fn params(&self) -> Params {
        Params::new_unchecked(self.interval.load(Ordering::Relaxed), self.slack)
    }
}

/// One tracked key's bucket and counters: 24 bytes.
struct Entry {
    /// The state word, as in `AtomicLimiter` but unpadded.
    tat: AtomicU64,
    /// Calls admitted (a cost of `n` counts once), modulo 2^32: each wrap
    /// adds 2^32 to the shard's `wrapped_admitted`.
    admitted: AtomicU32,
    /// Calls refused, modulo 2^32 likewise.
    refused: AtomicU32,
    /// The last call, in units of 2^[`IDLE_SHIFT`] ns of internal time,
    /// modulo 2^32 (about 52 days).
    last: AtomicU32,
    /// Index into the shard's class table.
    class: u32,
}

/// Idle time is kept in units of 2^20 ns (about 1 ms): enough for an admin
/// page, and it fits the last-use time in 32 bits.
const IDLE_SHIFT: u32 = 20;

/// `now` in idle units, modulo 2^32.
#[inline]
fn coarse(now: u64) -> u32 {
    (now >> IDLE_SHIFT) as u32
}

/// One shard of the map, under its `RwLock`.
struct Shard<K> {
    /// Keys and buckets, placed by the limiter's hash (computed once per
    /// call, for the shard and the slot alike).
    map: HashTable<(K, Entry)>,
    /// The class table the entries' `class` indices refer to
    /// (`resolved.classes`, one pointer closer).
    classes: Arc<[Class]>,
    /// The overrides new entries are resolved with.
    resolved: Arc<Resolved<K>>,
    /// The limiter's `epoch` when `resolved` was taken.
    epoch: u64,
    /// No entry can come to rest (plus grace) before this internal time.
    earliest_rest: u64,
    /// Sweep when an insert finds this many entries.
    sweep_at: usize,
    /// Counters of entries no longer in `map`.
    retired_admitted: u64,
    retired_refused: u64,
    /// 2^32 for each wrap of an entry's counter (rare: no contention).
    wrapped_admitted: AtomicU64,
    wrapped_refused: AtomicU64,
    pruned: u64,
    evicted: u64,
}

/// The overrides and the class table they resolve to.
struct Resolved<K> {
    /// Override key -> class index (1..).
    overrides: HashMap<K, u32, RandomState>,
    /// The rate each class was set with, for introspection; `[0]` the default.
    rates: Vec<Rate>,
    classes: Arc<[Class]>,
}

/// A rate limiter with one bucket per key: per user, per IP, per tenant.
///
/// Each key is paced exactly as a lone [`AtomicLimiter`](crate::AtomicLimiter)
/// built with `.full_credit(true)` and the key's rate and slack would pace it:
/// a new key may burst `slack + 1` permits at once, then one per interval.
/// Keys whose buckets are back at rest are dropped automatically (that
/// changes no decision), and the number of tracked keys never exceeds
/// [`max_keys`](KeyedBuilder::max_keys); [`WhenFull`] says what happens when
/// every tracked key is busy.
///
/// ```
/// use paceline::{KeyedLimiter, Rate};
/// use std::net::{IpAddr, Ipv4Addr};
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
/// Unlike the direct limiters, `take` returns a `Result`: a key may be
/// refused when the map is full under [`WhenFull::Refuse`].
///
/// # Memory ordering
/// As for `AtomicLimiter`: permits are ordered, memory is not.
pub struct KeyedLimiter<K, C: Clock = DefaultClock> {
    shards: Box<[CachePadded<RwLock<Shard<K>>>]>,
    /// Picks the shard. foldhash's quality variant: the fast one maps
    /// sequential keys (IPs, ids) to shards in a near-periodic pattern.
    hasher: foldhash::quality::RandomState,
    mask: usize,
    /// Entries per shard at most.
    shard_cap: usize,
    max_keys: usize,
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
    /// Requests admitted without a bucket ([`WhenFull::Admit`]).
    untracked: AtomicU64,
    /// Requests refused on keys not tracked (too large, or the map full).
    refused_untracked: AtomicU64,
}

/// Configures a [`KeyedLimiter`]; made by [`KeyedLimiter::builder`].
///
/// ```
/// use paceline::{KeyedLimiter, Rate, WhenFull};
///
/// let limiter = KeyedLimiter::<String>::builder("100/s".parse()?)
///     .slack(20)
///     .max_keys(100_000)
///     .when_full(WhenFull::Refuse)
///     .parent(paceline::keyed::path_parent)
///     .build()?;
/// limiter.set_override("api/upload".to_string(), "2/s".parse()?, 0)?;
/// assert!(limiter.try_take("api/upload/10.0.0.7").is_ok());
/// assert!(limiter.try_take("api/upload/10.0.0.7").is_err()); // 2/s, no slack
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a builder does nothing until .build()"]
pub struct KeyedBuilder<K, C: Clock = DefaultClock> {
    rate: Rate,
    slack: u64,
    wait: Wait,
    clock: C,
    max_keys: usize,
    when_full: WhenFull,
    parent: Option<fn(&K) -> Option<K>>,
}

impl<K, C: Clock> KeyedBuilder<K, C> {
    /// How many unused permits each key may bank (default 10): a key's burst
    /// is `slack + 1`.
    pub fn slack(mut self, permits: u64) -> Self {
        self.slack = permits;
        self
    }

    /// How blocking calls wait for their slot (default [`Wait::Sleep`]).
    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// The ceiling on tracked keys (default [`DEFAULT_MAX_KEYS`]). It is
    /// enforced per shard (`max_keys / shards` each), so the map may act on
    /// [`when_full`](Self::when_full) a little before the total reaches it.
    /// A ceiling of 0 is taken as 1.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// What to do with a new key when the map is full of busy keys (default
    /// [`WhenFull::Evict`]).
    pub fn when_full(mut self, when_full: WhenFull) -> Self {
        self.when_full = when_full;
        self
    }

    /// Where an override lookup goes when a key has none of its own:
    /// `parent(key)`, then its parent, and so on, then the default rate.
    /// [`path_parent`] gives `"api/upload/10.0.0.7"` → `"api/upload"` →
    /// `"api"`. Resolved once per key when it starts being tracked.
    pub fn parent(mut self, parent: fn(&K) -> Option<K>) -> Self {
        self.parent = Some(parent);
        self
    }

    /// The clock to read and wait on (default [`DefaultClock`]).
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedBuilder<K, C2> {
        KeyedBuilder {
            rate: self.rate,
            slack: self.slack,
            wait: self.wait,
            clock,
            max_keys: self.max_keys,
            when_full: self.when_full,
            parent: self.parent,
        }
    }

    /// The limiter.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when `slack * interval` is over 146 years.
    pub fn build(self) -> Result<KeyedLimiter<K, C>, BuildError>
    where
        K: Hash + Eq,
    {
        let p = params(self.rate, self.slack)?;
        let classes: Arc<[Class]> = Arc::from(vec![Class::new(p)]);
        let resolved = Arc::new(Resolved {
            overrides: HashMap::with_hasher(RandomState::default()),
            rates: vec![self.rate],
            classes: Arc::clone(&classes),
        });
        let max_keys = self.max_keys;
        let shards = shard_count(max_keys);
        let shard_cap = max_keys / shards;
        let hasher = foldhash::quality::RandomState::default();
        Ok(KeyedLimiter {
            shards: (0..shards)
                .map(|_| {
                    CachePadded::new(RwLock::new(Shard {
                        map: HashTable::new(),
                        classes: Arc::clone(&classes),
                        resolved: Arc::clone(&resolved),
                        epoch: 0,
                        earliest_rest: 0,
                        sweep_at: MIN_SWEEP.min(shard_cap),
                        retired_admitted: 0,
                        retired_refused: 0,
                        wrapped_admitted: AtomicU64::new(0),
                        wrapped_refused: AtomicU64::new(0),
                        pruned: 0,
                        evicted: 0,
                    }))
                })
                .collect(),
            hasher,
            mask: shards - 1,
            shard_cap,
            max_keys,
            when_full: self.when_full,
            parent: self.parent,
            resolved: RwLock::new(resolved),
            epoch: AtomicU64::new(0),
            admin: Mutex::new(()),
            clock: self.clock,
            wait: self.wait,
            untracked: AtomicU64::new(0),
            refused_untracked: AtomicU64::new(0),
        })
    }
}

impl<K, C: Clock> fmt::Debug for KeyedBuilder<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBuilder")
            .field("rate", &self.rate)
            .field("slack", &self.slack)
            .field("max_keys", &self.max_keys)
            .field("when_full", &self.when_full)
            .finish_non_exhaustive()
    }
}

/// How many shards for `max_keys`: about [`KEYS_PER_SHARD`] keys each, at
/// least [`MIN_SHARDS`], a power of two, never more shards than keys.
fn shard_count(max_keys: usize) -> usize {
    let wanted = max_keys
        .div_ceil(KEYS_PER_SHARD)
        .next_power_of_two()
        .clamp(MIN_SHARDS, MAX_SHARDS);
    // The largest power of two not above max_keys (>= 1).
    let fit = 1usize << (usize::BITS - 1 - max_keys.leading_zeros());
    wanted.min(fit)
}

/// The parent of a `/`-separated path: `"api/upload/10.0.0.7"` →
/// `"api/upload"` → `"api"` → `None`. For [`KeyedBuilder::parent`] on
/// `String` (or `Box<str>`, `Arc<str>`) keys.
///
/// ```
/// use paceline::keyed::path_parent;
///
/// assert_eq!(path_parent(&"api/upload/10.0.0.7".to_string()).as_deref(), Some("api/upload"));
/// assert_eq!(path_parent(&"api".to_string()), None);
/// ```
pub fn path_parent<S>(key: &S) -> Option<S>
where
    S: AsRef<str> + for<'a> From<&'a str>,
{
    let s = key.as_ref();
    s.rfind('/').map(|i| S::from(&s[..i]))
}

/// One tracked key as [`KeyedLimiter::snapshot`] sees it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct KeyState<K> {
    /// The key.
    pub key: K,
    /// How much of the key's burst is in use: 0 at rest, 1 when no permit is
    /// free now, above 1 when blocking callers have reserved slots beyond
    /// that.
    pub fill: f64,
    /// How long until a permit of cost 1 is free (zero: now).
    pub next_free: Duration,
    /// Time since the key was last asked about, to about a millisecond.
    pub idle: Duration,
    /// Calls admitted on this key since it was last tracked, modulo 2^32
    /// ([`KeyedLimiter::stats`] counts exactly).
    pub admitted: u64,
    /// Calls refused on this key since it was last tracked, modulo 2^32.
    pub refused: u64,
}

/// Totals of a [`KeyedLimiter`], for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyedStats {
    /// Keys tracked now.
    pub keys: usize,
    /// Calls admitted in all (tracked, since dropped, and untracked).
    pub admitted: u64,
    /// Calls refused in all.
    pub refused: u64,
    /// Keys dropped because they came to rest.
    pub pruned: u64,
    /// Busy keys evicted under [`WhenFull::Evict`].
    pub evicted: u64,
    /// Calls admitted without a bucket under [`WhenFull::Admit`].
    pub untracked: u64,
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// A keyed limiter giving each key `rate` with slack 10, at most
    /// [`DEFAULT_MAX_KEYS`] keys, evicting when full, on the [`DefaultClock`].
    ///
    /// # Panics
    /// If ten intervals of `rate` exceed 146 years;
    /// [`builder`](Self::builder) reports that as an error.
    pub fn new(rate: Rate) -> KeyedLimiter<K> {
        match Self::builder(rate).build() {
            Ok(limiter) => limiter,
            Err(e) => panic!("{e}"),
        }
    }

    /// A builder for a keyed limiter giving each key `rate` by default.
    pub fn builder(rate: Rate) -> KeyedBuilder<K> {
        KeyedBuilder {
            rate,
            slack: DEFAULT_SLACK,
            wait: Wait::default(),
            clock: DefaultClock::new(),
            max_keys: DEFAULT_MAX_KEYS,
            when_full: WhenFull::default(),
            parent: None,
        }
    }
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // Poisoning: every critical section stores whole values computed first.
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

/// When the bucket `tat` under `p` comes to rest, plus the grace.
#[inline]
fn rest_time(tat: u64, p: Params) -> u64 {
    tat.saturating_add(p.tau()).saturating_add(PRUNE_GRACE)
}

/// A key's state `tat` when, at `now`, its parameters change from `old` to
/// `new`: `FULL` if it is at rest under `old` (so it stays at rest, as an
/// absent key would be), else [`schedule::rebase`]d: the slots it handed out
/// stand and its next one is one *new* interval after the last, as a lone
/// `AtomicLimiter`'s after `set_rate`.
#[inline]
fn moved(tat: u64, now: u64, old: Params, new: Params) -> u64 {
    if tat <= now.saturating_sub(old.tau()) {
        FULL
    } else {
        schedule::rebase(tat, old, new)
    }
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// Blocks until the key's next permit's slot and returns the clock time it
    /// was scheduled at (since the clock's origin).
    ///
    /// ```
    /// use paceline::{KeyedLimiter, ManualClock, Rate};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::with_auto_advance(); // waits move the clock
    /// let limiter = KeyedLimiter::<&str>::builder(Rate::per_second(10))
    ///     .slack(0)
    ///     .clock(clock)
    ///     .build()?;
    /// assert_eq!(limiter.take(&"alice")?, Duration::ZERO);
    /// assert_eq!(limiter.take(&"alice")?, Duration::from_millis(100));
    /// assert_eq!(limiter.take(&"bob")?, Duration::from_millis(100)); // no wait
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`TakeError::TooManyKeys`] for a new key when the map is full of busy
    /// keys under [`WhenFull::Refuse`].
    #[inline]
    pub fn take<Q>(&self, key: &Q) -> Result<Duration, TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.take_n(key, 1)
    }

    /// Blocks until `cost` permits of the key are paid for, as one request.
    ///
    /// # Errors
    /// [`TakeError::CostTooLarge`]; [`TakeError::TooManyKeys`].
    pub fn take_n<Q>(&self, key: &Q, cost: u64) -> Result<Duration, TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (now, grant) = self.decide(key, cost, Admit::Always)?;
        Ok(self.wait_for(now, grant.slot))
    }

    /// Takes a permit of the key if one is free now; never blocks. A refusal
    /// stores nothing.
    ///
    /// # Errors
    /// [`TakeError::RetryAfter`]; [`TakeError::TooManyKeys`].
    #[inline]
    pub fn try_take<Q>(&self, key: &Q) -> Result<(), TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.decide(key, 1, Admit::Within(0)).map(drop)
    }

    /// Takes `cost` permits of the key if they are free now; never blocks.
    ///
    /// # Errors
    /// [`TakeError::RetryAfter`]; [`TakeError::ExceedsBurst`] when `cost`
    /// exceeds the key's burst; [`TakeError::CostTooLarge`];
    /// [`TakeError::TooManyKeys`].
    #[inline]
    pub fn try_take_n<Q>(&self, key: &Q, cost: u64) -> Result<(), TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.decide(key, cost, Admit::Within(0)).map(drop)
    }

    /// Takes a permit of the key and waits for it only if its slot is at
    /// most `max_wait` away; otherwise fails at once, storing nothing.
    ///
    /// # Errors
    /// [`TakeError::QueueFull`]; [`TakeError::TooManyKeys`].
    pub fn take_timeout<Q>(&self, key: &Q, max_wait: Duration) -> Result<Duration, TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.take_n_timeout(key, 1, max_wait)
    }

    /// [`take_timeout`](Self::take_timeout) for `cost` permits.
    ///
    /// # Errors
    /// [`TakeError::QueueFull`]; [`TakeError::ExceedsBurst`];
    /// [`TakeError::CostTooLarge`]; [`TakeError::TooManyKeys`].
    pub fn take_n_timeout<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (now, grant) = self
            .decide(key, cost, Admit::Within(nanos(max_wait)))
            .map_err(|e| pacer::timed_out(e, max_wait))?;
        Ok(self.wait_for(now, grant.slot))
    }

    /// Whether [`try_take_n(key, cost)`](Self::try_take_n) would pass now.
    /// Consumes nothing and tracks no new key. (Under a full map with
    /// [`WhenFull::Refuse`] a new key answers as if it were tracked.)
    pub fn can_take<Q>(&self, key: &Q, cost: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (tat, now, p) = self.peek(key);
        schedule::step(tat, now, cost, p, Admit::Within(0)).is_ok()
    }

    /// How many permits of the key one request could take now without
    /// waiting: at most `slack + 1` (a key not tracked has them all).
    /// Consumes nothing and tracks no key.
    ///
    /// ```
    /// use paceline::{KeyedLimiter, Rate};
    ///
    /// let limiter = KeyedLimiter::<u32>::new(Rate::per_second(10)); // slack 10
    /// assert_eq!(limiter.available(&7), 11);
    /// limiter.try_take_n(&7, 4)?;
    /// assert_eq!(limiter.available(&7), 7);
    /// # Ok::<(), paceline::TakeError>(())
    /// ```
    pub fn available<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (tat, now, p) = self.peek(key);
        schedule::available(tat, now, p)
    }

    /// How long until a permit of the key is free (zero: one is free now).
    /// Consumes nothing and tracks no key.
    pub fn next_free<Q>(&self, key: &Q) -> Duration
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (tat, now, p) = self.peek(key);
        Duration::from_nanos(schedule::next_free(tat, now, p))
    }

    /// The key's state, the clock and the key's parameters, read under its
    /// shard's read lock; a key not tracked is at rest (`FULL`) with the
    /// parameters it would be tracked with.
    fn peek<Q>(&self, key: &Q) -> (u64, u64, Params)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (hash, lock) = self.shard(key);
        let shard = read(lock);
        let now = self.now();
        match find(&shard.map, hash, key) {
            Some(e) => {
                let class = &shard.classes[e.class as usize];
                (e.tat.load(Ordering::Relaxed), now, class.params())
            }
            // As the shard would resolve it now (an override change on
            // its way to this shard is not seen yet, as for its entries).
            None => {
                let class = self.resolve(&shard.resolved, key);
                (FULL, now, shard.classes[class as usize].params())
            }
        }
    }

    /// The clock's reading in internal time.
    #[inline]
    fn now(&self) -> u64 {
        self.clock.now().saturating_add(ORIGIN)
    }

    /// The key's hash and its shard. The shard takes bits 32 and up: the
    /// table inside uses the low bits for the slot and the top 7 as tags.
    #[inline]
    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> (u64, &RwLock<Shard<K>>) {
        let hash = self.hasher.hash_one(key);
        (hash, &self.shards[(hash >> 32) as usize & self.mask])
    }

    #[inline]
    fn wait_for(&self, now: u64, slot: u64) -> Duration {
        pacer::wait_for(self.wait, &self.clock, now, slot)
    }

    /// The hot path: a tracked key under its shard's read lock.
    #[inline]
    fn decide<Q>(&self, key: &Q, cost: u64, admit: Admit) -> Result<(u64, Grant), TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (hash, lock) = self.shard(key);
        {
            let shard = read(lock);
            if let Some(entry) = find(&shard.map, hash, key) {
                // Read under the lock: see the module doc's "Rest".
                let now = self.now();
                return on_entry(&shard, entry, now, cost, admit);
            }
        }
        self.decide_new(lock, hash, key, cost, admit)
    }

    /// A key not (yet) tracked: decide on a bucket at rest, and track the key
    /// if the decision stores something.
    #[cold]
    fn decide_new<Q>(
        &self,
        lock: &RwLock<Shard<K>>,
        hash: u64,
        key: &Q,
        cost: u64,
        admit: Admit,
    ) -> Result<(u64, Grant), TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut guard = write(lock);
        let now = self.now();
        let shard = &mut *guard;
        // Another thread may have tracked it meanwhile.
        if let Some(entry) = find(&shard.map, hash, key) {
            return on_entry(shard, entry, now, cost, admit);
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
        let p = shard.classes[class as usize].params();
        let grant = match schedule::step(FULL, now, cost, p, admit) {
            Ok(grant) => grant,
            Err(deny) => {
                self.refused_untracked.fetch_add(1, Ordering::Relaxed);
                return Err(error(deny, cost, admit, p.slack()));
            }
        };
        if grant.next == FULL {
            // A cost of 0: nothing to remember.
            return Ok((now, grant));
        }
        if shard.map.len() >= shard.sweep_at && !self.make_room(shard, now) {
            return match self.when_full {
                WhenFull::Refuse => {
                    self.refused_untracked.fetch_add(1, Ordering::Relaxed);
                    Err(TakeError::TooManyKeys {
                        max_keys: self.max_keys,
                    })
                }
                // `Evict` always makes room; `Admit` decides as at rest.
                WhenFull::Admit | WhenFull::Evict => {
                    self.untracked.fetch_add(1, Ordering::Relaxed);
                    Ok((now, grant))
                }
            };
        }
        shard.earliest_rest = shard.earliest_rest.min(rest_time(grant.next, p));
        let entry = Entry {
            tat: AtomicU64::new(grant.next),
            admitted: AtomicU32::new(1),
            refused: AtomicU32::new(0),
            last: AtomicU32::new(coarse(now)),
            class,
        };
        let hasher = &self.hasher;
        shard
            .map
            .insert_unique(hash, (key.to_owned(), entry), |(k, _)| hasher.hash_one(k));
        Ok((now, grant))
    }

    /// Called when an insert finds `shard` at its sweep mark: sweeps if any
    /// entry may be at rest, evicts if the policy says so; `false` when the
    /// shard is still full.
    fn make_room(&self, shard: &mut Shard<K>, now: u64) -> bool {
        if now >= shard.earliest_rest {
            sweep(shard, now);
        }
        let len = shard.map.len();
        if len < self.shard_cap {
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
            // (Not `clamp`: a shard cap may be under MIN_SWEEP.)
            shard.sweep_at = next.max(MIN_SWEEP).min(self.shard_cap).max(len + 1);
            return true;
        }
        if self.when_full != WhenFull::Evict {
            return false;
        }
        evict(shard, len >> EVICT_SHIFT);
        true
    }

    /// The class of `key`: its own override, else its parents', else 0.
    fn resolve<Q>(&self, resolved: &Resolved<K>, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if resolved.overrides.is_empty() {
            return 0;
        }
        if let Some(&class) = resolved.overrides.get(key) {
            return class;
        }
        let Some(parent) = self.parent else {
            return 0;
        };
        let mut k = parent(&key.to_owned());
        while let Some(key) = k {
            if let Some(&class) = resolved.overrides.get::<K>(&key) {
                return class;
            }
            k = parent(&key);
        }
        0
    }

    /// Points every entry of `shard` at `resolved`'s table: an entry at rest
    /// at `now` under its old class moves to `FULL`, any other is rebased
    /// from its old parameters to its new ones (see [`moved`]).
    ///
    /// Runs under the shard's write lock, and every step on an entry runs
    /// under the read lock: no CAS races the rebase, so each entry's change
    /// happens between two of its steps, exactly.
    fn reresolve(&self, shard: &mut Shard<K>, resolved: &Arc<Resolved<K>>, now: u64) {
        if Arc::ptr_eq(&shard.resolved, resolved) {
            return;
        }
        if !Arc::ptr_eq(&shard.classes, &resolved.classes) {
            let old = Arc::clone(&shard.classes);
            for (key, entry) in shard.map.iter_mut() {
                let before = old[entry.class as usize].params();
                entry.class = self.resolve(resolved, key);
                let after = resolved.classes[entry.class as usize].params();
                let tat = entry.tat.get_mut();
                *tat = moved(*tat, now, before, after);
            }
        }
        shard.classes = Arc::clone(&resolved.classes);
        shard.resolved = Arc::clone(resolved);
        // A shorter slack may bring rest closer.
        shard.earliest_rest = 0;
    }

    /// Sets the default rate, for every key without an override. As for
    /// [`AtomicLimiter::set_rate`](crate::AtomicLimiter::set_rate), per key:
    /// slots already handed out stand, and a busy key's next slot is one
    /// new interval after its last; keys at rest stay at rest (a burst of
    /// `slack + 1` at the new rate). Applies to the tracked keys one shard
    /// at a time.
    ///
    /// ```
    /// use paceline::{KeyedLimiter, ManualClock, Rate, TakeError};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::<u32>::builder(Rate::per_hour(1))
    ///     .slack(0)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// limiter.try_take(&7)?;
    /// limiter.set_rate(Rate::per_second(100))?;
    /// // Key 7's next permit is 10 ms after its last, not an hour.
    /// let wait = Duration::from_millis(10);
    /// assert_eq!(limiter.try_take(&7), Err(TakeError::RetryAfter(wait)));
    /// clock.advance(wait);
    /// assert!(limiter.try_take(&7).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when the default slack at `rate` banks
    /// over 146 years; nothing changes then.
    pub fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let current = Arc::clone(&read(&self.resolved));
        let p = params(rate, current.classes[0].slack)?;
        let entries = self.overrides_except(&current, None);
        self.publish((rate, p), entries);
        Ok(())
    }

    /// The overrides of `current` but `except`'s, as `publish` takes them.
    fn overrides_except<Q>(
        &self,
        current: &Resolved<K>,
        except: Option<&Q>,
    ) -> Vec<(K, Rate, Params)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        current
            .overrides
            .iter()
            .filter(|(k, _)| except.is_none_or(|e| (*k).borrow() != e))
            .map(|(k, &class)| {
                let c = &current.classes[class as usize];
                (k.clone(), current.rates[class as usize], c.params())
            })
            .collect()
    }

    /// The default rate and parameters of `current`.
    fn default_of(current: &Resolved<K>) -> (Rate, Params) {
        (current.rates[0], current.classes[0].params())
    }

    /// Gives `key`, and with a [`parent`](KeyedBuilder::parent) function every
    /// key under it, its own `rate` and `slack`, replacing any override it
    /// had. Applies to keys already tracked, one shard at a time, as
    /// [`set_rate`](Self::set_rate) does: slots handed out stand, a busy
    /// key's next slot is one new interval after its last, keys at rest stay
    /// at rest.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when `slack` at `rate` banks over 146
    /// years; nothing changes then.
    pub fn set_override(&self, key: K, rate: Rate, slack: u64) -> Result<(), BuildError> {
        let p = params(rate, slack)?;
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let current = Arc::clone(&read(&self.resolved));
        let mut entries = self.overrides_except(&current, Some(&key));
        entries.push((key, rate, p));
        self.publish(Self::default_of(&current), entries);
        Ok(())
    }

    /// Removes `key`'s override; its keys fall back to their parent's rate or
    /// the default, moving to it as in [`set_rate`](Self::set_rate). `false`
    /// if it had none.
    pub fn remove_override<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let current = Arc::clone(&read(&self.resolved));
        if !current.overrides.contains_key(key) {
            return false;
        }
        let entries = self.overrides_except(&current, Some(key));
        self.publish(Self::default_of(&current), entries);
        true
    }

    /// Publishes a new table with `default` and the overrides `entries`,
    /// then brings every shard to it. Runs under `admin`.
    fn publish(&self, default: (Rate, Params), entries: Vec<(K, Rate, Params)>) {
        let mut classes = vec![Class::new(default.1)];
        let mut rates = vec![default.0];
        let mut overrides = HashMap::with_hasher(RandomState::default());
        for (k, rate, p) in entries {
            overrides.insert(k, classes.len() as u32);
            classes.push(Class::new(p));
            rates.push(rate);
        }
        let next = Arc::new(Resolved {
            overrides,
            rates,
            classes: Arc::from(classes),
        });
        *write(&self.resolved) = Arc::clone(&next);
        // Release: an insert that sees this epoch sees `next` (or later).
        let epoch = self.epoch.fetch_add(1, Ordering::Release) + 1;
        for lock in self.shards.iter() {
            let mut shard = write(lock);
            let now = self.now();
            self.reresolve(&mut shard, &next, now);
            shard.epoch = shard.epoch.max(epoch);
        }
    }

    /// The rate and slack a key gets (its override's, its parent's, or the
    /// default).
    pub fn rate_for<Q>(&self, key: &Q) -> (Rate, u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let resolved = Arc::clone(&read(&self.resolved));
        let class = self.resolve(&resolved, key) as usize;
        (resolved.rates[class], resolved.classes[class].slack)
    }

    /// The default rate, for keys without an override.
    pub fn rate(&self) -> Rate {
        read(&self.resolved).rates[0]
    }

    /// The default slack, in permits: a key's burst is `slack + 1`.
    pub fn slack(&self) -> u64 {
        read(&self.resolved).classes[0].slack
    }

    /// How blocking calls wait for their slot.
    pub fn wait_strategy(&self) -> Wait {
        self.wait
    }

    /// The number of keys tracked now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| read(s).map.len()).sum()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ceiling on tracked keys.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// What happens to new keys when the map is full of busy keys.
    pub fn when_full(&self) -> WhenFull {
        self.when_full
    }

    /// Drops every key at rest now, one shard at a time, and returns how many.
    /// Never needed for correctness or bounds (inserts prune as they go); for
    /// an admin page that wants an exact [`len`](Self::len).
    pub fn prune(&self) -> usize {
        let mut dropped = 0;
        for lock in self.shards.iter() {
            let mut shard = write(lock);
            let now = self.now();
            let before = shard.map.len();
            sweep(&mut shard, now);
            dropped += before - shard.map.len();
        }
        dropped
    }

    /// The keys not at rest, with their fill level, time to a free permit,
    /// idle time and counters. Takes each shard's read lock in turn. (A key
    /// at rest is as good as absent; [`len`](Self::len) counts it until its
    /// shard is next swept.)
    ///
    /// ```
    /// use paceline::{KeyedLimiter, Rate};
    ///
    /// let limiter = KeyedLimiter::<u32>::new(Rate::per_second(10));
    /// limiter.try_take_n(&7, 11)?; // the whole burst
    /// let keys = limiter.snapshot();
    /// assert_eq!(keys.len(), 1);
    /// assert_eq!(keys[0].key, 7);
    /// assert!((keys[0].fill - 1.0).abs() < 0.01);
    /// # Ok::<(), paceline::TakeError>(())
    /// ```
    pub fn snapshot(&self) -> Vec<KeyState<K>> {
        let mut out = Vec::new();
        for lock in self.shards.iter() {
            let shard = read(lock);
            let now = self.now();
            for (key, e) in shard.map.iter() {
                let class = &shard.classes[e.class as usize];
                let p = class.params();
                let tat = e.tat.load(Ordering::Relaxed);
                let used = tat.saturating_sub(now.saturating_sub(p.tau()));
                if used == 0 {
                    // At rest: as good as absent, only not swept yet.
                    continue;
                }
                let window = p.tau().saturating_add(p.interval());
                out.push(KeyState {
                    key: key.clone(),
                    fill: used as f64 / window as f64,
                    next_free: Duration::from_nanos(schedule::next_free(tat, now, p)),
                    idle: Duration::from_nanos(
                        u64::from(coarse(now).wrapping_sub(e.last.load(Ordering::Relaxed)))
                            << IDLE_SHIFT,
                    ),
                    admitted: u64::from(e.admitted.load(Ordering::Relaxed)),
                    refused: u64::from(e.refused.load(Ordering::Relaxed)),
                });
            }
        }
        out
    }

    /// Totals since the limiter was built, for metrics. Takes each shard's
    /// read lock in turn, so the totals of a busy limiter are not one
    /// instant's.
    ///
    /// ```
    /// use paceline::{KeyedLimiter, Rate};
    ///
    /// let limiter = KeyedLimiter::<u32>::builder(Rate::per_second(1)).slack(0).build()?;
    /// limiter.try_take(&1)?;
    /// assert!(limiter.try_take(&1).is_err());
    /// let stats = limiter.stats();
    /// assert_eq!((stats.keys, stats.admitted, stats.refused), (1, 1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> KeyedStats {
        let mut stats = KeyedStats {
            untracked: self.untracked.load(Ordering::Relaxed),
            admitted: self.untracked.load(Ordering::Relaxed),
            refused: self.refused_untracked.load(Ordering::Relaxed),
            ..KeyedStats::default()
        };
        for lock in self.shards.iter() {
            let shard = read(lock);
            stats.keys += shard.map.len();
            stats.admitted += shard.retired_admitted;
            stats.refused += shard.retired_refused;
            stats.admitted += shard.wrapped_admitted.load(Ordering::Relaxed);
            stats.refused += shard.wrapped_refused.load(Ordering::Relaxed);
            stats.pruned += shard.pruned;
            stats.evicted += shard.evicted;
            for (_, e) in shard.map.iter() {
                stats.admitted += u64::from(e.admitted.load(Ordering::Relaxed));
                stats.refused += u64::from(e.refused.load(Ordering::Relaxed));
            }
        }
        stats
    }

    /// The limiter's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// The entry of `key` (hashed to `hash`) in `map`.
#[inline]
fn find<'a, K, Q>(map: &'a HashTable<(K, Entry)>, hash: u64, key: &Q) -> Option<&'a Entry>
where
    K: Borrow<Q>,
    Q: Eq + ?Sized,
{
    map.find(hash, |(k, _)| k.borrow() == key).map(|(_, e)| e)
}

/// A step on a tracked entry of `shard`, counting the outcome.
#[inline]
fn on_entry<K>(
    shard: &Shard<K>,
    entry: &Entry,
    now: u64,
    cost: u64,
    admit: Admit,
) -> Result<(u64, Grant), TakeError> {
    // The index was set under this shard's lock against this very table.
    let class = &shard.classes[entry.class as usize];
    entry.last.store(coarse(now), Ordering::Relaxed);
    match atomic::update(&entry.tat, &class.interval, class.slack, now, cost, admit) {
        Ok(grant) => {
            if entry.admitted.fetch_add(1, Ordering::Relaxed) == u32::MAX {
                shard.wrapped_admitted.fetch_add(1 << 32, Ordering::Relaxed);
            }
            Ok((now, grant))
        }
        Err(deny) => {
            if entry.refused.fetch_add(1, Ordering::Relaxed) == u32::MAX {
                shard.wrapped_refused.fetch_add(1 << 32, Ordering::Relaxed);
            }
            Err(error(deny, cost, admit, class.slack))
        }
    }
}

/// Drops the entries of `shard` at rest at `now` and notes when the next one
/// can come to rest.
fn sweep<K>(shard: &mut Shard<K>, now: u64) {
    let classes = Arc::clone(&shard.classes);
    let mut earliest = u64::MAX;
    let (mut admitted, mut refused, mut pruned) = (0, 0, 0);
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
}

/// Evicts at least `count` (and at least one) entries of `shard` nearest to
/// rest.
fn evict<K>(shard: &mut Shard<K>, count: usize) {
    let classes = Arc::clone(&shard.classes);
    let rest = |e: &Entry| {
        let class = &classes[e.class as usize];
        rest_time(e.tat.load(Ordering::Relaxed), class.params())
    };
    let mut times: Vec<u64> = shard.map.iter().map(|(_, e)| rest(e)).collect();
    if times.is_empty() {
        return;
    }
    let nth = count.clamp(1, times.len()) - 1;
    let (_, &mut threshold, _) = times.select_nth_unstable(nth);
    let (mut admitted, mut refused, mut evicted) = (0, 0, 0);
    shard.map.retain(|(_, e)| {
        if rest(e) <= threshold {
            admitted += u64::from(e.admitted.load(Ordering::Relaxed));
            refused += u64::from(e.refused.load(Ordering::Relaxed));
            evicted += 1;
            false
        } else {
            true
        }
    });
    shard.retired_admitted += admitted;
    shard.retired_refused += refused;
    shard.evicted += evicted;
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

/// The async face (feature `tokio`): the same decisions, waiting on Tokio's
/// timer instead of blocking the thread.
#[cfg(feature = "tokio")]
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
    /// reserved on this key since; otherwise the slot is spent. Either way
    /// the call counts as admitted in [`stats`](Self::stats).
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
        let (now, grant) = self.decide(key, cost, Admit::Always)?;
        self.sleep_to(key, now, grant).await
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
        let (now, grant) = self
            .decide(key, cost, Admit::Within(nanos(max_wait)))
            .map_err(|e| pacer::timed_out(e, max_wait))?;
        self.sleep_to(key, now, grant).await
    }

    /// Sleeps on Tokio's timer until `grant.slot`, giving it back if dropped
    /// first.
    async fn sleep_to<Q>(&self, key: &Q, now: u64, grant: Grant) -> Result<Duration, TakeError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if grant.slot > now {
            let mut pending = Pending {
                limiter: self,
                key: key.to_owned(),
                grant,
                armed: true,
            };
            tokio::time::sleep(Duration::from_nanos(grant.slot - now)).await;
            pending.armed = false;
        }
        Ok(Duration::from_nanos(grant.slot.max(now) - ORIGIN))
    }

    /// Puts `grant` back on `key` (`next` → `prev`) if nobody has updated the
    /// key since; `true` when it did.
    fn give_back(&self, key: &K, grant: Grant) -> bool {
        let (hash, lock) = self.shard(key);
        let shard = read(lock);
        find(&shard.map, hash, key).is_some_and(|e| {
            e.tat
                .compare_exchange(grant.next, grant.prev, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        })
    }
}

/// A reserved slot an async caller is sleeping towards; dropped before the
/// slot (the future was cancelled), it gives the slot back.
#[cfg(feature = "tokio")]
struct Pending<'a, K: Hash + Eq + Clone, C: Clock> {
    limiter: &'a KeyedLimiter<K, C>,
    key: K,
    grant: Grant,
    /// Cleared once the slot is reached.
    armed: bool,
}

#[cfg(feature = "tokio")]
impl<K: Hash + Eq + Clone, C: Clock> Drop for Pending<'_, K, C> {
    fn drop(&mut self) {
        if self.armed {
            self.limiter.give_back(&self.key, self.grant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    #[test]
    fn counters_wrapping_a_key_still_total_exactly() {
        let l = KeyedLimiter::<u32>::builder(Rate::per_second(1))
            .slack(5)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        l.try_take(&7).unwrap();
        let (hash, lock) = l.shard(&7);
        {
            let shard = read(lock);
            let e = find(&shard.map, hash, &7).unwrap();
            e.admitted.store(u32::MAX, Ordering::Relaxed);
            e.refused.store(u32::MAX, Ordering::Relaxed);
        }
        l.try_take(&7).unwrap();
        l.try_take_n(&7, 5).unwrap_err();
        let stats = l.stats();
        assert_eq!(stats.admitted, u64::from(u32::MAX) + 1);
        assert_eq!(stats.refused, u64::from(u32::MAX) + 1);
    }

    #[test]
    fn an_entry_is_24_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 24);
    }
}
