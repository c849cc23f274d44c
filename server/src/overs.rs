//! `LOCAL_CACHE_SIZE_IN_BYTES`: the counters this replica has seen over
//! their limit, kept until their window ends, so that the window's next
//! hits are refused here without a round trip to the store (and not
//! counted there), as envoyproxy/ratelimit's local cache refuses them
//! (its stat `over_limit_with_local_cache`).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// About what one counter takes, its name and its window's end and the
/// map's own share, for sizing by bytes.
const BYTES_PER_COUNTER: usize = 128;

/// The counters over their limit, by the store's name of their window.
pub struct Overs {
    /// Each counter's window end, Unix seconds.
    until: Mutex<HashMap<String, u64>>,
    /// The most counters kept.
    capacity: usize,
}

impl Overs {
    /// A cache of about `bytes`; none for 0.
    pub fn new(bytes: usize) -> Option<Overs> {
        (bytes > 0).then(|| Overs {
            until: Mutex::default(),
            capacity: (bytes / BYTES_PER_COUNTER).max(1),
        })
    }

    /// Whether `name` is over its limit in a window not ended at `now_s`.
    pub fn holds(&self, name: &str, now_s: u64) -> bool {
        let until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until.get(name).is_some_and(|end| *end > now_s)
    }

    /// `name` went over its limit; its window ends at `end_s`. A full
    /// cache drops the windows that have ended first, and keeps no more
    /// than its capacity (a counter left out is only asked of the store).
    pub fn mark(&self, name: &str, end_s: u64, now_s: u64) {
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        if until.len() >= self.capacity && !until.contains_key(name) {
            until.retain(|_, end| *end > now_s);
            if until.len() >= self.capacity {
                return;
            }
        }
        until.insert(name.to_owned(), end_s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_is_held_until_its_window_ends_and_the_size_is_kept() {
        assert!(Overs::new(0).is_none());
        let overs = Overs::new(2 * BYTES_PER_COUNTER).unwrap();
        overs.mark("a_60", 120, 70);
        assert!(overs.holds("a_60", 119));
        assert!(!overs.holds("a_60", 120));
        assert!(!overs.holds("b_60", 70));
        overs.mark("b_60", 120, 70);
        // Full: a third is left out while both windows last...
        overs.mark("c_60", 120, 70);
        assert!(!overs.holds("c_60", 71));
        // ...and takes an ended one's place after.
        overs.mark("c_120", 180, 121);
        assert!(overs.holds("c_120", 121));
    }
}
