//! The warm-up step: [`schedule::step`](crate::model::schedule::step) with Guava's
//! `SmoothWarmingUp` cost profile, for
//! [`WarmUpLimiter`](crate::WarmUpLimiter). Pure, like the step it extends:
//! with a warm-up of 0 it decides exactly as `schedule::step` does (a
//! property test checks it).
//!
//! # The model
//!
//! Besides `tat`, the state holds the **coldness** `c`, in ns: Guava's
//! stored permits times the interval, `0 <= c <= W` for a warm-up period
//! `W`. Guava's constants with its cold factor of 3 are, in time:
//!
//! - the cold interval is `3 T`; the threshold is at `c = W / 2`, and a
//!   stored permit below it costs `T`, like a fresh one;
//! - above the threshold the interval rises linearly, from `T` at `W / 2`
//!   to `3 T` at `W`: spending coldness from `x` to `x - d` costs
//!   `d + F(x) - F(x - d)` with `F(x) = ((2x - W)+)^2 / (2 W)`, the
//!   trapezoid under Guava's interval function;
//! - idle time cools the limiter one stored permit per interval (Guava's
//!   `coolDownInterval = W / maxPermits = T` at factor 3): `c` grows by the
//!   idle time, up to `W`. So a limiter idle for `W` is fully cold again.
//!
//! A request of `n` permits at `now`, with `tau = S * T` the slack:
//!
//! ```text
//! c     = min(W, c + max(0, now - tau - tat))   // time beyond the slack cools
//! base  = max(tat, now - tau)                   // as in schedule::step
//! d(k)  = min(c, k * T)                         // coldness k permits spend
//! slot  = base + (n - 1) * T + F(c) - F(c - d(n - 1))
//! tat'  = base +  n      * T + F(c) - F(c - d(n))
//! c'    = c - d(n)
//! ```
//!
//! `F` is computed in `u128` and rounded down once per state, so costs
//! telescope: `take_n(3)` moves the state exactly as three `take()`s at the
//! same instant do, as in Guava ("acquire(3) costs what three acquire(1)
//! do").
//!
//! Where it differs from Guava (it pays first; the slack still banks a late
//! caller's time; exact integers; rate changes keep the coldness in time):
//! the guide's [warm-up](crate::guide::warm_up) chapter.

use crate::model::schedule::{span, Admit, Deny, Grant, Params, FRESH, FULL, MAX_SPAN, MAX_TAT};

/// A warming-up limiter's state: `tat`, as in [`schedule`](crate::model::schedule),
/// and the coldness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarmState {
    /// As [`schedule::step`](crate::model::schedule::step)'s `tat`.
    pub tat: u64,
    /// Guava's stored permits times the interval, ns; `0..=W`.
    pub cold: u64,
}

impl WarmState {
    /// A limiter that has granted nothing: `tat` is [`FRESH`] (or [`FULL`]
    /// with `full_credit`), and it starts fully cold, as Guava's does.
    pub fn cold(tat: u64, warm_up: u64) -> WarmState {
        WarmState { tat, cold: warm_up }
    }
}

/// The longest warm-up period, ns: [`MAX_SPAN`] (about 146 years).
pub const MAX_WARM_UP: u64 = MAX_SPAN;

/// `F(x) = ((2x - W)+)^2 / (2W)`, rounded down: what spending coldness from
/// `x` down to `W / 2` costs beyond one interval per permit.
#[inline]
fn premium(x: u64, w: u64) -> u64 {
    let above = (2 * u128::from(x)).saturating_sub(u128::from(w));
    if above == 0 {
        return 0;
    }
    // above <= W <= 2^62, so above^2 < 2^124 and the result <= W / 2.
    (above * above / (2 * u128::from(w))) as u64
}

/// What the first `k` permits of a request cost from coldness `cold`, and
/// the coldness they spend: `(k * T + F(c) - F(c - d), d)`.
#[inline]
fn cost(k_span: u64, cold: u64, w: u64) -> (u64, u64) {
    let d = cold.min(k_span);
    (k_span + premium(cold, w) - premium(cold - d, w), d)
}

/// The coldness at `now`: `cold` plus the time beyond the slack since `tat`,
/// at most `w`.
#[inline]
fn cooled(s: WarmState, now: u64, p: Params, w: u64) -> u64 {
    if s.tat == FRESH || s.tat == FULL {
        return s.cold;
    }
    let idle = now.saturating_sub(p.tau()).saturating_sub(s.tat);
    s.cold.saturating_add(idle).min(w)
}

