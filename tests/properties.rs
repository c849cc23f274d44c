//! Property tests: random sequences of calls and clock moves give identical
//! decisions, slots and clock readings on the pure `schedule::step`, on
//! `AtomicLimiter` and on `MutexLimiter`; a refusal's promised wait comes
//! true; and whatever the sequence, the permits admitted in any window
//! `[a, b]` of one constant-rate stretch never exceed
//! `slack + 1 + (b - a) / T`.
//!
//! Each limiter runs on its own auto-advancing `ManualClock`, so a blocking
//! call returns at once with its clock moved to the slot; the model moves its
//! own clock the same way, and every clock move in the sequence is applied to
//! all three.

mod common;
#[allow(unused_imports)]
use common::Limiter;

use std::sync::Arc;
use std::time::Duration;

use common::{build_with, Kind};
use paceline::model::schedule::{self, Admit, Deny, Params, FRESH, FULL, ORIGIN};
use paceline::{clock::Clock, clock::ManualClock, BuildError, Error, Rate, Slack, Wait};
use proptest::prelude::*;

/// One call or clock move. Durations are in quarters of the interval in
/// force (plus a few ns of jitter), so that every rate sees meaningful gaps.
#[derive(Clone, Debug)]
enum Op {
    Advance {
        quarters: u64,
        jitter: u64,
    },
    /// The clock steps back by this many quarter intervals (saturating at 0).
    StepBack {
        quarters: u64,
    },
    /// The clock is set to this reading, ns (extremes included).
    SetClock(u64),
    Take,
    TakeN(u64),
    TryTakeN(u64),
    /// Cost and allowed wait in quarter intervals.
    TakeTimeout {
        cost: u64,
        quarters: u64,
    },
    CanTake(u64),
    /// The new interval, ns.
    SetRate(u64),
    /// The new slack, permits.
    SetSlack(u64),
}

/// What a call answered; the same for every implementation or a bug.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    Moved,
    Took(Result<Duration, Error>),
    Tried(Result<(), Error>),
    Can(bool),
    SetRate(Result<(), BuildError>),
}

/// The pure step with a clock: the reference every limiter must match.
struct Model {
    tat: u64,
    params: Params,
    /// The clock reading, ns since its origin.
    clock: u64,
}

impl Model {
    fn now(&self) -> u64 {
        self.clock.saturating_add(ORIGIN)
    }

    /// Runs one request; an admitted one waits (the clock jumps to its slot).
    fn request(&mut self, cost: u64, admit: Admit) -> Result<(u64, schedule::Grant), Deny> {
        let now = self.now();
        let grant = schedule::step(self.tat, now, cost, self.params, admit)?;
        self.tat = grant.next;
        if grant.slot > now {
            self.clock = self.clock.max(grant.slot - ORIGIN);
        }
        Ok((now, grant))
    }

    fn error(&self, deny: Deny, cost: u64, max_wait: Option<u64>) -> Error {
        match (deny, max_wait) {
            (Deny::Wait(w), None) => Error::RetryAfter(Duration::from_nanos(w).into()),
            (Deny::Wait(w), Some(max)) => Error::QueueFull {
                wait: Duration::from_nanos(w),
                max_wait: Duration::from_nanos(max),
            },
            (Deny::ExceedsBurst, _) => Error::ExceedsBurst {
                cost,
                burst: self.params.slack() + 1,
            },
            (Deny::CostTooLarge, _) => Error::CostTooLarge { cost },
            (Deny::Saturated, _) => Error::Saturated,
        }
    }

