//! The pure step of an adaptive rate: additive increase while answers
//! succeed, multiplicative decrease when the far side refuses (or, if
//! asked, answers slower than it can), as TCP's congestion window moves,
//! but for a rate. No clock, no atomics, no storage: [`step`] takes the
//! state and one answer and returns the next state, and
//! [`Adaptive`](crate::adapt::Adaptive) runs it under a lock and sets the
//! limiter it drives to the rate it returns.
//!
//! # The arithmetic
//!
//! Rates are counted in nano-permits per second (`u64`: 1 permit a second
//! is `10^9`; the ceiling a rate can have, one permit a nanosecond, is
//! `10^18`), so that an increase of a fraction of a permit per second adds
//! up exactly. With `r` the rate, `a` the increase and `b` the share kept
//! by a decrease:
//!
//! - a success adds `a / r`: a second's worth of successes at the rate
//!   (`r` of them) adds `a` permits a second, whatever the rate, as TCP's
//!   `cwnd += 1 / cwnd` per acknowledgement adds one segment per round
//!   trip;
//! - a refusal (`429`, `503`), or with a latency tolerance `k` a success
//!   slower than `k` times the fastest seen, sets `r` to `b * r`;
//! - the result is always within `[floor, ceiling]`; every product is
//!   computed in 128 bits and saturates, so no input panics or wraps.
//!
//! # Once per window
//!
//! Answers come back a round trip after their requests left, so a burst of
//! refusals may all be for requests sent before the first decrease took
//! effect: decreasing once for each would collapse the rate for one
//! overload. So every request carries a ticket (its number, in the order
//! sent), and the state remembers the first ticket sent after its last
//! change, the `mark`: only an answer to a request sent after the last
//! change (`ticket >= mark`) changes the rate, and at most once per window
//! of requests in flight, as TCP decreases once per window of lost
//! segments. Successes sent before the last change still add their
//! increase unless that change was a decrease (the `recovery` mark): they
//! add up in `earned` and the next change applies them at once.

/// Nano-permits per permit: rates here are in nano-permits per second.
pub const NANO: u64 = 1_000_000_000;

/// The fastest rate there is, in nano-permits per second: one permit a
/// nanosecond, paceline's unit of time.
pub const MAX_RATE: u64 = NANO * NANO;

/// The share a decrease keeps is in millionths.
pub const MILLION: u32 = 1_000_000;

/// The configuration of an adaptive rate, checked once
/// ([`Params::new`]): every field is within its range, so [`step`] needs
/// no check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// The slowest rate, nano-permits per second; `1..=ceiling`.
    floor: u64,
    /// The fastest rate, nano-permits per second; `floor..=MAX_RATE`.
    ceiling: u64,
    /// What a second's worth of successes adds, nano-permits per second.
    increase: u64,
    /// The share of the rate a decrease keeps, in millionths; `0..MILLION`.
    keep: u32,
    /// How much slower than the fastest answer seen an answer may be
    /// before it counts as a refusal, in millionths of that fastest
    /// answer's latency (above `MILLION`); `None`: latency is not watched.
    latency: Option<u64>,
}

impl Params {
    /// Parameters between `floor` and `ceiling` (nano-permits per second),
    /// adding `increase` per second's worth of successes and keeping
    /// `keep` millionths of the rate on a refusal; `None` when `floor` is 0,
    /// `floor > ceiling`, `ceiling > MAX_RATE` or `keep >= MILLION` (a
    /// decrease that does not decrease).
    pub fn new(floor: u64, ceiling: u64, increase: u64, keep: u32) -> Option<Params> {
        if floor == 0 || floor > ceiling || ceiling > MAX_RATE || keep >= MILLION {
            return None;
        }
        Some(Params {
            floor,
            ceiling,
            increase,
            keep,
            latency: None,
        })
    }

    /// These parameters, with a success slower than `tolerance` millionths
    /// of the fastest one seen counting as a refusal; `None` for a tolerance
    /// of at most `MILLION` (1x: every answer but the fastest would be
    /// slow).
    pub fn with_latency(self, tolerance: u64) -> Option<Params> {
        (tolerance > u64::from(MILLION)).then_some(Params {
            latency: Some(tolerance),
            ..self
        })
    }

    /// The slowest rate, nano-permits per second.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The fastest rate, nano-permits per second.
    pub fn ceiling(&self) -> u64 {
        self.ceiling
    }

