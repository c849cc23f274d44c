//! Tests only: random calls on a limit counted by window for the backends'
//! property tests, which run them on a real server at a clock the test
//! sets and hold every decision, state, give-back and settle to
//! [`window::step`] and [`window::settle`] run here on the same word at
//! the same instant.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::seam::{paced, Count, Recount};
use super::{Decision, Done, Error, Op};
use crate::model::schedule::{Admit, ORIGIN};
use crate::model::window::{self, Params, Weekday, Window, EMPTY};
use crate::store::Booking;
use crate::wait::Ask;

const S: u64 = 1_000_000_000;

/// One call, or a move of the clock. Waits and moves are in quarters of
/// the window's nominal length, plus a few ns (to land off and on edges).
#[derive(Clone, Debug)]
pub(crate) enum Act {
    /// A take of `cost`, blocking (`None`) or allowed to wait this long.
    Take {
        cost: u64,
        wait: Option<(u64, u64)>,
    },
    Peek,
    /// Undoes the `n`-th booking held (modulo how many).
    Undo(usize),
    /// Settles the `n`-th booking held with its cost plus `more` less `less`.
    Settle {
        n: usize,
        more: u64,
        less: u64,
    },
    /// The clock moves forward, or back.
    Forward(u64, u64),
    Back(u64, u64),
    /// The clock goes to `ns - 2` after the end of the window holding it:
    /// a window's last instants and the next one's first.
    Edge(u64),
}

/// The windows the cases cut the clock by.
pub(crate) fn windows() -> impl Strategy<Value = Window> {
    let weekday = prop_oneof![
        Just(Weekday::Monday),
        Just(Weekday::Wednesday),
        Just(Weekday::Sunday),
    ];
    let offset = prop_oneof![Just(0i32), -14 * 3_600..=14 * 3_600i32, Just(-26 * 3_600)];
    prop_oneof![
        prop_oneof![Just(1u64), Just(7), Just(60), Just(86_400), 1..=100_000u64]
            .prop_map(|seconds| Window::Fixed { seconds }),
        offset.clone().prop_map(|offset| Window::Day { offset }),
        (weekday, offset.clone()).prop_map(|(starts, offset)| Window::Week { starts, offset }),
        offset.clone().prop_map(|offset| Window::Month { offset }),
        offset.prop_map(|offset| Window::Year { offset }),
    ]
}

/// The window's nominal length, ns (a month 30 days, a year 365).
fn length(w: Window) -> u64 {
    S * match w {
        Window::Fixed { seconds } => seconds,
        Window::Day { .. } => 86_400,
        Window::Week { .. } => 7 * 86_400,
        Window::Month { .. } => 30 * 86_400,
        Window::Year { .. } => 365 * 86_400,
    }
}

/// Where a case starts, Unix ns: near the epoch, today, a leap day in
/// 2096, or late in what internal time holds (ORIGIN + Unix time).
pub(crate) fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..=3 * 86_400 * S,
        1_700_000_000 * S..=1_800_000_000 * S,
        Just(4_080_672_000 * S - 1), // 2099-04-24: nothing; a plain instant
        Just(3_981_830_400 * S),     // 2096-03-01 (after a leap day)
        (u64::MAX - ORIGIN - 800 * 86_400 * S)..=(u64::MAX - ORIGIN - 400 * 86_400 * S),
    ]
}

#[cfg_attr(
    not(any(feature = "postgres", feature = "memcached")),
    allow(dead_code)
)]
pub(crate) fn acts() -> impl Strategy<Value = Vec<Act>> {
    acts_of(true)
}

/// [`acts`] on a clock that never steps back.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn acts_forward() -> impl Strategy<Value = Vec<Act>> {
    acts_of(false)
}

fn acts_of(back: bool) -> impl Strategy<Value = Vec<Act>> {
    let small = 0..=9u64;
    let jitter = prop_oneof![Just(0u64), 0..=3u64, 0..=2 * S];
    let act = prop_oneof![
        6 => (prop_oneof![4 => 0..=4u64, 1 => 5..=12u64],
              prop_oneof![Just(None), Just(Some((0, 0))),
                          (small.clone(), jitter.clone()).prop_map(Some)])
            .prop_map(|(cost, wait)| Act::Take { cost, wait }),
        1 => Just(Act::Peek),
        1 => any::<usize>().prop_map(Act::Undo),
        2 => (any::<usize>(), 0..=3u64, 0..=4u64)
            .prop_map(|(n, more, less)| Act::Settle { n, more, less }),
        2 => (small.clone(), jitter.clone()).prop_map(|(q, j)| Act::Forward(q, j)),
        u32::from(back) => (0..=5u64, jitter).prop_map(|(q, j)| Act::Back(q, j)),
        2 => (0..=4u64).prop_map(Act::Edge),
    ];
    proptest::collection::vec(act, 1..40)
}

