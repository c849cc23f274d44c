//! [`KeyedBuilder`]: a keyed limiter's configuration, and the map it builds.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use hashbrown::HashTable;

use super::classes::{Resolved, Setting};
use super::shard::Shard;
use super::windowed::unix_origin;
use super::{
    KeyHasher, KeyedLimiter, WhenFull, DEFAULT_MAX_KEYS, KEYS_PER_SHARD, MAX_SHARDS, MIN_SHARDS,
    MIN_SWEEP,
};
use crate::clock::{Clock, DefaultClock};
use crate::observe::stats::{Counting, Meter};
use crate::observe::stripes::Counters;
use crate::primitive::{AtomicU64, AtomicUsize, Mutex, RwLock};
use crate::values::error::BuildError;
use crate::values::limit::Limit;
use crate::values::rate::Rate;
use crate::values::slack::Slack;
use crate::wait::Wait;

/// Configures a [`KeyedLimiter`]; made by [`KeyedLimiter::builder`].
///
/// ```
/// use paceline::{KeyedLimiter, Rate, keyed::WhenFull};
/// use paceline::Take;
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
    /// Read by the HTTP layer's builder, which holds one of these (and sets
    /// `slack` and `when_full` in it).
    pub(crate) rate: Rate,
    pub(crate) slack: Slack,
    wait: Wait,
    clock: C,
    max_keys: usize,
    pub(crate) when_full: WhenFull,
    parent: Option<fn(&K) -> Option<K>>,
    counting: Counting,
    /// The default limit when [`limit`](Self::limit) set one counted by
    /// window (`rate` and `slack` are then its nominal ones).
    counted: Option<Limit>,
}

