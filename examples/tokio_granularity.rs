//! What Tokio's 1 ms timer does to async pacing. At rates from 1k/s to
//! 1M/s: one task taking in a loop (the hardest case: nothing queued ahead
//! of it absorbs a late wake-up) with the default slack (`Slack::DEFAULT`,
//! 10 permits or 10 ms), with uber's 10 permits, and with the precise wait;
//! then 1000 tasks sharing the limiter with the default slack. Prints the
//! achieved rate (permits over the run), the long-run error (the rate
//! between the first tenth of the permits and the last tenth, each placed by
//! its median lateness against the ideal schedule `k / rate` on the OS
//! clock: only rate lost for good moves it, not one late wake-up at either
//! end) and how late permits went against their slots.
//!
//! ```text
//! cargo run --release --features tokio --example tokio_granularity [SECONDS_EACH]
//! ```

use std::time::{Duration, Instant};

use paceline::tokio::{AsyncLimiter, PRECISE};
use paceline::{clock::Clock, Rate, Slack, Wait};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map_or(2.0, |a| a.parse().expect("SECONDS_EACH"));
    let run = Duration::from_secs_f64(secs);
    println!("one task takes in a loop for {secs} s per line\n");
    println!(
        "{:>8} {:<26} {:>10} {:>9} {:>10} {:>10} {:>10}",
        "rate/s", "config", "achieved/s", "long-run", "late p50", "late p99", "late max"
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
            let achieved = went.len() as f64 / run.as_secs_f64();
            let pct = |p: usize| Duration::from_nanos(late[(late.len() - 1) * p / 100]);
            println!(
                "{rate:>8} {name:<26} {achieved:>10.0} {:>+8.4}% {:>10.1?} {:>10.1?} {:>10.1?}",
                long_run_error(&went, rate),
                pct(50),
                pct(99),
                pct(100),
            );
        }
    }
}

/// The rate between the first tenth of the permits (`went`: ns after the
/// start, sorted) and the last tenth, each placed by its median lateness
/// against permit `k`'s ideal time `k / rate`, against `rate`, in %.
fn long_run_error(went: &[u64], rate: u64) -> f64 {
    let n = went.len();
    if n < 20 {
        return f64::NAN;
    }
    let interval = 1e9 / rate as f64;
    let tenth = n / 10;
    let median_lateness = |range: std::ops::Range<usize>| {
        let mut late: Vec<f64> = range
            .map(|k| went[k] as f64 - k as f64 * interval)
            .collect();
        late.sort_by(f64::total_cmp);
        late[late.len() / 2]
    };
    let (k1, k2) = (tenth as f64 / 2.0, (n - tenth) as f64 + tenth as f64 / 2.0);
    let t1 = k1 * interval + median_lateness(0..tenth);
    let t2 = k2 * interval + median_lateness(n - tenth..n);
    ((k2 - k1) * 1e9 / (t2 - t1) / rate as f64 - 1.0) * 100.0
}

/// Takes in a loop until `run` after `start`; how late (ns) each permit that
/// went within `run` went against its slot, and when it went (ns after
/// `start`, on the OS clock).
async fn pace(limiter: AsyncLimiter, start: Instant, run: Duration) -> (Vec<u64>, Vec<u64>) {
    let (mut late, mut went_at) = (Vec::new(), Vec::new());
    loop {
        let slot = limiter.take().await.at();
        let went = limiter.limiter().clock().now();
        if start.elapsed() >= run {
            return (late, went_at);
        }
        late.push(went.saturating_sub(slot.as_nanos() as u64));
        went_at.push(start.elapsed().as_nanos() as u64);
    }
}
