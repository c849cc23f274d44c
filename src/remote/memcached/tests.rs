//! The CAS loop against the pure step, on a real `memcached`, with the
//! client's clock a [`ManualClock`] so that both decide at exactly the
//! same instants; and what the server is left holding (states, expiries).

use crate::limiter::take::Take;
#[path = "../../../tests/support/memcached_server.rs"]
mod server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::clock::ManualClock;
use crate::model::schedule::{step, Admit, Deny, Params, FRESH, FULL, ORIGIN};
use crate::remote::{self, Backend, Decision, Done};
use crate::values::rate::Rate;
use crate::Error;
use server::MemcachedServer;

/// The window step's loop: `tests/window.rs`.
mod window;

fn limiter(
    server: &MemcachedServer,
    interval: u64,
    slack: u64,
    clock: &ManualClock,
) -> MemcachedLimiter<ManualClock> {
    MemcachedLimiter::builder(
        server.addr(),
        Rate::every(Duration::from_nanos(interval)).unwrap(),
    )
    .slack(slack)
    .clock(clock.clone())
    .build()
    .unwrap()
}

/// A key no other case has used.
fn fresh_key() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("case:{}", N.fetch_add(1, Ordering::Relaxed))
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
        // Rests over 30 days, and past 2038: absolute expiries, and none.
        1_000_000_000..=(1u64 << 50),
    ]
}

/// Where the clock starts (internal ns, at least `ORIGIN`: the clock reads
/// from 0): today, or anywhere up to where the arithmetic saturates.
fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(ORIGIN + 1_763_700_000_000_000_000),
        ORIGIN..=u64::MAX,
        (u64::MAX - (1 << 40))..=u64::MAX,
    ]
}

/// The key's state before the first op: absent, or any stored word.
fn initial() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        Just(None),
        Just(Some(FRESH)),
        Just(Some(FULL)),
        any::<u64>().prop_map(Some),
    ]
}

/// The remaining TTL memcached reports for `stored` (-1: none), and its
/// value.
fn ttl_and_value(server: &MemcachedServer, stored: &str) -> Option<(i64, String)> {
    let reply = server.meta(&format!("mg {stored} t v"));
    if reply == "EN\r\n" {
        return None;
    }
    let (head, value) = reply.split_once("\r\n").unwrap();
    let ttl = head
        .split(' ')
        .find_map(|t| t.strip_prefix('t'))
        .unwrap()
        .parse()
        .unwrap();
    Some((ttl, value.trim_end().to_owned()))
}

