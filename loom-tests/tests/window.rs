//! The window store (`src/store/window.rs`, reached through the hidden
//! `__WindowStore`): racing try-takes and a take that may wait, a settle
//! racing takes, and a change of quota racing takes, on a quota per
//! minute with the clock of a [`ManualClock`] held still, so that the
//! interleaving is the only thing that varies.
//!
//! Each model checks, with a message naming what broke:
//!
//! - every admission is the pure step ([`window::step`]) on the word it
//!   replaced, in the parameters it reports (the old quota or the new,
//!   whole: never a mix);
//! - no window counts more than the quota;
//! - the answers are those of some order of the operations, one at a time,
//!   each thread's in its own order, through the pure steps, ending in the
//!   store's word and quota: nothing lost, nothing counted twice, and once
//!   a take is decided at a new quota no take after it goes back to the
//!   old ([`explained`]).

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::check;
use paceline::__WindowStore as WindowStore;
use paceline::clock::{Clock, ManualClock};
use paceline::model::schedule::{Admit, Grant};
use paceline::model::window::{self, Deny, Params, Window, EMPTY};

/// Nanoseconds in a second.
const S: u64 = 1_000_000_000;
/// 2023-11-14 22:13:20 UTC: 20 s into a minute.
const START: u64 = 1_700_000_000 * S;

/// What an operation answered.
type Answer = Result<(Grant, Params), Deny>;

/// One operation a model ran, with its answer.
#[derive(Clone, Copy, Debug)]
enum Op {
    Take {
        now: u64,
        cost: u64,
        admit: Admit,
        got: Answer,
    },
    /// A settle of a booking whose permit went at `went`: the word it
    /// found and the word it left.
    Settle {
        now: u64,
        went: u64,
        booked: u64,
        actual: u64,
        got: (u64, u64),
    },
    SetQuota(u64),
}

/// The store at `START` on a manual clock, a quota of `quota` a minute.
fn store(quota: u64) -> (Arc<WindowStore>, ManualClock) {
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(START));
    let p = Params::new(quota, Window::MINUTE).expect("a valid quota");
    (Arc::new(WindowStore::new(p)), clock)
}

fn take(store: &WindowStore, clock: &ManualClock, cost: u64, admit: Admit) -> Op {
    let now = clock.now();
    let got = store.update(now, cost, admit);
    Op::Take {
        now,
        cost,
        admit,
        got,
    }
}

/// Runs `op` on `(word, p)` through the pure steps: the state after it, if
/// its answer is the one the pure step gives.
fn replay(op: &Op, word: u64, p: Params) -> Option<(u64, Params)> {
    match *op {
        Op::Take {
            now,
            cost,
            admit,
            got,
        } => {
            let want = window::step(word, now, cost, p, admit);
            (want.map(|g| (g, p)) == got).then(|| (want.map_or(word, |g| g.next), p))
        }
        Op::Settle {
            now,
            went,
            booked,
            actual,
            got,
        } => {
            let left = window::settle(word, now, went, booked, actual, p);
            (got == (word, left)).then_some((left, p))
        }
        Op::SetQuota(quota) => Some((word, p.with_quota(quota).ok()?)),
    }
}

/// Whether some interleaving of `threads` (each in its own order), run one
/// operation at a time through the pure steps from `(word, p)`, gives every
/// answer they got and ends in `end`.
fn explained(threads: &[Vec<Op>], word: u64, p: Params, end: (u64, Params)) -> bool {
    fn go(
        threads: &[Vec<Op>],
        next: &mut [usize],
        state: (u64, Params),
        end: (u64, Params),
    ) -> bool {
        if next.iter().zip(threads).all(|(&i, ops)| i == ops.len()) {
            return state == end;
        }
        for t in 0..threads.len() {
            let Some(op) = threads[t].get(next[t]) else {
                continue;
            };
            if let Some(after) = replay(op, state.0, state.1) {
                next[t] += 1;
                let found = go(threads, next, after, end);
                next[t] -= 1;
                if found {
                    return true;
                }
            }
        }
        false
    }
    go(threads, &mut vec![0; threads.len()], (word, p), end)
}

/// The grants among `ops`, each checked to be the pure step on the word
/// it replaced in the parameters it reports.
fn grants(ops: &[&Op], quotas: &[u64]) -> Vec<(Grant, Params)> {
    let mut out = Vec::new();
    for op in ops {
        if let Op::Take {
            now,
            cost,
            admit,
            got: Ok((g, p)),
        } = **op
        {
            assert!(
                quotas.contains(&p.quota()),
                "a take decided at a quota never set, {}: {op:?}",
                p.quota()
            );
            assert_eq!(
                window::step(g.prev, now, cost, p, admit),
                Ok(g),
                "an admission is not the step on the word it replaced: {op:?}"
            );
            out.push((g, p));
        }
    }
    out
}

/// No window counts more than `quota` among `grants` of cost 1.
fn at_most_the_quota(grants: &[(Grant, Params)], quota: u64, all: &[&Op]) {
    let mut counts = std::collections::BTreeMap::new();
    for (g, p) in grants {
        *counts.entry(p.index_at(g.slot)).or_insert(0u64) += 1;
    }
    assert!(
        counts.values().all(|&n| n <= quota),
        "a window counted over its quota {quota}: {counts:?} from {all:?}"
    );
}

