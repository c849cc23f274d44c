//! Property tests: each key of a `KeyedLimiter` decides exactly as a lone
//! `AtomicLimiter` (full credit, same rate and slack) given that key's
//! operations (rate overrides set and removed included), and pruning, manual
//! or on insert, never changes a decision.
#![cfg(feature = "keyed")]

use paceline::Take;
mod common;

use std::collections::HashMap;
use std::time::Duration;

use paceline::keyed::PRUNE_GRACE;
use paceline::model::schedule::{self, Admit, Deny, Params};
use paceline::{clock::ManualClock, keyed::WhenFull, AtomicLimiter, Error, KeyedLimiter, Rate};
use proptest::prelude::*;

/// With slack 3 the banked window (3 ms) is longer than the 1 ms grace
/// `PRUNE_GRACE`, so a sweep that dropped keys early would show.
const INTERVAL: Duration = Duration::from_millis(1);
const SLACK: u64 = 3;

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    TryTake {
        key: u32,
        cost: u64,
    },
    Timeout {
        key: u32,
        cost: u64,
        max_us: u64,
    },
    Take {
        key: u32,
        cost: u64,
    },
    Can {
        key: u32,
        cost: u64,
    },
    Prune,
    /// Gives `key` its own interval, `ms` milliseconds, and slack.
    Override {
        key: u32,
        ms: u64,
        slack: u64,
    },
    RemoveOverride {
        key: u32,
    },
    /// Sets the default interval to `ms` milliseconds.
    SetRate {
        ms: u64,
    },
}

/// Any operation, rate and override changes included.
fn op() -> impl Strategy<Value = Op> {
    let key = 0u32..6;
    prop_oneof![
        10 => plain_op(),
        1 => (key.clone(), 1u64..4, 0..=SLACK + 1)
            .prop_map(|(key, ms, slack)| Op::Override { key, ms, slack }),
        1 => key.prop_map(|key| Op::RemoveOverride { key }),
        1 => (1u64..4).prop_map(|ms| Op::SetRate { ms }),
    ]
}

/// Operations without override changes (a lone `AtomicLimiter` has none).
fn plain_op() -> impl Strategy<Value = Op> {
    let key = 0u32..6;
    let cost = 0u64..=SLACK + 2;
    prop_oneof![
        // Mostly short steps, sometimes past rest plus the 1 ms grace.
        3 => (0u64..4_000_000).prop_map(Op::Advance),
        1 => (0u64..30_000_000).prop_map(Op::Advance),
        4 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::TryTake { key, cost }),
        2 => (key.clone(), cost.clone(), 0u64..5_000)
            .prop_map(|(key, cost, max_us)| Op::Timeout { key, cost, max_us }),
        1 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::Take { key, cost }),
        1 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::Can { key, cost }),
        1 => Just(Op::Prune),
    ]
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Taken(Result<Duration, Error>),
    Tried(Result<(), Error>),
    Can(bool),
    Nothing,
}