    /// `rate` brought within `[floor, ceiling]`.
    pub fn clamp(&self, rate: u64) -> u64 {
        rate.clamp(self.floor, self.ceiling)
    }
}

/// Where an adaptive rate stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    /// The rate in force, nano-permits per second.
    pub rate: u64,
    /// The first ticket sent after the last change: only answers to it and
    /// later ones change the rate.
    pub mark: u64,
    /// The first ticket sent after the last decrease: only their successes
    /// earn an increase.
    pub recovery: u64,
    /// Successes counted since the last change, whose increase is not
    /// applied yet.
    pub earned: u64,
    /// The fastest answer seen, ns (`u64::MAX`: none yet).
    pub fastest: u64,
}

impl State {
    /// A state at `rate` (brought within the bounds), nothing sent yet.
    pub fn new(params: &Params, rate: u64) -> State {
        State {
            rate: params.clamp(rate),
            mark: 0,
            recovery: 0,
            earned: 0,
            fastest: u64::MAX,
        }
    }
}

/// One answer from the far side, as the rate sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Served, after `latency` ns.
    Served {
        /// From the request's send to its answer, ns.
        latency: u64,
    },
    /// Refused for its rate (a `429`, a `503`).
    Refused,
    /// Neither: says nothing of the rate (an error of the request's own, a
    /// broken connection). Changes nothing.
    Other,
}

/// What a step did to the rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing.
    Kept,
    /// Raised it.
    Increased,
    /// Lowered it (or, at the floor, would have).
    Decreased,
}

/// The state after the answer to the request of `ticket`, when `sent`
/// tickets have been handed out so far (so `sent` is the first ticket of
/// the window a change opens), and what changed.
///
/// Never panics; the rate it returns is within the bounds whatever the
/// state it is given.
pub fn step(
    params: &Params,
    state: State,
    ticket: u64,
    sent: u64,
    answer: Answer,
) -> (State, Change) {
    let mut next = State {
        rate: params.clamp(state.rate),
        ..state
    };
    // Sent before the last change: it speaks of the rate before it.
    let fresh = ticket >= state.mark;
    let slow = match answer {
        Answer::Served { latency } => {
            next.fastest = next.fastest.min(latency);
            params.latency.is_some_and(|tolerance| {
                u128::from(latency) * u128::from(MILLION)
                    > u128::from(next.fastest) * u128::from(tolerance)
            })
        }
        Answer::Refused => false,
        Answer::Other => return (next, Change::Kept),
    };
    if matches!(answer, Answer::Refused) || slow {
        if !fresh {
            return (next, Change::Kept);
        }
        let kept = u128::from(next.rate) * u128::from(params.keep) / u128::from(MILLION);
        // Within bounds: `kept <= rate <= ceiling`.
        next.rate = params.clamp(kept as u64);
        next.mark = sent;
        next.recovery = sent;
        next.earned = 0;
        return (next, Change::Decreased);
    }
    if ticket < state.recovery {
        // Served under the rate a decrease has since cut: it earns nothing.
        return (next, Change::Kept);
    }
    next.earned = next.earned.saturating_add(1);
    if !fresh {
        return (next, Change::Kept);
    }
    // a * earned / r, in nano-permits: `increase * earned * NANO / rate`.
    let added = u128::from(params.increase)
        .saturating_mul(u128::from(next.earned))
        .saturating_mul(u128::from(NANO))
        / u128::from(next.rate);
    let raised = u128::from(next.rate)
        .saturating_add(added)
        .min(u128::from(params.ceiling)) as u64;
    if raised == next.rate {
        if next.rate == params.ceiling {
            // Nothing to earn at the ceiling: a later fall starts afresh.
            next.earned = 0;
        }
        // Else too little to move the rate yet: it keeps adding up.
        return (next, Change::Kept);
    }
    next.rate = raised;
    next.mark = sent;
    next.earned = 0;
    (next, Change::Increased)
}

/// The interval between permits at `rate` (nano-permits per second), ns,
/// rounded to nearest; at least 1.
pub fn interval_ns(rate: u64) -> u64 {
    let rate = u128::from(rate.max(1));
    let interval = (u128::from(MAX_RATE) + rate / 2) / rate;
    // At most 10^18: a rate of at least 1 nano-permit a second.
    (interval as u64).max(1)
}

