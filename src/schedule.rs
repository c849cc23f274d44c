//! The pure step of paceline's model: one function from (state, clock
//! reading, cost, configuration) to a decision, with no atomics and no clock.
//! Every store of the state (atomic, mutex, keyed, Redis) runs [`step`], so
//! they agree decision for decision. It is public so that a store paceline
//! does not ship (a database row, say) can run the very same decisions, and
//! so that tests can check any store against it.
//!
//! # The model
//!
//! The state is one `u64`, `tat`: the earliest time at which the next unit may
//! be scheduled. With `T` the interval, `S` the slack and `tau = S * T`, a
//! request of cost `n >= 1` at time `t` computes
//!
//! ```text
//! base  = max(tat, t - tau)        // unused time older than tau is forgotten
//! slot  = base + (n - 1) * T       // when this request may proceed
//! tat'  = base + n * T             // where the next request starts
//! ```
//!
//! For `n = 1` this grants exactly uber-go/ratelimit's permits: uber's
//! `(last, sleepFor)` pair only ever enters its decisions as
//! `last + sleepFor`, so it packs losslessly into `tat = last + sleepFor + T`.
//!
//! # Internal time
//!
//! Times here are nanoseconds since the clock's origin plus [`ORIGIN`]
//! (2^62 ns). The offset keeps `t - tau` from underflowing, so a limiter
//! built "with full credit" has it even at clock reading 0. All arithmetic
//! saturates: readings past about 438 years stick at [`MAX_TAT`]
//! (`2^16` ns below `u64::MAX`) instead of wrapping. (The words above it are
//! never states, so a store may use them as markers of its own:
//! `AtomicLimiter` marks a `set_rate` in progress with them.) A step never
//! lowers `tat`, so a clock that steps backwards can delay a caller but never
//! admit one early. Only two things lower it: a [`rebase`] to a faster rate
//! (the next slot moves to one new interval after the last), and an async
//! cancellation, back to the word its own reservation replaced, when no one
//! has reserved and the rate has not changed since.

use crate::rate::MAX_SPAN;

/// Internal time of the clock's origin: clock readings are offset by this.
pub const ORIGIN: u64 = 1 << 62;

/// `tat` of a limiter that has granted nothing yet: its first request is
/// granted as a limiter at rest would grant it (at once, up to a burst of
/// `slack + 1`) and leaves no banked credit: the next permit is one interval
/// later, however long the limiter sat unused before (uber's behaviour).
pub const FRESH: u64 = 0;

/// `tat` of a limiter that starts with full credit: any time so far in the
/// past that `t - tau` is always later.
pub const FULL: u64 = 1;

/// The largest state [`step`] and [`rebase`] produce: they saturate here,
/// `2^16` ns below `u64::MAX`. The words above are never states, so a store
/// may use them as markers of its own.
pub const MAX_TAT: u64 = u64::MAX - (1 << 16);

/// The configuration a decision depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// `T`, the interval between permits, ns; `1..=MAX_SPAN`.
    interval: u64,
    /// `S`, the slack in permits; `S * T <= MAX_SPAN`.
    slack: u64,
}

impl Params {
    /// Parameters for an interval of `interval` ns and a slack of `slack`
    /// permits; `None` unless `1 <= interval` and `slack * interval <= 2^62`
    /// (about 146 years).
    pub fn new(interval: u64, slack: u64) -> Option<Params> {
        match slack.checked_mul(interval) {
            Some(tau) if tau <= MAX_SPAN && (1..=MAX_SPAN).contains(&interval) => {
                Some(Params { interval, slack })
            }
            _ => None,
        }
    }

    /// Parameters already known to satisfy [`Params::new`]'s checks (an
    /// interval a validated `Rate` gave, with the slack it was checked with).
    #[inline]
    pub(crate) const fn new_unchecked(interval: u64, slack: u64) -> Params {
        Params { interval, slack }
    }

    /// `T`, the interval between permits, ns.
    #[inline]
    pub fn interval(self) -> u64 {
        self.interval
    }

