//! A quota per window's non-blocking take beside pacing's, on one key of a
//! keyed limiter, measured interleaved as `fast_path.rs` measures: each
//! round times a batch of every call in turn (in the thread's CPU time),
//! and the ratios are taken within the round, so a busy machine slows both
//! sides of a ratio alike. The median and the spread of the per-round
//! ratios are printed.
//!
//! ```text
//! cargo run --release -p paceline-benches --example window_path            # 41 rounds
//! cargo run --release -p paceline-benches --example window_path -- 101     # more rounds
//! ```
//!
//! The calls, each `try_take` on one key tracked in a `KeyedLimiter<u64>`:
//! - `pace_ok` / `window_ok`: every call admitted (pacing at 10^9/s with a
//!   burst of a billion; a quota of 2^40 a day);
//! - `pace_no` / `window_no`: every call refused, the key spent (pacing at
//!   1 an hour with no slack; a quota of 1 a day), each saying when to
//!   retry;
//! - `atomic_ok`: a lone `AtomicLimiter`'s admitted `try_take`, the floor of
//!   a take without a key.

use std::hint::black_box;

#[path = "../interleaved.rs"]
mod interleaved;
use interleaved::{report, time};

use paceline::model::window::Window;
use paceline::{AtomicLimiter, KeyedLimiter, Limit, Rate, Take};

/// A keyed limiter whose every key is held to `limit`.
fn keyed(limit: Limit) -> KeyedLimiter<u64> {
    KeyedLimiter::builder(Rate::per_second(1))
        .limit(limit)
        .build()
        .expect("a limit a keyed limiter takes")
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("rounds: a whole number"))
        .unwrap_or(41);

    let day = Window::Day { offset: 0 };
    let pace_ok = keyed(Limit::new(Rate::per_second(1_000_000_000), 999_999_999));
    let window_ok = keyed(Limit::per_window(1 << 40, day).expect("a valid quota"));
    let pace_no = keyed(Limit::new(Rate::per_hour(1), 0));
    let window_no = keyed(Limit::per_window(1, day).expect("a valid quota"));
    let atomic_ok = AtomicLimiter::builder(Rate::per_second(1_000_000_000))
        .slack(1_000_000_000)
        .full_credit(true)
        .build()
        .expect("valid limiter");
    let key = 7u64;
    assert!(pace_no.try_take(&key).is_ok() && window_no.try_take(&key).is_ok());
    assert!(pace_ok.try_take(&key).is_ok() && window_ok.try_take(&key).is_ok());
    assert!(pace_no.try_take(&key).is_err() && window_no.try_take(&key).is_err());

    let names = ["pace_ok", "window_ok", "pace_no", "window_no", "atomic_ok"];
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut ratios: [Vec<f64>; 3] = Default::default();
    for round in 0..=rounds {
        let t = [
            time(|| {
                let _ = black_box(pace_ok.try_take(black_box(&key)));
            }),
            time(|| {
                let _ = black_box(window_ok.try_take(black_box(&key)));
            }),
            time(|| {
                let _ = black_box(pace_no.try_take(black_box(&key)));
            }),
            time(|| {
                let _ = black_box(window_no.try_take(black_box(&key)));
            }),
            time(|| {
                let _ = black_box(atomic_ok.try_take());
            }),
        ];
        // The first round warms up.
        if round == 0 {
            continue;
        }
        for (all, t) in ns.iter_mut().zip(t) {
            all.push(t);
        }
        for (all, r) in ratios
            .iter_mut()
            .zip([t[1] / t[0], t[3] / t[2], t[0] / t[4]])
        {
            all.push(r);
        }
    }
    let labels = [
        "window admitted / pacing admitted",
        "window refused / pacing refused",
        "keyed pacing admitted / AtomicLimiter",
    ];
    report(rounds, &names, &mut ns, &labels, &mut ratios);
}