/// The warm-up step: the decision for a request of `cost` permits at `now`
/// on state `s`, with parameters `p` and a warm-up period of `w` ns
/// (`<= MAX_WARM_UP`). Refusals change nothing; a grant's `prev` and `next`
/// are the `tat` words, the whole new state is returned beside it.
///
/// [`Deny::ExceedsBurst`] means that no wait admits the request within the
/// allowed wait: its cost from the current coldness exceeds what the slack
/// banks, and waiting only cools the limiter further.
#[inline]
pub fn step(
    s: WarmState,
    now: u64,
    cost_n: u64,
    p: Params,
    w: u64,
    admit: Admit,
) -> Result<(Grant, WarmState), Deny> {
    if cost_n == 0 {
        let grant = Grant {
            prev: s.tat,
            slot: now,
            next: s.tat,
        };
        return Ok((grant, s));
    }
    let span_n = span(cost_n, p)?;
    let cold = cooled(s, now, p, w);
    let (to_slot, _) = cost(span_n - p.interval(), cold, w);
    let (to_next, spent) = cost(span_n, cold, w);
    let base = if s.tat == FRESH {
        now.saturating_sub(to_slot.min(p.tau()))
    } else if s.tat == FULL {
        now.saturating_sub(p.tau())
    } else {
        s.tat.max(now.saturating_sub(p.tau()))
    };
    // to_next <= MAX_SPAN + W / 2 < 2^63: no overflow in the compare.
    if base > MAX_TAT.saturating_sub(to_next) {
        return Err(Deny::Saturated);
    }
    let next = base + to_next;
    let slot = base + to_slot;
    if let Admit::Within(max) = admit {
        let wait = slot.saturating_sub(now);
        if wait > max {
            return Err(if to_slot.saturating_sub(p.tau()) > max {
                Deny::ExceedsBurst
            } else {
                Deny::Wait(wait)
            });
        }
    }
    let grant = Grant {
        prev: s.tat,
        slot,
        next,
    };
    Ok((
        grant,
        WarmState {
            tat: next,
            cold: cold - spent,
        },
    ))
}