    /// `S`, the slack, in permits.
    #[inline]
    pub fn slack(self) -> u64 {
        self.slack
    }

    /// `tau = S * T`, the banked window, ns (cannot overflow: checked in `new`).
    #[inline]
    pub fn tau(self) -> u64 {
        self.slack * self.interval
    }

    /// Where a request would start: the later of `tat` and `now - tau`.
    #[inline]
    fn base(self, tat: u64, now: u64) -> u64 {
        if tat == FRESH {
            now
        } else {
            tat.max(now.saturating_sub(self.tau()))
        }
    }
}

/// Which requests are admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Every request, however far its slot (blocking `take`).
    Always,
    /// Only a request whose slot is at most this many ns away
    /// (`try_take` is `Within(0)`, `take_timeout(max)` is `Within(max)`).
    Within(u64),
}

/// An admitted request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The state the request was decided on.
    pub prev: u64,
    /// When the request may proceed (may be in the past: banked credit).
    pub slot: u64,
    /// The new state.
    pub next: u64,
}

/// A refused request; the state must not change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deny {
    /// Admitted only this many ns from now.
    Wait(u64),
    /// Never admitted within the allowed wait, even at rest.
    ExceedsBurst,
    /// `cost * interval` is over `MAX_SPAN`.
    CostTooLarge,
}

/// The one step every store runs: the decision for a request of `cost`
/// permits at internal time `now` on state `tat`.
#[inline]
pub fn step(tat: u64, now: u64, cost: u64, p: Params, admit: Admit) -> Result<Grant, Deny> {
    if cost == 0 {
        // Nothing to pay: admitted now, state untouched.
        return Ok(Grant {
            prev: tat,
            slot: now,
            next: tat,
        });
    }
    // A single permit spans one interval, which `Params` keeps within
    // `MAX_SPAN`: once inlined with a constant cost of 1 the check goes.
    let span = if cost == 1 {
        p.interval
    } else {
        match cost.checked_mul(p.interval) {
            Some(span) if span <= MAX_SPAN => span,
            _ => return Err(Deny::CostTooLarge),
        }
    };
    let base = if tat == FRESH {
        // The first request goes as it would on a limiter at rest, but keeps
        // no credit: the next permit is one interval after its slot. (With
        // `base = now` a cost of 2 would never pass a `try_take_n`, however
        // long its caller waited, since waiting banks nothing here.)
        now.saturating_sub((span - p.interval).min(p.tau()))
    } else {
        p.base(tat, now)
    };
    let slot = base.saturating_add(span - p.interval);
    if let Admit::Within(max) = admit {
        let wait = slot.saturating_sub(now);
        if wait > max {
            // Even at rest (base = now - tau) the slot would be this far away.
            let at_rest = (span - p.interval).saturating_sub(p.tau());
            return Err(if at_rest > max {
                Deny::ExceedsBurst
            } else {
                Deny::Wait(wait)
            });
        }
    }
    Ok(Grant {
        prev: tat,
        slot,
        next: base.saturating_add(span).min(MAX_TAT),
    })
}

/// The state after the interval changes from `old` to `new`, so that slots
/// already handed out stand and the next one is a *new* interval after the
/// last of them (`tat - old`): without it, the first request after a change
/// would still be spaced by the old interval (an hour, after a change from
/// 1/h to 100/s). Credit banked in the past shifts by the same amount and is
/// clamped to the new `tau` by the next step. The sentinels, and a `tat`
/// pinned at [`MAX_TAT`], are left alone.
#[inline]
pub fn rebase(tat: u64, old: Params, new: Params) -> u64 {
    if tat == FRESH || tat == FULL || tat >= MAX_TAT {
        return tat;
    }
    // A booked `tat` is at least `old` past 0 (see `step`); the clamp keeps
    // the result off the sentinels all the same.
    tat.saturating_sub(old.interval)
        .saturating_add(new.interval)
        .clamp(FULL + 1, MAX_TAT)
}

