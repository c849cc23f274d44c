//! The pure step of paceline's model: one function from (state, clock
//! reading, cost, configuration) to a decision, with no atomics and no clock.
//! Every store of the state (atomic, mutex, keyed, Redis, PostgreSQL) runs [`step`], so
//! they agree decision for decision. It is public so that a store paceline
//! does not ship (a database row, say) can run the very same decisions, and
//! so that tests can check any store against it.
//!
//! # The model
//!
//! The state is one `u64`, `tat`: the earliest time at which the next unit
//! may be scheduled. [`step`] moves it as [the guide's
//! model](crate::guide::model#one-word-of-state) states: from
//! `base = max(tat, t - tau)`, the slot `n - 1` intervals on and the next
//! `tat` `n` on, which is what bounds every window.
//!
//! # Internal time
//!
//! Times here are nanoseconds since the clock's origin plus [`ORIGIN`]
//! (2^62 ns). The offset keeps `t - tau` from underflowing, so a limiter
//! built "with full credit" has it even at clock reading 0. All arithmetic
//! saturates instead of wrapping, and a slot that would fall past [`MAX_TAT`]
//! (`2^16` ns below `u64::MAX`, clock readings of about 438 years) is
//! refused ([`Deny::Saturated`]), never admitted. (The words above it are
//! never states, so a store may use them as markers of its own:
//! `AtomicLimiter` marks a `set_rate` in progress with them.) A step never
//! lowers `tat`, so a clock that steps backwards can delay a caller but never
//! admit one early. Only two things lower it: a [`rebase`] to a faster rate
//! (the next slot moves to one new interval after the last, credit is
//! conserved in permits), and an async cancellation, back to the word its
//! own reservation replaced, while its slot is still ahead and no one has
//! reserved and the parameters have not changed since.
use std::fmt;

/// Internal time of the clock's origin: clock readings are offset by this.
pub const ORIGIN: u64 = 1 << 62;

/// The longest span the model handles, ns: 2^62, about 146 years. An
/// interval, a banked window `slack * interval` and a request's
/// `cost * interval` are each at most this, so that `tat` plus any of them
/// stays below `u64::MAX` until clock readings pass about 438 years.
pub const MAX_SPAN: u64 = 1 << 62;

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
///
/// It keeps `T` and `tau = S * T` (the product every step needs, so no step
/// multiplies); `S` is `tau / T`, exact.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// `T`, the interval between permits, ns; `1..=MAX_SPAN`.
    interval: u64,
    /// `tau = S * T`, the banked window, ns; `<= MAX_SPAN`.
    tau: u64,
}

impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Params")
            .field("interval", &self.interval)
            .field("slack", &self.slack())
            .finish()
    }
}

impl Params {
    /// Parameters for an interval of `interval` ns and a slack of `slack`
    /// permits; `None` unless `1 <= interval` and `slack * interval <= 2^62`
    /// (about 146 years).
    pub fn new(interval: u64, slack: u64) -> Option<Params> {
        match slack.checked_mul(interval) {
            Some(tau) if tau <= MAX_SPAN && (1..=MAX_SPAN).contains(&interval) => {
                Some(Params { interval, tau })
            }
            _ => None,
        }
    }

    /// Parameters from an interval and a `tau` that were a valid
    /// [`Params`]'s (a store's copy of [`interval`](Self::interval) and
    /// [`tau`](Self::tau)).
    #[inline]
    pub(crate) const fn from_tau_unchecked(interval: u64, tau: u64) -> Params {
        Params { interval, tau }
    }

    /// `T`, the interval between permits, ns.
    #[inline]
    pub const fn interval(self) -> u64 {
        self.interval
    }

    /// `S`, the slack, in permits.
    #[inline]
    pub fn slack(self) -> u64 {
        self.tau / self.interval
    }