/// How many permits one request could take at `now` without waiting: the
/// largest `n` that [`step`] admits with `Admit::Within(0)`; at most
/// `slack + 1`.
pub fn available(s: WarmState, now: u64, p: Params, w: u64) -> u64 {
    let admits = |n: u64| step(s, now, n, p, w, Admit::Within(0)).is_ok();
    if !admits(1) {
        return 0;
    }
    // admits(n) is monotone in n (costs only grow with n): bisect in
    // [1, slack + 1].
    let (mut lo, mut hi) = (1, p.slack().saturating_add(1));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if admits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// The most permits one request could take at once from the coldness at
/// `now`, once the limiter is at rest (waiting does not make it warmer):
/// `slack + 1` when warm, fewer when cold; at least 1.
pub fn burst(s: WarmState, now: u64, p: Params, w: u64) -> u64 {
    let cold = cooled(s, now, p, w);
    let rested = WarmState { tat: FULL, cold };
    available(rested, now, p, w).max(1)
}

/// The state after the interval or slack change from `old` to `new` at
/// `now`: `tat` [rebased](crate::model::schedule::rebase), the coldness (a time)
/// kept, after cooling up to `now` under `old`.
pub fn rebase(s: WarmState, now: u64, old: Params, new: Params, w: u64) -> WarmState {
    if old == new {
        return s;
    }
    // The rebase keeps at most the old window of credit in `tat`; the idle
    // time beyond it is in the coldness now, so nothing counts twice.
    WarmState {
        tat: crate::model::schedule::rebase(s.tat, now, old, new),
        cold: cooled(s, now, old, w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::schedule::{self, ORIGIN};

    const S: u64 = 1_000_000_000;

    /// Guava's `testWarmUp`: rate 2/s, warm-up 4 s, from cold, eight
    /// `acquire()`s back to back sleep 0, 1.375, 1.125, 0.875, 0.625, 0.5,
    /// 0.5, 0.5 s. Exact here, in ns.
    #[test]
    fn guavas_warm_up_vector() {
        let p = Params::new(S / 2, 0).unwrap();
        let w = 4 * S;
        let (mut s, mut now) = (WarmState::cold(FRESH, w), ORIGIN);
        let mut sleeps = vec![];
        for _ in 0..8 {
            let (g, next) = step(s, now, 1, p, w, Admit::Always).unwrap();
            sleeps.push(g.slot - now);
            (s, now) = (next, g.slot);
        }
        let ms = |x: u64| x * 1_000_000;
        assert_eq!(sleeps, [0, 1375, 1125, 875, 625, 500, 500, 500].map(ms));
    }

    /// `take_n(3)` moves the state exactly as three `take()`s.
    #[test]
    fn costs_telescope() {
        let p = Params::new(1_000_003, 5).unwrap();
        let w = 77_777_777;
        for cold in [0, 1, w / 2 - 1, w / 2, w / 2 + 12345, w - 1, w] {
            let s = WarmState { tat: ORIGIN, cold };
            let (_, three) = step(s, ORIGIN, 3, p, w, Admit::Always).unwrap();
            let mut one = s;
            for _ in 0..3 {
                one = step(one, ORIGIN, 1, p, w, Admit::Always).unwrap().1;
            }
            assert_eq!(three, one, "cold {cold}");
        }
    }

    /// With no warm-up, the step is `schedule::step`.
    #[test]
    fn no_warm_up_is_the_plain_step() {
        let p = Params::new(10, 3).unwrap();
        for tat in [FRESH, FULL, ORIGIN, ORIGIN + 25, ORIGIN + 100] {
            for now in [ORIGIN, ORIGIN + 7, ORIGIN + 60] {
                for n in 0..6 {
                    for admit in [Admit::Always, Admit::Within(0), Admit::Within(15)] {
                        let plain = schedule::step(tat, now, n, p, admit);
                        let warm = step(WarmState { tat, cold: 0 }, now, n, p, 0, admit);
                        assert_eq!(warm.map(|(g, s)| (g, s.tat)), plain.map(|g| (g, g.next)));
                    }
                }
            }
        }
    }

    /// Nothing past the end of internal time is admitted, cold or warm.
    #[test]
    fn saturation_refuses() {
        let p = Params::new(1_000, 3).unwrap();
        let s = WarmState {
            tat: MAX_TAT - 500,
            cold: 0,
        };
        assert_eq!(
            step(s, MAX_TAT - 400, 1, p, 10_000, Admit::Always),
            Err(Deny::Saturated)
        );
        let cold = WarmState::cold(FULL, 10_000);
        assert_eq!(
            step(cold, u64::MAX, 1, p, 10_000, Admit::Always),
            Err(Deny::Saturated)
        );
    }

    /// A full-credit start is at rest and cold: its burst is what the slack
    /// pays for at cold intervals. A request that fits the slack at this
    /// coldness is told to wait; one that does not, that no wait helps.
    #[test]
    fn full_credit_starts_at_rest_and_cold() {
        // T = 1 ms, slack 9 ms, W = 100 ms (as tests/warm_up.rs).
        let ms = 1_000_000;
        let p = Params::new(ms, 9).unwrap();
        let w = 100 * ms;
        let s = WarmState::cold(FULL, w);
        assert_eq!(available(s, ORIGIN, p, w), 4);
        assert_eq!(burst(s, ORIGIN, p, w), 4);
        let (g, after) = step(s, ORIGIN, 2, p, w, Admit::Within(0)).unwrap();
        // Base 9 ms back; the first permit costs 2.98 ms from cold.
        assert_eq!(g.slot, ORIGIN - 9 * ms + 2_980_000);
        assert_eq!(after.cold, w - 2 * ms);
        // Three more fit the slack at this coldness, but not yet: a wait.
        match step(after, ORIGIN, 3, p, w, Admit::Within(0)) {
            Err(Deny::Wait(d)) => assert!(d > 0 && d < 9 * ms, "{d}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            step(after, ORIGIN, 10, p, w, Admit::Within(0)),
            Err(Deny::ExceedsBurst)
        );
        // Within a long enough wait the same request is booked.
        assert!(step(after, ORIGIN, 10, p, w, Admit::Within(100 * ms)).is_ok());
    }

    /// The sentinels keep the coldness they were given (a store starts them
    /// cold; one made warm stays warm): no idle time is counted from them.
    #[test]
    fn sentinels_keep_their_coldness() {
        let p = Params::new(1_000, 0).unwrap();
        for tat in [FRESH, FULL] {
            let warm = WarmState { tat, cold: 0 };
            let (_, next) = step(warm, ORIGIN + 5_000_000, 1, p, 100_000, Admit::Always).unwrap();
            assert_eq!(next.cold, 0, "{tat}");
            assert_eq!(next.tat, ORIGIN + 5_000_000 + 1_000, "one interval, warm");
        }
    }

    #[test]
    fn premium_is_the_trapezoid() {
        let w = 4 * S;
        assert_eq!(premium(w / 2, w), 0);
        assert_eq!(premium(w, w), w / 2);
        // From W to W - T at T = 0.5 s: 0.875 s beyond the interval.
        assert_eq!(premium(w, w) - premium(w - S / 2, w), 875_000_000);
        assert_eq!(premium(MAX_WARM_UP, MAX_WARM_UP), MAX_WARM_UP / 2);
    }
}
