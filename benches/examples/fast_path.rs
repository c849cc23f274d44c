//! A non-blocking take's cost beside its floor and governor's, measured
//! interleaved: each round times a batch of every call in turn, and the
//! ratios are taken within the round, so a busy machine slows both sides of
//! a ratio alike. Each batch is timed in the thread's CPU time, as
//! criterion's groups are (`benches/cpu_time.rs`). The median and the spread of the per-round ratios are
//! printed; criterion's groups (`benches/throughput.rs`) time each call in a
//! run of its own.
//!
//! ```text
//! cargo run --release -p paceline-benches --example fast_path            # 41 rounds
//! cargo run --release -p paceline-benches --example fast_path -- 101     # more rounds
//! ```
//!
//! The calls:
//! - `floor`: one raw clock read and a CAS loop moving a word forward
//!   (`benches/floor.rs`, which `benches/throughput.rs`'s `floor/clock_cas`
//!   times too);
//! - `floor_ns`: the same with the reading scaled to nanoseconds, as any
//!   limiter counting in time does (governor's clock, paceline's);
//! - `atomic_ok` / `governor_ok`: `AtomicLimiter::try_take` and governor's
//!   `check()`, every call admitted;
//! - `atomic_no` / `governor_no`: the same on a limiter already exhausted
//!   (1 an hour, no slack), every call refused and saying when to retry;
//! - `atomic_ok_is` / `governor_ok_is`: the admitted calls with only
//!   `is_ok()` read, so that what the answer holds need not be written;
//! - `atomic_no_is` / `governor_no_is`: the refused calls read the same way.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

#[path = "../interleaved.rs"]
mod interleaved;
use interleaved::{report, time};

use crossbeam_utils::CachePadded;
#[path = "../floor.rs"]
mod floor;
use floor::{cas_past, clock_cas};
use paceline::{AtomicLimiter, Rate};

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("rounds: a whole number"))
        .unwrap_or(41);

    let clock = quanta::Clock::new();
    let cell = CachePadded::new(AtomicU64::new(0));
    let ok = AtomicLimiter::builder(Rate::per_second(1_000_000_000))
        .slack(1_000_000_000)
        .full_credit(true)
        .build()
        .expect("valid limiter");
    let gov_ok = governor::RateLimiter::direct(
        governor::Quota::with_period(Duration::from_nanos(1))
            .expect("non-zero period")
            .allow_burst(NonZeroU32::MAX),
    );
    let no = AtomicLimiter::builder(Rate::per_hour(1))
        .slack(0)
        .build()
        .expect("valid limiter");
    no.take();
    let gov_no = governor::RateLimiter::direct(governor::Quota::per_hour(NonZeroU32::MIN));
    assert!(gov_no.check().is_ok());
    assert!(ok.try_take().is_ok() && gov_ok.check().is_ok());
    assert!(no.try_take().is_err() && gov_no.check().is_err());

    let names = [
        "floor",
        "floor_ns",
        "atomic_ok",
        "governor_ok",
        "atomic_no",
        "governor_no",
        "atomic_ok_is",
        "governor_ok_is",
        "atomic_no_is",
        "governor_no_is",
    ];
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut ratios: [Vec<f64>; 9] = Default::default();
    for round in 0..=rounds {
        let t = [
            time(|| {
                black_box(clock_cas(&clock, &cell));
            }),
            time(|| {
                black_box(cas_past(&cell, clock.delta_as_nanos(0, clock.raw())));
            }),
            time(|| {
                let _ = black_box(ok.try_take());
            }),
            time(|| {
                let _ = black_box(gov_ok.check());
            }),
            time(|| {
                let _ = black_box(no.try_take());
            }),
            time(|| {
                let _ = black_box(gov_no.check());
            }),
            time(|| {
                black_box(ok.try_take().is_ok());
            }),
            time(|| {
                black_box(gov_ok.check().is_ok());
            }),
            time(|| {
                black_box(no.try_take().is_ok());
            }),
            time(|| {
                black_box(gov_no.check().is_ok());
            }),
        ];
        // The first round warms up.
        if round == 0 {
            continue;
        }
        for (all, t) in ns.iter_mut().zip(t) {
            all.push(t);
        }
        let r = [
            t[2] / t[0],
            t[2] / t[1],
            t[2] / t[3],
            t[4] / t[5],
            t[3] / t[0],
            t[5] / t[0],
            t[6] / t[0],
            t[6] / t[7],
            t[8] / t[9],
        ];
        for (all, r) in ratios.iter_mut().zip(r) {
            all.push(r);
        }
    }
    let labels = [
        "admitted try_take / floor",
        "admitted try_take / floor_ns",
        "admitted try_take / governor check",
        "refused try_take / governor check",
        "governor admitted / floor",
        "governor refused / floor",
        "admitted, read as a bool / floor",
        "admitted, read as a bool / governor",
        "refused, read as a bool / governor",
    ];
    report(rounds, &names, &mut ns, &labels, &mut ratios);
}
