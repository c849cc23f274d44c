//! paceline's main job: several threads pace through one limiter for a few
//! seconds; the program prints the target and achieved rate and how late
//! permits left against their slots, for each wait strategy.
//!
//! ```text
//! cargo run --release --example demo [RATE_PER_SEC] [THREADS] [SECONDS]
//! ```

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use paceline::{clock::Clock, AtomicLimiter, Rate, Slack, Wait};

fn main() {
    let mut args = std::env::args().skip(1);
    let rate: u64 = args
        .next()
        .map_or(2_000, |a| a.parse().expect("RATE_PER_SEC"));
    let threads: usize = args.next().map_or(4, |a| a.parse().expect("THREADS"));
    let secs: f64 = args.next().map_or(2.0, |a| a.parse().expect("SECONDS"));
    let run = Duration::from_secs_f64(secs);

    // The default slack: 10 permits or 10 ms of them, whichever is more.
    let slack = Slack::DEFAULT.permits_at(Rate::per_second(rate));
    println!(
        "paceline demo: {threads} threads share one AtomicLimiter at {rate}/s (default slack: {slack} permits, {}) for {secs} s\n",
        Slack::DEFAULT
    );
    println!(
        "{:<8} {:>10} {:>12} {:>9} {:>12} {:>12} {:>12}",
        "wait", "permits", "achieved/s", "error", "late p50", "late p99", "late max"
    );
    for (name, wait) in [("sleep", Wait::Sleep), ("precise", Wait::PRECISE)] {
        let limiter = Arc::new(
            AtomicLimiter::builder(Rate::per_second(rate))
                .wait(wait)
                .build()
                .expect("a valid configuration"),
        );
        let start = Instant::now();
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                thread::spawn(move || {
                    let mut permits = Vec::new();
                    while start.elapsed() < run {
                        let slot = limiter.take().at();
                        let left = limiter.clock().now();
                        permits.push((left, left.saturating_sub(slot.as_nanos() as u64)));
                    }
                    permits
                })
            })
            .collect();
        let permits: Vec<(u64, u64)> = workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker panicked"))
            .collect();
        // Achieved rate: permits after the first over the time from the first
        // to the last leaving.
        let first = permits.iter().map(|p| p.0).min().unwrap_or(0);
        let last = permits.iter().map(|p| p.0).max().unwrap_or(0);
        let achieved = (permits.len() - 1) as f64 / ((last - first) as f64 / 1e9);
        let mut lateness: Vec<u64> = permits.iter().map(|p| p.1).collect();
        lateness.sort_unstable();
        let pct = |p: f64| {
            let i = ((lateness.len() - 1) as f64 * p) as usize;
            Duration::from_nanos(lateness[i])
        };
        println!(
            "{:<8} {:>10} {:>12.1} {:>8.3}% {:>12?} {:>12?} {:>12?}",
            name,
            lateness.len(),
            achieved,
            (achieved / rate as f64 - 1.0) * 100.0,
            pct(0.5),
            pct(0.99),
            Duration::from_nanos(*lateness.last().unwrap_or(&0)),
        );
    }
    println!("\nlate = when take() returned minus the slot it was scheduled for.");
}
