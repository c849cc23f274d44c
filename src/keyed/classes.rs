//! The rate classes a shard's entries refer to, and how an entry's state
//! moves from one class to another. Shared by `shard.rs` (which holds the
//! tables) and `rates.rs` (which publishes them), so neither imports the
//! other's types.

use std::collections::HashMap;
use std::sync::Arc;

use super::{OverrideHasher, PRUNE_GRACE};
use crate::model::schedule::{self, Params, FULL};
use crate::values::rate::Rate;
use crate::values::slack::Slack;

/// The parameters of one class of keys: the default or one override. They
/// never change: a change publishes a new table.
pub(super) struct Class {
    params: Params,
}

impl Class {
    pub(super) fn new(params: Params) -> Class {
        Class { params }
    }

    #[inline]
    pub(super) fn params(&self) -> Params {
        self.params
    }
}

/// The overrides and the class table they resolve to.
pub(super) struct Resolved<K> {
    /// Override key -> class index (1..).
    pub(super) overrides: HashMap<K, u32, OverrideHasher>,
    /// The rate and slack each class was set with (a slack in time is
    /// resolved again when the rate changes); `[0]` the default.
    pub(super) limits: Vec<(Rate, Slack)>,
    /// The layer each class's limit came from (`None`: set by hand).
    pub(super) layers: Vec<Option<Arc<str>>>,
    pub(super) classes: Arc<[Class]>,
}

impl<K> Resolved<K> {
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