/// The rate (nano-permits per second) of one permit every `interval` ns,
/// rounded to nearest; at least 1.
pub fn rate_of(interval_ns: u64) -> u64 {
    let interval = u128::from(interval_ns.max(1));
    let rate = (u128::from(MAX_RATE) + interval / 2) / interval;
    (rate as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PER_S: u64 = NANO;

    /// 1/s to 1000/s, +1/s per second of successes, halving on a refusal.
    fn params() -> Params {
        Params::new(PER_S, 1000 * PER_S, PER_S, MILLION / 2).unwrap()
    }

    fn served() -> Answer {
        Answer::Served { latency: 1_000_000 }
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert_eq!(Params::new(0, PER_S, 1, 1), None, "a zero floor");
        assert_eq!(Params::new(2, 1, 1, 1), None, "floor over ceiling");
        assert_eq!(Params::new(1, MAX_RATE + 1, 1, 1), None, "past 1/ns");
        assert_eq!(
            Params::new(1, 2, 1, MILLION),
            None,
            "a decrease keeping all"
        );
        assert!(Params::new(1, 1, 0, 0).is_some(), "one rate, nothing kept");
        assert_eq!(params().with_latency(u64::from(MILLION)), None);
    }

    #[test]
    fn a_refusal_keeps_its_share_and_opens_a_window() {
        let p = params();
        let s = State::new(&p, 200 * PER_S);
        let (s, change) = step(&p, s, 0, 5, Answer::Refused);
        assert_eq!(change, Change::Decreased);
        assert_eq!((s.rate, s.mark, s.recovery), (100 * PER_S, 5, 5));
        // Tickets 1..5 were sent before the decrease: their refusals are
        // the same overload, and change nothing.
        for ticket in 1..5 {
            let (after, change) = step(&p, s, ticket, 9, Answer::Refused);
            assert_eq!((after, change), (s, Change::Kept));
        }
        // Ticket 5 was sent after it: a second decrease.
        let (s, change) = step(&p, s, 5, 9, Answer::Refused);
        assert_eq!((s.rate, change), (50 * PER_S, Change::Decreased));
    }

    #[test]
    fn a_second_of_successes_adds_the_increase() {
        let p = params();
        let mut s = State::new(&p, 100 * PER_S);
        // One request in flight at a time: each answer is a window.
        for ticket in 0..100 {
            (s, _) = step(&p, s, ticket, ticket + 1, served());
        }
        // 100 successes at about 100/s: about +1/s (each adds 1/r of it).
        assert!(s.rate > 100 * PER_S + PER_S * 99 / 100, "{}", s.rate);
        assert!(s.rate <= 101 * PER_S, "{}", s.rate);
    }

    #[test]
    fn successes_in_one_window_change_the_rate_once() {
        let p = params();
        let s = State::new(&p, 100 * PER_S);
        // Ten requests in flight, tickets 0..10: the first answer raises
        // the rate and opens a window at 10; the other nine add up.
        let (mut s, change) = step(&p, s, 0, 10, served());
        assert_eq!(change, Change::Increased);
        let once = s.rate;
        for ticket in 1..10 {
            let change;
            (s, change) = step(&p, s, ticket, 10, served());
            assert_eq!(change, Change::Kept);
        }
        assert_eq!((s.rate, s.earned), (once, 9));
        // The next window's first answer applies all nine.
        let (s, change) = step(&p, s, 10, 20, served());
        assert_eq!(change, Change::Increased);
        assert_eq!(s.rate, once + PER_S * 10 * PER_S / once);
    }

    #[test]
    fn successes_from_before_a_decrease_earn_nothing() {
        let p = params();
        let s = State::new(&p, 100 * PER_S);
        let (s, _) = step(&p, s, 3, 10, Answer::Refused);
        let (after, change) = step(&p, s, 4, 10, served());
        assert_eq!(
            (after.rate, after.earned, change),
            (s.rate, 0, Change::Kept)
        );
    }

    #[test]
    fn the_rate_never_leaves_its_bounds() {
        let p = params();
        // At the floor a refusal stays there.
        let s = State::new(&p, PER_S);
        let (s, change) = step(&p, s, 0, 1, Answer::Refused);
        assert_eq!((s.rate, change), (PER_S, Change::Decreased));
        // At the ceiling a success stays there and earns nothing.
        let s = State::new(&p, 1000 * PER_S);
        let (s, change) = step(&p, s, 0, 1, served());
        assert_eq!((s.rate, s.earned, change), (1000 * PER_S, 0, Change::Kept));
        // A state out of bounds (bounds changed under it) comes back in.
        let s = State {
            rate: u64::MAX,
            ..s
        };
        let (s, _) = step(&p, s, 0, 1, Answer::Other);
        assert_eq!(s.rate, 1000 * PER_S);
        let s = State { rate: 0, ..s };
        let (s, _) = step(&p, s, 0, 1, Answer::Other);
        assert_eq!(s.rate, PER_S);
        assert_eq!(State::new(&p, 0).rate, PER_S);
    }

    #[test]
    fn nothing_overflows_at_the_extremes() {
        // The widest bounds and the largest increase: a success at the
        // floor saturates to the ceiling, never wraps or panics.
        let p = Params::new(1, MAX_RATE, u64::MAX, MILLION - 1).unwrap();
        let s = State {
            earned: u64::MAX,
            ..State::new(&p, 1)
        };
        let (s, change) = step(&p, s, u64::MAX, u64::MAX, served());
        assert_eq!((s.rate, change), (MAX_RATE, Change::Increased));
        // A refusal at the ceiling keeps 999 999 millionths.
        let (s, _) = step(&p, s, u64::MAX, u64::MAX, Answer::Refused);
        assert_eq!(s.rate, MAX_RATE / 1_000_000 * 999_999);
        // Keeping nothing lands on the floor, not on zero.
        let p = Params::new(7, MAX_RATE, 0, 0).unwrap();
        let (s, _) = step(&p, State::new(&p, MAX_RATE), 0, 0, Answer::Refused);
        assert_eq!(s.rate, 7);
        // No increase: successes never move it.
        let (s, change) = step(&p, s, 0, 0, served());
        assert_eq!((s.rate, change), (7, Change::Kept));
    }

    #[test]
    fn an_increase_too_small_to_see_adds_up_until_it_counts() {
        // 1 nano-permit per second of successes at 1000/s: each success
        // adds 10^-3 nano-permits, rounded away, so they add up in
        // `earned` until a thousand of them make one.
        let p = Params::new(1, MAX_RATE, 1, 0).unwrap();
        let mut s = State::new(&p, 1000 * PER_S);
        let mut changed = 0;
        for ticket in 0..1000 {
            let change;
            (s, change) = step(&p, s, ticket, ticket + 1, served());
            changed += usize::from(change == Change::Increased);
        }
        assert_eq!((s.rate, changed), (1000 * PER_S + 1, 1));
    }

    #[test]
    fn a_slow_answer_counts_as_a_refusal_only_when_asked() {
        let slow = Answer::Served { latency: 5_000_000 };
        let p = params();
        let s = State::new(&p, 100 * PER_S);
        let (s, _) = step(&p, s, 0, 1, served()); // the fastest: 1 ms
        let (s, change) = step(&p, s, 1, 2, slow);
        assert_eq!(change, Change::Increased, "latency not watched");
        // Tolerating 2x the fastest: 5 ms is slow, 2 ms is not.
        let p = params().with_latency(2 * u64::from(MILLION)).unwrap();
        let (after, change) = step(&p, s, 2, 3, slow);
        assert_eq!((after.rate, change), (s.rate / 2, Change::Decreased));
        let (_, change) = step(&p, s, 2, 3, Answer::Served { latency: 2_000_000 });
        assert_eq!(change, Change::Increased);
        // The fastest answer only ever gets faster.
        let (after, _) = step(&p, s, 2, 3, Answer::Served { latency: 1 });
        assert_eq!(after.fastest, 1);
    }

    #[test]
    fn other_answers_change_nothing() {
        let p = params();
        let s = State::new(&p, 100 * PER_S);
        assert_eq!(step(&p, s, 0, 1, Answer::Other), (s, Change::Kept));
    }

    #[test]
    fn intervals_and_rates_convert_both_ways() {
        assert_eq!(interval_ns(50 * PER_S), 20_000_000);
        assert_eq!(rate_of(20_000_000), 50 * PER_S);
        assert_eq!(interval_ns(MAX_RATE), 1);
        assert_eq!(interval_ns(0), MAX_RATE, "no division by zero");
        assert_eq!(interval_ns(1), MAX_RATE);
        assert_eq!(rate_of(0), MAX_RATE);
        assert_eq!(rate_of(u64::MAX), 1, "never a zero rate");
    }
}