#[test]
fn the_cas_loop_agrees_with_the_step_decision_for_decision() {
    let server = MemcachedServer::start();
    let mut runner = crate::remote::settle_cases::runner(200);
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
            let clock = ManualClock::new();
            let mut lim = limiter(&server, interval, slack, &clock);
            lim.core.keep = kept.tau();
            let key = fresh_key();
            let stored = format!("{}{key}", lim.prefix());
            let mut tat = match initial {
                None => FULL, // absent decides as at rest
                Some(word) => {
                    let v = word.to_string();
                    server.meta(&format!("ms {stored} {} T0\r\n{v}", v.len()));
                    word
                }
            };
            let mut now = start;
            // When the last grant was stored.
            let mut written_at = None;
            for op in ops {
                now = now.saturating_add(op.dt.saturating_mul(interval) / 4);
                clock.set(Duration::from_nanos(now - ORIGIN));
                let admit = match op.admit {
                    Admit::Always => Admit::Always,
                    Admit::Within(q) => Admit::Within(q.saturating_mul(interval) / 4),
                };
                let rust = step(tat, now, op.cost, params, admit);
                let backend = lim.backend();
                let mc = lim.core.request(op.cost, admit).and_then(|request| {
                    backend
                        .call(&key, remote::Op::Step(request))
                        .and_then(Done::decision)
                });
                match (rust, mc) {
                    (Ok(g), Ok(Decision::Granted(b))) => {
                        prop_assert_eq!(g.slot, b.slot, "slot");
                        prop_assert_eq!(b.now, now, "now");
                        prop_assert_eq!(b.cost, op.cost, "cost");
                        if op.cost > 0 {
                            prop_assert_eq!(b.next, g.next);
                            tat = g.next;
                            written_at = Some(now);
                        }
                    }
                    (Err(deny), Ok(Decision::Denied(mc))) if deny != Deny::CostTooLarge => {
                        prop_assert_eq!(deny, mc)
                    }
                    (Err(Deny::CostTooLarge), Err(Error::CostTooLarge { .. })) => {}
                    (rust, mc) => {
                        return Err(TestCaseError::fail(format!(
                            "tat {tat} now {now} {op:?}: rust {rust:?}, memcached {mc:?}"
                        )))
                    }
                }
                // The stored word is the model's, exactly (absent only if
                // never written), with the expiry of its rest time.
                let (peeked, n) = backend
                    .call(&key, remote::Op::Peek)
                    .and_then(Done::peeked)
                    .unwrap();
                prop_assert_eq!(peeked, tat, "stored state");
                prop_assert_eq!(n, now);
                if let Some((ttl, value)) = ttl_and_value(&server, &stored) {
                    prop_assert_eq!(value, tat.to_string());
                    if let Some(at) = written_at {
                        let wall = || {
                            std::time::SystemTime::now()
                                .duration_since(std::time::UNIX_EPOCH)
                                .unwrap()
                                .as_secs()
                        };
                        let want = cas::exptime(tat, kept.tau(), at, wall);
                        if want == 0 {
                            prop_assert_eq!(ttl, -1, "never expires");
                        } else if u64::from(want) <= cas::MAX_RELATIVE_EXPTIME {
                            // (Less by the second memcached's clock may
                            // have ticked since.)
                            prop_assert!(
                                ttl == i64::from(want) || ttl == i64::from(want) - 1,
                                "ttl {} want {}",
                                ttl,
                                want
                            );
                        } else {
                            prop_assert!(ttl > cas::MAX_RELATIVE_EXPTIME as i64, "ttl {}", ttl);
                        }
                    }
                } else {
                    prop_assert!(initial.is_none() && tat == FULL, "the key is gone");
                }
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_slow_limit_keeps_its_key_past_30_days_by_an_absolute_expiry() {
    let server = MemcachedServer::start();
    // 1/day with a burst of 100: its key rests 100 days after the burst.
    let lim = MemcachedLimiter::builder(
        server.addr(),
        Rate::every(Duration::from_secs(86_400)).unwrap(),
    )
    .slack(99)
    .build()
    .unwrap();
    for i in 0..100 {
        lim.try_take("slow")
            .unwrap_or_else(|e| panic!("permit {i}: {e}"));
    }
    // A relative expiry of 100 days would be read as a Unix time in 1970:
    // the key would be gone at once, and the burst granted again.
    match lim.try_take("slow") {
        Err(Error::RetryAfter(d)) => {
            assert!(d.duration() > Duration::from_secs(86_000), "{d:?}")
        }
        other => panic!("the 101st permit within a day: {other:?}"),
    }
    let (ttl, _) = ttl_and_value(&server, "paceline:slow").expect("the key is kept");
    let days = |d: i64| d * 86_400;
    assert!(
        (days(100)..=days(101) + 60).contains(&ttl),
        "ttl {ttl} s, want 100 days and the margin"
    );
}

#[test]
fn an_idle_key_expires_once_at_rest_and_decides_as_at_rest() {
    let server = MemcachedServer::start();
    // 10/s, slack 2: at rest 300 ms after its burst (a permit accrues only
    // after 100 ms, so the refusal below holds on a loaded machine);
    // expires within ~3 s.
    let lim = MemcachedLimiter::builder(server.addr(), Rate::per_second(10))
        .slack(2)
        .build()
        .unwrap();
    lim.try_take_n("k", 3).unwrap();
    assert!(lim.try_take("k").is_err(), "burst of slack + 1 spent");
    let (ttl, _) = ttl_and_value(&server, "paceline:k").unwrap();
    assert!((1..=3).contains(&ttl), "ttl {ttl}");
    std::thread::sleep(Duration::from_millis(3_100));
    assert!(
        ttl_and_value(&server, "paceline:k").is_none(),
        "not expired"
    );
    assert_eq!(lim.available("k").unwrap(), 3);
}

#[test]
fn a_key_holding_something_else_fails_alone_and_is_left_as_it_was() {
    let server = MemcachedServer::start();
    let lim = MemcachedLimiter::builder(server.addr(), Rate::per_second(10))
        .stats(true)
        .build()
        .unwrap();
    lim.try_take("before").unwrap();
    let huge = "z".repeat(100_000);
    for (key, value) in [("text", "hello"), ("huge", huge.as_str()), ("empty", "")] {
        server.meta(&format!("ms paceline:{key} {} T0\r\n{value}", value.len()));
        for policy_open in [false, true] {
            let lim = if policy_open {
                MemcachedLimiter::builder(server.addr(), Rate::per_second(10))
                    .on_error(FailPolicy::Open)
                    .build()
                    .unwrap()
            } else {
                lim.clone()
            };
            match lim.try_take(key) {
                Err(Error::Script(e)) => {
                    let e = e.to_string();
                    assert!(e.contains("not a paceline state"), "{e}");
                    assert!(e.contains(&format!("{} bytes", value.len())), "{e}");
                    assert!(!e.contains("hello"), "the value is echoed: {e}");
                }
                other => panic!("{key}: expected a script error, got {other:?}"),
            }
        }
        let (_, kept) = ttl_and_value(&server, &format!("paceline:{key}")).unwrap();
        assert_eq!(kept, value, "the foreign value was changed");
    }
    // Other keys are served on, on the same connection.
    // (Each `stats` is a connection of its own.)
    let before: u64 = server.stats("")["total_connections"].parse().unwrap();
    lim.try_take("after").unwrap();
    let after: u64 = server.stats("")["total_connections"].parse().unwrap();
    assert_eq!(after, before + 1, "the limiter connected again");
    let stats = lim.stats().unwrap();
    assert_eq!((stats.admitted, stats.refused), (2, 3));
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn a_give_back_restores_the_state_before_only_while_no_one_took_since() {
    use crate::remote::AsyncBackend;
    use crate::store::Booking;
    let server = MemcachedServer::start();
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_800_000_000));
    let lim = limiter(&server, 1_000_000_000, 4, &clock);
    let tau = lim.core.params.tau();
    let backend = lim.backend().to_async();
    let request = lim.core.request(1, Admit::Always).unwrap();
    // The three calls on "k", through the backend's one call.
    let step = async || match backend
        .call("k", remote::Op::Step(request))
        .await
        .and_then(Done::decision)
    {
        Ok(Decision::Granted(booking)) => booking,
        _ => panic!("not granted"),
    };
    let undo = async |booking: Booking| {
        let op = remote::Op::Undo { tau, booking };
        backend.call("k", op).await.and_then(Done::flag).unwrap()
    };
    let peek = async || {
        let peeked = backend.call("k", remote::Op::Peek).await;
        peeked.and_then(Done::peeked).unwrap().0
    };
    // A booking on an absent key, given back: the key is absent again.
    let booking = step().await;
    assert_eq!(booking.prev, None);
    assert!(undo(booking).await);
    assert!(ttl_and_value(&server, "paceline:k").is_none());
    // Two bookings; the first given back finds the second's state: no.
    let first = step().await;
    let second = step().await;
    assert!(!undo(first).await);
    assert_eq!(peek().await, second.next);
    // The second, the last: back to the first's state, with an expiry.
    assert!(undo(second).await);
    assert_eq!(peek().await, first.next);
    let (ttl, _) = ttl_and_value(&server, "paceline:k").unwrap();
    assert!(ttl > 0, "ttl {ttl}");
    // A stale undo (states that were never stored) changes nothing.
    let stale = Booking::granted(0, 5, 1, Some(5), 6);
    assert!(!undo(stale).await);
    assert_eq!(peek().await, first.next);
}

#[test]
fn the_cas_loop_settles_as_the_model_state_for_state_among_steps() {
    use crate::remote::settle_cases::{interleaved, Call as Either};
    let server = MemcachedServer::start();
    let mut runner = crate::remote::settle_cases::runner(200);
    let strategy = (
        interval(),
        0..=20u64,
        start(),
        initial(),
        proptest::collection::vec(interleaved(op()), 1..24),
    );
    runner
        .run(&strategy, |(interval, slack, start, initial, calls)| {
            let Some(params) = Params::new(interval, slack) else {
                return Ok(());
            };
            let clock = ManualClock::new();
            let lim = limiter(&server, interval, slack, &clock);
            let backend = lim.backend();
            let key = fresh_key();
            let stored = format!("{}{key}", lim.prefix());
            let mut tat = match initial {
                None => FULL,
                Some(word) => {
                    let v = word.to_string();
                    server.meta(&format!("ms {stored} {} T0\r\n{v}", v.len()));
                    word
                }
            };
            let mut now = start;
            for call in calls {
                match call {
                    Either::Step(op) => {
                        now = now.saturating_add(op.dt.saturating_mul(interval) / 4);
                        clock.set(Duration::from_nanos(now - ORIGIN));
                        let admit = match op.admit {
                            Admit::Always => Admit::Always,
                            Admit::Within(q) => Admit::Within(q.saturating_mul(interval) / 4),
                        };
                        if let Ok(g) = step(tat, now, op.cost, params, admit) {
                            tat = g.next;
                        }
                        // (Its decision is the other test's to check.)
                        let request = lim.core.request(op.cost, admit);
                        let _ = request.and_then(|r| backend.call(&key, remote::Op::Step(r)));
                    }
                    Either::Settle(s) => {
                        now = s.advance(now, interval);
                        clock.set(Duration::from_nanos(now - ORIGIN));
                        let (op, want) = s.at(tat, now, params, lim.core.keep);
                        let left = backend.call(&key, op).and_then(Done::peeked).unwrap();
                        prop_assert_eq!(left, (want, now), "tat {} {:?}", tat, op);
                        tat = want;
                    }
                }
                let (peeked, _) = backend
                    .call(&key, remote::Op::Peek)
                    .and_then(Done::peeked)
                    .unwrap();
                prop_assert_eq!(peeked, tat, "stored state");
            }
            Ok(())
        })
        .unwrap();
}