/// When the state `tat` under `p` is at rest for good, allowing a clock read
/// up to `grace` ns behind: from this time on, any reading no more than
/// `grace` behind it steps from `tat` exactly as from [`FULL`] (`max(tat,
/// t - tau) = t - tau`). [`FRESH`] is never at rest (it banks no credit).
#[inline]
pub fn rest_time(tat: u64, p: Params, grace: u64) -> u64 {
    if tat == FRESH {
        return u64::MAX;
    }
    tat.saturating_add(p.tau()).saturating_add(grace)
}

/// Whether `tat` under `p` is at rest at `now` with `grace` to spare (see
/// [`rest_time`]): a store may then replace it with [`FULL`], or forget it,
/// and no reading down to `now - grace` decides differently.
#[inline]
pub fn at_rest(tat: u64, now: u64, p: Params, grace: u64) -> bool {
    tat != FRESH && rest_time(tat, p, grace) <= now
}

/// How many permits one request could take at `now` without waiting.
/// At most `slack + 1`.
#[inline]
pub fn available(tat: u64, now: u64, p: Params) -> u64 {
    if tat == FRESH {
        // The first request may be a whole burst (see `step`).
        return p.slack + 1;
    }
    let base = p.base(tat, now);
    if base > now {
        0
    } else {
        (now - base) / p.interval + 1
    }
}