    /// `tau = S * T`, the banked window, ns (cannot overflow: checked in `new`).
    #[inline]
    pub const fn tau(self) -> u64 {
        self.tau
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
    /// `cost * interval` is over [`MAX_SPAN`].
    CostTooLarge,
    /// The slot would fall past the end of internal time (clock readings
    /// past about 438 years, or a schedule booked that far ahead): no
    /// permit can be scheduled there, so none is admitted. Saturation never
    /// means "unlimited".
    Saturated,
}

/// `cost * T`, the time a request of `cost` permits spans, or
/// [`Deny::CostTooLarge`] when that is over [`MAX_SPAN`]. Depends only on the
/// request and the parameters, so a remote store can check it before its
/// round trip.
#[inline]
pub fn span(cost: u64, p: Params) -> Result<u64, Deny> {
    // A single permit spans one interval, which `Params` keeps within
    // `MAX_SPAN`: once inlined with a constant cost of 1 the check goes.
    if cost == 1 {
        return Ok(p.interval);
    }
    match cost.checked_mul(p.interval) {
        Some(span) if span <= MAX_SPAN => Ok(span),
        _ => Err(Deny::CostTooLarge),
    }
}

/// Whether a request spanning `span` could not be admitted within `max` ns
/// even by a bucket at rest (its slot would still be `span - T - tau`
/// away): [`Deny::ExceedsBurst`] rather than a wait. Depends only on the
/// request, so a remote store can check it before its round trip.
#[inline]
pub fn exceeds_burst(span: u64, p: Params, max: u64) -> bool {
    (span - p.interval).saturating_sub(p.tau()) > max
}

/// The one step every store runs: the decision for a request of `cost`
/// permits at internal time `now` on state `tat`.
///
/// A request of `cost > slack + 1` is paid for first: it waits, even at
/// rest, until `cost - 1 - slack` more intervals have accrued, and then goes
/// as one unit. So an instant may see up to `max(slack + 1, cost)` permits
/// leave together; the [window bound](crate::guide::model) counts the
/// permits *paid for* (a request's permits accrue over the `cost * T`
/// before its slot).
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
    let span = span(cost, p)?;
    let base = if tat == FRESH {
        // The first request goes as it would on a limiter at rest, but keeps
        // no credit: the next permit is one interval after its slot. (With
        // `base = now` a cost of 2 would never pass a `try_take_n`, however
        // long its caller waited, since waiting banks nothing here.)
        now.saturating_sub((span - p.interval).min(p.tau()))
    } else {
        p.base(tat, now)
    };
    // Past the end of internal time nothing is scheduled: a saturated `tat`
    // or clock must not turn into "admit everything".
    // (`span <= MAX_SPAN < MAX_TAT`: one compare covers the overflow too.)
    if base > MAX_TAT - span {
        return Err(Deny::Saturated);
    }
    let next = base + span;
    let slot = next - p.interval;
    if let Admit::Within(max) = admit {
        let wait = slot.saturating_sub(now);
        if wait > max {
            return Err(if exceeds_burst(span, p, max) {
                Deny::ExceedsBurst
            } else {
                Deny::Wait(wait)
            });
        }
    }
    Ok(Grant {
        prev: tat,
        slot,
        next,
    })
}

/// The step's refusal of a single permit when no parameters could change
/// it: `tat` a state more than `max` ns ahead of `now`, and not so near the
/// end of internal time that a long interval would saturate it. Then
/// `step(tat, now, 1, p, Admit::Within(max))` is `Err(Deny::Wait(tat -
/// now))` for every valid `p` (the base is `tat`, the slot too), so a
/// store may answer it from the state alone, before it reads its
/// parameters: the refusal holds at the moment it read `tat`.
#[inline(always)]
pub fn refusal_at_once(tat: u64, now: u64, cost: u64, admit: Admit) -> Option<u64> {
    let Admit::Within(max) = admit else {
        return None;
    };
    if cost != 1 || tat <= now.saturating_add(max) {
        return None;
    }
    (tat <= MAX_TAT - MAX_SPAN).then(|| tat - now)
}

