//! The async limiter in real time: 1000 tasks on a multi-thread runtime
//! pace at 10 000/s for 2 s and achieve the target within 0.5 %.
//!
//! Real time on a shared machine is noisy: a run that loses the CPU for a
//! few milliseconds at the end falls short through no fault of the limiter,
//! so the test allows three attempts and prints every figure. It never lets
//! through more than the schedule allows, which it checks on every attempt.
#![cfg(feature = "tokio")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use paceline::tokio::AsyncLimiter;
use paceline::Rate;

const RATE: u64 = 10_000;
const TASKS: usize = 1000;
const RUN: Duration = Duration::from_secs(2);
const ATTEMPTS: usize = 3;

/// Permits that went (their take completed) within `RUN`, over the target;
/// and the same over the middle second alone, away from the run's ends.
fn achieved_ratio() -> (f64, f64) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let limiter = AsyncLimiter::new(Rate::per_second(RATE));
        let went = Arc::new(AtomicU64::new(0));
        let middle = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let limiter = limiter.clone();
                let (went, middle) = (Arc::clone(&went), Arc::clone(&middle));
                tokio::spawn(async move {
                    loop {
                        limiter.take().await;
                        let at = start.elapsed();
                        if at >= RUN {
                            break;
                        }
                        went.fetch_add(1, Ordering::Relaxed);
                        if at >= RUN / 4 && at < RUN * 3 / 4 {
                            middle.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let went = went.load(Ordering::Relaxed);
        // A fresh limiter has no credit: slots 0, 100 µs, ... make exactly
        // RATE * 2 before 2 s, and no permit may go before its slot.
        assert!(went <= RATE * 2, "{went} permits in {RUN:?} at {RATE}/s");
        // The middle half of 2 s is one second: RATE permits.
        let middle = middle.load(Ordering::Relaxed) as f64 / RATE as f64;
        (went as f64 / (RATE * 2) as f64, middle)
    })
}

#[test]
fn thousand_tasks_achieve_ten_thousand_per_second_within_half_a_percent() {
    let mut ratios = Vec::new();
    for _ in 0..ATTEMPTS {
        let (ratio, middle) = achieved_ratio();
        eprintln!(
            "achieved {ratio:.4} of {RATE}/s ({:+.3} %); middle second {:+.3} %",
            (ratio - 1.0) * 100.0,
            (middle - 1.0) * 100.0
        );
        ratios.push(ratio);
        if ratio >= 0.995 {
            return;
        }
    }
    panic!("no attempt within 0.5 % of {RATE}/s: {ratios:?}");
}