    /// A refusal that names a wait must be admitted after that wait, if
    /// nothing else happens meanwhile.
    fn check_wait_comes_true(
        &self,
        cost: u64,
        deny: Deny,
        max_wait: u64,
    ) -> Result<(), TestCaseError> {
        if let Deny::Wait(w) = deny {
            prop_assert!(w > max_wait, "refused a wait of {} within {}", w, max_wait);
            let later = self.now().saturating_add(w - max_wait);
            if later < u64::MAX {
                let again =
                    schedule::step(self.tat, later, cost, self.params, Admit::Within(max_wait));
                prop_assert!(
                    again.is_ok(),
                    "cost {} refused with wait {} (allowed {}) at tat {} now {}, and again {} later: {:?}",
                    cost, w, max_wait, self.tat, self.now(), w - max_wait, again
                );
            }
        }
        Ok(())
    }
}

/// A permit-bearing grant: its clock time, cost, and constant-rate stretch.
#[derive(Clone, Copy, Debug)]
struct Admitted {
    at: u64,
    cost: u64,
    stretch: usize,
    /// How many times the clock had been stepped back or set before it: one
    /// instant of the clock can come twice only across such a move.
    epoch: usize,
}

struct Run {
    admitted: Vec<Admitted>,
    /// The interval of each stretch.
    intervals: Vec<u64>,
    /// The slack of each stretch.
    slacks: Vec<u64>,
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Runs `ops` on the model and on both limiters, asserting they agree after
/// every step.
fn run(
    interval: u64,
    slack: u64,
    full: bool,
    precise: bool,
    ops: &[Op],
) -> Result<Run, TestCaseError> {
    let rate = Rate::every(Duration::from_nanos(interval)).unwrap();
    let Some(params) = Params::new(interval, slack) else {
        return Err(TestCaseError::reject("slack overflows"));
    };
    let wait = if precise { Wait::PRECISE } else { Wait::Sleep };
    let mut model = Model {
        tat: if full { FULL } else { FRESH },
        params,
        clock: 0,
    };
    let limiters: Vec<(Kind, ManualClock, Arc<dyn Limiter>)> = [Kind::Atomic, Kind::Mutex]
        .into_iter()
        .map(|kind| {
            let clock = ManualClock::with_auto_advance();
            let limiter = build_with(kind, rate, slack, full, wait, clock.clone());
            (kind, clock, limiter)
        })
        .collect();
    let mut out = Run {
        admitted: Vec::new(),
        intervals: vec![interval],
        slacks: vec![slack],
    };
    let mut epoch = 0;
    for op in ops {
        if matches!(op, Op::StepBack { .. } | Op::SetClock(_)) {
            epoch += 1;
        }
        let t = model.params.interval();
        let quarter = |q: u64| q.saturating_mul(t) / 4;
        let stretch = out.intervals.len() - 1;
        let mut admitted = |at: u64, cost: u64| {
            if cost > 0 {
                out.admitted.push(Admitted {
                    at,
                    cost,
                    stretch,
                    epoch,
                });
            }
        };
        // The model's answer.
        let want = match *op {
            Op::Advance { quarters, jitter } => {
                model.clock = model.clock.saturating_add(quarter(quarters) + jitter);
                Answer::Moved
            }
            Op::StepBack { quarters } => {
                model.clock = model.clock.saturating_sub(quarter(quarters));
                Answer::Moved
            }
            Op::SetClock(at) => {
                model.clock = at;
                Answer::Moved
            }
            Op::Take | Op::TakeN(_) => {
                let cost = if let Op::TakeN(n) = *op { n } else { 1 };
                match model.request(cost, Admit::Always) {
                    Ok((now, g)) => {
                        let at = g.slot.max(now) - ORIGIN;
                        admitted(at, cost);
                        Answer::Took(Ok(Duration::from_nanos(at)))
                    }
                    // A plain take past the end of internal time is never
                    // admitted: it waits for the clock's end.
                    Err(Deny::Saturated) if matches!(op, Op::Take) => {
                        model.clock = model.clock.max(u64::MAX - ORIGIN);
                        Answer::Took(Ok(Duration::from_nanos(u64::MAX - ORIGIN)))
                    }
                    Err(deny) => Answer::Took(Err(model.error(deny, cost, None))),
                }
            }
            Op::TryTakeN(cost) => match model.request(cost, Admit::Within(0)) {
                Ok((now, g)) => {
                    prop_assert!(g.slot <= now);
                    admitted(model.clock, cost);
                    Answer::Tried(Ok(()))
                }
                Err(deny) => {
                    model.check_wait_comes_true(cost, deny, 0)?;
                    Answer::Tried(Err(model.error(deny, cost, None)))
                }
            },
            Op::TakeTimeout { cost, quarters } => {
                let max = quarter(quarters);
                match model.request(cost, Admit::Within(max)) {
                    Ok((now, g)) => {
                        let at = g.slot.max(now) - ORIGIN;
                        prop_assert!(at - (now - ORIGIN) <= max);
                        admitted(at, cost);
                        Answer::Took(Ok(Duration::from_nanos(at)))
                    }
                    Err(deny) => {
                        model.check_wait_comes_true(cost, deny, max)?;
                        Answer::Took(Err(model.error(deny, cost, Some(max))))
                    }
                }
            }
            Op::CanTake(cost) => Answer::Can(
                schedule::step(model.tat, model.now(), cost, model.params, Admit::Within(0))
                    .is_ok(),
            ),
            Op::SetRate(_) | Op::SetSlack(_) => {
                let (interval, slack) = match *op {
                    Op::SetRate(interval) => (interval, model.params.slack()),
                    Op::SetSlack(slack) => (model.params.interval(), slack),
                    _ => unreachable!(),
                };
                match Params::new(interval, slack) {
                    Some(p) => {
                        model.tat = schedule::rebase(model.tat, model.now(), model.params, p);
                        model.params = p;
                        out.intervals.push(interval);
                        out.slacks.push(slack);
                        Answer::SetRate(Ok(()))
                    }
                    None => Answer::SetRate(Err(BuildError::SlackTooLarge {
                        slack,
                        interval: Duration::from_nanos(interval),
                    })),
                }
            }
        };
        // Each limiter's answer.
        for (kind, clock, limiter) in &limiters {
            let got = match *op {
                Op::Advance { quarters, jitter } => {
                    clock.advance(Duration::from_nanos(quarter(quarters) + jitter));
                    Answer::Moved
                }
                Op::StepBack { quarters } => {
                    clock.set(Duration::from_nanos(
                        clock.now().saturating_sub(quarter(quarters)),
                    ));
                    Answer::Moved
                }
                Op::SetClock(at) => {
                    clock.set(Duration::from_nanos(at));
                    Answer::Moved
                }
                Op::Take => Answer::Took(Ok(limiter.take())),
                Op::TakeN(n) => Answer::Took(limiter.take_n(n)),
                Op::TryTakeN(n) => Answer::Tried(limiter.try_take_n(n)),
                Op::TakeTimeout { cost, quarters } => Answer::Took(
                    limiter.take_n_timeout(cost, Duration::from_nanos(quarter(quarters))),
                ),
                Op::CanTake(n) => Answer::Can(limiter.can_take(n)),
                Op::SetRate(interval) => Answer::SetRate(
                    limiter.set_rate(Rate::every(Duration::from_nanos(interval)).unwrap()),
                ),
                Op::SetSlack(slack) => Answer::SetRate(limiter.set_slack(Slack::permits(slack))),
            };
            prop_assert_eq!(&got, &want, "{:?} on {:?}", kind, op);
            prop_assert_eq!(clock.now(), model.clock, "{:?}: clock after {:?}", kind, op);
            prop_assert_eq!(
                limiter.available(),
                schedule::available(model.tat, model.now(), model.params),
                "{:?}: available after {:?}",
                kind,
                op
            );
            prop_assert_eq!(
                duration_ns(limiter.next_free()),
                schedule::next_free(model.tat, model.now(), model.params),
                "{:?}: next_free after {:?}",
                kind,
                op
            );
        }
    }
    Ok(out)
}

/// Permits admitted in any window `[a, b]` of one stretch, at most
/// `burst + (b - a) / T`; the burst is `slack + 1`, or the window's largest
/// single cost when a blocking `take_n` paid for more than that by waiting.
fn check_window_bound(run: &Run) -> Result<(), TestCaseError> {
    for (stretch, &t) in run.intervals.iter().enumerate() {
        let mut grants: Vec<Admitted> = run
            .admitted
            .iter()
            .copied()
            .filter(|g| g.stretch == stretch)
            .collect();
        grants.sort_by_key(|g| g.at);
        for i in 0..grants.len() {
            let (mut sum, mut largest) = (0u128, 0u64);
            for j in i..grants.len() {
                sum += u128::from(grants[j].cost);
                largest = largest.max(grants[j].cost);
                let burst = u128::from((run.slacks[stretch] + 1).max(largest));
                let span = u128::from(grants[j].at - grants[i].at);
                prop_assert!(
                    sum * u128::from(t) <= span + burst * u128::from(t),
                    "{} permits in [{}, {}] at T = {} ns, slack {}: {:?}",
                    sum,
                    grants[i].at,
                    grants[j].at,
                    t,
                    run.slacks[stretch],
                    &grants[i..=j]
                );
            }
        }
    }
    Ok(())
}

/// Across any sequence of rate and slack changes, the permits admitted at one
/// instant (of a clock that has not stepped back since) never exceed the largest burst in force around it (`slack + 1`),
/// or the largest single cost a blocking `take_n` paid for by waiting: a
/// change never refills credit already spent.
fn check_instant_bound(run: &Run) -> Result<(), TestCaseError> {
    let mut grants = run.admitted.clone();
    grants.sort_by_key(|g| (g.epoch, g.at));
    for same in grants.chunk_by(|a, b| (a.epoch, a.at) == (b.epoch, b.at)) {
        let sum: u128 = same.iter().map(|g| u128::from(g.cost)).sum();
        let largest = same.iter().map(|g| g.cost).max().unwrap_or(0);
        let (first, last) = (same[0].stretch, same[same.len() - 1].stretch);
        let slack = run.slacks[first..=last].iter().copied().max().unwrap_or(0);
        prop_assert!(
            sum <= u128::from((slack + 1).max(largest)),
            "{} permits at one instant {} with slack {}: {:?}",
            sum,
            same[0].at,
            slack,
            same
        );
    }
    Ok(())
}

const INTERVALS: [u64; 6] = [1, 3, 10, 1_000, 10_000_000, 1_000_000_000];

fn cost() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..=14, 1 => Just(u64::MAX), 1 => (1u64 << 30)..=(1u64 << 62)]
}