/// The step that settles a booking after its call: the state after a take
/// that booked `booked` permits, whose permit went at internal time `went`
/// (the later of the take's clock reading and its slot), turns out at `now`
/// to have cost `actual`.
///
/// - **As booked** (`actual == booked`): `tat`, unchanged.
/// - **More** (`actual > booked`): the excess is charged now, as a take of
///   `actual - booked` permits at `now` admitted whatever its wait ([`step`]
///   under [`Admit::Always`]): from the step's own base, later takes wait
///   behind it. Never a refusal: an excess whose span is over [`MAX_SPAN`],
///   or that would end past the end of internal time, saturates the state
///   at [`MAX_TAT`], where nothing more is admitted.
/// - **Less**: `tat` moves back by the difference, `(booked - actual) * T`,
///   at most by `min(booked, slack + 1) * T - (now - went)` (the part of
///   the booking that may still count against the burst, wherever refunds
///   before it have moved it: never more than was booked), and never below
///   `now - tau` (at rest with a full burst: no banking past it; on a
///   history of this schedule the time limit keeps it there already, the
///   floor guards any other input). Only once the permit has gone (`went <=
///   now`) and every permit booked so far has gone too (`tat <= now + T`):
///   while a permit still waits for its slot, takes after a refund could
///   land nearer to it than its booking allowed, so the estimate stands.
///   [`FRESH`] and [`FULL`] are left as they are (full already; banking
///   nothing).
///
/// A store runs it on the state it holds, in the parameters in force; a
/// refund of a booking made before a change of the parameters or a reset
/// is the caller's to drop (its booking describes another schedule).
/// Exact integer arithmetic; it panics at no input.
///
/// # The promise
/// Count each permit at its settled cost, at the time it went, and an
/// excess as booked at the settle: in any window `w` of one rate, permits
/// take at most `S + 1 + w / T` (or the window's largest booked cost or
/// excess, where that is more), plus the excesses of the window's permits
/// charged after its end. A refund never lets through more than the bound
/// allows with the actual costs, and a caller settling each permit right
/// after its call, its estimates within the burst, keeps the long-run rate
/// exact. The argument is in the
/// [guide](crate::guide::model#settling-a-cost-after-the-call).
pub fn settle(tat: u64, now: u64, went: u64, booked: u64, actual: u64, p: Params) -> u64 {
    if actual > booked {
        return step(tat, now, actual - booked, p, Admit::Always).map_or(MAX_TAT, |g| g.next);
    }
    if actual == booked || tat == FRESH || tat == FULL || went > now {
        return tat;
    }
    if tat > now.saturating_add(p.interval) {
        // Takes wait behind the schedule: the estimate stands.
        return tat;
    }
    // What may still count of the booking: its span, at most a burst's (a
    // larger cost paid for the rest more than `tau` before it went), less
    // the time since its permit went. No overflow: `booked <= slack` bounds
    // the product by `tau`.
    let reach = if booked > p.slack() {
        p.tau + p.interval
    } else {
        booked * p.interval
    };
    let back = (booked - actual)
        .saturating_mul(p.interval)
        .min(reach.saturating_sub(now - went));
    // Never below `now - tau` (nor onto a sentinel), never above `tat`.
    let floor = tat.min(now.saturating_sub(p.tau)).max(FULL + 1);
    tat.saturating_sub(back).max(floor)
}

/// The state after the parameters change from `old` to `new` at `now`:
///
/// - **In debt** (`tat > now`, slots booked ahead): the slots already handed
///   out stand, and the next one is one *new* interval after the last of
///   them (`tat - old + new`). Without that, the first request after a
///   change from 1/h to 100/s would still wait out the hour. But never
///   sooner than the debt conserved in permits (`now + (tat - now) * new /
///   old`) on a speed-up: a fraction of an old interval left to wait is the
///   same fraction of a new one, so a speed-up cannot turn a debt into
///   credit. (A slow-down cannot either: `tat - old + new >= tat`.)
/// - **Holding credit** (`tat <= now`): the banked permits are conserved in
///   permits, rounded down (`now - credit * new / old`), never refilled: a
///   speed-up gives no more permits than the limiter held, a slow-down no
///   fewer. The next step clamps them to the new `tau`.
///
/// The sentinels, and a `tat` pinned at [`MAX_TAT`], are left alone (a
/// bucket at rest is at rest at any rate), and so is any `tat` when the
/// parameters do not change: a change elsewhere (another key's override, a
/// rate set to what it was) must not move this state, not even to an
/// equivalent one, since how long ago it came to rest decides when a store
/// may treat it as at rest.
#[inline]
pub fn rebase(tat: u64, now: u64, old: Params, new: Params) -> u64 {
    if tat == FRESH || tat == FULL || tat >= MAX_TAT || old == new {
        return tat;
    }
    let rebased = if tat > now {
        let after_last = tat
            .saturating_sub(old.interval)
            .saturating_add(new.interval);
        if new.interval < old.interval {
            // A speed-up: the last slot may be in the past, and one new
            // interval after it sooner than the debt allows.
            let conserved = now.saturating_add(scale_up(tat - now, new.interval, old.interval));
            after_last.max(conserved)
        } else {
            after_last
        }
    } else {
        let credit = now - old.base(tat, now);
        now.saturating_sub(scale_down(credit, new.interval, old.interval))
    };
    // The clamp keeps the result off the sentinels.
    rebased.clamp(FULL + 1, MAX_TAT)
}

/// `x * num / den`, rounded down, saturating.
fn scale_down(x: u64, num: u64, den: u64) -> u64 {
    u64::try_from(u128::from(x) * u128::from(num) / u128::from(den)).unwrap_or(u64::MAX)
}

