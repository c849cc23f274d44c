//! [`Tracked`]: what a limiter shows the look inside (its rows, its
//! settings, its counts), answered by every keyed limiter.

use std::fmt::{Display, Write as _};
use std::hash::Hash;
use std::sync::Arc;

use super::query::{Query, Row};
use crate::clock::Clock;
use crate::keyed::{AsyncKeyedLimiter, KeyedLimiter, KeyedStats};
use crate::values::limit::Limits;

/// A keyed limiter [`Inspect::keyed`](super::Inspect::keyed) lists:
/// [`KeyedLimiter`], `AsyncKeyedLimiter` (feature `tokio`), or an `Arc`
/// of either, whose keys are [`Display`]. Sealed: paceline implements it.
pub trait Tracked: Send + Sync + 'static {
    /// The keyed limiter it is, or holds (its `Tracking` is sealed: this
    /// module is private).
    #[doc(hidden)]
    fn tracking(&self) -> &dyn Tracking;
}

/// What the service asks of a keyed limiter.
pub trait Tracking {
    /// Offers each tracked bucket `query` selects (`limiter` unset), its
    /// key borrowed: the caller copies only those it keeps.
    fn rows(&self, query: &Query, offer: &mut dyn FnMut(&str, Row));
    /// Its totals (with its request counts, if it counts them), and its
    /// ceiling on tracked keys.
    fn totals(&self) -> (KeyedStats, usize);
    /// The limits in force: the default, then at most `most` overrides;
    /// and how many overrides there are.
    fn limits_shown(&self, most: usize) -> (Limits, usize);
}

impl<K, C> Tracking for KeyedLimiter<K, C>
where
    K: Display + Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + Send + Sync + 'static,
{
    fn rows(&self, query: &Query, offer: &mut dyn FnMut(&str, Row)) {
        // One buffer for every key's text: nothing is kept per key.
        let mut key = String::new();
        self.for_each_key(|k, state, (rate, slack)| {
            if !query.keeps_fill(state.fill) {
                return;
            }
            key.clear();
            // Writing to a String cannot fail.
            let _ = write!(key, "{k}");
            if !key.starts_with(&query.prefix) {
                return;
            }
            offer(
                &key,
                Row {
                    limiter: 0,
                    rate,
                    burst: slack.saturating_add(1),
                    state,
                },
            );
        });
    }

    fn totals(&self) -> (KeyedStats, usize) {
        (self.keyed_stats(), self.max_keys())
    }

    fn limits_shown(&self, most: usize) -> (Limits, usize) {
        self.limits_upto(most, K::to_string)
    }
}

impl<T: Tracking + Send + Sync + 'static> Tracked for T {
    fn tracking(&self) -> &dyn Tracking {
        self
    }
}

impl<K, C> Tracked for AsyncKeyedLimiter<K, C>
where
    K: Display + Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + Send + Sync + 'static,
{
    fn tracking(&self) -> &dyn Tracking {
        self.limiter()
    }
}

impl<T: Tracked> Tracked for Arc<T> {
    fn tracking(&self) -> &dyn Tracking {
        (**self).tracking()
    }
}
