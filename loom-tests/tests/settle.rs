//! A settle racing takes, and one racing a change of rate: the real
//! `Store::settle` (AtomicLimiter's CAS loop, MutexLimiter's lock, a keyed
//! key's entry CAS) through the limiters' cfg-gated `__settle` hooks, which
//! run the limiter's own generation check first.
//!
//! The limiter (slack 2, full credit, clock still at 0) books an estimate
//! of 3 for a call that costs 1, and settles it while other threads take.
//! Every update reports the state it replaced and the state it stored,
//! and whatever the interleaving:
//!
//! - no update is lost and the settle takes effect exactly once: the
//!   transitions chain, each from the state the one before it stored, from
//!   the booking's state to the limiter's final one, every one used once
//!   (a change of rate is one more link: the rebase of the state it
//!   found);
//! - the settle's transition is the pure step's on the state it found, in
//!   the parameters in force there; a refund across the change is dropped;
//! - the permits that went at 0, counted at their actual costs, stay
//!   within the burst `slack + 1`, and those by `T` within `slack + 2`.

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::{check, Booking, OneKey, Subject};
use paceline::model::schedule::{self, Admit, Grant, Params, ORIGIN};
use paceline::{clock::ManualClock, AtomicLimiter, MutexLimiter, Rate};

const T: Duration = Duration::from_millis(1);
const T2: Duration = Duration::from_millis(2);
const SLACK: u64 = 2;
/// The estimate booked.
const BOOKED: u64 = 3;
/// What the call cost.
const ACTUAL: u64 = 1;

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// A transition of the state: what it replaced, what it stored.
type Link = (u64, u64);

/// Whether `links`, each used once, chain from `from` to `to` (some order
/// of them does), a rebase from `old` to `new` at 0 counted as one more
/// link when given.
fn chains(from: u64, to: u64, links: &[Link], rebase: Option<(Params, Params)>) -> bool {
    fn go(at: u64, to: u64, left: &mut Vec<Link>, rebase: Option<(Params, Params)>) -> bool {
        if left.is_empty() && rebase.is_none() {
            return at == to;
        }
        if let Some((old, new)) = rebase {
            if go(schedule::rebase(at, ORIGIN, old, new), to, left, None) {
                return true;
            }
        }
        for i in 0..left.len() {
            if left[i].0 == at {
                let link = left.remove(i);
                let found = go(link.1, to, left, rebase);
                left.insert(i, link);
                if found {
                    return true;
                }
            }
        }
        false
    }
    go(from, to, &mut links.to_vec(), rebase)
}

/// The states a chain of `links` from `from` (and a rebase, if given)
/// can end at.
fn ends(from: u64, links: &[Link], rebase: Option<(Params, Params)>) -> Vec<u64> {
    let mut ends: Vec<u64> = links.iter().map(|l| l.1).chain([from]).collect();
    if let Some((old, new)) = rebase {
        let rebased: Vec<u64> = ends
            .iter()
            .map(|&e| schedule::rebase(e, ORIGIN, old, new))
            .collect();
        ends.extend(rebased);
    }
    ends
}

/// The limiter's state, read back through what it answers at clock 0: it
/// must answer as the pure step does on `state` under `p`.
fn answers_as<L: Subject>(limiter: &L, state: u64, p: Params) -> bool {
    let (now, free) = (ORIGIN, nanos(limiter.next_free()));
    limiter.available() == schedule::available(state, now, p)
        && free == schedule::next_free(state, now, p)
}

/// `links` in clock time, in units of `T`: `prev -> next`.
fn show(links: &[Link]) -> String {
    let t = |ns: u64| (ns as f64 - ORIGIN as f64) / nanos(T) as f64;
    let shown: Vec<String> = links
        .iter()
        .map(|&(prev, next)| format!("{}T -> {}T", t(prev), t(next)))
        .collect();
    shown.join(", ")
}

fn link(grant: &Grant) -> Link {
    (grant.prev, grant.next)
}

fn params(interval: Duration) -> Params {
    Params::new(nanos(interval), SLACK).unwrap()
}

/// Books the estimate, whose permit goes at once, at clock 0.
fn book<L: Subject>(limiter: &L) -> (Booking, Grant) {
    let booking = limiter
        .book(BOOKED, Admit::Within(0))
        .expect("a full limiter admits 3 of its 3");
    (booking, booking.__grant().expect("an in-process booking"))
}

