//! [`WindowStore`] decides as [`window::step`] does, decision for decision,
//! and settles as [`window::settle`] does, among takes, settles, changes of
//! quota, resets and a clock that steps back; and racing threads count
//! every permit once.

use std::sync::Arc;
use std::thread;

use proptest::prelude::*;

use super::WindowStore;
use crate::model::schedule::Admit;
use crate::model::window::{self, Deny, Invalid, Params, Window, EMPTY};

/// Nanoseconds in a second.
const S: u64 = 1_000_000_000;
/// 2023-11-14 22:13:20 UTC, a Unix time to start from.
const START: u64 = 1_700_000_000 * S;

#[derive(Clone, Debug)]
enum Op {
    /// Moves the clock forward, ns.
    Advance(u64),
    /// Moves the clock back, ns.
    Back(u64),
    /// A take of a cost, waiting at most this long (`None`: always).
    Take(u64, Option<u64>),
    /// Settles the take `pick` selects (its slot and cost) at this cost.
    Settle(prop::sample::Index, u64),
    SetQuota(u64),
    Reset,
}

/// Runs `ops` on a fresh store and on the pure steps, asserting that every
/// decision, every settle and every state agrees.
fn agree(p: Params, ops: &[Op]) -> Result<(), TestCaseError> {
    let store = WindowStore::new(p);
    let (mut word, mut p, mut now) = (EMPTY, p, START);
    // The takes admitted so far: (slot, cost).
    let mut taken: Vec<(u64, u64)> = Vec::new();
    for op in ops {
        match *op {
            Op::Advance(ns) => now += ns,
            Op::Back(ns) => now -= ns.min(now - START),
            Op::Take(cost, wait) => {
                let admit = wait.map_or(Admit::Always, Admit::Within);
                let want = window::step(word, now, cost, p, admit);
                let got = store.update(now, cost, admit);
                prop_assert_eq!(got, want.map(|g| (g, p)));
                if let Ok(g) = want {
                    prop_assert_eq!(g.prev, word);
                    word = g.next;
                    taken.push((g.slot, cost));
                }
            }
            Op::Settle(pick, actual) => {
                if taken.is_empty() {
                    continue;
                }
                let (went, cost) = taken[pick.index(taken.len())];
                let actual = actual % (cost + 3);
                let want = window::settle(word, now, went, cost, actual, p);
                prop_assert_eq!(store.settle(|| now, went, cost, actual), (word, want));
                word = want;
            }
            Op::SetQuota(quota) => {
                let new = p.with_quota(quota).unwrap();
                prop_assert_eq!(store.set_quota(quota), Ok(new));
                // The change is the rebase's identity: the word stays.
                prop_assert_eq!(window::rebase(word, now, p, new), word);
                p = new;
            }
            Op::Reset => {
                store.reset();
                word = EMPTY;
            }
        }
        prop_assert_eq!(store.peek(), (word, p));
    }
    Ok(())
}

fn ops(width: u64) -> impl Strategy<Value = Vec<Op>> {
    let step = width / 8;
    let op = prop_oneof![
        3 => (0u64..=12).prop_map(move |k| Op::Advance(k * step)),
        1 => (1u64..=12).prop_map(move |k| Op::Back(k * step)),
        6 => (0u64..=5, prop_oneof![Just(None), (0u64..=12).prop_map(move |k| Some(k * step))])
            .prop_map(|(cost, wait)| Op::Take(cost, wait)),
        3 => (any::<prop::sample::Index>(), any::<u64>()).prop_map(|(i, a)| Op::Settle(i, a)),
        1 => (0u64..=6).prop_map(Op::SetQuota),
        1 => Just(Op::Reset),
    ];
    prop::collection::vec(op, 1..80)
}

proptest! {
    #[test]
    fn the_store_decides_and_settles_as_the_pure_step_in_a_fixed_window(
        quota in 0u64..=6,
        ops in ops(2 * S),
    ) {
        agree(Params::new(quota, Window::Fixed { seconds: 2 }).unwrap(), &ops)?;
    }

    #[test]
    fn the_store_decides_and_settles_as_the_pure_step_in_a_calendar_day(
        quota in 0u64..=6,
        offset in -14 * 3_600i32..=14 * 3_600,
        ops in ops(86_400 * S),
    ) {
        agree(Params::new(quota, Window::Day { offset }).unwrap(), &ops)?;
    }
}

