//! The async cancellation give-back: a future dropped before its slot runs
//! `Pacer::give_back`, which undoes its grant (state `next` → `prev`) only if
//! no one has reserved since. Loom cannot run Tokio, so these models drive
//! the store-level protocol the async face is built on, through the
//! limiters' cfg-gated `__book` / `__undo` hooks: the same
//! `Pacer::book` an async take runs, then the real `Store::give_back` (the
//! CAS in `AtomicLimiter`'s store, the compare-and-set under the lock in
//! `MutexLimiter`'s), racing other reservations and `try_take`s.
//!
//! A grant "survives" unless its own give-back succeeded. Whatever the
//! interleaving:
//!
//! - no slot is handed out twice: the surviving grants never overlap (a
//!   slot given back may be granted again, since its first holder gave it up);
//! - a give-back succeeds unless someone reserved on the state it left, and
//!   one that fails changes nothing;
//! - the final state is exactly what the surviving grants imply, and the
//!   window bound `slack + 1 + elapsed / T` holds counting them;
//! - a give-back of a fresh limiter's first grant makes it fresh again: it
//!   banks no credit while idle, as if the grant had never been made;
//! - with `set_rate` racing, each surviving grant is still paced whole by
//!   one rate or the other (but see `give_backs_racing_set_rate` for the
//!   order of the two rates, which a give-back can upset).
//!
//! # Why `tat` is not monotonic
//!
//! Without give-backs the state only grows. A successful give-back lowers it
//! (to the `prev` of the grant undone, `FRESH` included), so no code may
//! assume that a `tat` it read is a lower bound for the state now. The fast
//! path DESIGN §2 sketches (`fetch_add(n * T)` while the limiter is behind
//! schedule, "because `tat` only grows") would be wrong as it stands: between
//! its check and its `fetch_add`, a give-back may lower `tat` below
//! `now - tau`, or to `FRESH` (0), and the `fetch_add` would then grant a
//! slot far in the past. Such a path must re-check what it added to (a CAS),
//! and get its own model here.

#![cfg(paceline_loom)]

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::{check, OneKey, Subject};
use paceline::model::schedule::{Admit, Grant, FRESH, ORIGIN};
use paceline::{clock::Clock, clock::ManualClock, AtomicLimiter, MutexLimiter, Rate};

const T: Duration = Duration::from_millis(1);
const SLACK: u64 = 1;

/// What became of a reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// Its holder kept it (a take that waited for its slot).
    Kept,
    /// Its holder gave it back, and the give-back undid it.
    GivenBack,
    /// Its holder gave it back, but the give-back failed: the slot is spent.
    Spent,
}

/// One reservation and what became of it.
#[derive(Clone, Copy)]
struct Held {
    grant: Grant,
    cost: u64,
    fate: Fate,
}

impl Held {
    /// Whether the grant still counts (it was not undone).
    fn survives(&self) -> bool {
        self.fate != Fate::GivenBack
    }

    /// The clock time the grant's first permit starts at.
    fn start(&self) -> Duration {
        // Saturating: a broken store's grant is reported, not a panic here.
        self.end().saturating_sub(T * self.cost as u32)
    }

    /// The clock time the grant's last permit ends at.
    fn end(&self) -> Duration {
        Duration::from_nanos(self.grant.next - ORIGIN)
    }

    /// The clock time of the grant's slot (its last permit).
    fn slot(&self) -> Duration {
        Duration::from_nanos(self.grant.slot - ORIGIN)
    }
}

impl fmt::Debug for Held {
    /// In clock time, in units of `T`: `[start, end) Fate` (and `from fresh`
    /// for a grant decided on a fresh state).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = |d: Duration| d.as_nanos() as f64 / T.as_nanos() as f64;
        write!(
            f,
            "[{}T, {}T) {:?}",
            t(self.start()),
            t(self.end()),
            self.fate
        )?;
        if self.grant.prev == FRESH {
            write!(f, " from fresh")?;
        }
        Ok(())
    }
}

