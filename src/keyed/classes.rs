//! The rate classes a shard's entries refer to, and how an entry's state
//! moves from one class to another. Shared by `shard.rs` (which holds the
//! tables) and `rates.rs` (which publishes them), so neither imports the
//! other's types.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use super::{OverrideHasher, PRUNE_GRACE};
use crate::limiter::pacer::params;
use crate::model::schedule::{self, Params, FULL};
use crate::values::error::BuildError;
use crate::values::limit::Limit;

/// One class of keys (the default or one override) as it was set.
#[derive(Clone)]
pub(super) struct Setting {
    /// The rate and slack (a slack in time is resolved again when the rate
    /// changes).
    pub(super) limit: Limit,
    pub(super) params: Params,
    /// The layer the limit came from (`None`: set by hand).
    pub(super) layer: Option<Arc<str>>,
}

/// The overrides and the class table they resolve to. A class's parameters
/// never change: a change publishes a new table.
pub(super) struct Resolved<K> {
    /// Override key -> class index (1..).
    pub(super) overrides: HashMap<K, u32, OverrideHasher>,
    /// Each class's setting; `[0]` the default.
    pub(super) settings: Vec<Setting>,
    /// Each class's parameters (the settings', one pointer closer for a
    /// shard).
    pub(super) classes: Arc<[Params]>,
}

impl Setting {
    /// `limit` from `layer`, checked.
    pub(super) fn new(limit: Limit, layer: Option<Arc<str>>) -> Result<Setting, BuildError> {
        limit.paced("KeyedLimiter")?;
        let params = params(limit.rate(), limit.slack())?;
        Ok(Setting {
            limit,
            params,
            layer,
        })
    }
}

impl<K: Hash + Eq> Resolved<K> {
    /// The table of `default` and `overrides`, classes in that order.
    pub(super) fn new(default: Setting, overrides: Vec<(K, Setting)>) -> Resolved<K> {
        let mut settings = vec![default];
        let mut keys = HashMap::with_hasher(OverrideHasher::default());
        for (key, setting) in overrides {
            keys.insert(key, settings.len() as u32);
            settings.push(setting);
        }
        let classes = settings.iter().map(|s| s.params).collect();
        Resolved {
            overrides: keys,
            settings,
            classes,
        }
    }

    /// The overrides by class, `(class, key)`, in the order they were set
    /// (the map's own order is its hashes').
    pub(super) fn in_order(&self) -> Vec<(usize, &K)> {
        let mut by_class: Vec<(usize, &K)> = self
            .overrides
            .iter()
            .map(|(k, &c)| (c as usize, k))
            .collect();
        by_class.sort_unstable_by_key(|&(class, _)| class);
        by_class
    }
}

/// A key's state `tat` when, at `now`, its parameters change from `old` to
/// `new`: `FULL` if it is at rest under `old` with [`PRUNE_GRACE`] to spare
/// (so it stays at rest, as an absent key would be, and a reading up to the
/// grace behind `now` decides as before), else [`schedule::rebase`]d: the
/// slots it handed out stand and its next one is one *new* interval after
/// the last, as a lone `AtomicLimiter`'s after `set_rate`.
#[inline]
pub(super) fn moved(tat: u64, now: u64, old: Params, new: Params) -> u64 {
    if schedule::at_rest(tat, now, old, PRUNE_GRACE) {
        FULL
    } else {
        schedule::rebase(tat, now, old, new)
    }
}

/// When the bucket `tat` under `p` can be dropped: at rest, plus the grace.
#[inline]
pub(super) fn rest_time(tat: u64, p: Params) -> u64 {
    schedule::rest_time(tat, p, PRUNE_GRACE)
}
