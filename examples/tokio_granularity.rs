//! What Tokio's 1 ms timer does to async pacing. At several rates: one task
//! taking in a loop (the hardest case: nothing queued ahead of it absorbs a
//! late wake-up) with the default slack of 10, with slack covering 2.5 ms and
//! 10 ms, and with the precise wait (and slack covering 2.5 ms); then 1000
//! tasks sharing the limiter with the default slack. Prints the achieved rate and how late permits went
//! against their slots.
//!
//! ```text
//! cargo run --release --features tokio --example tokio_granularity [SECONDS_EACH]
//! ```

use std::time::{Duration, Instant};

use paceline::tokio::{AsyncLimiter, PRECISE};
use paceline::{Clock, Rate, Wait};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map_or(2.0, |a| a.parse().expect("SECONDS_EACH"));
    let run = Duration::from_secs_f64(secs);
    println!("one task takes in a loop for {secs} s per line\n");
    println!(
        "{:>8} {:<22} {:>10} {:>9} {:>10} {:>10} {:>10}",
        "rate/s", "config", "achieved/s", "error", "late p50", "late p99", "late max"
    );
    for rate in [1_000, 2_000, 5_000, 10_000, 20_000, 50_000] {
        let (s1, s2) = ((rate / 400).max(10), (rate / 100).max(10));
        let configs = [
            ("1 task, slack 10".to_string(), 1, 10, Wait::Sleep),
            (format!("1 task, slack {s1}"), 1, s1, Wait::Sleep),
            (format!("1 task, slack {s2}"), 1, s2, Wait::Sleep),
            (format!("1 task, PRECISE, {s1}"), 1, s1, PRECISE),
            ("1000 tasks, slack 10".to_string(), 1000, 10, Wait::Sleep),
        ];
        for (name, tasks, slack, wait) in configs {
            let limiter = AsyncLimiter::builder(Rate::per_second(rate))
                .slack(slack)
                .wait(wait)
                .build()
                .expect("a valid configuration");
            let start = Instant::now();
            let runs: Vec<_> = (0..tasks)
                .map(|_| tokio::spawn(pace(limiter.clone(), start, run)))
                .collect();
            let mut late = Vec::new();
            for r in runs {
                late.extend(r.await.expect("a pacing task"));
            }
            late.sort_unstable();
            let achieved = late.len() as f64 / run.as_secs_f64();
            let pct = |p: usize| Duration::from_nanos(late[(late.len() - 1) * p / 100]);
            println!(
                "{rate:>8} {name:<22} {achieved:>10.0} {:>+8.2}% {:>10.1?} {:>10.1?} {:>10.1?}",
                (achieved / rate as f64 - 1.0) * 100.0,
                pct(50),
                pct(99),
                pct(100),
            );
        }
    }
}

/// Takes in a loop until `run` after `start`; how late (ns) each permit that
/// went within `run` went against its slot.
async fn pace(limiter: AsyncLimiter, start: Instant, run: Duration) -> Vec<u64> {
    let mut late = Vec::new();
    loop {
        let slot = limiter.take().await;
        let went = limiter.clock().now();
        if start.elapsed() >= run {
            return late;
        }
        late.push(went.saturating_sub(slot.as_nanos() as u64));
    }
}