/// Reserves `cost` permits if `admit` allows, as an async take does, and
/// keeps the grant.
fn reserve<L: Subject>(limiter: &L, cost: u64, admit: Admit) -> Option<Held> {
    let grant = limiter.reserve(cost, admit).ok()?;
    Some(Held {
        grant,
        cost,
        fate: Fate::Kept,
    })
}

/// Reserves `cost` permits as an async take does, then drops the "future"
/// before its slot: gives the grant back.
fn reserve_and_cancel<L: Subject>(limiter: &L, cost: u64, admit: Admit) -> Option<Held> {
    let booking = limiter.book(cost, admit).ok()?;
    let grant = booking.__grant()?;
    let fate = if limiter.give_back(booking) {
        Fate::GivenBack
    } else {
        Fate::Spent
    };
    Some(Held { grant, cost, fate })
}

/// The invariants one execution broke. Every check runs and the execution
/// fails listing each one broken, tagged, so a broken step shows all it
/// breaks in the first interleaving loom finds. `GIVE_BACK_IGNORE` (tags,
/// comma-separated) turns checks off, to find what the others catch alone:
/// it is how the mutation table in `loom-tests/src/lib.rs` was made.
struct Verdict {
    name: &'static str,
    held: Vec<Held>,
    ignored: Vec<String>,
    broken: Vec<String>,
}

impl Verdict {
    fn new(name: &'static str, held: &[Held]) -> Verdict {
        let ignored = std::env::var("GIVE_BACK_IGNORE").unwrap_or_default();
        let mut held = held.to_vec();
        held.sort_by_key(Held::start);
        Verdict {
            name,
            held,
            ignored: ignored.split(',').map(str::to_owned).collect(),
            broken: Vec::new(),
        }
    }

    /// Records the invariant `tag` as broken unless `holds`.
    fn expect(&mut self, tag: &str, holds: bool, invariant: impl FnOnce() -> String) {
        if !holds && !self.ignored.iter().any(|i| i == tag) {
            self.broken.push(format!("[{tag}] {}", invariant()));
        }
    }

    /// No slot handed out twice, and none lost: the surviving grants, in
    /// slot order, tile the schedule from `from` (no overlap, no gap), and
    /// end where it returns. The first may start earlier if it was decided
    /// on a fresh state: a fresh limiter's first request goes as at rest,
    /// its burst starting up to `tau` before the clock (see
    /// `paceline::model::schedule::FRESH`).
    fn survivors_tile_from(&mut self, from: Duration) -> Duration {
        let mut survivors: Vec<Held> = self.held.iter().copied().filter(Held::survives).collect();
        survivors.sort_by_key(Held::start);
        let mut end: Option<Duration> = None;
        for h in survivors {
            let expected = end.unwrap_or(if h.grant.prev == FRESH {
                from - T * (h.cost - 1).min(SLACK) as u32
            } else {
                from
            });
            self.expect("overlap", h.start() >= expected, || {
                format!("a slot handed out twice: {h:?} overlaps a surviving grant")
            });
            self.expect("gap", h.start() <= expected, || {
                format!("a gap before {h:?}: the schedule lost permits")
            });
            end = Some(expected.max(h.end()));
        }
        end.unwrap_or(from)
    }

    /// A give-back fails only when someone reserved after it, that is, on
    /// the very state its grant left (`other.prev == grant.next`).
    fn failed_give_backs_were_overtaken(&mut self) {
        let held = self.held.clone();
        for h in held.iter().filter(|h| h.fate == Fate::Spent) {
            let overtaken = held.iter().any(|o| o.grant.prev == h.grant.next);
            self.expect("overtaken", overtaken, || {
                format!("a give-back failed though no one reserved after it: {h:?}")
            });
        }
    }

    fn finish(self) {
        assert!(
            self.broken.is_empty(),
            "{}: with grants {:?} (T = {T:?}):\n  - {}",
            self.name,
            self.held,
            self.broken.join("\n  - ")
        );
    }
}