/// The settle racing a `try_take` and then a blocking take.
fn a_settle_racing_takes<L: Subject>() {
    check(&format!("{} settle", L::NAME), || {
        let limiter = Arc::new(L::build(T, SLACK, true, ManualClock::new()));
        let p = params(T);
        let (booking, booked) = book(&*limiter);

        let settler = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.settle(booking, ACTUAL))
        };
        let taker = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                let tried = limiter.reserve(1, Admit::Within(0)).ok();
                let taken = limiter.reserve(1, Admit::Always).expect("a take waits");
                tried.into_iter().chain([taken]).collect::<Vec<_>>()
            })
        };
        let settled = settler.join().unwrap().expect("no change: always settled");
        let grants = taker.join().unwrap();
        let name = L::NAME;

        // The settle is the pure step on the state it found.
        let went = booked.slot.max(ORIGIN);
        let (found, left) = settled;
        assert_eq!(
            left,
            schedule::settle(found, ORIGIN, went, BOOKED, ACTUAL, p),
            "{name}: the settle stored what the step does not on [{}]",
            show(&[settled])
        );
        // Every update once, chained: nothing lost, the settle once.
        let mut links: Vec<Link> = grants.iter().map(link).collect();
        links.push(settled);
        let end = ends(booked.next, &links, None)
            .into_iter()
            .find(|&end| chains(booked.next, end, &links, None) && answers_as(&*limiter, end, p));
        assert!(
            end.is_some(),
            "{name}: the updates [{}] do not chain from 1T to the limiter's state",
            show(&links)
        );
        // At clock 0: the booking at its actual cost and what went with it.
        let at_once = grants.iter().filter(|g| g.slot <= ORIGIN).count() as u64;
        assert!(
            ACTUAL + at_once <= SLACK + 1,
            "{name}: {} permits went at once, over the burst {}: [{}], settle [{}]",
            ACTUAL + at_once,
            SLACK + 1,
            show(&grants.iter().map(link).collect::<Vec<_>>()),
            show(&[settled])
        );
        let by_t = grants
            .iter()
            .filter(|g| g.slot <= ORIGIN + nanos(T))
            .count() as u64;
        assert!(ACTUAL + by_t <= SLACK + 2, "{name}: over the bound by T");
    });
}

/// The settle racing a change of rate (to `2 * T`, then a `try_take`) and
/// a `try_take`: settled before the change in the old rate, or dropped
/// after it; every update chained, the rebase once.
fn a_settle_racing_a_change<L: Subject>() {
    check(&format!("{} settle set_rate", L::NAME), || {
        let limiter = Arc::new(L::build(T, SLACK, true, ManualClock::new()));
        let (old, new) = (params(T), params(T2));
        let (booking, booked) = book(&*limiter);

        let settler = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.settle(booking, ACTUAL))
        };
        let changer = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                limiter.set_rate(Rate::every(T2).unwrap()).unwrap();
                limiter.reserve(1, Admit::Within(0)).ok()
            })
        };
        let mine = limiter.reserve(1, Admit::Within(0)).ok();
        let settled = settler.join().unwrap();
        let after = changer.join().unwrap();
        let name = L::NAME;

        let mut links: Vec<Link> = mine.iter().chain(&after).map(link).collect();
        if let Some((found, left)) = settled {
            // Only before the change: in the old rate.
            let went = booked.slot.max(ORIGIN);
            assert_eq!(
                left,
                schedule::settle(found, ORIGIN, went, BOOKED, ACTUAL, old),
                "{name}: the settle is not the old rate's step on [{}]",
                show(&[(found, left)])
            );
            links.push((found, left));
        }
        let rebase = Some((old, new));
        let end = ends(booked.next, &links, rebase).into_iter().find(|&end| {
            chains(booked.next, end, &links, rebase) && answers_as(&*limiter, end, new)
        });
        assert!(
            end.is_some(),
            "{name}: the updates [{}] and one rebase do not chain from 1T to the limiter's \
             state (settled: {})",
            show(&links),
            settled.is_some()
        );
    });
}

#[test]
fn atomic_limiter_settle_racing_takes() {
    a_settle_racing_takes::<AtomicLimiter<ManualClock>>();
}

#[test]
fn mutex_limiter_settle_racing_takes() {
    a_settle_racing_takes::<MutexLimiter<ManualClock>>();
}

#[test]
fn keyed_limiter_settle_racing_takes() {
    a_settle_racing_takes::<OneKey>();
}

#[test]
fn atomic_limiter_settle_racing_a_change() {
    a_settle_racing_a_change::<AtomicLimiter<ManualClock>>();
}

#[test]
fn mutex_limiter_settle_racing_a_change() {
    a_settle_racing_a_change::<MutexLimiter<ManualClock>>();
}

#[test]
fn keyed_limiter_settle_racing_a_change() {
    a_settle_racing_a_change::<OneKey>();
}
