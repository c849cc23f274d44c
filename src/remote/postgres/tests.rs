//! The SQL step against the Rust one, on a real PostgreSQL, with `now`
//! passed in so that both decide at exactly the same instants.

#[path = "../../../tests/support/pg_server.rs"]
mod server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;

use super::sql::encode;
use super::*;
use crate::model::schedule::{step, Admit, Deny, Params, FULL, MAX_TAT, ORIGIN};
use crate::remote::{Decision, Op as Call, Request};
use crate::store::Booking;
use crate::values::rate::Rate;
use crate::Error;
use server::PgServer;

/// The window's function: `tests/window.rs`.
mod window;

/// The backend's calls at a test clock, one per kind of call.
trait At {
    fn step_at(&self, key: &str, r: &Request, now: Option<u64>) -> Result<Decision, Error>;
    fn peek_at(&self, key: &str, now: Option<u64>) -> Result<(u64, u64), Error>;
}

impl At for PostgresBackend {
    fn step_at(&self, key: &str, r: &Request, now: Option<u64>) -> Result<Decision, Error> {
        self.call_at(key, Call::Step(*r), now)?.decision()
    }
    fn peek_at(&self, key: &str, now: Option<u64>) -> Result<(u64, u64), Error> {
        self.call_at(key, Call::Peek, now)?.peeked()
    }
}

fn limiter(server: &PgServer, interval: u64, slack: u64) -> PostgresLimiter {
    let lim = PostgresLimiter::builder(
        &server.conn(),
        Rate::every(Duration::from_nanos(interval)).unwrap(),
    )
    .slack(slack)
    .prune(0, 64) // the test's clock is not the server's: no pruning
    .pool_size(2)
    .build()
    .unwrap();
    lim.install().unwrap();
    lim
}

fn fresh_key() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("case:{}", N.fetch_add(1, Ordering::Relaxed))
}

/// Stores `tat` under `key` directly (any word but `FRESH`, which the store
/// never writes).
fn set_state(lim: &PostgresLimiter, key: &str, tat: u64) {
    let (key, col) = (key.to_owned(), encode(tat));
    let t = lim.backend().backend.0.table.quoted.clone();
    lim.backend()
        .block_on(move |b| async move {
            b.run(|c| async move {
                c.execute(
                    &format!("INSERT INTO {t} (key, tat, rest_at) VALUES ($1, $2, 0)"),
                    &[&key, &col],
                )
                .await
            })
            .await
        })
        .unwrap();
}

/// `(rest_at)` of `key`'s row.
fn rest_at(lim: &PostgresLimiter, key: &str) -> Option<i64> {
    let key = key.to_owned();
    let t = lim.backend().backend.0.table.quoted.clone();
    lim.backend()
        .block_on(move |b| async move {
            b.run(|c| async move {
                c.query_opt(&format!("SELECT rest_at FROM {t} WHERE key = $1"), &[&key])
                    .await
            })
            .await
        })
        .unwrap()
        .map(|r| r.get(0))
}

#[derive(Clone, Debug)]
struct Op {
    cost: u64,
    admit: Admit,
    /// Clock advance before the op, in quarter intervals.
    dt: u64,
}

fn op() -> impl Strategy<Value = Op> {
    (
        prop_oneof![8 => 0..=13u64, 1 => Just(u64::MAX), 1 => Just(1u64 << 40)],
        prop_oneof![
            Just(None),
            Just(Some(0u64)),
            (0..=40u64).prop_map(Some), // in quarter intervals
        ],
        prop_oneof![3 => 0..=8u64, 1 => Just(0u64), 1 => 0..=200u64],
    )
        .prop_map(|(cost, admit, dt)| Op {
            cost,
            admit: match admit {
                None => Admit::Always,
                Some(q) => Admit::Within(q),
            },
            dt,
        })
}

fn interval() -> impl Strategy<Value = u64> {
    prop_oneof![
        1..=1_000u64,
        1_000..=1_000_000_000u64,
        Just(1_000_000_000u64),
        1_000_000_000..=(1u64 << 50),
        Just(1u64 << 62),
    ]
}

/// Where the clock starts: today's internal time, or anywhere a u64 reaches
/// (near 2^64 the arithmetic saturates; near 0, `now - tau` does; 2^63 is
/// where the encoding's sign flips).
fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(ORIGIN + 1_763_700_000_000_000_000),
        any::<u64>(),
        (u64::MAX - (1 << 40))..=u64::MAX,
        0..=(1u64 << 40),
        ((1u64 << 63) - (1 << 30))..=((1u64 << 63) + (1 << 30)),
    ]
}