/// Two reservations given back racing a `try_take`, on a fresh limiter whose
/// clock stays at `START` (slack 1, so a state wrongly restored would bank
/// credit).
///
/// The clock never moves, so every reservation on a non-fresh state starts
/// where that state ends: the surviving grants must tile the schedule from
/// `START` (the first, decided on the fresh state, as at rest: a cost of 2
/// starts `tau` earlier) with no gap and no overlap, and the state must end
/// where they do; with no survivor it must be fresh again (no credit banked
/// after a long idle).
fn give_backs_never_hand_a_slot_out_twice<L: Subject>() {
    /// Where the clock stands: far enough from 0 that a first request's
    /// burst, which starts up to `tau` before the clock, has a clock time.
    const START: Duration = Duration::from_millis(4);
    check(&format!("{} give_back", L::NAME), || {
        let clock = ManualClock::new();
        clock.advance(START);
        let limiter = Arc::new(L::build(T, SLACK, false, clock.clone()));

        let a = {
            let limiter = limiter.clone();
            thread::spawn(move || reserve_and_cancel(&*limiter, 1, Admit::Always))
        };
        let b = {
            let limiter = limiter.clone();
            thread::spawn(move || reserve_and_cancel(&*limiter, 2, Admit::Always))
        };
        // A `try_take` (the same admission): admitted only on a fresh state.
        let mut held: Vec<Held> = reserve(&*limiter, 1, Admit::Within(0))
            .into_iter()
            .collect();
        held.extend(a.join().unwrap());
        held.extend(b.join().unwrap());
        let mut verdict = Verdict::new(L::NAME, &held);
        let end = verdict.survivors_tile_from(START);
        verdict.failed_give_backs_were_overtaken();

        // The state is exactly what the survivors imply (`START` for none:
        // a fresh limiter's next request may go now) ...
        let state = START + limiter.next_free();
        verdict.expect("state", state == end, || {
            format!("the state ends at {state:?}, the surviving grants at {end:?}")
        });
        // ... and with none, the limiter is fresh again: idle time banks no
        // credit (a state restored to the first permit's time would bank
        // it). A fresh limiter's first take leaves nothing; after a real
        // grant and a long idle, one take leaves `slack`.
        clock.advance(T * 10);
        let first = limiter.try_take();
        let credit = if held.iter().any(Held::survives) {
            SLACK
        } else {
            0
        };
        let available = limiter.available();
        verdict.expect("fresh", first.is_ok() && available == credit, || {
            format!(
                "after a long idle and a take ({first:?}), {available} permits available, \
                 not {credit} (a fresh limiter banks nothing: 0; else slack)"
            )
        });
        verdict.finish();
    });
}

#[test]
fn atomic_limiter_give_backs_never_hand_a_slot_out_twice() {
    give_backs_never_hand_a_slot_out_twice::<AtomicLimiter<ManualClock>>();
}

#[test]
fn mutex_limiter_give_backs_never_hand_a_slot_out_twice() {
    give_backs_never_hand_a_slot_out_twice::<MutexLimiter<ManualClock>>();
}

