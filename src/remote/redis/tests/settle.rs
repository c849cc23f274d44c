//! The Lua settle against the Rust one, among steps, on a real
//! `redis-server`, at a test clock as the step's test runs it.

use super::*;
use crate::remote::settle_cases::{interleaved, Call as Either};

#[test]
fn lua_settle_agrees_with_rust_settle_state_for_state_among_steps() {
    let server = RedisServer::start();
    let mut runner = crate::remote::settle_cases::runner(300);
    let strategy = (
        interval(),
        0..=20u64,
        prop_oneof![Just(0u64), 1..=1_000u64],
        start(),
        initial(),
        proptest::collection::vec(interleaved(op()), 1..24),
    );
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
                let mut lim = limiter(&server, interval, slack);
                lim.core.keep = kept.tau();
                let backend = lim.backend();
                let key = fresh_key();
                let mut tat = match initial {
                    None => FULL,
                    Some(word) => {
                        server.raw(&format!("SET {}{key} {word}", lim.prefix()));
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
                            let lua = lim
                                .core
                                .request(op.cost, admit)
                                .and_then(|request| backend.step_at(&key, &request, Some(now)));
                            match (rust, lua) {
                                (Ok(g), Ok((Decision::Granted(b), _))) => {
                                    prop_assert_eq!(g.slot, b.slot, "slot");
                                    tat = g.next;
                                }
                                (Err(deny), Ok((Decision::Denied(lua), _)))
                                    if deny != Deny::CostTooLarge =>
                                {
                                    prop_assert_eq!(deny, lua)
                                }
                                (Err(Deny::CostTooLarge), Err(Error::CostTooLarge { .. })) => {}
                                (rust, lua) => {
                                    return Err(TestCaseError::fail(format!(
                                        "tat {tat} now {now} {op:?}: rust {rust:?}, lua {lua:?}"
                                    )))
                                }
                            }
                        }
                        Either::Settle(s) => {
                            now = s.advance(now, interval);
                            let (op, want) = s.at(tat, now, params, kept.tau());
                            let (done, ttl) = backend.call_at(&key, op, Some(now)).unwrap();
                            let (left, n) = done.peeked().unwrap();
                            prop_assert_eq!(left, want, "tat {} now {} {:?}", tat, now, op);
                            prop_assert_eq!(n, now);
                            if want != tat {
                                prop_assert_eq!(ttl, expected_ttl_ms(want, kept.tau(), now), "ttl");
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

/// A settle is never sent twice: one that meets a pooled connection the
/// server dropped (it restarted) fails, where a take is sent again on a
/// fresh connection; the next settle goes through.
#[test]
fn a_settle_is_not_sent_again_on_a_fresh_connection() {
    use crate::limiter::take::Within;
    let mut server = RedisServer::start_with(Some(0), &[]);
    let lim = RedisLimiter::builder(server.tcp_url(), Rate::per_minute(1))
        .slack(4)
        .build()
        .unwrap();
    let booked = lim.book("k", 3, Within::Now).unwrap();
    server.stop();
    server.restart();
    let e = lim.settle("k", booked, 1).unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
    // A take on such a connection is sent again (the failure above
    // dropped that one: this take makes the one the restart kills).
    lim.try_take("k").unwrap();
    server.stop();
    server.restart();
    lim.try_take("other").unwrap();
    // The key was forgotten, at rest: 1 booked, 1 given back.
    let booked = lim.book("k", 1, Within::Now).unwrap();
    assert_eq!(lim.available("k").unwrap(), 4);
    lim.settle("k", booked, 0).unwrap();
    assert_eq!(lim.available("k").unwrap(), 5, "the refund went through");
}
