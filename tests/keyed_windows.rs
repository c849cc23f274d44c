//! A keyed limiter's keys counted by window (`Limit::per_window`): each
//! decides as `window::step` on its word, decision for decision, among
//! changes of class (quota, window, pacing and back), settles, resets,
//! prunes and a `ManualClock` stepping back and forth; month ends and leap
//! days through a `ManualClock` set to those Unix times; overrides read from
//! TOML; a key pruned once its window ends; async takes waiting for the
//! next window on a paused Tokio clock.
#![cfg(feature = "keyed")]

mod common;

use std::time::Duration;

use paceline::keyed::PRUNE_GRACE;
use paceline::model::schedule::{self, Admit, ORIGIN};
use paceline::model::window::{self, Window, EMPTY};
use paceline::{clock::ManualClock, Error, KeyedLimiter, Limit, Rate, Take};
use proptest::prelude::*;

/// Keys of the property test.
const KEYS: usize = 4;
/// 2024-02-29 00:00:00 UTC, a leap day, in s.
const LEAP_DAY: u64 = 1_709_164_800;
/// 2024-03-01 00:00:00 UTC, in s.
const MARCH_1: u64 = 1_709_251_200;
/// 2024-12-31 00:00:00 UTC, in s.
const NEW_YEARS_EVE: u64 = 1_735_603_200;
const S: u64 = 1_000_000_000;

/// The classes a key may be in: windows of 1 s and 2 s at several quotas,
/// and one pacing limit (1 per 100 ms, slack 2).
fn limit(which: usize) -> Limit {
    let w = |quota, seconds| Limit::per_window(quota, Window::Fixed { seconds }).unwrap();
    match which {
        0 => w(3, 1),
        1 => w(5, 1),
        2 => w(1, 1),
        3 => w(4, 2),
        _ => Limit::new(Rate::per_second(10), 2),
    }
}

/// A class as the reference runs it.
#[derive(Clone, Copy, Debug)]
enum Class {
    Paced(schedule::Params),
    Window(window::Params),
}

fn class(which: usize) -> Class {
    let l = limit(which);
    match l.window() {
        Some(w) => Class::Window(window::Params::new(l.burst(), w).unwrap()),
        None => Class::Paced(schedule::Params::new(100_000_000, 2).unwrap()),
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Moves the clock forward, ns.
    Advance(u64),
    /// Moves the clock back, ns (at most to the start).
    Back(u64),
    TryTake {
        key: usize,
        cost: u64,
    },
    Timeout {
        key: usize,
        cost: u64,
        max_ms: u64,
    },
    Take {
        key: usize,
        cost: u64,
    },
    Can {
        key: usize,
        cost: u64,
    },
    State {
        key: usize,
    },
    /// Books `cost` (waiting as long as it takes), then settles at `actual`.
    BookSettle {
        key: usize,
        cost: u64,
        actual: u64,
    },
    Reset {
        key: usize,
    },
    Prune,
    Override {
        key: usize,
        which: usize,
    },
    RemoveOverride {
        key: usize,
    },
    Default {
        which: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS;
    let cost = 0u64..7;
    prop_oneof![
        4 => (0u64..700_000_000).prop_map(Op::Advance),
        1 => (0u64..3 * S).prop_map(Op::Advance),
        1 => (0u64..1_500_000_000).prop_map(Op::Back),
        6 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::TryTake { key, cost }),
        2 => (key.clone(), cost.clone(), 0u64..2_500)
            .prop_map(|(key, cost, max_ms)| Op::Timeout { key, cost, max_ms }),
        1 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::Take { key, cost }),
        1 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::Can { key, cost }),
        1 => key.clone().prop_map(|key| Op::State { key }),
        2 => (key.clone(), 0u64..6, 0u64..8)
            .prop_map(|(key, cost, actual)| Op::BookSettle { key, cost, actual }),
        1 => key.clone().prop_map(|key| Op::Reset { key }),
        1 => Just(Op::Prune),
        1 => (key.clone(), 0usize..5).prop_map(|(key, which)| Op::Override { key, which }),
        1 => key.prop_map(|key| Op::RemoveOverride { key }),
        1 => (0usize..5).prop_map(|which| Op::Default { which }),
    ]
}

