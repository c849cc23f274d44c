//! Stress: more threads than cores hammer one limiter on the real clock with
//! a mix of blocking and non-blocking calls, and every admitted permit's
//! decision time is checked against the window bound: in any window
//! `[a, b]`, at most `slack + 1 + (b - a) / T` permits.
//!
//! Asserts nothing about speed (the machine may be loaded); the run is
//! bounded to a fraction of a second of wall time per limiter.

mod common;
#[allow(unused_imports)]
use common::Limiter;

use std::cell::Cell;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::windows::{self, Recording, LAST_READ};
use common::{build, Kind, KINDS};
use paceline::Rate;

const THREADS: usize = 8;
const RUN: Duration = Duration::from_millis(250);
const SLACK: u64 = 10;

/// Each thread's loop: blocking takes, weighted takes, and non-blocking tries.
fn hammer(limiter: &dyn Limiter, which: usize, deadline: Instant) -> Vec<(u64, u64)> {
    let mut admitted = Vec::new();
    let mut i = which;
    while Instant::now() < deadline {
        i += 1;
        match i % 4 {
            0 => admitted.push((ns(limiter.take()), 1)),
            1 => {
                let cost = 1 + (i as u64 / 4) % 3;
                admitted.push((ns(limiter.take_n(cost).unwrap()), cost));
            }
            _ => {
                // Spin on try_take for a while, as a poller would.
                for _ in 0..50 {
                    if limiter.try_take().is_ok() {
                        admitted.push((LAST_READ.with(Cell::get), 1));
                    } else {
                        thread::yield_now();
                    }
                }
            }
        }
    }
    admitted
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap()
}

/// The plain bound at one interval `T`: `slack + 1 + (b - a) / T` permits
/// in any window `[a, b]`.
fn check_windows(kind: Kind, permits: Vec<(u64, u64)>, interval: u64) {
    check_windows_between(kind, permits, interval, interval);
}

/// The bound while the interval moves between `t_min` and `t_max`
/// ([`windows::check_windows_between`]).
fn check_windows_between(kind: Kind, permits: Vec<(u64, u64)>, t_min: u64, t_max: u64) {
    windows::check_windows_between(format_args!("{kind:?}"), permits, SLACK, t_min, t_max);
}

#[test]
fn window_bound_holds_under_contention_on_the_real_clock() {
    let rate = Rate::per_second(200_000);
    let interval = ns(rate.interval());
    for kind in KINDS {
        let limiter = build(kind, rate, SLACK, Recording::default());
        let start = Arc::new(Barrier::new(THREADS));
        let deadline = Instant::now() + RUN;
        let per_thread: Vec<Vec<(u64, u64)>> = thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|which| {
                    let (limiter, start) = (&limiter, &start);
                    s.spawn(move || {
                        start.wait();
                        hammer(&**limiter, which, deadline)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let tried = per_thread.iter().flatten().count();
        assert!(tried > THREADS, "{kind:?}: only {tried} permits admitted");
        check_windows(kind, per_thread.into_iter().flatten().collect(), interval);
    }
}

/// `set_rate` is safe while other threads take: with the rate switching
/// between 200k/s and 100k/s under the takers, no window holds more than the
/// bound for the faster rate's spacing and the slower rate's banked window.
#[test]
fn window_bound_holds_while_the_rate_changes_under_contention() {
    let (fast, slow) = (Rate::per_second(200_000), Rate::per_second(100_000));
    for kind in KINDS {
        let limiter = build(kind, fast, SLACK, Recording::default());
        let start = Arc::new(Barrier::new(THREADS + 1));
        let deadline = Instant::now() + RUN;
        let per_thread: Vec<Vec<(u64, u64)>> = thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|which| {
                    let (limiter, start) = (&limiter, &start);
                    s.spawn(move || {
                        start.wait();
                        hammer(&**limiter, which, deadline)
                    })
                })
                .collect();
            start.wait();
            let mut flips = 0u32;
            while Instant::now() < deadline {
                let rate = [slow, fast][flips as usize & 1];
                limiter.set_rate(rate).unwrap();
                flips += 1;
                thread::sleep(Duration::from_micros(200));
            }
            assert!(flips > 1);
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let admitted = per_thread.iter().flatten().count();
        assert!(
            admitted > THREADS,
            "{kind:?}: only {admitted} permits admitted"
        );
        check_windows_between(
            kind,
            per_thread.into_iter().flatten().collect(),
            ns(fast.interval()),
            ns(slow.interval()),
        );
    }
}

/// The check above can fail: a burst one permit over the bound is caught.
#[test]
fn the_window_check_catches_one_permit_too_many() {
    let burst: Vec<(u64, u64)> = (0..=SLACK + 1).map(|_| (1_000, 1)).collect();
    let caught = std::panic::catch_unwind(|| check_windows(Kind::Atomic, burst, 5_000));
    assert!(caught.is_err());
    let spaced: Vec<(u64, u64)> = (0..=SLACK)
        .map(|_| (1_000, 1))
        .chain([(6_000, 1)])
        .collect();
    check_windows(Kind::Atomic, spaced, 5_000);
}
