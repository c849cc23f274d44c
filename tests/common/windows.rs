//! The window bound, checked on recorded decision times: a clock that
//! remembers its last reading per thread, and the check itself.

use std::cell::Cell;
use std::fmt::Display;

use paceline::{clock::Clock, clock::DefaultClock};

thread_local! {
    /// This thread's last clock reading.
    pub static LAST_READ: Cell<u64> = const { Cell::new(0) };
}

/// `DefaultClock` that remembers, per thread, the reading it last gave: a
/// non-blocking call reads the clock once, so after an admitted `try_take`
/// this is the time the decision was made at.
#[derive(Clone, Default)]
pub struct Recording(DefaultClock);

impl Clock for Recording {
    fn now(&self) -> u64 {
        let t = self.0.now();
        LAST_READ.with(|c| c.set(t));
        t
    }
}

/// The bound while the interval moves between `t_min` and `t_max`: every
/// grant books at least `t_min` per permit and forgets credit older than
/// `slack * t_max`, so a window `[a, b]` holds at most
/// `((slack + 1) * t_max + b - a) / t_min` permits (with `t_min == t_max`,
/// the plain bound `slack + 1 + (b - a) / T`).
///
/// Every window at once: with permits `(time, cost)` sorted by time and `P`
/// their running total, `[t_i, t_j]` holds `P[j+1] - P[i]` permits, and the
/// bound is `(P[j+1] * t_min - t_j) - (P[i] * t_min - t_i) <= (slack + 1) *
/// t_max`: one pass keeping the smallest `P[i] * t_min - t_i` so far.
pub fn check_windows_between(
    what: impl Display,
    mut permits: Vec<(u64, u64)>,
    slack: u64,
    t_min: u64,
    t_max: u64,
) {
    permits.sort_unstable();
    let burst = i128::from(slack + 1) * i128::from(t_max);
    let t = i128::from(t_min);
    let (mut total, mut lowest, mut worst) = (0i128, i128::MAX, i128::MIN);
    for &(at, cost) in &permits {
        lowest = lowest.min(total * t - i128::from(at));
        total += i128::from(cost);
        worst = worst.max(total * t - i128::from(at) - lowest);
    }
    assert!(
        worst <= burst,
        "{what}: a window holds {} permits more than the bound allows",
        (worst - burst) as f64 / t as f64
    );
}