#[test]
fn a_quota_the_word_cannot_count_is_refused_and_changes_nothing() {
    let p = Params::new(3, Window::SECOND).unwrap();
    let store = WindowStore::new(p);
    store.update(START, 2, Admit::Within(0)).unwrap();
    let before = store.peek();
    let max = p.max_quota();
    assert_eq!(
        store.set_quota(max + 1),
        Err(Invalid::QuotaTooLarge {
            quota: max + 1,
            max
        })
    );
    assert_eq!(store.peek(), before);
    // Lowered below the count: nothing left in this window; the next opens
    // at the new quota.
    store.set_quota(1).unwrap();
    assert_eq!(store.update(START, 1, Admit::Within(0)), Err(Deny::Wait(S)));
    let (g, p1) = store.update(START + S, 1, Admit::Within(0)).unwrap();
    assert_eq!(p1.quota(), 1);
    assert_eq!(p1.unpack(g.next).count, 1);
}

#[test]
fn a_refusal_and_a_cost_of_0_store_nothing_and_a_reset_forgets_the_count() {
    let p = Params::new(2, Window::MINUTE).unwrap();
    let store = WindowStore::new(p);
    let (g, _) = store.update(START, 2, Admit::Within(0)).unwrap();
    assert_eq!(
        store.update(START, 1, Admit::Within(0)).map(drop),
        Err(Deny::Wait(40 * S))
    );
    assert_eq!(
        store.update(START, 3, Admit::Always).map(drop),
        Err(Deny::ExceedsQuota)
    );
    let (zero, _) = store.update(START, 0, Admit::Within(0)).unwrap();
    assert_eq!((zero.prev, zero.next), (g.next, g.next));
    assert_eq!(store.peek().0, g.next);
    store.reset();
    assert_eq!(store.peek().0, EMPTY);
    assert!(store.update(START, 2, Admit::Within(0)).is_ok());
}

/// Threads racing on one word: every admission is the step on the word it
/// replaced, the words chain from `EMPTY` to the store's, no window counts
/// more than the quota, and the first window fills.
#[test]
fn racing_threads_count_every_permit_once() {
    const THREADS: u64 = 4;
    const TRIES: u64 = 500;
    let p = Params::new(700, Window::MINUTE).unwrap();
    let store = Arc::new(WindowStore::new(p));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let store = store.clone();
            thread::spawn(move || {
                // Half the threads may wait for the next window.
                let admit = if i % 2 == 0 {
                    Admit::Within(0)
                } else {
                    Admit::Always
                };
                (0..TRIES)
                    .filter_map(|_| store.update(START, 1, admit).ok())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut grants: Vec<_> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    for (g, gp) in &grants {
        // Where a try-take is admitted, so is a take that may wait, alike.
        assert_eq!(
            window::step(g.prev, START, 1, *gp, Admit::Always).as_ref(),
            Ok(g)
        );
    }
    // In the order of the words they replaced, each starts where the last
    // ended: nothing lost, nothing twice.
    grants.sort_by_key(|(g, _)| g.prev);
    let mut at = EMPTY;
    for (g, _) in &grants {
        assert_eq!(g.prev, at, "a word replaced twice, or one lost");
        at = g.next;
    }
    assert_eq!(store.peek().0, at);
    let mut per_window = std::collections::BTreeMap::new();
    for (g, _) in &grants {
        *per_window.entry(p.index_at(g.slot)).or_insert(0u64) += 1;
    }
    assert!(
        per_window.values().all(|&n| n <= p.quota()),
        "{per_window:?}"
    );
    let first = p.index_at(START);
    assert_eq!(per_window[&first], p.quota(), "the first window filled");
    assert_eq!(grants.len() as u64, per_window.values().sum::<u64>());
    let last = p.unpack(at);
    assert!(last.index > first && last.count <= p.quota(), "{last:?}");
}
