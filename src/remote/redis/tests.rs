//! The Lua step against the Rust one, on a real `redis-server`, with `now`
//! passed in so that both decide at exactly the same instants.

use crate::limiter::take::Take;
#[path = "../../../tests/support/redis_server.rs"]
mod server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::model::schedule::{step, Admit, Deny, Params, FRESH, FULL, ORIGIN};
use crate::remote::{Decision, Op as Call, Request};
use crate::store::Booking;
use crate::values::rate::Rate;
use crate::Error;
use server::RedisServer;

/// Settles among steps: `tests/settle.rs`.
mod settle;

/// The window script: `tests/window.rs`.
mod window;

/// The backend's calls at a test clock, one per kind of call.
trait At {
    fn step_at(&self, key: &str, r: &Request, now: Option<u64>) -> Result<(Decision, u64), Error>;
    fn peek_at(&self, key: &str, now: Option<u64>) -> Result<(u64, u64), Error>;
    fn give_back_at(
        &self,
        key: &str,
        tau: u64,
        b: Booking,
        now: Option<u64>,
    ) -> Result<bool, Error>;
}

impl At for RedisBackend {
    fn step_at(&self, key: &str, r: &Request, now: Option<u64>) -> Result<(Decision, u64), Error> {
        let (done, ttl) = self.call_at(key, Call::Step(*r), now)?;
        Ok((done.decision()?, ttl))
    }
    fn peek_at(&self, key: &str, now: Option<u64>) -> Result<(u64, u64), Error> {
        self.call_at(key, Call::Peek, now)?.0.peeked()
    }
    fn give_back_at(
        &self,
        key: &str,
        tau: u64,
        b: Booking,
        now: Option<u64>,
    ) -> Result<bool, Error> {
        let undo = Call::Undo { tau, booking: b };
        self.call_at(key, undo, now)?.0.flag()
    }
}

fn limiter(server: &RedisServer, interval: u64, slack: u64) -> RedisLimiter {
    RedisLimiter::builder(
        server.url(),
        Rate::every(Duration::from_nanos(interval)).unwrap(),
    )
    .slack(slack)
    .build()
    .unwrap()
}

/// A key no other case has used.
fn fresh_key() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("case:{}", N.fetch_add(1, Ordering::Relaxed))
}

/// The TTL the script must set: until rest, rounded up to ms, plus margin.
fn expected_ttl_ms(next: u64, tau: u64, now: u64) -> u64 {
    next.saturating_add(tau)
        .saturating_sub(now)
        .div_ceil(1_000_000)
        + 2
}

#[derive(Clone, Debug)]
struct Op {
    cost: u64,
    admit: Admit,
    /// Clock advance before the op, in intervals (fractional: ns = dt * T / 4).
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
                Some(q) => Admit::Within(q), // scaled by the interval below
            },
            dt,
        })
}

fn interval() -> impl Strategy<Value = u64> {
    prop_oneof![
        1..=1_000u64,
        1_000..=1_000_000_000u64,
        Just(999_999_999u64),
        Just(1_000_000_000u64),
        // Low parts that add up to exactly 10^9: the carry's edge.
        Just(500_000_000u64),
        Just(250_000_000u64),
        // Spans cross as one decimal up to 15 digits, split by the script
        // beyond: the edge.
        Just(999_999_999_999_999u64),
        Just(1_000_000_000_000_000u64),
        1_000_000_000..=(1u64 << 50),
    ]
}

/// Where the clock starts: today's internal time, or anywhere a u64 reaches
/// (near 2^64 the arithmetic saturates; near 0, `now - tau` does).
fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(ORIGIN + 1_763_700_000_000_000_000),
        any::<u64>(),
        (u64::MAX - (1 << 40))..=u64::MAX,
        0..=(1u64 << 40),
        // Whole seconds, half seconds: low parts of 0 and 5 * 10^8.
        (0..=36_000_000_000u64).prop_map(|half| half * 500_000_000),
    ]
}

/// The key's state before the first op: absent, or any stored word
/// (including `FRESH`, which the script never writes but must read alike).
fn initial() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        Just(None),
        Just(Some(FRESH)),
        Just(Some(FULL)),
        any::<u64>().prop_map(Some),
    ]
}