/// Runs `ops` on a keyed limiter and on one lone limiter per key, each on
/// its own auto-advancing clock, and checks every decision agrees. A request
/// the keyed limiter refuses with `TooManyKeys` never reaches the lone one.
fn check(ops: &[Op], max_keys: usize, when_full: WhenFull) -> Result<(), TestCaseError> {
    let rate = Rate::every(INTERVAL).unwrap();
    let keyed_clock = ManualClock::with_auto_advance();
    let lone_clock = ManualClock::with_auto_advance();
    let keyed = KeyedLimiter::<u32>::builder(rate)
        .slack(SLACK)
        .max_keys(max_keys)
        .when_full(when_full)
        .clock(keyed_clock.clone())
        .build()
        .unwrap();
    let lone: HashMap<u32, AtomicLimiter<ManualClock>> = (0..6)
        .map(|key| {
            let limiter = AtomicLimiter::builder(rate)
                .slack(SLACK)
                .full_credit(true)
                .clock(lone_clock.clone())
                .build()
                .unwrap();
            (key, limiter)
        })
        .collect();
    let lone_for = |key: u32| &lone[&key];
    for op in ops {
        let (k, l) = match *op {
            Op::Advance(ns) => {
                keyed_clock.advance(Duration::from_nanos(ns));
                lone_clock.advance(Duration::from_nanos(ns));
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::Prune => {
                keyed.prune();
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::Override { .. } | Op::RemoveOverride { .. } | Op::SetRate { .. } => {
                unreachable!("plain_op() makes none")
            }
            Op::TryTake { key, cost } => {
                let k = keyed.try_take_n(&key, cost).map(drop);
                if let Err(Error::TooManyKeys { .. }) = k {
                    continue;
                }
                (
                    Outcome::Tried(k),
                    Outcome::Tried(lone_for(key).try_take_n(cost).map(drop)),
                )
            }
            Op::Timeout { key, cost, max_us } => {
                let max = Duration::from_micros(max_us);
                let k = keyed.take_n_timeout(&key, cost, max).map(|t| t.at());
                if let Err(Error::TooManyKeys { .. }) = k {
                    continue;
                }
                let l = lone_for(key).take_n_timeout(cost, max).map(|t| t.at());
                (Outcome::Taken(k), Outcome::Taken(l))
            }
            Op::Take { key, cost } => {
                let k = keyed.take_n(&key, cost).map(|t| t.at());
                if let Err(Error::TooManyKeys { .. }) = k {
                    continue;
                }
                (
                    Outcome::Taken(k),
                    Outcome::Taken(lone_for(key).take_n(cost).map(|t| t.at())),
                )
            }
            Op::Can { key, cost } => (
                Outcome::Can(keyed.can_take(&key, cost).unwrap()),
                Outcome::Can(lone_for(key).can_take(cost)),
            ),
        };
        prop_assert_eq!(k, l, "op {:?}", op);
        prop_assert_eq!(keyed_clock.elapsed(), lone_clock.elapsed());
        prop_assert!(keyed.len() <= max_keys);
    }
    Ok(())
}

/// The reference for runs with rate and override changes: per key, the pure
/// step on a `tat` that starts `FULL`; when a key's parameters change, a key
/// at rest for `PRUNE_GRACE` stays at rest (`FULL`) and any other is
/// `schedule::rebase`d, as a lone `AtomicLimiter`'s state is by `set_rate`.
#[derive(Clone, Copy)]
struct Model {
    /// Clock reading, ns since the origin.
    now: u64,
    tat: [u64; 6],
    /// The default interval, ns (slack `SLACK`).
    default: u64,
    /// Each key's override: interval (ns) and slack.
    overrides: [Option<(u64, u64)>; 6],
}

impl Model {
    fn new() -> Model {
        Model {
            now: 0,
            tat: [schedule::FULL; 6],
            default: INTERVAL.as_nanos() as u64,
            overrides: [None; 6],
        }
    }

    fn params(&self, key: u32) -> Params {
        let (interval, slack) = self.overrides[key as usize].unwrap_or((self.default, SLACK));
        Params::new(interval, slack).unwrap()
    }

    fn decide(&mut self, key: u32, cost: u64, admit: Admit) -> Result<Duration, Error> {
        let now = self.now + schedule::ORIGIN;
        let p = self.params(key);
        match schedule::step(self.tat[key as usize], now, cost, p, admit) {
            Ok(grant) => {
                self.tat[key as usize] = grant.next;
                // Blocking calls wait; the clock auto-advances to the slot.
                self.now = self.now.max(grant.slot.saturating_sub(schedule::ORIGIN));
                Ok(Duration::from_nanos(grant.slot.max(now) - schedule::ORIGIN))
            }
            Err(Deny::Wait(wait)) => Err(match admit {
                Admit::Within(0) => Error::RetryAfter(Duration::from_nanos(wait).into()),
                Admit::Within(max) => Error::QueueFull {
                    wait: Duration::from_nanos(wait),
                    max_wait: Duration::from_nanos(max),
                },
                Admit::Always => Error::CostTooLarge { cost },
            }),
            Err(Deny::ExceedsBurst) => Err(Error::ExceedsBurst {
                cost,
                burst: p.slack() + 1,
            }),
            Err(Deny::CostTooLarge) => Err(Error::CostTooLarge { cost }),
            Err(Deny::Saturated) => Err(Error::Saturated),
        }
    }

    /// Applies `change` to the rates, then moves every key to its new
    /// parameters.
    fn change(&mut self, change: impl FnOnce(&mut Model)) {
        let now = self.now + schedule::ORIGIN;
        let old: Vec<Params> = (0..6).map(|k| self.params(k)).collect();
        change(self);
        for k in 0..6 {
            let (old, new) = (old[k as usize], self.params(k));
            let tat = &mut self.tat[k as usize];
            *tat = if schedule::at_rest(*tat, now, old, PRUNE_GRACE) {
                schedule::FULL
            } else {
                schedule::rebase(*tat, now, old, new)
            };
        }
    }
}

/// Runs `ops` on a keyed limiter and on [`Model`], checking every decision.
fn check_model(ops: &[Op]) -> Result<(), TestCaseError> {
    let clock = ManualClock::with_auto_advance();
    let keyed = KeyedLimiter::<u32>::builder(Rate::every(INTERVAL).unwrap())
        .slack(SLACK)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut model = Model::new();
    for op in ops {
        let (k, m) = match *op {
            Op::Advance(ns) => {
                clock.advance(Duration::from_nanos(ns));
                model.now += ns;
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::Prune => {
                keyed.prune();
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::Override { key, ms, slack } => {
                let interval = Duration::from_millis(ms);
                keyed
                    .set_override(key, Rate::every(interval).unwrap(), slack)
                    .unwrap();
                let interval = interval.as_nanos() as u64;
                model.change(|m| m.overrides[key as usize] = Some((interval, slack)));
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::RemoveOverride { key } => {
                let had = model.overrides[key as usize].is_some();
                prop_assert_eq!(keyed.remove_override(&key), had);
                model.change(|m| m.overrides[key as usize] = None);
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::SetRate { ms } => {
                let interval = Duration::from_millis(ms);
                keyed.set_rate(Rate::every(interval).unwrap()).unwrap();
                model.change(|m| m.default = interval.as_nanos() as u64);
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::TryTake { key, cost } => (
                Outcome::Tried(keyed.try_take_n(&key, cost).map(drop)),
                Outcome::Tried(model.decide(key, cost, Admit::Within(0)).map(drop)),
            ),
            Op::Timeout { key, cost, max_us } => {
                let max = Duration::from_micros(max_us);
                (
                    Outcome::Taken(keyed.take_n_timeout(&key, cost, max).map(|t| t.at())),
                    // A timeout refuses with `QueueFull`, even with no wait
                    // allowed (the model's `Within(0)` speaks for `try_take`).
                    Outcome::Taken(
                        model
                            .decide(key, cost, Admit::Within(max_us * 1000))
                            .map_err(|e| match e {
                                Error::RetryAfter(wait) => Error::QueueFull {
                                    wait: wait.duration(),
                                    max_wait: max,
                                },
                                e => e,
                            }),
                    ),
                )
            }
            Op::Take { key, cost } => (
                Outcome::Taken(keyed.take_n(&key, cost).map(|t| t.at())),
                Outcome::Taken(model.decide(key, cost, Admit::Always)),
            ),
            Op::Can { key, cost } => {
                let can = keyed.can_take(&key, cost).unwrap();
                let mut probe = Model { ..model };
                let would = probe.decide(key, cost, Admit::Within(0)).is_ok();
                (Outcome::Can(can), Outcome::Can(would))
            }
        };
        prop_assert_eq!(k, m, "op {:?}", op);
        prop_assert_eq!(clock.elapsed(), Duration::from_nanos(model.now));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(512)))]

    #[test]
    fn each_key_decides_like_the_pure_step_and_rebase_across_rate_changes(
        ops in prop::collection::vec(op(), 1..200)
    ) {
        check_model(&ops)?;
    }

    #[test]
    fn each_key_decides_like_a_lone_limiter_and_pruning_changes_nothing(
        ops in prop::collection::vec(plain_op(), 1..200)
    ) {
        check(&ops, 1_000, WhenFull::Evict)?;
    }

    /// A ceiling of 4 keys over 6: every insert finds its shard full and
    /// sweeps it first, so sweeps on insert run constantly; refusing the rest
    /// keeps every tracked key exact.
    #[test]
    fn sweeps_on_insert_change_no_decision_of_tracked_keys(
        ops in prop::collection::vec(plain_op(), 1..200)
    ) {
        check(&ops, 4, WhenFull::Refuse)?;
    }

    #[test]
    fn admitting_untracked_keys_keeps_the_ceiling_and_never_panics(
        ops in prop::collection::vec(op(), 1..200)
    ) {
        // Untracked admissions diverge from a lone limiter by design, so only
        // check that nothing panics and the ceiling holds.
        let rate = Rate::every(INTERVAL).unwrap();
        let clock = ManualClock::with_auto_advance();
        let keyed = KeyedLimiter::<u32>::builder(rate)
            .slack(SLACK)
            .max_keys(2)
            .when_full(WhenFull::Admit)
            .clock(clock.clone())
            .build()
            .unwrap();
        for op in &ops {
            match *op {
                Op::Advance(ns) => clock.advance(Duration::from_nanos(ns)),
                Op::TryTake { key, cost } => {
                    let _ = keyed.try_take_n(&key, cost);
                }
                Op::Timeout { key, cost, max_us } => {
                    let _ = keyed.take_n_timeout(&key, cost, Duration::from_micros(max_us));
}
                Op::Take { key, cost } => {
                    let _ = keyed.take_n(&key, cost);
                }
                Op::Can { key, cost } => {
                    let _ = keyed.can_take(&key, cost);
                }
                Op::Prune => {
                    keyed.prune();
                }
                Op::Override { key, ms, slack } => {
                    let rate = Rate::every(Duration::from_millis(ms)).unwrap();
                    keyed.set_override(key, rate, slack).unwrap();
                }
                Op::SetRate { ms } => {
                    keyed.set_rate(Rate::every(Duration::from_millis(ms)).unwrap()).unwrap();
                }
                Op::RemoveOverride { key } => {
                    keyed.remove_override(&key);
                }
            }
            prop_assert!(keyed.len() <= 2);
        }
    }
}