/// Two try-takes and a take that may wait (`Admit::Always`) race for a
/// quota of 2: the first window counts 2, the waiting take goes into the
/// next if it comes last, and every word replaced is replaced once.
#[test]
fn racing_takes_count_at_most_the_quota_each_on_the_word_it_replaced() {
    check("window takes", || {
        let (store, clock) = store(2);
        let tries: Vec<_> = (0..2)
            .map(|_| {
                let (store, clock) = (store.clone(), clock.clone());
                thread::spawn(move || take(&store, &clock, 1, Admit::Within(0)))
            })
            .collect();
        let waits = take(&store, &clock, 1, Admit::Always);
        let tried: Vec<Op> = tries.into_iter().map(|t| t.join().unwrap()).collect();
        let all: Vec<&Op> = tried.iter().chain([&waits]).collect();
        let end = store.peek();

        let mut grants = grants(&all, &[2]);
        // Each word replaced once, and the words chain from `EMPTY` to the
        // store's (a take only adds, so their order is the words').
        grants.sort_by_key(|(g, _)| g.prev);
        let mut at = EMPTY;
        for (g, _) in &grants {
            assert_eq!(
                g.prev, at,
                "a word replaced twice, or an update lost: {all:?}"
            );
            at = g.next;
        }
        assert_eq!(
            at, end.0,
            "the store's word is not the last grant's: {all:?}"
        );
        at_most_the_quota(&grants, 2, &all);
        assert!(
            matches!(waits, Op::Take { got: Ok(_), .. }),
            "the take that may wait was refused: {all:?}"
        );
        let p = end.1;
        let first = grants
            .iter()
            .filter(|(g, _)| p.index_at(g.slot) == p.index_at(START))
            .count();
        assert_eq!(first, 2, "the first window did not fill: {all:?}");

        let threads = vec![vec![tried[0]], vec![tried[1]], vec![waits]];
        assert!(
            explained(&threads, EMPTY, p, end),
            "no order of the takes one at a time gives {all:?} and ends in {end:?}"
        );
    });
}

/// A settle giving back a booking of 2 (of a quota of 3) races a try-take
/// of 2 and a take that may wait: the settle is the pure settle on the word
/// it found, and every update lands once.
#[test]
fn a_settle_racing_takes_lands_once_on_the_word_it_found() {
    check("window settle", || {
        let (store, clock) = store(3);
        let booked = take(&store, &clock, 2, Admit::Within(0));
        let Op::Take {
            got: Ok((booking, p)),
            ..
        } = booked
        else {
            panic!("an empty window admits 2 of its 3: {booked:?}");
        };
        let settler = {
            let (store, clock) = (store.clone(), clock.clone());
            thread::spawn(move || {
                let now = clock.now();
                let got = store.settle(|| clock.now(), booking.slot, 2, 0);
                Op::Settle {
                    now,
                    went: booking.slot,
                    booked: 2,
                    actual: 0,
                    got,
                }
            })
        };
        let taker = {
            let (store, clock) = (store.clone(), clock.clone());
            thread::spawn(move || take(&store, &clock, 2, Admit::Within(0)))
        };
        let waits = take(&store, &clock, 1, Admit::Always);
        let settled = settler.join().unwrap();
        let tried = taker.join().unwrap();
        let all = [&settled, &tried, &waits];
        let end = store.peek();

        let Op::Settle {
            got: (found, left),
            now,
            ..
        } = settled
        else {
            unreachable!()
        };
        assert_eq!(
            left,
            window::settle(found, now, booking.slot, 2, 0, p),
            "the settle stored what the pure settle does not on the word it found: {all:?}"
        );
        grants(&all, &[3]);
        assert!(
            p.unpack(end.0).count <= 3,
            "a window counted over its quota: {:?} from {all:?}",
            p.unpack(end.0)
        );
        let threads = vec![vec![settled], vec![tried], vec![waits]];
        assert!(
            explained(&threads, booking.next, p, end),
            "no order of the settle and the takes one at a time gives {all:?} and ends in \
             {end:?}: an update lost or landed twice"
        );
    });
}

/// The quota lowered from 3 to 1 (and a try-take after it, on the same
/// thread) races two try-takes: each take decides in the old quota or the
/// new, whole; the one after the change in the new; and once a take is
/// counted at the new quota, none decided on its word or a later one goes
/// back to the old.
#[test]
fn a_change_of_quota_racing_takes_decides_each_in_the_old_or_the_new() {
    check("window set_quota", || {
        let (store, clock) = store(3);
        let p = store.peek().1;
        let changer = {
            let (store, clock) = (store.clone(), clock.clone());
            thread::spawn(move || {
                store.set_quota(1).expect("a quota the word holds");
                vec![Op::SetQuota(1), take(&store, &clock, 1, Admit::Within(0))]
            })
        };
        let taker = {
            let (store, clock) = (store.clone(), clock.clone());
            thread::spawn(move || take(&store, &clock, 1, Admit::Within(0)))
        };
        let mine = take(&store, &clock, 1, Admit::Within(0));
        let changed = changer.join().unwrap();
        let tried = taker.join().unwrap();
        let all = [&changed[1], &tried, &mine];
        let end = store.peek();

        grants(&all, &[3, 1]);
        if let Op::Take {
            got: Ok((_, after)),
            ..
        } = changed[1]
        {
            assert_eq!(
                after.quota(),
                1,
                "a take after the change at the old quota: {all:?}"
            );
        }
        assert_eq!(end.1.quota(), 1);
        let threads = vec![changed.clone(), vec![tried], vec![mine]];
        assert!(
            explained(&threads, EMPTY, p, end),
            "no order of the change and the takes one at a time gives {all:?} and ends in \
             {end:?}: a take went back to the old quota after one at the new, or an update \
             was lost"
        );
    });
}
