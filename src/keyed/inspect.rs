//! A look inside a [`KeyedLimiter`]: its settings, its live keys
//! ([`KeyState`]) and its totals ([`KeyedStats`]).

use std::hash::Hash;
use std::time::Duration;

use super::classes::Class;
use super::shard::{coarse, sweep, IDLE_SHIFT, REFUSED_MAX};
use super::{KeyedLimiter, WhenFull};
use crate::clock::Clock;
use crate::model::schedule;
use crate::model::window::Window;
use crate::observe::stats::{Counted, Stats};
use crate::primitive::{read, write, Ordering};
use crate::values::rate::Rate;
use crate::wait::Wait;

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
    /// Calls refused on this key since it was last tracked, up to
    /// [`KeyState::REFUSED_MAX`] (4095), where it stops:
    /// [`keyed_stats`](KeyedLimiter::keyed_stats) counts every refusal.
    /// (Calls admitted are counted for all keys together only: a count per
    /// key on every grant would be a second write on a hot key's cache
    /// line, see `docs/PERFORMANCE.md`.)
    pub refused: u64,
    /// For a key counted by window, its window's count and end; `None` for
    /// a pacing key.
    pub window: Option<WindowCount>,
}

/// What a key counted by window ([`Limit::per_window`](crate::Limit::per_window))
/// shows of its window in a [`KeyState`]: its fill is this count over the
/// quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WindowCount {
    /// The window the key is counted by.
    pub window: Window,
    /// The permits counted in the window a take would count in now (the
    /// current one, or one ahead booked by a take that waits for it).
    pub count: u64,
    /// How long until that window ends, and its count with it.
    pub ends: Duration,
}

impl<K> KeyState<K> {
    /// Where a key's own [`refused`](KeyState::refused) count stops.
    pub const REFUSED_MAX: u64 = REFUSED_MAX;
}

