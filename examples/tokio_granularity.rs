//! What Tokio's 1 ms timer does to async pacing. At rates from 1k/s to
//! 1M/s: one task taking in a loop (the hardest case: nothing queued ahead
//! of it absorbs a late wake-up) with the default slack (`Slack::DEFAULT`,
//! 10 permits or 10 ms), with uber's 10 permits, and with the precise wait;
//! then 1000 tasks sharing the limiter with the default slack. Prints the
//! achieved rate (permits after the first over the time from the first
//! permit's slot to the last's: the schedule the limiter kept, which loses
//! whatever a stall longer than the slack forgets, without the last wake-up's
//! jitter) and how late permits went against their slots.
//!
//! ```text
//! cargo run --release --features tokio --example tokio_granularity [SECONDS_EACH]
//! ```

use std::time::{Duration, Instant};

use paceline::tokio::{AsyncLimiter, PRECISE};
use paceline::{Clock, Rate, Slack, Wait};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map_or(2.0, |a| a.parse().expect("SECONDS_EACH"));
    let run = Duration::from_secs_f64(secs);
    println!("one task takes in a loop for {secs} s per line\n");
    println!(
        "{:>8} {:<26} {:>10} {:>9} {:>10} {:>10} {:>10}",
        "rate/s", "config", "achieved/s", "error", "late p50", "late p99", "late max"
    );
    for rate in [1_000, 10_000, 100_000, 1_000_000] {
        let configs = [
            ("1 task, default slack", 1, Slack::DEFAULT, Wait::Sleep),
            ("1 task, slack 10", 1, Slack::permits(10), Wait::Sleep),
            ("1 task, PRECISE, default", 1, Slack::DEFAULT, PRECISE),
            (
                "1000 tasks, default slack",
                1000,
                Slack::DEFAULT,
                Wait::Sleep,
            ),
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
            let (mut late, mut went) = (Vec::new(), Vec::new());
            for r in runs {
                let (l, w) = r.await.expect("a pacing task");
                late.extend(l);
                went.extend(w);
            }
            late.sort_unstable();
            went.sort_unstable();
            let span = went.last().zip(went.first()).map_or(0, |(l, f)| l - f);
            let achieved = (went.len() - 1) as f64 * 1e9 / span.max(1) as f64;
            let pct = |p: usize| Duration::from_nanos(late[(late.len() - 1) * p / 100]);
            println!(
                "{rate:>8} {name:<26} {achieved:>10.0} {:>+8.4}% {:>10.1?} {:>10.1?} {:>10.1?}",
                (achieved / rate as f64 - 1.0) * 100.0,
                pct(50),
                pct(99),
                pct(100),
            );
        }
    }
}

/// Takes in a loop until `run` after `start`; how late (ns) each permit that
/// went within `run` went against its slot, and the slots (ns on the
/// limiter's clock).
async fn pace(limiter: AsyncLimiter, start: Instant, run: Duration) -> (Vec<u64>, Vec<u64>) {
    let (mut late, mut went_at) = (Vec::new(), Vec::new());
    loop {
        let slot = limiter.take().await;
        let went = limiter.clock().now();
        if start.elapsed() >= run {
            return (late, went_at);
        }
        late.push(went.saturating_sub(slot.as_nanos() as u64));
        went_at.push(slot.as_nanos() as u64);
    }
}