/// The reference: per key, a word (`None`: not tracked) in its class,
/// stepped by `window::step` (a window class, on Unix time: the
/// `ManualClock`'s readings) or `schedule::step` (the pacing class, on the
/// internal time line); a change of class moves each word as the keyed
/// limiter documents (window to window by `window::rebase`, pacing to
/// pacing by `schedule::rebase` or to `FULL` at rest, across kinds as a
/// new key); a prune drops the keys at rest (a window's ended, plus the
/// grace).
struct Model {
    words: [Option<u64>; KEYS],
    overrides: [Option<usize>; KEYS],
    default: usize,
}

impl Model {
    fn class_of(&self, key: usize) -> Class {
        class(self.overrides[key].unwrap_or(self.default))
    }

    fn word(&self, key: usize) -> u64 {
        self.words[key].unwrap_or(match self.class_of(key) {
            Class::Paced(_) => schedule::FULL,
            Class::Window(_) => EMPTY,
        })
    }

    /// The step on `key` at `now` (Unix ns); the slot, internal time
    /// less `ORIGIN` (= Unix ns), or the refusal as the limiter names it.
    fn decide(&mut self, key: usize, now: u64, cost: u64, admit: Admit) -> Result<u64, Error> {
        let word = self.word(key);
        let grant = match self.class_of(key) {
            Class::Window(p) => {
                window::step(word, now, cost, p, admit).map_err(|deny| match deny {
                    window::Deny::Wait(wait) => wait_error(wait, admit, cost),
                    window::Deny::ExceedsQuota => Error::ExceedsBurst {
                        cost,
                        burst: p.quota(),
                    },
                    window::Deny::Saturated => Error::Saturated,
                })?
            }
            Class::Paced(p) => {
                let g =
                    schedule::step(word, now + ORIGIN, cost, p, admit).map_err(
                        |deny| match deny {
                            schedule::Deny::Wait(wait) => wait_error(wait, admit, cost),
                            schedule::Deny::ExceedsBurst => Error::ExceedsBurst {
                                cost,
                                burst: p.slack() + 1,
                            },
                            schedule::Deny::CostTooLarge => Error::CostTooLarge { cost },
                            schedule::Deny::Saturated => Error::Saturated,
                        },
                    )?;
                schedule::Grant {
                    slot: g.slot - ORIGIN,
                    ..g
                }
            }
        };
        if grant.next != grant.prev {
            self.words[key] = Some(grant.next);
        }
        Ok(grant.slot.max(now))
    }

    /// Every key moved from the classes before `change` to those after.
    fn change(&mut self, now: u64, change: impl FnOnce(&mut Model)) {
        let old: Vec<Class> = (0..KEYS).map(|k| self.class_of(k)).collect();
        change(self);
        for (k, old) in old.into_iter().enumerate() {
            let Some(word) = self.words[k] else { continue };
            self.words[k] = Some(match (old, self.class_of(k)) {
                (Class::Window(o), Class::Window(n)) => window::rebase(word, now, o, n),
                (Class::Paced(o), Class::Paced(n)) => {
                    let at = now + ORIGIN;
                    if schedule::at_rest(word, at, o, PRUNE_GRACE) {
                        schedule::FULL
                    } else {
                        schedule::rebase(word, at, o, n)
                    }
                }
                (_, Class::Window(_)) => EMPTY,
                (_, Class::Paced(_)) => schedule::FULL,
            });
        }
    }

    /// When `key`'s word can be dropped, Unix ns.
    fn rest(&self, key: usize) -> Option<u64> {
        let word = self.words[key]?;
        Some(match self.class_of(key) {
            Class::Window(_) if word == EMPTY => 0,
            Class::Window(p) => p.end(p.unpack(word).index).saturating_add(PRUNE_GRACE),
            Class::Paced(p) => schedule::rest_time(word, p, PRUNE_GRACE).saturating_sub(ORIGIN),
        })
    }
}