/// Totals of a [`KeyedLimiter`], for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyedStats {
    /// Keys tracked now.
    pub keys: usize,
    /// Bytes the map holds for its keys now: its slots as allocated,
    /// occupied or free, each a key's inline bytes and its bucket. Memory a
    /// key owns beyond its inline bytes (a `String`'s text) is not in it;
    /// the HTTP layer's keys own at most 72 bytes more
    /// (`http::MAX_KEY_BYTES`), whatever a client sends.
    pub bytes: usize,
    /// Calls admitted in all (tracked, since dropped, and untracked). A call
    /// of cost 0 counts, on a key tracked or not: it is admitted, and takes
    /// nothing.
    pub admitted: u64,
    /// Calls refused in all.
    pub refused: u64,
    /// Keys dropped because they came to rest.
    pub pruned: u64,
    /// Busy keys evicted under [`WhenFull::Evict`].
    pub evicted: u64,
    /// Keys forgotten by [`reset`](KeyedLimiter::reset) (only those that
    /// were tracked). Their calls stay in `admitted` and `refused`.
    pub reset: u64,
    /// Calls admitted without a bucket under [`WhenFull::Admit`].
    pub untracked: u64,
    /// Override lookups that gave up after
    /// [`MAX_PARENT_STEPS`](super::MAX_PARENT_STEPS) parents and used the
    /// default rate: nonzero means the [`parent`](super::KeyedBuilder::parent)
    /// function has a cycle (or a chain that deep).
    pub parent_walks_cut: u64,
    /// Requests, permits and scheduled wait, all keys together, when the
    /// builder asked for them with [`stats(true)`](super::KeyedBuilder::stats);
    /// `None` otherwise.
    pub requests: Option<Stats>,
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// How blocking calls wait for their slot.
    pub fn wait_strategy(&self) -> Wait {
        self.wait
    }

    /// The number of keys tracked now: one atomic read of the count the
    /// ceiling is enforced with, so never above [`max_keys`](Self::max_keys)
    /// even while other threads insert and evict (summing the shards one at
    /// a time could be).
    pub fn len(&self) -> usize {
        self.tracked.load(Ordering::Relaxed)
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
            let freed = sweep(&mut shard, self.now());
            self.release(freed);
            dropped += freed;
        }
        dropped
    }

    /// The keys not at rest, with their fill level, time to a free permit,
    /// idle time and refusals. Takes each shard's read lock in turn. (A key
    /// at rest is as good as absent; [`len`](Self::len) counts it until its
    /// shard is next swept.)
    ///
    /// ```
    /// use paceline::{clock::ManualClock, KeyedLimiter, Rate};
    /// use paceline::Take;
    ///
    /// let limiter = KeyedLimiter::<u32>::builder(Rate::per_second(10))
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// limiter.try_take_n(&7, 11)?; // the whole burst
    /// let keys = limiter.snapshot();
    /// assert_eq!(keys.len(), 1);
    /// assert_eq!(keys[0].key, 7);
    /// assert_eq!(keys[0].fill, 1.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn snapshot(&self) -> Vec<KeyState<K>> {
        let mut out = Vec::new();
        self.for_each_key(|key, state, _| {
            // Fill 0 is at rest: as good as absent, only not swept yet.
            if state.fill > 0.0 {
                out.push(KeyState {
                    key: key.clone(),
                    fill: state.fill,
                    next_free: state.next_free,
                    idle: state.idle,
                    refused: state.refused,
                    window: state.window,
                });
            }
        });
        out
    }

    /// [`snapshot`](Self::snapshot)'s walk without its copies: `f` sees
    /// each tracked key, those at rest (fill 0, not swept yet) too,
    /// borrowed, with its state (`key: ()`) and the rate and slack it is
    /// limited by, under its shard's read lock, so it must not take from,
    /// reset or change this limiter. For the look inside, which keeps only
    /// the rows a page shows: memory bounded by those, not by the keys.
    pub(crate) fn for_each_key(&self, mut f: impl FnMut(&K, KeyState<()>, (Rate, u64))) {
        for lock in self.shards.iter() {
            let shard = read(lock);
            let now = self.now();
            for (key, e) in shard.map.iter() {
                let class_index = e.class() as usize;
                let class = &shard.classes[class_index];
                let tat = e.tat.load(Ordering::Relaxed);
                // The entry's class indexes this shard's table, taken with
                // its limits (`reresolve` moves them together).
                let rate = shard.resolved.settings[class_index].limit.rate();
                let (fill, next_free, window) = match class {
                    Class::Paced(p) => {
                        // None used (fill 0): at rest.
                        let used = tat.saturating_sub(now.saturating_sub(p.tau()));
                        let window = p.tau().saturating_add(p.interval());
                        let next = schedule::next_free(tat, now, *p);
                        (used as f64 / window as f64, next, None)
                    }
                    Class::Window(w) => {
                        // Nothing counted in the current window (fill 0):
                        // at rest.
                        let (count, ends) = w.row(tat, now);
                        let quota = w.params.quota();
                        let state = w.state(tat, now);
                        let counted = WindowCount {
                            window: w.params.window(),
                            count,
                            ends,
                        };
                        let next = crate::wait::nanos(state.next_free());
                        (count as f64 / quota as f64, next, Some(counted))
                    }
                };
                f(
                    key,
                    KeyState {
                        key: (),
                        fill,
                        next_free: Duration::from_nanos(next_free),
                        idle: Duration::from_nanos(
                            u64::from(coarse(now).wrapping_sub(e.last())) << IDLE_SHIFT,
                        ),
                        refused: e.refused(),
                        window,
                    },
                    (rate, class.slack()),
                );
            }
        }
    }

    /// Totals since the limiter was built, for metrics. Takes each shard's
    /// read lock in turn, so the totals of a busy limiter are not one
    /// instant's.
    ///
    /// ```
    /// use paceline::{KeyedLimiter, Rate};
    /// use paceline::Take;
    ///
    /// let limiter = KeyedLimiter::<u32>::builder(Rate::per_second(1)).slack(0).build()?;
    /// limiter.try_take(&1)?;
    /// assert!(limiter.try_take(&1).is_err());
    /// let stats = limiter.keyed_stats();
    /// assert_eq!((stats.keys, stats.admitted, stats.refused), (1, 1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// (Named apart from [`Counted::stats`], every kind's request counts,
    /// which a keyed limiter answers with
    /// [`KeyedStats::requests`].)
    pub fn keyed_stats(&self) -> KeyedStats {
        let [admitted, refused, untracked, parent_walks_cut] = self.counts.read();
        let mut stats = KeyedStats {
            untracked,
            parent_walks_cut,
            keys: self.len(),
            admitted,
            refused,
            requests: self.meter.read(),
            ..KeyedStats::default()
        };
        for lock in self.shards.iter() {
            let shard = read(lock);
            stats.pruned += shard.pruned;
            stats.evicted += shard.evicted;
            stats.reset += shard.reset;
            stats.bytes += shard.map.allocation_size();
        }
        stats
    }

    /// The limiter's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// [`KeyedStats::requests`]: all keys together, if counting.
impl<K, C: Clock> Counted for KeyedLimiter<K, C> {
    fn stats(&self) -> Option<Stats> {
        self.meter.read()
    }
}