/// How long until a request of cost 1 would be admitted, ns (0: now).
#[inline]
pub fn next_free(tat: u64, now: u64, p: Params) -> u64 {
    p.base(tat, now).saturating_sub(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 10;

    fn p(slack: u64) -> Params {
        Params::new(T, slack).unwrap()
    }

    #[test]
    fn first_call_is_granted_at_once_without_credit() {
        let g = step(FRESH, ORIGIN + 1_000_000, 1, p(10), Admit::Within(0)).unwrap();
        assert_eq!(g.slot, ORIGIN + 1_000_000);
        assert_eq!(g.next, ORIGIN + 1_000_000 + T);
        // A second immediate request has to wait one interval.
        assert_eq!(
            step(g.next, ORIGIN + 1_000_000, 1, p(10), Admit::Within(0)),
            Err(Deny::Wait(T))
        );
    }

    #[test]
    fn first_request_of_any_cost_within_the_burst_goes_at_once_and_banks_nothing() {
        let now = ORIGIN + 5_000;
        for cost in 1..=11 {
            assert_eq!(available(FRESH, now, p(10)), 11);
            let g = step(FRESH, now, cost, p(10), Admit::Within(0)).unwrap();
            assert_eq!(g.slot, now, "cost {cost}");
            assert_eq!(g.next, now + T, "cost {cost}: no credit left over");
        }
        // Above the burst it waits what a limiter at rest would.
        assert_eq!(
            step(FRESH, now, 12, p(10), Admit::Within(0)),
            Err(Deny::ExceedsBurst)
        );
        let g = step(FRESH, now, 13, p(10), Admit::Always).unwrap();
        assert_eq!((g.slot, g.next), (now + 2 * T, now + 3 * T));
    }

    #[test]
    fn full_credit_admits_a_burst_of_slack_plus_one_at_clock_zero() {
        assert_eq!(available(FULL, ORIGIN, p(10)), 11);
        let g = step(FULL, ORIGIN, 11, p(10), Admit::Within(0)).unwrap();
        assert_eq!(g.slot, ORIGIN);
        assert_eq!(available(g.next, ORIGIN, p(10)), 0);
    }

    #[test]
    fn cost_above_burst_is_its_own_refusal() {
        assert_eq!(
            step(FULL, ORIGIN, 12, p(10), Admit::Within(0)),
            Err(Deny::ExceedsBurst)
        );
        // ... but may pass with a long enough wait: at rest it waits one T.
        let g = step(FULL, ORIGIN, 12, p(10), Admit::Within(T)).unwrap();
        assert_eq!(g.slot, ORIGIN + T);
    }

    #[test]
    fn refusal_reports_the_wait() {
        let tat = ORIGIN + 100;
        assert_eq!(
            step(tat, ORIGIN + 40, 1, p(0), Admit::Within(0)),
            Err(Deny::Wait(60))
        );
        assert_eq!(
            step(tat, ORIGIN + 40, 2, p(0), Admit::Within(69)),
            Err(Deny::Wait(70))
        );
        assert!(step(tat, ORIGIN + 40, 2, p(0), Admit::Within(70)).is_ok());
    }

    #[test]
    fn cost_zero_changes_nothing() {
        let g = step(ORIGIN + 500, ORIGIN, 0, p(1), Admit::Within(0)).unwrap();
        assert_eq!(g.slot, ORIGIN);
        assert_eq!(g.next, ORIGIN + 500);
    }

    #[test]
    fn overflowing_cost_is_refused_not_wrapped() {
        assert_eq!(
            step(FULL, ORIGIN, u64::MAX, p(1), Admit::Always),
            Err(Deny::CostTooLarge)
        );
        assert_eq!(
            step(FULL, ORIGIN, MAX_SPAN / T + 1, p(1), Admit::Always),
            Err(Deny::CostTooLarge)
        );
        let g = step(FULL, u64::MAX - 5, MAX_SPAN / T, p(1), Admit::Always).unwrap();
        assert_eq!(g.next, MAX_TAT, "saturates below the words left to stores");
        let g = step(FRESH, u64::MAX, 1, p(0), Admit::Always).unwrap();
        assert_eq!(g.next, MAX_TAT);
    }

    #[test]
    fn clock_stepping_back_never_moves_state_back() {
        let g = step(FULL, ORIGIN + 1000, 1, p(2), Admit::Always).unwrap();
        let h = step(g.next, ORIGIN, 1, p(2), Admit::Always).unwrap();
        assert!(h.slot >= g.next && h.next > g.next);
    }

    #[test]
    fn rebase_spaces_the_next_slot_by_the_new_interval() {
        let (slow, fast) = (Params::new(1000, 1).unwrap(), p(1));
        // Last slot at ORIGIN + 5000, booked at the slow rate.
        assert_eq!(rebase(ORIGIN + 6000, slow, fast), ORIGIN + 5000 + T);
        assert_eq!(rebase(ORIGIN + 5000 + T, fast, slow), ORIGIN + 6000);
        for tat in [FRESH, FULL, MAX_TAT] {
            assert_eq!(rebase(tat, slow, fast), tat);
        }
        assert_eq!(rebase(MAX_TAT - 1, fast, slow), MAX_TAT);
        assert_eq!(rebase(500, slow, Params::new(1, 0).unwrap()), FULL + 1);
    }

    #[test]
    fn at_rest_with_grace_decides_as_full_down_to_grace_behind() {
        let (p, grace) = (p(2), 5);
        let tat = ORIGIN + 100;
        let rest = rest_time(tat, p, grace);
        assert_eq!(rest, tat + 2 * T + grace);
        assert!(!at_rest(tat, rest - 1, p, grace));
        assert!(at_rest(tat, rest, p, grace));
        // From the rest time on, no reading down to `grace` behind it tells
        // `tat` from FULL; one further behind does.
        for now in rest - grace..rest + 3 * T {
            for cost in 1..5 {
                let admit = Admit::Within(0);
                assert_eq!(
                    step(tat, now, cost, p, admit).map(|g| (g.slot, g.next)),
                    step(FULL, now, cost, p, admit).map(|g| (g.slot, g.next)),
                    "now {now}, cost {cost}"
                );
            }
        }
        assert_ne!(
            available(tat, rest - grace - 1, p),
            available(FULL, rest - grace - 1, p)
        );
        assert!(!at_rest(FRESH, u64::MAX, p, 0));
    }

    #[test]
    fn params_reject_overflowing_slack() {
        assert!(Params::new(T, MAX_SPAN / T).is_some());
        assert!(Params::new(T, MAX_SPAN / T + 1).is_none());
        assert!(Params::new(u64::MAX, 0).is_none());
        assert!(Params::new(0, 0).is_none());
    }
}