impl<K, C: Clock> KeyedBuilder<K, C> {
    crate::values::setters! {
        /// How much unused time each key may bank: a permit count, a
        /// `Duration`, or a [`Slack`] (default [`Slack::DEFAULT`]: 10 permits,
        /// or 10 ms of permits if that is more). A key's burst is `slack + 1`.
        slack(slack: impl Into<Slack>) => slack;
        /// How blocking calls wait for their slot (default [`Wait::Sleep`]).
        wait(wait: Wait) => wait;
        /// Whether the limiter counts its requests, permits and wait, all keys
        /// together ([`KeyedStats::requests`](super::KeyedStats::requests), and
        /// [`Counted`](crate::observe::stats::Counted) for
        /// [`stats::prometheus`](crate::observe::stats::prometheus)); default `false`.
        /// (Admitted and refused calls are counted per key either way.)
        stats(on: bool) => counting.on;
        /// Counts as [`stats(true)`](Self::stats) and sends the counts to the
        /// `metrics` facade too, labelled `limiter = name` (see
        /// [`Builder::metrics`](crate::Builder::metrics)).
        #[cfg(feature = "metrics")]
        metrics(name: impl Into<String>) => counting.facade = Some(name.into());
        /// The ceiling on tracked keys (default [`DEFAULT_MAX_KEYS`]): the map
        /// never tracks more, and acts on [`when_full`](Self::when_full) only
        /// once it tracks exactly this many busy keys. A ceiling of 0 is taken
        /// as 1.
        max_keys(max_keys: usize) => max_keys = max_keys.max(1);
        /// What to do with a new key when the map is full of busy keys (default
        /// [`WhenFull::Evict`]).
        when_full(when_full: WhenFull) => when_full;
        /// Where an override lookup goes when a key has none of its own:
        /// `parent(key)`, then its parent, and so on, then the default rate.
        /// [`path_parent`](super::path_parent) gives `"api/upload/10.0.0.7"` → `"api/upload"` →
        /// `"api"`. Resolved once per key when it starts being tracked (and
        /// again when the overrides change).
        ///
        /// The walk follows at most [`MAX_PARENT_STEPS`](super::MAX_PARENT_STEPS)
        /// parents. A function with a cycle (`"" → ""`), or a chain longer than
        /// that, is a misconfiguration: the key gets the default rate, and each
        /// such walk counts in [`KeyedStats::parent_walks_cut`](super::KeyedStats::parent_walks_cut).
        parent(parent: fn(&K) -> Option<K>) => parent = Some(parent);
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
            counting: self.counting,
            counted: self.counted,
        }
    }

    /// Every key's default limit: a rate and its slack (as
    /// [`builder`](KeyedLimiter::builder) and [`slack`](Self::slack) set
    /// them), or a quota per window ([`Limit::per_window`]: each key
    /// counted by that window, see the guide's
    /// [keyed limits](crate::guide::keyed#window-keys)). A later
    /// [`slack`](Self::slack) applies to a pacing limit only.
    ///
    /// ```
    /// use paceline::{clock::ManualClock, KeyedLimiter, Limit, Rate};
    /// use paceline::Take;
    ///
    /// let limiter = KeyedLimiter::<u32>::builder(Rate::per_second(1))
    ///     .limit(Limit::per_window(3, "minute".parse()?)?)
    ///     .clock(ManualClock::new()) // its readings are Unix times
    ///     .build()?;
    /// limiter.try_take_n(&7, 3)?;
    /// let refused = limiter.try_take(&7).unwrap_err();
    /// assert_eq!(refused.retry_after(), Some(std::time::Duration::from_secs(60)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limit(self, limit: Limit) -> Self {
        KeyedBuilder {
            rate: limit.rate(),
            slack: limit.slack(),
            counted: limit.window().map(|_| limit),
            ..self
        }
    }

    /// The limiter.
    ///
    /// A limiter with a window limit takes the Unix time of its clock's
    /// origin here, once ([`Clock::unix_origin`], else the host's Unix time
    /// less the clock's reading): its windows are counted on its clock from
    /// then on.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when `slack * interval` is over 146 years.
    pub fn build(self) -> Result<KeyedLimiter<K, C>, BuildError>
    where
        K: Hash + Eq,
    {
        let origin = unix_origin(&self.clock);
        let limit = self
            .counted
            .unwrap_or_else(|| Limit::new(self.rate, self.slack));
        let default = Setting::new(limit, None, origin)?;
        let resolved = Arc::new(Resolved::new(default, Vec::new()));
        let shards = shard_count(self.max_keys);
        Ok(KeyedLimiter {
            shards: (0..shards)
                .map(|_| {
                    CachePadded::new(RwLock::new(Shard {
                        map: HashTable::new(),
                        classes: Arc::clone(&resolved.classes),
                        resolved: Arc::clone(&resolved),
                        epoch: 0,
                        earliest_rest: 0,
                        sweep_at: MIN_SWEEP,
                        pruned: 0,
                        evicted: 0,
                        reset: 0,
                        generation: 0,
                    }))
                })
                .collect(),
            hasher: KeyHasher::default(),
            mask: shards - 1,
            max_keys: self.max_keys,
            tracked: CachePadded::new(AtomicUsize::new(0)),
            next_rest: AtomicU64::new(u64::MAX),
            when_full: self.when_full,
            parent: self.parent,
            resolved: RwLock::new(resolved),
            epoch: AtomicU64::new(0),
            admin: Mutex::new(()),
            id: crate::limiter::booked::owner(),
            origin,
            #[cfg(feature = "tokio")]
            changed: ::tokio::sync::Notify::new(),
            clock: self.clock,
            wait: self.wait,
            counts: Counters::new(),
            meter: Meter::new(&self.counting),
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

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// A keyed limiter giving each key `rate` with the default slack
    /// ([`Slack::DEFAULT`]), at most
    /// [`DEFAULT_MAX_KEYS`] keys, evicting when full, on the [`DefaultClock`].
    ///
    /// # Panics
    /// If ten intervals of `rate` exceed 146 years;
    /// [`builder`](Self::builder) reports that as an error.
    pub fn new(rate: Rate) -> KeyedLimiter<K> {
        Self::builder(rate)
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A builder for a keyed limiter giving each key `rate` by default.
    pub fn builder(rate: Rate) -> KeyedBuilder<K> {
        KeyedBuilder {
            rate,
            slack: Slack::DEFAULT,
            wait: Wait::default(),
            clock: DefaultClock::new(),
            max_keys: DEFAULT_MAX_KEYS,
            when_full: WhenFull::default(),
            parent: None,
            counting: Counting::default(),
            counted: None,
        }
    }
}