/// A reservation given back racing `try_take`s while the clock moves: the
/// window bound holds counting the surviving grants, and the state accounts
/// for exactly them.
///
/// As in `try_take.rs`, the limiter (slack 1, full credit) first spends its
/// burst at clock 0, so its state is `T`; the clock then moves to `2 * T`,
/// never more than `tau` past the state, so each surviving grant moves the
/// state by exactly its cost times `T` and the final state is `T` plus that.
fn give_backs_keep_the_budget<L: Subject>() {
    check(&format!("{} give_back budget", L::NAME), || {
        let clock = ManualClock::new();
        let limiter = Arc::new(L::build(T, SLACK, true, clock.clone()));
        let burst = SLACK + 1;
        limiter
            .try_take_n(burst)
            .expect("a full limiter admits its burst");

        // An async `take_timeout(T)`, dropped before its slot.
        let a = {
            let limiter = limiter.clone();
            thread::spawn(move || reserve_and_cancel(&*limiter, 1, Admit::Within(nanos(T))))
        };
        // `try_take`, then `try_take_n(2)`.
        let b = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                let first = reserve(&*limiter, 1, Admit::Within(0));
                let second = reserve(&*limiter, 2, Admit::Within(0));
                first.into_iter().chain(second).collect::<Vec<_>>()
            })
        };
        clock.advance(T);
        clock.advance(T);
        let mut held: Vec<Held> = a.join().unwrap().into_iter().collect();
        held.extend(b.join().unwrap());
        let mut verdict = Verdict::new(L::NAME, &held);

        // Permits whose slot has come, counting the surviving grants only.
        let elapsed = clock.elapsed();
        let budget = SLACK + 1 + (elapsed.as_nanos() / T.as_nanos()) as u64;
        let gone: u64 = held
            .iter()
            .filter(|h| h.survives() && h.slot() <= elapsed)
            .map(|h| h.cost)
            .sum();
        verdict.expect("budget", burst + gone <= budget, || {
            format!(
                "{} permits went in {elapsed:?}, over slack + 1 + elapsed / T = {budget}",
                burst + gone
            )
        });
        // The burst took `[-T, T)`: the survivors tile the schedule from `T`.
        verdict.survivors_tile_from(T);
        verdict.failed_give_backs_were_overtaken();

        // The state is exactly what the burst and the survivors imply.
        let surviving: u64 = held.iter().filter(|h| h.survives()).map(|h| h.cost).sum();
        let now = Duration::from_nanos(clock.now());
        let state = if limiter.next_free() > Duration::ZERO {
            now + limiter.next_free()
        } else {
            now - T * (limiter.available() as u32).saturating_sub(1)
        };
        let expected = T * (1 + surviving as u32);
        verdict.expect("state", state == expected, || {
            format!("the state is {state:?}, the burst and the survivors make {expected:?}")
        });
        verdict.finish();
    });
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

#[test]
fn atomic_limiter_give_backs_keep_the_budget() {
    give_backs_keep_the_budget::<AtomicLimiter<ManualClock>>();
}

#[test]
fn mutex_limiter_give_backs_keep_the_budget() {
    give_backs_keep_the_budget::<MutexLimiter<ManualClock>>();
}

