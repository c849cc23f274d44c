//! Each in-process store settles as [`schedule::settle`] does, decision
//! for decision, among takes, changes of parameters and resets: the same
//! state found, the same state left.

use proptest::prelude::*;

use super::sealed::Store;
use super::{AtomicStore, MutexStore, WarmStore};
use crate::model::schedule::{self, Admit, Params, FRESH, FULL, ORIGIN};

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    Take(u64, Option<u64>),
    /// Settles the permit `pick` selects (its last `went` and cost).
    Settle(prop::sample::Index, u64),
    SetParams(u64, u64),
    Reset(bool),
}

/// The permits taken so far: `(went, cost)`.
type Taken = Vec<(u64, u64)>;

/// Runs `ops` on `store` and on the pure steps, asserting that every
/// update and every settle agrees.
fn agree<S: Store>(
    store: &S,
    mut tat: u64,
    mut p: Params,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let (mut now, mut taken): (u64, Taken) = (ORIGIN, Vec::new());
    for op in ops {
        match *op {
            Op::Advance(ns) => now += ns,
            Op::Take(cost, wait) => {
                let admit = wait.map_or(Admit::Always, Admit::Within);
                let want = schedule::step(tat, now, cost, p, admit);
                let got = store.update(now, cost, admit).map(|(g, _)| g);
                prop_assert_eq!(got, want);
                if let Ok(g) = want {
                    tat = g.next;
                    taken.push((g.slot.max(now), cost));
                }
            }
            Op::Settle(pick, actual) => {
                if taken.is_empty() {
                    continue;
                }
                let (went, cost) = taken[pick.index(taken.len())];
                let actual = actual % (cost + 4);
                let want = (tat, schedule::settle(tat, now, went, cost, actual, p));
                prop_assert_eq!(store.settle(|| now, went, cost, actual), want);
                tat = want.1;
            }
            Op::SetParams(interval, slack) => {
                let new = Params::new(interval, slack).unwrap();
                store.set_params(now, new);
                tat = schedule::rebase(tat, now, p, new);
                p = new;
            }
            Op::Reset(full) => {
                tat = if full { FULL } else { FRESH };
                store.reset(tat);
            }
        }
        prop_assert_eq!(store.peek(), (tat, p));
    }
    Ok(())
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (0u64..=60).prop_map(Op::Advance),
        4 => (0u64..=8, prop_oneof![Just(None), (0u64..=40).prop_map(Some)])
            .prop_map(|(cost, wait)| Op::Take(cost, wait)),
        4 => (any::<prop::sample::Index>(), any::<u64>()).prop_map(|(i, a)| Op::Settle(i, a)),
        1 => (prop::sample::select(&[5u64, 10, 20][..]), 0u64..=4)
            .prop_map(|(t, s)| Op::SetParams(t, s)),
        1 => any::<bool>().prop_map(Op::Reset),
    ];
    prop::collection::vec(op, 1..60)
}

proptest! {
    #[test]
    fn every_store_settles_as_the_pure_step(full in any::<bool>(), ops in ops()) {
        let (tat, p) = (if full { FULL } else { FRESH }, Params::new(10, 3).unwrap());
        agree(&AtomicStore::new(tat, p, 0), tat, p, &ops)?;
        agree(&MutexStore::new(tat, p, 0), tat, p, &ops)?;
        // Without warm-up the warm store's steps are the plain ones.
        agree(&WarmStore::new(tat, p, 0), tat, p, &ops)?;
    }
}

/// With a warm-up, a settle moves `tat` as the plain step does and leaves
/// the coldness alone; and a settle that moves the state ends the last
/// grant's give-back.
#[test]
fn a_warm_store_settles_tat_as_plain_and_keeps_its_coldness() {
    let p = Params::new(1_000, 5).unwrap();
    let store = WarmStore::new(FULL, p, 100_000);
    let now = ORIGIN + 1_000_000;
    let (grant, _, cold, _) = store.update_warm(now, 4, Admit::Always).unwrap();
    let cold_now = || store.update_warm(now, 0, Admit::Always).unwrap().2;
    // A refund (or none, while the take waits behind the schedule) and an
    // excess, each as the plain step moves `tat`.
    let mut tat = grant.next;
    for actual in [1, 6] {
        let want = schedule::settle(tat, now, now, 4, actual, p);
        assert_eq!(store.settle(|| now, now, 4, actual), (tat, want));
        assert_eq!(cold_now(), cold);
        tat = want;
    }
    assert!(tat > grant.next);
    assert!(
        !store.give_back(grant),
        "the state is no longer the grant's"
    );
}
