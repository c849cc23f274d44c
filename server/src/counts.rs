//! Where hits are counted: paceline's keyed limiters, one per unit for the
//! fixed windows (each key a window limit of the unit's length, from the
//! Unix epoch, its quota the most the window word counts, so the limiter
//! counts and the service compares the count with the rule's limit, as
//! envoyproxy/ratelimit compares its `INCRBY`'s answer), and one per
//! smooth rule for paced descriptors (refusing, as paceline does).
//!
//! Keys are the counters' names without the window (the limiter windows
//! them), so a change of configuration keeps every count, as
//! envoyproxy/ratelimit's cache keys do; keys at rest are pruned by the
//! limiters themselves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use paceline::model::window::{Params, Window};
use paceline::{BuildError, KeyedLimiter, Limit, Rate, Take};

use crate::config::Unit;

/// A fixed window's count before and after a hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    /// Before the hits.
    pub before: u64,
    /// After them.
    pub after: u64,
}

/// A smooth rule's answer: whether the hits were admitted, and how many
/// more would be now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Paced {
    /// Admitted (and counted).
    pub admitted: bool,
    /// Permits available after the call.
    pub available: u64,
    /// Seconds until the key is whole again, rounded up.
    pub reset_s: u64,
}

/// A smooth rule's numbers: requests per unit, the unit, the burst.
type SmoothRule = (u32, Unit, u64);

/// Every counter.
pub struct Counts {
    /// One per unit, in [`Unit::ALL`]'s order, with its quota.
    fixed: Vec<(Arc<KeyedLimiter<String>>, u64)>,
    /// One per (requests per unit, unit, burst).
    smooth: Mutex<HashMap<SmoothRule, Arc<KeyedLimiter<String>>>>,
    max_keys: usize,
}

/// A unit's fixed window, from the Unix epoch, and the most its window
/// word counts: the quota of a counter that compares nothing itself.
pub fn counted(unit: Unit) -> (Window, u64) {
    let window = Window::Fixed {
        seconds: unit.seconds(),
    };
    let quota = Params::new(1, window)
        .map(Params::max_quota)
        .unwrap_or(u64::from(u32::MAX));
    (window, quota)
}

impl Counts {
    /// Counters tracking at most `max_keys` keys each.
    pub fn new(max_keys: usize) -> Result<Counts, BuildError> {
        let mut fixed = Vec::new();
        for unit in Unit::ALL {
            let (window, quota) = counted(unit);
            let limiter = KeyedLimiter::builder(Rate::per_second(1))
                .limit(Limit::per_window(quota, window)?)
                .max_keys(max_keys)
                .build()?;
            fixed.push((Arc::new(limiter), quota));
        }
        Ok(Counts {
            fixed,
            smooth: Mutex::new(HashMap::new()),
            max_keys,
        })
    }

    fn fixed(&self, unit: Unit) -> &(Arc<KeyedLimiter<String>>, u64) {
        let i = Unit::ALL.iter().position(|u| *u == unit).unwrap_or(0);
        &self.fixed[i]
    }

    /// The fixed-window limiters, by unit (the look inside lists them).
    pub fn limiters(&self) -> impl Iterator<Item = (Unit, Arc<KeyedLimiter<String>>)> + '_ {
        Unit::ALL
            .into_iter()
            .zip(&self.fixed)
            .map(|(u, (l, _))| (u, Arc::clone(l)))
    }

    /// Counts `hits` on `key` in its current window of `unit`: the count
    /// before and after. Every hit counts, whatever the limit (the limit's
    /// comparison is the caller's); a count at the window word's largest
    /// stays there.
    pub fn add(&self, unit: Unit, key: &str, hits: u64) -> Counted {
        let (limiter, quota) = self.fixed(unit);
        if hits == 0 {
            let now = self.count(unit, key);
            return Counted {
                before: now,
                after: now,
            };
        }
        match limiter.try_take_n(key, hits) {
            Ok(taken) => {
                let after = quota - taken.available().min(*quota);
                Counted {
                    before: after.saturating_sub(hits),
                    after,
                }
            }
            // Past what a window counts: as far as it counts.
            Err(_) => Counted {
                before: self.count(unit, key),
                after: *quota,
            },
        }
    }

    /// The count of `key`'s current window of `unit`, counting nothing.
    pub fn count(&self, unit: Unit, key: &str) -> u64 {
        let (limiter, quota) = self.fixed(unit);
        let available = limiter.state(key).map_or(*quota, |s| s.available());
        quota - available.min(*quota)
    }

    /// A smooth rule's limiter: `requests_per_unit` per `unit`, `burst` at
    /// once; the same one for the same three numbers, across reloads.
    pub fn smooth(
        &self,
        requests_per_unit: u32,
        unit: Unit,
        burst: u64,
    ) -> Result<Arc<KeyedLimiter<String>>, BuildError> {
        let mut map = self.smooth.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = map.get(&(requests_per_unit, unit, burst)) {
            return Ok(Arc::clone(l));
        }
        let rate = Rate::new(
            u64::from(requests_per_unit),
            std::time::Duration::from_secs(unit.seconds()),
        )?;
        let limiter = Arc::new(
            KeyedLimiter::builder(rate)
                .slack(burst.saturating_sub(1))
                .max_keys(self.max_keys)
                .build()?,
        );
        map.insert((requests_per_unit, unit, burst), Arc::clone(&limiter));
        Ok(limiter)
    }

    /// `hits` on `key` under a smooth limiter (0: a question that takes
    /// nothing).
    pub fn pace(limiter: &KeyedLimiter<String>, key: &str, hits: u64) -> Paced {
        let seconds = |d: std::time::Duration| d.as_secs() + u64::from(d.subsec_nanos() > 0);
        if hits == 0 {
            let state = limiter.state(key).ok();
            let available = state.as_ref().map_or(0, |s| s.available());
            return Paced {
                admitted: available > 0,
                available,
                reset_s: state.map_or(0, |s| seconds(s.reset())),
            };
        }
        match limiter.try_take_n(key, hits) {
            Ok(taken) => Paced {
                admitted: true,
                available: taken.available(),
                reset_s: seconds(taken.reset()),
            },
            Err(e) => Paced {
                admitted: false,
                available: 0,
                reset_s: e.retry_after().map_or(0, seconds),
            },
        }
    }
}