/// Runs `acts` on a fresh key from `start` (Unix ns) under `params`,
/// through `call` (an op at a clock, internal ns, the test sets), holding
/// every answer to the model's on the same word.
#[cfg_attr(
    not(any(feature = "postgres", feature = "memcached")),
    allow(dead_code)
)]
pub(crate) fn check(
    params: Params,
    start: u64,
    acts: &[Act],
    call: impl FnMut(Op, u64) -> Result<Done, Error>,
) -> Result<(), TestCaseError> {
    run(params, start, acts, false, call)
}

/// [`check`] for a store whose key expires at its window's end (Redis):
/// a state whose window has ended is forgotten before the next call, as
/// if nothing were stored. The step decides the same on either (an ended
/// window counts nothing now); what differs is the state a peek shows,
/// the `prev` a booking records and whether an undo finds its grant.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn check_expiring(
    params: Params,
    start: u64,
    acts: &[Act],
    call: impl FnMut(Op, u64) -> Result<Done, Error>,
) -> Result<(), TestCaseError> {
    run(params, start, acts, true, call)
}

fn run(
    params: Params,
    start: u64,
    acts: &[Act],
    expiring: bool,
    mut call: impl FnMut(Op, u64) -> Result<Done, Error>,
) -> Result<(), TestCaseError> {
    let len = length(params.window());
    let (mut now, mut word, mut present) = (start, EMPTY, false);
    let mut held: Vec<Booking> = Vec::new();
    for act in acts {
        // Stay where internal time holds the clock.
        now = now.min(u64::MAX - ORIGIN);
        let at = now + ORIGIN;
        if expiring && present && params.end(params.unpack(word).index) <= now {
            (word, present) = (EMPTY, false);
        }
        let seen = format!("word {word:#x} now {now} {act:?}");
        match *act {
            Act::Take { cost, wait } => {
                let admit = wait.map_or(Admit::Always, |(q, j)| Admit::Within(q * len / 4 + j));
                let count = Count {
                    cost,
                    params,
                    admit,
                    ask: Ask::Answer,
                };
                let rust = window::step(word, now, cost, params, admit);
                let server = call(Op::Count(count), at).and_then(Done::decision);
                match (rust, server) {
                    (Ok(g), Ok(Decision::Granted(b))) => {
                        prop_assert_eq!(b.slot, g.slot.saturating_add(ORIGIN), "slot: {}", seen);
                        prop_assert_eq!(b.now, at, "now: {}", seen);
                        prop_assert_eq!(b.next, g.next, "next: {}", seen);
                        prop_assert_eq!(b.prev, present.then_some(word), "prev: {}", seen);
                        if cost > 0 {
                            (word, present) = (g.next, true);
                            held.push(b);
                        }
                    }
                    (Err(deny), Ok(Decision::Denied(d))) => {
                        prop_assert_eq!(paced(deny), d, "{}", seen)
                    }
                    (rust, server) => {
                        return Err(TestCaseError::fail(format!(
                            "{seen}: rust {rust:?}, server {server:?}"
                        )))
                    }
                }
            }
            Act::Peek => {
                let (w, n) = call(Op::PeekCount(params), at)
                    .and_then(Done::peeked)
                    .map_err(|e| TestCaseError::fail(format!("{seen}: {e}")))?;
                prop_assert_eq!((w, n), (word, at), "peek: {}", seen);
            }
            Act::Undo(n) if !held.is_empty() => {
                let booking = held.remove(n % held.len());
                let undo = Op::UndoCount { params, booking };
                let given = call(undo, at).and_then(Done::flag);
                let want = present && word == booking.next;
                prop_assert_eq!(given.ok(), Some(want), "undo: {}", seen);
                if want {
                    (word, present) = (booking.prev.unwrap_or(EMPTY), booking.prev.is_some());
                }
            }
            Act::Settle { n, more, less } if !held.is_empty() => {
                let booking = held.remove(n % held.len());
                let booked = booking.cost;
                let actual = (booked + more).saturating_sub(less);
                let Some(recount) = Recount::of(Some(&booking), booked, actual, params) else {
                    continue;
                };
                let want = window::settle(word, now, recount.went, booked, actual, params);
                let (w, n) = call(Op::Recount(recount), at)
                    .and_then(Done::peeked)
                    .map_err(|e| TestCaseError::fail(format!("{seen}: {e}")))?;
                prop_assert_eq!(
                    (w, n),
                    (want, at),
                    "settle {} for {}: {}",
                    actual,
                    booked,
                    seen
                );
                present |= want != word;
                word = want;
            }
            Act::Undo(_) | Act::Settle { .. } => {}
            Act::Forward(q, j) => now = now.saturating_add(q * len / 4 + j),
            Act::Back(q, j) => now = now.saturating_sub(q * len / 4 + j),
            Act::Edge(ns) => {
                now = params
                    .end(params.index_at(now))
                    .saturating_add(ns)
                    .saturating_sub(2)
            }
        }
    }
    Ok(())
}

/// A case's parameters: `quota` per `window`, or `None` when the word
/// cannot count that many.
pub(crate) fn params(quota: u64, window: Window) -> Option<Params> {
    Params::new(quota, window).ok()
}