/// The key's state before the first op: absent, or any stored word but
/// `FRESH` (which no store writes: absent rows decide as `FULL`).
fn initial() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        Just(None),
        Just(Some(FULL)),
        Just(Some(MAX_TAT)),
        (1..=u64::MAX).prop_map(Some),
    ]
}

#[test]
fn sql_step_agrees_with_rust_step_decision_for_decision() {
    let server = PgServer::start();
    let mut runner = crate::remote::settle_cases::runner(300);
    let strategy = (
        interval(),
        0..=20u64,
        prop_oneof![Just(0u64), 1..=1_000u64],
        start(),
        initial(),
        proptest::collection::vec(op(), 1..24),
    );
    // One pool for every case: each case's limit shares it.
    let base = limiter(&server, 1_000_000, 0);
    runner
        .run(&strategy, |(interval, slack, more, start, initial, ops)| {
            let Some(params) = Params::new(interval, slack) else {
                return Ok(());
            };
            // A lease's lender keeps its states until at rest at a larger
            // (stated) slack than it decides at: `more` permits larger.
            let Some(kept) = Params::new(interval, slack + more) else {
                return Ok(());
            };
            let mut lim = base
                .with_limit(Rate::every(Duration::from_nanos(interval)).unwrap(), slack)
                .unwrap();
            lim.core.keep = kept.tau();
            let lim = &lim;
            let key = fresh_key();
            let mut tat = match initial {
                None => FULL,
                Some(word) => {
                    set_state(lim, &key, word);
                    word
                }
            };
            let mut present = initial.is_some();
            let mut now = start;
            for op in ops {
                now = now.saturating_add(op.dt.saturating_mul(interval) / 4);
                let admit = match op.admit {
                    Admit::Always => Admit::Always,
                    Admit::Within(q) => Admit::Within(q.saturating_mul(interval) / 4),
                };
                let rust = step(tat, now, op.cost, params, admit);
                let backend = lim.backend();
                let sql = lim
                    .core
                    .request(op.cost, admit)
                    .and_then(|request| backend.step_at(&key, &request, Some(now)));
                match (rust, sql) {
                    (Ok(g), Ok(Decision::Granted(b))) => {
                        prop_assert_eq!(g.slot, b.slot, "slot");
                        prop_assert_eq!(b.now, now, "now");
                        prop_assert_eq!(b.cost, op.cost, "cost");
                        if op.cost > 0 {
                            // The row held `tat` before (unless absent).
                            prop_assert_eq!(b.next, g.next, "booking.next");
                            prop_assert_eq!(b.prev, present.then_some(tat), "booking.prev");
                            present = true;
                            // rest_at: at rest from then on, plus a second.
                            let at_rest = i128::from(g.next) + i128::from(kept.tau())
                                - i128::from(ORIGIN)
                                + 1_000_000_000;
                            let rest = i128::from(rest_at(lim, &key).unwrap());
                            // Rounded up (toward +infinity, as SQL's ceil).
                            let want = at_rest.div_euclid(1_000_000_000)
                                + i128::from(at_rest.rem_euclid(1_000_000_000) != 0);
                            prop_assert_eq!(rest, want, "rest_at");
                        } else {
                            prop_assert!(!b.wrote(), "a cost of 0 writes nothing");
                        }
                        tat = g.next;
                    }
                    (Err(deny), Ok(Decision::Denied(sql))) if deny != Deny::CostTooLarge => {
                        prop_assert_eq!(deny, sql)
                    }
                    (Err(Deny::CostTooLarge), Err(Error::CostTooLarge { .. })) => {}
                    (rust, sql) => {
                        return Err(TestCaseError::fail(format!(
                            "tat {tat} now {now} {op:?}: rust {rust:?}, sql {sql:?}"
                        )))
                    }
                }
                // The stored word is the model's, exactly.
                let (stored, n) = backend.peek_at(&key, Some(now)).unwrap();
                prop_assert_eq!(stored, tat, "stored state");
                prop_assert_eq!(n, now);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn give_back_restores_only_the_state_it_replaced() {
    let server = PgServer::start();
    let lim = limiter(&server, 1_000_000, 2);
    let b = lim.backend();
    let now = ORIGIN + 1_763_700_000_000_000_000;
    let request = lim.core.request(1, Admit::Always).unwrap();
    let first = b.step_at("k", &request, Some(now)).unwrap();
    let Decision::Granted(u1) = first else {
        panic!("{first:?}")
    };
    assert_eq!(u1.prev, None, "the row was absent");
    let second = b.step_at("k", &request, Some(now)).unwrap();
    let Decision::Granted(u2) = second else {
        panic!("{second:?}")
    };
    assert_eq!(u2.prev, Some(u1.next));
    let tau = lim.core.params.tau();
    let give = |u: Booking| {
        let undo = Call::Undo { tau, booking: u };
        b.call_at("k", undo, None).unwrap().flag().unwrap()
    };
    assert!(!give(u1), "someone took after the first grant");
    assert!(give(u2));
    assert_eq!(b.peek_at("k", Some(now)).unwrap().0, u1.next);
    assert!(!give(u2), "a give-back runs once");
    assert!(give(u1), "back to absent");
    assert_eq!(b.peek_at("k", Some(now)).unwrap().0, FULL);
    assert_eq!(rest_at(&lim, "k"), None, "the row is gone");
}

#[test]
fn sql_settle_agrees_with_rust_settle_state_for_state_among_steps() {
    use crate::remote::settle_cases::{interleaved, Call as Either};
    let server = PgServer::start();
    let mut runner = crate::remote::settle_cases::runner(300);
    let strategy = (
        interval(),
        0..=20u64,
        prop_oneof![Just(0u64), 1..=1_000u64],
        start(),
        initial(),
        proptest::collection::vec(interleaved(op()), 1..24),
    );
    let base = limiter(&server, 1_000_000, 0);
    runner
        .run(
            &strategy,
            |(interval, slack, more, start, initial, calls)| {
                let Some(params) = Params::new(interval, slack) else {
                    return Ok(());
                };
                let Some(kept) = Params::new(interval, slack + more) else {
                    return Ok(());
                };
                let mut lim = base
                    .with_limit(Rate::every(Duration::from_nanos(interval)).unwrap(), slack)
                    .unwrap();
                lim.core.keep = kept.tau();
                let lim = &lim;
                let backend = lim.backend();
                let key = fresh_key();
                let mut tat = match initial {
                    None => FULL,
                    Some(word) => {
                        set_state(lim, &key, word);
                        word
                    }
                };
                let mut now = start;
                for call in calls {
                    match call {
                        Either::Step(op) => {
                            now = now.saturating_add(op.dt.saturating_mul(interval) / 4);
                            let admit = match op.admit {
                                Admit::Always => Admit::Always,
                                Admit::Within(q) => Admit::Within(q.saturating_mul(interval) / 4),
                            };
                            let rust = step(tat, now, op.cost, params, admit);
                            let sql = lim
                                .core
                                .request(op.cost, admit)
                                .and_then(|request| backend.step_at(&key, &request, Some(now)));
                            match (rust, sql) {
                                (Ok(g), Ok(Decision::Granted(b))) => {
                                    prop_assert_eq!(g.slot, b.slot, "slot");
                                    tat = g.next;
                                }
                                (Err(deny), Ok(Decision::Denied(sql)))
                                    if deny != Deny::CostTooLarge =>
                                {
                                    prop_assert_eq!(deny, sql)
                                }
                                (Err(Deny::CostTooLarge), Err(Error::CostTooLarge { .. })) => {}
                                (rust, sql) => {
                                    return Err(TestCaseError::fail(format!(
                                        "tat {tat} now {now} {op:?}: rust {rust:?}, sql {sql:?}"
                                    )))
                                }
                            }
                        }
                        Either::Settle(s) => {
                            now = s.advance(now, interval);
                            let (op, want) = s.at(tat, now, params, kept.tau());
                            let (left, n) = backend
                                .call_at(&key, op, Some(now))
                                .unwrap()
                                .peeked()
                                .unwrap();
                            prop_assert_eq!(left, want, "tat {} now {} {:?}", tat, now, op);
                            prop_assert_eq!(n, now);
                            if want != tat {
                                // rest_at: at rest from then on, plus a second,
                                // rounded up, as a step's.
                                let at_rest = i128::from(want) + i128::from(kept.tau())
                                    - i128::from(ORIGIN)
                                    + 1_000_000_000;
                                let rest = i128::from(rest_at(lim, &key).unwrap());
                                let want = at_rest.div_euclid(1_000_000_000)
                                    + i128::from(at_rest.rem_euclid(1_000_000_000) != 0);
                                prop_assert_eq!(rest, want, "rest_at");
                            }
                            tat = want;
                        }
                    }
                    let (stored, _) = backend.peek_at(&key, Some(now)).unwrap();
                    prop_assert_eq!(stored, tat, "stored state");
                }
                Ok(())
            },
        )
        .unwrap();
}