#[test]
fn lua_step_agrees_with_rust_step_decision_for_decision() {
    let server = RedisServer::start();
    let mut runner = crate::remote::settle_cases::runner(300);
    let strategy = (
        interval(),
        0..=20u64,
        prop_oneof![Just(0u64), 1..=1_000u64],
        start(),
        initial(),
        proptest::collection::vec(op(), 1..24),
    );
    runner
        .run(&strategy, |(interval, slack, more, start, initial, ops)| {
            let Some(params) = Params::new(interval, slack) else {
                return Ok(()); // rejected by the builder too
            };
            // A lease's lender keeps its states until at rest at a larger
            // (stated) slack than it decides at: `more` permits larger.
            let Some(kept) = Params::new(interval, slack + more) else {
                return Ok(());
            };
            let mut lim = limiter(&server, interval, slack);
            lim.core.keep = kept.tau();
            let key = fresh_key();
            let mut tat = match initial {
                None => FULL, // absent decides as at rest
                Some(word) => {
                    server.raw(&format!("SET {}{key} {word}", lim.prefix()));
                    word
                }
            };
            let mut now = start;
            for op in ops {
                now = now.saturating_add(op.dt.saturating_mul(interval) / 4);
                let admit = match op.admit {
                    Admit::Always => Admit::Always,
                    Admit::Within(q) => Admit::Within(q.saturating_mul(interval) / 4),
                };
                let rust = step(tat, now, op.cost, params, admit);
                let backend = lim.backend();
                let lua = lim
                    .core
                    .request(op.cost, admit)
                    .and_then(|request| backend.step_at(&key, &request, Some(now)));
                match (rust, lua) {
                    (Ok(g), Ok((Decision::Granted(b), ttl_ms))) => {
                        prop_assert_eq!(g.slot, b.slot, "slot");
                        prop_assert_eq!(b.now, now, "now");
                        prop_assert_eq!(b.cost, op.cost, "cost");
                        if op.cost > 0 {
                            prop_assert_eq!(
                                ttl_ms,
                                expected_ttl_ms(g.next, kept.tau(), now),
                                "ttl"
                            );
                        }
                        tat = g.next;
                    }
                    (Err(deny), Ok((Decision::Denied(lua), _))) if deny != Deny::CostTooLarge => {
                        prop_assert_eq!(deny, lua)
                    }
                    (Err(Deny::CostTooLarge), Err(Error::CostTooLarge { .. })) => {}
                    (rust, lua) => {
                        return Err(TestCaseError::fail(format!(
                            "tat {tat} now {now} {op:?}: rust {rust:?}, lua {lua:?}"
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
fn key_expires_once_at_rest_and_then_decides_as_at_rest() {
    let server = RedisServer::start();
    // 100/s, slack 2: tau = 20 ms.
    let lim = RedisLimiter::builder(server.url(), Rate::per_second(100))
        .slack(2)
        .build()
        .unwrap();
    for _ in 0..3 {
        lim.try_take("k").unwrap();
    }
    assert!(lim.try_take("k").is_err(), "burst of slack + 1 spent");
    // tat = now + 10 ms: back at rest after 10 + 20 ms, plus the 2 ms margin.
    let pttl: i64 = server
        .raw("PTTL paceline:k")
        .trim_start_matches(':')
        .trim()
        .parse()
        .unwrap();
    // (Less by the time since the write: at most 32 ms, and not yet gone.)
    assert!((1..=32).contains(&pttl), "PTTL {pttl}");
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(server.raw("EXISTS paceline:k"), ":0\r\n");
    assert_eq!(lim.available("k").unwrap(), 3);
}

#[test]
fn an_absent_key_grants_the_full_burst_and_then_paces() {
    let server = RedisServer::start();
    let lim = RedisLimiter::builder(server.url(), Rate::per_minute(1))
        .slack(4)
        .build()
        .unwrap();
    assert!(lim.can_take("k", 5).unwrap());
    assert!(!lim.can_take("k", 6).unwrap());
    lim.try_take_n("k", 5).unwrap();
    match lim.try_take("k") {
        Err(Error::RetryAfter(d)) => {
            assert!(
                d.duration() > Duration::from_secs(59) && d.duration() <= Duration::from_secs(60),
                "{d:?}"
            )
        }
        other => panic!("expected RetryAfter, got {other:?}"),
    }
}

#[test]
fn a_key_holding_something_else_is_a_script_error() {
    let server = RedisServer::start();
    let lim = limiter(&server, 1_000_000, 1);
    server.raw("SET paceline:text hello");
    match lim.try_take("text") {
        Err(Error::Script(e)) => assert!(e.to_string().contains("not a paceline state"), "{e}"),
        other => panic!("expected a script error, got {other:?}"),
    }
    server.raw("RPUSH paceline:list a");
    assert!(matches!(lim.try_take("list"), Err(Error::Script(_))));
    // ... and the connection stays good for the next call.
    lim.try_take("other").unwrap();
    // Fail-open admits only when the server cannot answer: an error the
    // key caused is never an admission (a client must not lift its limit
    // by choosing its key).
    let open = RedisLimiter::builder(server.url(), Rate::per_second(1))
        .on_error(FailPolicy::Open)
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(matches!(open.try_take("text"), Err(Error::Script(_))));
    }
}

#[test]
fn script_is_loaded_again_after_a_script_flush() {
    let server = RedisServer::start();
    let lim = limiter(&server, 1_000_000, 10);
    lim.try_take("k").unwrap();
    assert_eq!(server.raw("SCRIPT FLUSH"), "+OK\r\n");
    lim.try_take("k").unwrap();
}

#[test]
fn a_cost_too_large_is_refused_without_asking_redis() {
    // Nothing listens there: any round trip would fail.
    let lim = RedisLimiter::builder("unix:///nonexistent/paceline.sock", Rate::per_second(1))
        .build()
        .unwrap();
    assert!(matches!(
        lim.try_take_n("k", u64::MAX),
        Err(Error::CostTooLarge { cost: u64::MAX })
    ));
    assert!(matches!(lim.try_take("k"), Err(Error::Unavailable(_))));
}

#[test]
fn a_configuration_that_cannot_work_is_refused_at_build() {
    let build = |b: RedisBuilder| match b.build() {
        Err(Error::Config(msg)) => msg,
        other => panic!("expected a configuration error, got {other:?}"),
    };
    let rate = Rate::per_second(1);
    build(RedisLimiter::builder("not a url", rate));
    build(RedisLimiter::builder("redis://127.0.0.1/", rate).connect_timeout(Duration::ZERO));
    build(RedisLimiter::builder("redis://127.0.0.1/", rate).response_timeout(Duration::ZERO));
    build(RedisLimiter::builder("redis://127.0.0.1/", Rate::per_hour(1)).slack(u64::MAX));
    build(RedisLimiter::cluster_builder(
        ["redis://127.0.0.1:1/", "ftp://x"],
        rate,
    ));
}

/// The script's give-back against the model: a grant undone while the key
/// still holds it leaves exactly the state before it (absent included), and
/// one undone after another take changes nothing.
#[test]
fn give_back_restores_the_state_before_only_while_the_key_holds_the_grant() {
    let server = RedisServer::start();
    let interval = 1_000_000; // 1 ms
    let lim = limiter(&server, interval, 2);
    let params = Params::new(interval, 2).unwrap();
    let backend = lim.backend();
    let key = fresh_key();
    let now = ORIGIN + 5_000_000_000;
    let grant = |now: u64| -> Booking {
        let request = lim.core.request(1, Admit::Always).unwrap();
        match backend.step_at(&key, &request, Some(now)).unwrap().0 {
            Decision::Granted(undo) => undo,
            other => panic!("{other:?}"),
        }
    };
    // At rest (absent): the grant's `prev` is none, and undoing it deletes
    // the key again.
    let first = grant(now);
    assert_eq!(first.prev, None);
    assert_eq!(
        first.next,
        step(FULL, now, 1, params, Admit::Always).unwrap().next
    );
    assert!(backend
        .give_back_at(&key, params.tau(), first, Some(now))
        .unwrap());
    assert_eq!(
        server.raw(&format!("EXISTS {}{key}", lim.prefix())),
        ":0\r\n"
    );
    // Three grants; undoing the last restores the second's state exactly.
    let a = grant(now);
    let b = grant(now);
    let c = grant(now);
    assert_eq!((b.prev, c.prev), (Some(a.next), Some(b.next)));
    assert!(backend
        .give_back_at(&key, params.tau(), c, Some(now))
        .unwrap());
    assert_eq!(backend.peek_at(&key, Some(now)).unwrap().0, b.next);
    // `a` is no longer the last booking: undoing it would erase `b`'s.
    assert!(!backend
        .give_back_at(&key, params.tau(), a, Some(now))
        .unwrap());
    assert_eq!(backend.peek_at(&key, Some(now)).unwrap().0, b.next);
    // A restored state already at rest is stored as absent (at rest).
    let later = now + 10 * interval;
    let d = grant(later);
    assert_eq!(d.prev, Some(b.next));
    assert!(backend
        .give_back_at(&key, params.tau(), d, Some(later))
        .unwrap());
    assert_eq!(
        server.raw(&format!("EXISTS {}{key}", lim.prefix())),
        ":0\r\n"
    );
}

/// A reset is a `DEL`: the key comes back at rest, as the model's `FULL`,
/// and a give-back of a grant made before it finds the key without the
/// grant's state and changes nothing.
#[test]
fn a_give_back_after_a_reset_changes_nothing() {
    let server = RedisServer::start();
    let interval = 1_000_000;
    let lim = limiter(&server, interval, 2);
    let params = Params::new(interval, 2).unwrap();
    let backend = lim.backend();
    let key = fresh_key();
    let exists = || server.raw(&format!("EXISTS {}{key}", lim.prefix()));
    let now = ORIGIN + 9_000_000_000;
    let request = lim.core.request(2, Admit::Always).unwrap();
    let grant = || match backend.step_at(&key, &request, Some(now)).unwrap().0 {
        Decision::Granted(undo) => undo,
        other => panic!("{other:?}"),
    };
    grant();
    let second = grant();
    assert!(lim.reset(&key).unwrap());
    assert_eq!(exists(), ":0\r\n");
    assert!(!lim.reset(&key).unwrap(), "already gone");
    assert!(!backend
        .give_back_at(&key, params.tau(), second, Some(now))
        .unwrap());
    assert_eq!(exists(), ":0\r\n");
    // At rest again: the next grant decides as on `FULL`.
    let model = step(FULL, now, 2, params, Admit::Always).unwrap();
    assert_eq!(grant().next, model.next);
}

/// An empty value is foreign, as the `redis` module docs say: every
/// operation on it fails with a script error and leaves it as it was (only
/// an absent key is at rest).
#[test]
fn an_empty_value_fails_every_operation_and_stays() {
    let server = RedisServer::start();
    let interval = 1_000_000;
    let lim = limiter(&server, interval, 3);
    let params = Params::new(interval, 3).unwrap();
    let backend = lim.backend();
    let key = fresh_key();
    let stored = format!("{}{key}", lim.prefix());
    server.raw(&format!("SET {stored} \"\""));
    let now = ORIGIN + 7_000_000_000;
    let script = |r: Result<_, Error>| assert!(matches!(r, Err(Error::Script(_))));
    for admit in [Admit::Within(0), Admit::Always] {
        let request = lim.core.request(2, admit).unwrap();
        script(backend.step_at(&key, &request, Some(now)).map(drop));
    }
    script(backend.peek_at(&key, Some(now)).map(drop));
    let next = step(FULL, now, 1, params, Admit::Always).unwrap().next;
    let undo = Booking::granted(now, next - interval, 1, None, next);
    script(
        backend
            .give_back_at(&key, params.tau(), undo, Some(now))
            .map(drop),
    );
    assert_eq!(server.raw(&format!("GET {stored}")), "$0\r\n\r\n");
}