/// A give-back racing `set_rate` and another reservation, on a limiter at
/// `T` (slack 0, clock at 0) changed to `2 * T`: no slot handed out twice,
/// every surviving grant paced whole by one rate or the other, the state
/// where the last one ends, and the take after `set_rate` at the new rate.
///
/// What does not hold here, unlike in `set_rate.rs`: "once a grant is paced
/// at the new rate, none reserved after it is paced at the old". A
/// reservation that read the state `v` a grant left, and the old interval,
/// may be preempted while that grant is given back and a reservation at the
/// new rate makes the state `v` again (cost 2 at `T` and cost 1 at `2 * T`
/// both end `2 * T` past where they start); its CAS then succeeds (ABA)
/// and its grant, paced at the old rate, follows one at the new. Loom finds
/// that at 4 preemptions (the checks below hold there too). Only
/// `AsyncLimiter` gives back, and it does not promise that order; the
/// blocking limiters, which do, never give back. The late grant is still
/// distinct and paced whole by one rate.
fn give_backs_racing_set_rate<L: Subject>() {
    /// `grant` in clock time, in units of `T`: `prev -> next (slot s)`.
    fn show(grants: &[(Grant, u64)]) -> String {
        let t = |ns: u64| match ns {
            FRESH => "fresh".to_owned(),
            _ => format!("{}T", (ns - ORIGIN) as f64 / T.as_nanos() as f64),
        };
        let shown: Vec<String> = grants
            .iter()
            .map(|&(g, cost)| {
                let (prev, slot, next) = (t(g.prev), t(g.slot), t(g.next));
                format!("{prev} -> {next} (slot {slot}, cost {cost})")
            })
            .collect();
        shown.join(", ")
    }

    const T2: Duration = Duration::from_millis(2);
    check(&format!("{} give_back set_rate", L::NAME), || {
        let clock = ManualClock::new();
        let limiter = Arc::new(L::build(T, 0, false, clock.clone()));
        let first = limiter.reserve(1, Admit::Always).expect("cost 1 fits");

        let a = {
            let limiter = limiter.clone();
            thread::spawn(move || reserve_and_cancel(&*limiter, 2, Admit::Always))
        };
        let b = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                limiter.set_rate(Rate::every(T2).unwrap()).unwrap();
                limiter.reserve(1, Admit::Always).expect("cost 1 fits")
            })
        };
        let c = limiter.reserve(1, Admit::Always).expect("cost 1 fits");
        let a = a.join().unwrap().expect("Always admits");
        let after_set = b.join().unwrap();
        let name = L::NAME;

        let mut survivors = vec![(after_set, 1), (c, 1)];
        if a.survives() {
            survivors.push((a.grant, a.cost));
        }
        // Slack 0 and a still clock: every grant starts where the state it
        // read ends, so the survivors chain from the first grant, each one
        // from the `next` of the one before, except that the set_rate
        // rebases the state once in between: the grant after it starts one
        // `T2` after the last slot, not one `T`. Every grant is in the chain
        // once: no slot twice, none lost.
        let shift = T2.as_nanos() as u64 - T.as_nanos() as u64;
        let mut chain = vec![(first, 1)];
        let mut rebased = None;
        loop {
            let last = chain.last().unwrap().0.next;
            if let Some(&g) = survivors.iter().find(|(g, _)| g.prev == last) {
                chain.push(g);
            } else if let Some(&g) = survivors
                .iter()
                .find(|(g, _)| rebased.is_none() && g.prev == last + shift)
            {
                rebased = Some(chain.len());
                chain.push(g);
            } else {
                break;
            }
        }
        assert_eq!(
            chain.len(),
            survivors.len() + 1,
            "{name}: surviving grants [{}] do not chain from [{}]: a slot handed out twice \
             or lost (give-back {a:?})",
            show(&survivors),
            show(&[(first, 1)])
        );
        // Each paced whole by one rate: `next - slot` is the interval it
        // used, and its `cost` permits span `cost` of them. (The first grant,
        // from the fresh state, is the test's own.)
        for &(g, cost) in &chain[1..] {
            let interval = Duration::from_nanos(g.next - g.slot);
            assert!(
                (interval == T || interval == T2)
                    && g.next - g.prev == cost * interval.as_nanos() as u64,
                "{name}: {} is not paced by {T:?} or {T2:?}",
                show(&[(g, cost)])
            );
        }
        assert_eq!(
            Duration::from_nanos(after_set.next - after_set.slot),
            T2,
            "{name}: the take after set_rate was paced at the old rate"
        );
        // The next slot after the change is one new interval after the last:
        // the grant on the rebased state is paced at the new rate.
        if let Some(i) = rebased {
            let g = chain[i].0;
            assert_eq!(
                Duration::from_nanos(g.next - g.slot),
                T2,
                "{name}: a grant on the rebased state was paced at the old rate: {}",
                show(&chain)
            );
        }
        // The state ends where the last surviving grant does.
        let end = Duration::from_nanos(chain.last().unwrap().0.next - ORIGIN);
        assert_eq!(
            limiter.next_free(),
            end,
            "{name}: the state does not end where the surviving grants do: {}",
            show(&chain)
        );
    });
}

#[test]
fn atomic_limiter_give_backs_racing_set_rate() {
    give_backs_racing_set_rate::<AtomicLimiter<ManualClock>>();
}

#[test]
fn mutex_limiter_give_backs_racing_set_rate() {
    give_backs_racing_set_rate::<MutexLimiter<ManualClock>>();
}

#[test]
fn keyed_limiter_give_backs_keep_the_budget() {
    give_backs_keep_the_budget::<OneKey>();
}

#[test]
fn keyed_limiter_give_backs_racing_set_rate() {
    give_backs_racing_set_rate::<OneKey>();
}