/// Calls and clock moves on a clock that stays far below saturation.
fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..=60, 0u64..=3).prop_map(|(quarters, jitter)| Op::Advance { quarters, jitter }),
        1 => (0u64..=60).prop_map(|quarters| Op::StepBack { quarters }),
        4 => Just(Op::Take),
        2 => (0u64..=14).prop_map(Op::TakeN),
        4 => (0u64..=14).prop_map(Op::TryTakeN),
        2 => (0u64..=14, 0u64..=60).prop_map(|(cost, quarters)| Op::TakeTimeout { cost, quarters }),
        1 => (0u64..=14).prop_map(Op::CanTake),
        1 => prop::sample::select(&INTERVALS[..]).prop_map(Op::SetRate),
        1 => (0u64..=12).prop_map(Op::SetSlack),
    ]
}

/// `op()` plus u64 extremes: clock readings, costs and intervals at the edges.
fn extreme_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => op(),
        1 => prop_oneof![
            Just(0u64),
            Just(u64::MAX),
            Just(u64::MAX - 1),
            Just(1u64 << 62),
            Just(u64::MAX - (1u64 << 62)),
            any::<u64>()
        ]
        .prop_map(Op::SetClock),
        1 => cost().prop_map(Op::TryTakeN),
        1 => (cost(), prop_oneof![Just(0u64), Just(u64::MAX), 0u64..=100])
            .prop_map(|(cost, quarters)| Op::TakeTimeout { cost, quarters }),
        1 => cost().prop_map(Op::CanTake),
        1 => prop_oneof![Just(1u64 << 62), Just((1u64 << 62) / 11), 1u64..=1 << 62].prop_map(Op::SetRate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(256)))]

    /// Both limiters agree with the pure step on every answer, clock reading
    /// and introspection, and every permit stays within the window bound.
    #[test]
    fn limiters_match_the_pure_step_and_the_window_bound_holds(
        interval in prop::sample::select(&INTERVALS[..]),
        slack in prop_oneof![Just(0u64), Just(1u64), Just(10u64), 0u64..=12],
        full in any::<bool>(),
        precise in any::<bool>(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let run = run(interval, slack, full, precise, &ops)?;
        check_window_bound(&run)?;
        check_instant_bound(&run)?;
    }

    /// Rate changes in bursts (speed-ups and slow-downs at one instant, with
    /// permits taken between): no instant ever releases more than the burst.
    #[test]
    fn rate_changes_never_refill_spent_credit(
        interval in prop::sample::select(&INTERVALS[..]),
        slack in prop_oneof![Just(0u64), Just(10u64), 0u64..=12],
        full in any::<bool>(),
        ops in prop::collection::vec(prop_oneof![
            4 => (0u64..=14).prop_map(Op::TryTakeN),
            2 => Just(Op::Take),
            3 => prop::sample::select(&INTERVALS[..]).prop_map(Op::SetRate),
            1 => (0u64..=12).prop_map(Op::SetSlack),
            1 => (0u64..=8, 0u64..=3).prop_map(|(quarters, jitter)| Op::Advance { quarters, jitter }),
        ], 1..60),
    ) {
        let run = run(interval, slack, full, false, &ops)?;
        check_instant_bound(&run)?;
    }

    /// The same agreement at the edges of `u64`: clocks set anywhere
    /// (saturating internal time included), costs up to `u64::MAX`, intervals
    /// up to 2^62 ns. Nothing panics and all three still agree.
    #[test]
    fn limiters_match_the_pure_step_at_u64_extremes(
        interval in prop_oneof![prop::sample::select(&INTERVALS[..]), 1u64..=(1 << 62) / 13],
        slack in prop_oneof![Just(0u64), Just(10u64), 0u64..=12],
        full in any::<bool>(),
        ops in prop::collection::vec(extreme_op(), 1..60),
    ) {
        run(interval, slack, full, false, &ops)?;
    }

    /// A refusal answered from the state alone (before a store reads its
    /// parameters) is the step's own, for any parameters.
    #[test]
    fn a_refusal_at_once_is_the_steps_for_any_parameters(
        tat in prop_oneof![any::<u64>(), Just(0u64), Just(1u64), (1u64 << 62)..=(3u64 << 62)],
        now in prop_oneof![any::<u64>(), (1u64 << 62)..=(3u64 << 62)],
        cost in prop_oneof![Just(1u64), cost()],
        max in prop_oneof![Just(0u64), 0u64..=1 << 40, any::<u64>()],
        bounded in any::<bool>(),
        interval in prop_oneof![1u64..=1 << 62, Just(1u64 << 62)],
        slack in prop_oneof![0u64..=12, any::<u64>()],
    ) {
        let admit = if bounded { Admit::Within(max) } else { Admit::Always };
        let slack = slack.min((1u64 << 62) / interval);
        let params = Params::new(interval, slack).expect("valid parameters");
        if let Some(wait) = schedule::refusal_at_once(tat, now, cost, admit) {
            prop_assert_eq!(
                schedule::step(tat, now, cost, params, admit),
                Err(Deny::Wait(wait))
            );
        }
    }
}