/// `x * num / den`, rounded up, saturating.
fn scale_up(x: u64, num: u64, den: u64) -> u64 {
    u64::try_from((u128::from(x) * u128::from(num)).div_ceil(u128::from(den))).unwrap_or(u64::MAX)
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
        return p.slack() + 1;
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
        // Past the end of internal time nothing is admitted (it used to
        // saturate at MAX_TAT and admit every later request).
        assert_eq!(
            step(FULL, u64::MAX - 5, MAX_SPAN / T, p(1), Admit::Always),
            Err(Deny::Saturated)
        );
        assert_eq!(
            step(FRESH, u64::MAX, 1, p(0), Admit::Always),
            Err(Deny::Saturated)
        );
        assert_eq!(
            step(MAX_TAT, MAX_TAT, 1, p(0), Admit::Within(0)),
            Err(Deny::Saturated)
        );
        let g = step(FULL, MAX_TAT - T, 1, p(0), Admit::Always).unwrap();
        assert_eq!(g.next, MAX_TAT, "the last slot there is");
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
        // Last slot at ORIGIN + 5000, booked at the slow rate, now before it.
        let now = ORIGIN + 4000;
        assert_eq!(rebase(ORIGIN + 6000, now, slow, fast), ORIGIN + 5000 + T);
        assert_eq!(rebase(ORIGIN + 5000 + T, now, fast, slow), ORIGIN + 6000);
        for tat in [FRESH, FULL, MAX_TAT] {
            assert_eq!(rebase(tat, now, slow, fast), tat);
        }
        assert_eq!(rebase(MAX_TAT - 1, now, fast, slow), MAX_TAT);
        // Debt conserved on a speed-up: a tenth of an old interval left is
        // a tenth of a new one (rounded up), not a credit.
        assert_eq!(rebase(500, 400, slow, Params::new(1, 0).unwrap()), 401);
        assert_eq!(rebase(500, 0, slow, Params::new(1, 0).unwrap()), FULL + 1);
    }

    /// `tat == now` is the edge of "holding credit" (`tat <= now`): the
    /// next permit is due now, and a slow-down does not put it off (were it
    /// debt, it would move one new interval after the last slot).
    #[test]
    fn rebase_at_neither_credit_nor_debt_keeps_the_next_permit_due_now() {
        let (slow, fast) = (Params::new(1000, 1).unwrap(), p(1));
        let now = ORIGIN + 1_000_000;
        assert_eq!(rebase(now, now, fast, slow), now);
        assert_eq!(rebase(now, now, slow, fast), now);
        assert_eq!(next_free(rebase(now, now, fast, slow), now, slow), 0);
    }

    #[test]
    fn params_debug_shows_interval_and_slack() {
        assert_eq!(
            format!("{:?}", p(3)),
            format!("Params {{ interval: {T}, slack: 3 }}")
        );
    }

    #[test]
    fn rebase_to_the_same_parameters_changes_nothing() {
        let now = ORIGIN + 1_000_000;
        for tat in [ORIGIN, now - 5 * T, now - 20 * T, now, now + 3 * T] {
            assert_eq!(rebase(tat, now, p(10), p(10)), tat);
        }
    }

    #[test]
    fn rebase_conserves_credit_in_permits() {
        let (slow, fast) = (Params::new(1000, 10).unwrap(), Params::new(10, 10).unwrap());
        let now = ORIGIN + 1_000_000;
        // No credit, no debt (10 of 11 spent at this instant): one permit
        // is left, at either rate.
        assert_eq!(available(now, now, slow), 1);
        let tat = rebase(now, now, slow, fast);
        assert_eq!(available(tat, now, fast), 1);
        // Four permits banked stay four permits.
        let tat = now - 3 * 1000;
        assert_eq!(available(tat, now, slow), 4);
        assert_eq!(available(rebase(tat, now, slow, fast), now, fast), 4);
        assert_eq!(available(rebase(now - 30, now, fast, slow), now, slow), 4);
        // A fraction of an old interval of debt is that fraction of a new
        // one, not a credit: half an old interval left, half a new one.
        assert_eq!(rebase(now + 500, now, slow, fast), now + 5);
        assert_eq!(next_free(rebase(now + 1, now, slow, fast), now, fast), 1);
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
    fn a_settle_as_booked_changes_nothing() {
        let now = ORIGIN + 1_000;
        for tat in [FRESH, FULL, now - 3 * T, now + 40 * T, MAX_TAT] {
            assert_eq!(settle(tat, now, now, 4, 4, p(10)), tat);
        }
    }

    #[test]
    fn an_excess_is_a_take_at_the_settle_admitted_whatever_its_wait() {
        let now = ORIGIN + 1_000;
        for tat in [FRESH, FULL, now - 30 * T, now - 3 * T, now + 40 * T] {
            let take = step(tat, now, 3, p(10), Admit::Always).unwrap();
            assert_eq!(settle(tat, now, now - T, 2, 5, p(10)), take.next);
        }
        // At rest it is charged against the burst, not against a state
        // long forgotten.
        assert_eq!(settle(ORIGIN, now, ORIGIN, 1, 4, p(2)), now - 2 * T + 3 * T);
        // Never refused: past the end of internal time it saturates.
        assert_eq!(settle(now, now, now, 1, u64::MAX, p(10)), MAX_TAT);
        assert_eq!(settle(MAX_TAT - T, now, now, 1, 3, p(10)), MAX_TAT);
        assert_eq!(settle(FULL, u64::MAX, 0, 0, 1, p(0)), MAX_TAT);
    }

    #[test]
    fn a_refund_right_after_the_call_gives_the_difference_back() {
        let now = ORIGIN + 1_000_000;
        let g = step(FULL, now, 5, p(10), Admit::Within(0)).unwrap();
        assert_eq!(available(g.next, now, p(10)), 6);
        let tat = settle(g.next, now, now, 5, 2, p(10));
        assert_eq!(tat, g.next - 3 * T);
        assert_eq!(available(tat, now, p(10)), 9, "the burst less the 2 spent");
        // A blocking take far ahead of a full bucket, settled when it went.
        let g = step(FULL, now, 25, p(10), Admit::Always).unwrap();
        let went = g.slot;
        assert_eq!(settle(g.next, went, went, 25, 1, p(10)), went + T - 11 * T);
    }

    #[test]
    fn a_refund_shrinks_with_the_time_since_the_permit_went() {
        let now = ORIGIN + 1_000_000;
        let tat = now - 2 * T;
        // Booked 5, went 3 intervals ago: 2 intervals of it may still count.
        assert_eq!(settle(tat, now, now - 3 * T, 5, 0, p(10)), tat - 2 * T);
        assert_eq!(settle(tat, now, now - 3 * T, 5, 4, p(10)), tat - T);
        // Gone longer than its span: nothing comes back.
        assert_eq!(settle(tat, now, now - 5 * T, 5, 0, p(10)), tat);
        // A cost above the burst counts at most a burst's worth.
        let tat = now + T;
        assert_eq!(settle(tat, now, now - T, 40, 0, p(2)), tat - 2 * T);
        assert_eq!(settle(tat, now, now - 3 * T, 40, 0, p(2)), tat);
    }

    #[test]
    fn a_refund_never_banks_past_the_burst() {
        let now = ORIGIN + 1_000_000;
        // Five permits back on a state 8 intervals behind the clock, with a
        // slack of 10: 2 of them would bank past the burst.
        let tat = settle(now - 8 * T, now, now, 5, 0, p(10));
        assert_eq!(tat, now - 10 * T, "at rest with a full burst, not below");
        assert_eq!(available(tat, now, p(10)), 11);
        // A state at rest already is left alone, never moved forward.
        assert_eq!(settle(now - 19 * T, now, now, 3, 0, p(10)), now - 19 * T);
        // Nor onto a sentinel, however early the clock.
        assert_eq!(settle(5, 3, 2, 3, 0, p(2)), FULL + 1);
    }

    #[test]
    fn a_refund_waits_for_the_permit_and_for_takes_waiting_behind_the_schedule() {
        let now = ORIGIN + 1_000_000;
        // The permit has not gone yet.
        assert_eq!(settle(now + T, now, now + 1, 3, 0, p(10)), now + T);
        // A take waits for a slot ahead: the estimate stands.
        assert_eq!(settle(now + 2 * T, now, now, 3, 0, p(10)), now + 2 * T);
        assert_eq!(settle(now + T, now, now, 3, 0, p(10)), now - 2 * T);
        // The sentinels are full already, or bank nothing.
        for tat in [FRESH, FULL] {
            assert_eq!(settle(tat, now, now, 3, 0, p(10)), tat);
        }
    }

    #[test]
    fn params_reject_overflowing_slack() {
        assert!(Params::new(T, MAX_SPAN / T).is_some());
        assert!(Params::new(T, MAX_SPAN / T + 1).is_none());
        assert!(Params::new(u64::MAX, 0).is_none());
        assert!(Params::new(0, 0).is_none());
    }
}
