//! The rate classes a shard's entries refer to, and how an entry's state
//! moves from one class to another. Shared by `shard.rs` (which holds the
//! tables) and `rates.rs` (which publishes them), so neither imports the
//! other's types. A class paces (its entry's word a `tat`) or counts by
//! window (its entry's word the window word, `windowed.rs`).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use super::windowed::Windowed;
use super::{OverrideHasher, PRUNE_GRACE};
use crate::limiter::found::State;
use crate::limiter::pacer::params;
use crate::model::schedule::{self, Admit, Grant, Params, FULL};
use crate::model::window::{self, EMPTY};
use crate::values::error::{BuildError, Error};
use crate::values::limit::Limit;
use crate::values::rate::Rate;

/// What a class's entries run: the pacing step on a `tat`, or the window
/// step on a window word.
///
/// A window class's parameters are behind a pointer: a class is then 24
/// bytes, which keeps a pacing take's lookup in the table cheap (a class
/// of a hundred bytes, handed back whole in each decision, cost pacing
/// takes about 5 % in `benches/keyed.rs`).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Class {
    /// Paced: the word is `tat` ([`schedule::step`]).
    Paced(Params),
    /// Counted by window: the word is the window word ([`window::step`]).
    Window(Arc<Windowed>),
}

/// One class of keys (the default or one override) as it was set.
#[derive(Clone)]
pub(super) struct Setting {
    /// The rate and slack (a slack in time is resolved again when the rate
    /// changes), or the quota and window.
    pub(super) limit: Limit,
    pub(super) class: Class,
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
    pub(super) classes: Arc<[Class]>,
}

impl Setting {
    /// `limit` from `layer`, checked; a window's on a clock whose origin
    /// is at Unix time `origin` ns (`windowed.rs`).
    pub(super) fn new(
        limit: Limit,
        layer: Option<Arc<str>>,
        origin: u64,
    ) -> Result<Setting, BuildError> {
        let class = match limit.window() {
            None => Class::Paced(params(limit.rate(), limit.slack())?),
            Some(w) => Class::Window(Arc::new(Windowed {
                params: window::Params::new(limit.burst(), w)?,
                limit,
                origin,
            })),
        };
        Ok(Setting {
            limit,
            class,
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
        let classes = settings.iter().map(|s| s.class.clone()).collect();
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

impl Class {
    /// The word of a key not tracked: at rest with full credit (`FULL`),
    /// or a window that has counted nothing (`EMPTY`).
    #[inline]
    pub(super) fn initial(&self) -> u64 {
        match self {
            Class::Paced(_) => FULL,
            Class::Window(_) => EMPTY,
        }
    }

    /// The class's step on `word` at `now`, storing nothing.
    #[inline]
    pub(super) fn decide(
        &self,
        word: u64,
        now: u64,
        cost: u64,
        admit: Admit,
    ) -> Result<Grant, Error> {
        match self {
            Class::Paced(p) => schedule::step(word, now, cost, *p, admit)
                .map_err(|deny| Error::refused(deny, cost, admit, p.slack())),
            Class::Window(w) => w.decide(word, now, cost, admit),
        }
    }

    /// The key's state `word` at `now`, as the interface reports it; `rate`
    /// the class's limit's.
    pub(super) fn state(&self, word: u64, now: u64, rate: Rate) -> State {
        match self {
            Class::Paced(p) => State::of_reading(word, now, *p, rate),
            Class::Window(w) => w.state(word, now),
        }
    }

    /// The limit in force, as `limit_for` reports it: a pacing class's
    /// slack in permits at `rate`, a window's quota and window.
    pub(super) fn limit(&self, rate: Rate) -> Limit {
        match self {
            Class::Paced(p) => Limit::new(rate, p.slack()),
            Class::Window(w) => w.limit,
        }
    }

    /// The slack in permits: a window's quota less one.
    pub(super) fn slack(&self) -> u64 {
        match self {
            Class::Paced(p) => p.slack(),
            Class::Window(w) => w.params.quota().saturating_sub(1),
        }
    }
}

/// A key's word `word` when, at `now`, its class changes from `old` to
/// `new`:
///
/// - pacing to pacing: `FULL` if it is at rest under `old` with
///   [`PRUNE_GRACE`] to spare (so it stays at rest, as an absent key would
///   be, and a reading up to the grace behind `now` decides as before),
///   else [`schedule::rebase`]d: the slots it handed out stand and its next
///   one is one *new* interval after the last, as a lone `AtomicLimiter`'s
///   after `set_rate`;
/// - window to window: [`window::rebase`]d (a change of quota leaves the
///   count, never refunding what a window spent);
/// - pacing to a window or back: the key starts in its new kind as a new
///   key would (`EMPTY`, `FULL`): the two words measure different things,
///   and no count or schedule translates into the other.
#[inline]
pub(super) fn moved(word: u64, now: u64, old: &Class, new: &Class) -> u64 {
    match (old, new) {
        (Class::Paced(old), Class::Paced(new)) => {
            if schedule::at_rest(word, now, *old, PRUNE_GRACE) {
                FULL
            } else {
                schedule::rebase(word, now, *old, *new)
            }
        }
        (Class::Window(old), Class::Window(new)) => old.rebase(word, now, new),
        (_, new) => new.initial(),
    }
}

/// When the entry `word` of class `class` can be dropped: a pacing bucket
/// at rest plus the grace, a window's once its window has ended plus the
/// grace.
#[inline]
pub(super) fn rest_time(word: u64, class: &Class) -> u64 {
    match class {
        Class::Paced(p) => schedule::rest_time(word, *p, PRUNE_GRACE),
        Class::Window(w) => w.rest_time(word),
    }
}