/// A refusal for a wait of `wait` ns under `admit`, as the limiter names it.
fn wait_error(wait: u64, admit: Admit, cost: u64) -> Error {
    match admit {
        Admit::Within(0) => Error::RetryAfter(Duration::from_nanos(wait).into()),
        Admit::Within(max) => Error::QueueFull {
            wait: Duration::from_nanos(wait),
            max_wait: Duration::from_nanos(max),
        },
        Admit::Always => Error::CostTooLarge { cost },
    }
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Taken(Result<u64, Error>),
    Can(bool),
    State(u64, Duration),
    Nothing,
}

/// Runs `ops` on a keyed limiter (default `limit(0)`) and on [`Model`].
fn check(ops: &[Op]) -> Result<(), TestCaseError> {
    let start = Duration::from_secs(LEAP_DAY);
    let clock = ManualClock::with_auto_advance();
    clock.set(start);
    let keyed = KeyedLimiter::<usize>::builder(Rate::per_second(1))
        .limit(limit(0))
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut model = Model {
        words: [None; KEYS],
        overrides: [None; KEYS],
        default: 0,
    };
    let now = |c: &ManualClock| c.elapsed().as_nanos() as u64;
    for op in ops {
        let t = now(&clock);
        let (k, m) = match *op {
            Op::Advance(ns) => {
                clock.advance(Duration::from_nanos(ns));
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::Back(ns) => {
                clock.set(Duration::from_nanos(t.saturating_sub(ns).max(LEAP_DAY * S)));
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::TryTake { key, cost } => (
                Outcome::Taken(
                    keyed
                        .try_take_n(&key, cost)
                        .map(|t| t.at().as_nanos() as u64),
                ),
                Outcome::Taken(model.decide(key, t, cost, Admit::Within(0))),
            ),
            Op::Timeout { key, cost, max_ms } => {
                let max = Duration::from_millis(max_ms);
                let k = keyed.take_n_timeout(&key, cost, max);
                let m = model.decide(key, t, cost, Admit::Within(max_ms * 1_000_000));
                // A timeout's refusal is the full queue's, with no wait
                // allowed too.
                let m = m.map_err(|e| match e {
                    Error::RetryAfter(wait) => Error::QueueFull {
                        wait: wait.duration(),
                        max_wait: max,
                    },
                    e => e,
                });
                (
                    Outcome::Taken(k.map(|t| t.at().as_nanos() as u64)),
                    Outcome::Taken(m),
                )
            }
            Op::Take { key, cost } => (
                Outcome::Taken(keyed.take_n(&key, cost).map(|t| t.at().as_nanos() as u64)),
                Outcome::Taken(model.decide(key, t, cost, Admit::Always)),
            ),
            Op::Can { key, cost } => {
                let can = keyed.can_take(&key, cost).unwrap();
                let word = model.words[key];
                let would = model.decide(key, t, cost, Admit::Within(0)).is_ok();
                model.words[key] = word;
                (Outcome::Can(can), Outcome::Can(would))
            }
            Op::State { key } => {
                let s = keyed.state(&key).unwrap();
                let want = match model.class_of(key) {
                    Class::Window(p) => {
                        let word = model.word(key);
                        let next = window::next_free(word, t, p).unwrap();
                        (window::available(word, t, p), Duration::from_nanos(next))
                    }
                    Class::Paced(p) => {
                        let (word, at) = (model.word(key), t + ORIGIN);
                        let next = schedule::next_free(word, at, p);
                        (schedule::available(word, at, p), Duration::from_nanos(next))
                    }
                };
                (
                    Outcome::State(s.available(), s.next_free()),
                    Outcome::State(want.0, want.1),
                )
            }
            Op::BookSettle { key, cost, actual } => {
                let k = keyed.book(&key, cost, paceline::limiter::take::Within::Any);
                let m = model.decide(key, t, cost, Admit::Always);
                let after = now(&clock);
                if let (Ok(booked), Ok(went)) = (k, &m) {
                    keyed.settle(&key, booked, actual).unwrap();
                    settle_model(&mut model, key, after, *went, cost, actual);
                }
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::Reset { key } => {
                let tracked = model.words[key].is_some();
                prop_assert_eq!(keyed.reset(&key), tracked);
                model.words[key] = None;
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::Prune => {
                let dropped = (0..KEYS)
                    .filter(|&k| model.rest(k).is_some_and(|rest| rest <= t))
                    .collect::<Vec<_>>();
                prop_assert_eq!(keyed.prune(), dropped.len(), "at {}", t);
                for k in dropped {
                    model.words[k] = None;
                }
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::Override { key, which } => {
                keyed.set_override_limit(key, limit(which)).unwrap();
                model.change(t, |m| m.overrides[key] = Some(which));
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::RemoveOverride { key } => {
                let had = model.overrides[key].is_some();
                prop_assert_eq!(keyed.remove_override(&key), had);
                // Removing no override changes nothing (and moves no key).
                if had {
                    model.change(t, |m| m.overrides[key] = None);
                }
                (Outcome::Nothing, Outcome::Nothing)
            }
            Op::Default { which } => {
                keyed.set_default_limit(limit(which)).unwrap();
                model.change(t, |m| m.default = which);
                (Outcome::Nothing, Outcome::Nothing)
            }
        };
        prop_assert_eq!(k, m, "op {:?} at {}", op, t);
        let in_force = limit(model.overrides[0].unwrap_or(model.default));
        prop_assert_eq!(keyed.limit_for(&0), Some(normal(in_force)));
    }
    Ok(())
}

/// A limit as `limit_for` reports it: a pacing one's slack in permits.
fn normal(l: Limit) -> Limit {
    match l.window() {
        Some(_) => l,
        None => Limit::new(l.rate(), l.slack().min_permits()),
    }
}

/// The reference's settle of a booking of `cost` whose permit went at
/// `went`, settled at `now` with `actual`: on the key's word, as the
/// class's pure settle; on a key no longer tracked, an excess is a take of
/// it.
fn settle_model(model: &mut Model, key: usize, now: u64, went: u64, cost: u64, actual: u64) {
    let Some(word) = model.words[key] else {
        if actual > cost {
            let _ = model.decide(key, now, actual - cost, Admit::Always);
        }
        return;
    };
    model.words[key] = Some(match model.class_of(key) {
        Class::Window(p) => window::settle(word, now, went, cost, actual, p),
        Class::Paced(p) => schedule::settle(word, now + ORIGIN, went + ORIGIN, cost, actual, p),
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(512)))]

    #[test]
    fn window_keys_decide_as_the_window_step_among_changes_settles_and_clock_moves(
        ops in prop::collection::vec(op(), 1..200)
    ) {
        check(&ops)?;
    }
}

/// A limiter on a `ManualClock` (its readings are Unix times) set to `t`,
/// counting `default` per key; its clock jumps to any slot waited for.
fn at(t: Duration, default: Limit) -> (KeyedLimiter<&'static str, ManualClock>, ManualClock) {
    let clock = ManualClock::with_auto_advance();
    clock.set(t);
    let keyed = KeyedLimiter::builder(Rate::per_second(1))
        .limit(default)
        .clock(clock.clone())
        .build()
        .unwrap();
    (keyed, clock)
}

fn per(quota: u64, window: &str) -> Limit {
    Limit::per_window(quota, window.parse().unwrap()).unwrap()
}

#[test]
fn a_month_ends_on_its_last_day_at_midnight_utc_leap_day_included() {
    let ms = Duration::from_millis;
    // 2024-02-29 23:59:58.5 UTC: a leap February's last day.
    let (keyed, clock) = at(Duration::from_secs(MARCH_1) - ms(1_500), per(2, "month"));
    keyed.try_take_n(&"a", 2).unwrap();
    let refused = keyed.try_take(&"a").unwrap_err();
    assert_eq!(refused.retry_after(), Some(ms(1_500)), "until March 1");
    let state = keyed.state(&"a").unwrap();
    assert_eq!((state.available(), state.next_free()), (0, ms(1_500)));
    assert_eq!(state.reset(), ms(1_500), "whole again when February ends");
    // A take that may wait goes at March's first instant.
    let taken = keyed.take_timeout(&"a", ms(1_500)).unwrap();
    assert_eq!(taken.at(), Duration::from_secs(MARCH_1));
    assert_eq!(clock.elapsed(), Duration::from_secs(MARCH_1));
    assert_eq!((taken.available(), taken.next_free()), (1, Duration::ZERO));
    assert_eq!(taken.reset(), Duration::from_secs(31 * 86_400), "March");
    // A key that counted nothing is whole: nothing to wait for.
    assert_eq!(keyed.state(&"b").unwrap().reset(), Duration::ZERO);
}

#[test]
fn a_day_window_counts_the_leap_day_on_its_own_and_a_year_ends_on_december_31() {
    // 2024-02-28 23:59:59 UTC.
    let (keyed, clock) = at(Duration::from_secs(LEAP_DAY - 1), per(1, "day"));
    keyed.set_override_limit("yearly", per(1, "year")).unwrap();
    keyed.try_take(&"a").unwrap();
    let refused = keyed.try_take(&"a").unwrap_err();
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(1)));
    clock.set(Duration::from_secs(LEAP_DAY));
    let taken = keyed.try_take(&"a").unwrap();
    assert_eq!(taken.reset(), Duration::from_secs(86_400), "February 29");
    assert_eq!(
        keyed.try_take(&"a").unwrap_err().retry_after(),
        Some(Duration::from_secs(MARCH_1 - LEAP_DAY))
    );
    // 2024-12-31 23:59:59.5: a leap year's last half second.
    clock.set(Duration::from_secs(NEW_YEARS_EVE + 86_399) + Duration::from_millis(500));
    keyed.try_take(&"yearly").unwrap();
    let refused = keyed.try_take(&"yearly").unwrap_err();
    assert_eq!(refused.retry_after(), Some(Duration::from_millis(500)));
    clock.advance(Duration::from_millis(500));
    let taken = keyed.try_take(&"yearly").unwrap();
    assert_eq!(taken.reset(), Duration::from_secs(365 * 86_400), "2025");
}

#[cfg(feature = "serde")]
#[test]
fn apply_reads_day_quotas_from_toml_and_a_change_of_quota_refunds_nothing() {
    use paceline::Limits;
    let doc = |free: &str| {
        format!(
            "[default]\nrate = \"10/s\"\nburst = 2\n\n[overrides]\n\
             \"tenant:free\" = {free}\n\"tenant:acme\" = {{ quota = 1000, window = \"day\" }}\n"
        )
    };
    let limits: Limits = toml::from_str(&doc(r#"{ quota = 3, window = "day" }"#)).unwrap();
    // Noon on the leap day.
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(LEAP_DAY + 12 * 3_600));
    let keyed = KeyedLimiter::<String>::builder(Rate::per_second(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    keyed.apply(&limits).unwrap();
    assert_eq!(keyed.limits(), limits);
    assert_eq!(keyed.limit_for("tenant:free"), Some(per(3, "day")));
    keyed.try_take_n("tenant:free", 3).unwrap();
    let twelve_hours = Some(Duration::from_secs(12 * 3_600));
    assert_eq!(
        keyed.try_take("tenant:free").unwrap_err().retry_after(),
        twelve_hours
    );
    keyed.try_take_n("tenant:acme", 1_000).unwrap();
    // The default paces: a burst of 2, then one per 100 ms.
    keyed.try_take_n("tenant:other", 2).unwrap();
    let paced = keyed.try_take("tenant:other").unwrap_err().retry_after();
    assert_eq!(paced, Some(Duration::from_millis(100)));

    // A raised quota adds the difference; what the day spent stays spent.
    let raised: Limits = toml::from_str(&doc(r#"{ quota = 5, window = "day" }"#)).unwrap();
    keyed.apply(&raised).unwrap();
    assert_eq!(keyed.available("tenant:free"), 2);
    // A lowered one leaves nothing more today.
    let lowered: Limits = toml::from_str(&doc(r#"{ quota = 1, window = "day" }"#)).unwrap();
    keyed.apply(&lowered).unwrap();
    assert_eq!(keyed.available("tenant:free"), 0);
    assert_eq!(
        keyed.try_take("tenant:free").unwrap_err().retry_after(),
        twelve_hours
    );
    // A key moved to pacing starts as a new key there, and back.
    let paced: Limits = toml::from_str(&doc(r#"{ rate = "1/s", burst = 4 }"#)).unwrap();
    keyed.apply(&paced).unwrap();
    assert_eq!(keyed.available("tenant:free"), 4);
    keyed.try_take("tenant:free").unwrap();
    keyed.apply(&raised).unwrap();
    assert_eq!(keyed.available("tenant:free"), 5);
}

#[test]
fn a_window_key_is_pruned_once_its_window_ends_and_its_row_shows_the_window() {
    let half = Duration::from_millis(500);
    let minute = Window::Fixed { seconds: 60 };
    let (keyed, clock) = at(Duration::from_secs(LEAP_DAY) + half, per(5, "minute"));
    keyed.try_take_n(&"a", 2).unwrap();
    let rows = keyed.snapshot();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].fill, 0.4);
    let counted = rows[0].window.unwrap();
    assert_eq!(counted.window, minute);
    assert_eq!(
        (counted.count, counted.ends),
        (2, Duration::from_secs(60) - half)
    );
    assert_eq!(keyed.prune(), 0, "its window still counts");
    // At its window's end it is at rest (no row), and dropped a grace later.
    clock.advance(Duration::from_secs(60) - half);
    assert!(keyed.snapshot().is_empty());
    assert_eq!(keyed.prune(), 0, "the grace");
    clock.advance(Duration::from_nanos(PRUNE_GRACE));
    assert_eq!((keyed.prune(), keyed.len()), (1, 0));
    assert_eq!(keyed.keyed_stats().pruned, 1);
    assert_eq!(keyed.available(&"a"), 5, "a new window, as a new key");
}

#[test]
fn keys_whose_windows_ended_make_room_for_new_ones_under_the_ceiling() {
    let (clock, max) = (ManualClock::new(), 64);
    clock.set(Duration::from_secs(LEAP_DAY));
    let keyed = KeyedLimiter::<u32>::builder(Rate::per_second(1))
        .limit(per(1, "second"))
        .max_keys(max)
        .when_full(paceline::keyed::WhenFull::Refuse)
        .clock(clock.clone())
        .build()
        .unwrap();
    for key in 0..max as u32 {
        keyed.try_take(&key).unwrap();
    }
    // Every tracked key's window still counts: a new key is refused.
    let full = keyed.try_take(&1_000).unwrap_err();
    assert_eq!(full, Error::TooManyKeys { max_keys: max });
    // Once their second has ended (and the grace), they make room.
    for round in 1..4u32 {
        clock.advance(Duration::from_secs(1) + Duration::from_nanos(PRUNE_GRACE));
        for key in 0..max as u32 {
            keyed.try_take(&(round * 1_000 + key)).unwrap();
        }
        assert_eq!(keyed.len(), max);
    }
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn async_takes_wait_for_the_next_window_and_a_dropped_one_gives_its_count_back() {
    use paceline::tokio::{AsyncKeyedLimiter, TokioClock};
    use paceline::AsyncTake;

    let limiter = AsyncKeyedLimiter::from(
        KeyedLimiter::<u32>::builder(Rate::per_second(1))
            .limit(per(2, "second"))
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
    limiter.take_n(&1, 2).await.unwrap();
    let wait = limiter.state(&1).await.unwrap().next_free();
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(1),
        "{wait:?}"
    );
    // Too short a timeout is refused at once, naming the wait.
    let short = limiter.take_timeout(&1, wait / 2).await.unwrap_err();
    assert!(matches!(short, Error::QueueFull { .. }), "{short:?}");
    // A take dropped within the horizon (booked) gives its count back.
    let start = tokio::time::Instant::now();
    let dropped = tokio::time::timeout(
        wait.saturating_sub(Duration::from_millis(2)),
        limiter.take(&1),
    )
    .await;
    assert!(dropped.is_err(), "dropped before the next window");
    tokio::time::sleep_until(start + wait).await;
    assert_eq!(
        limiter.state(&1).await.unwrap().available(),
        2,
        "given back"
    );
    // A take waits for the window after that one's start.
    limiter.take_n(&1, 2).await.unwrap();
    let next = limiter.state(&1).await.unwrap().next_free();
    let start = tokio::time::Instant::now();
    let taken = limiter.take(&1).await.unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= next && waited < next + Duration::from_millis(2),
        "{waited:?}"
    );
    assert_eq!(taken.available(), 1);
}

#[test]
fn window_keys_count_in_the_totals_and_the_requests() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(LEAP_DAY));
    let keyed = KeyedLimiter::<u32>::builder(Rate::per_second(1))
        .limit(per(2, "minute"))
        .stats(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    keyed.try_take_n(&1, 2).unwrap();
    keyed.try_take(&1).unwrap_err();
    keyed.try_take(&2).unwrap();
    keyed.try_take_n(&3, 3).unwrap_err(); // over the quota: never admitted
    let stats = keyed.keyed_stats();
    assert_eq!((stats.admitted, stats.refused, stats.keys), (2, 2, 2));
    let requests = stats.requests.unwrap();
    assert_eq!(
        (requests.admitted, requests.permits, requests.refused),
        (2, 3, 2)
    );
    assert_eq!(keyed.snapshot().iter().map(|k| k.refused).sum::<u64>(), 1);
}

/// A fleet's layers merge window quotas key by key like any limit, and the
/// merged set counts each key by its window.
#[cfg(feature = "fleet")]
#[test]
fn a_fleets_layers_set_window_quotas_key_by_key() {
    use paceline::config::fleet::Layers;
    use std::sync::Arc;

    let clock = ManualClock::new();
    clock.set(Duration::from_secs(LEAP_DAY + 12 * 3_600));
    let keyed = Arc::new(
        KeyedLimiter::<String>::builder(Rate::per_second(1))
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let layers = Layers::new({
        let keyed = Arc::clone(&keyed);
        move |limits| keyed.apply(limits)
    });
    let (global, server) = (layers.add("global"), layers.add("server"));
    global
        .offer_text(
            1,
            "[default]\nrate = \"10/s\"\n\n[overrides]\n\
             \"tenant:free\" = { quota = 3, window = \"day\" }\n\
             \"tenant:trial\" = { quota = 2, window = \"month\" }\n",
        )
        .unwrap();
    server
        .offer_text(
            1,
            "[overrides]\n\"tenant:free\" = { quota = 5, window = \"day\" }\n",
        )
        .unwrap();
    assert_eq!(
        keyed.limit_of("tenant:free"),
        per(5, "day"),
        "the server's layer"
    );
    assert_eq!(keyed.limit_of("tenant:trial"), per(2, "month"));
    keyed.try_take_n("tenant:free", 5).unwrap();
    keyed.try_take_n("tenant:trial", 2).unwrap();
    let twelve_hours = Some(Duration::from_secs(12 * 3_600));
    assert_eq!(
        keyed.try_take("tenant:free").unwrap_err().retry_after(),
        twelve_hours
    );
    // The server's layer withdraws its override: the global quota, lower
    // than what the day spent, leaves nothing more today.
    server.offer_text(2, "[overrides]\n").unwrap();
    assert_eq!(keyed.limit_of("tenant:free"), per(3, "day"));
    assert_eq!(keyed.available("tenant:free"), 0);
    assert_eq!(keyed.limits().layer("tenant:free"), Some("global"));
}

#[test]
fn a_rate_set_on_a_window_default_paces_with_the_default_slack() {
    let day = Limit::per_window(100, "day".parse().unwrap()).unwrap();
    let limiter = KeyedLimiter::<String>::builder(Rate::per_second(1))
        .limit(day)
        .build()
        .unwrap();
    limiter.set_rate(Rate::per_second(10)).unwrap();
    // The default slack (10 permits at 10/s), not 99, the quota less one.
    let limit = limiter.limit_of("k");
    assert_eq!((limit.rate(), limit.burst()), (Rate::per_second(10), 11));
    assert_eq!(limit.window(), None);
}
