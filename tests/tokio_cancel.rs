//! Many waiters cancelled at random points (timeouts firing before, at and
//! after their slots): the schedule stays consistent. No slot is handed out
//! twice and no window holds more than `slack + 1 + window / T` permits.
#![cfg(feature = "tokio")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use paceline::tokio::AsyncLimiter;
use paceline::Rate;
use tokio::time::timeout;

const SLACK: u64 = 5;

/// `tasks` tasks take for `run`, each under a pseudo-random timeout of up to
/// `max_timeout`; returns the slots of the takes that completed.
async fn takes_under_random_timeouts(
    limiter: &AsyncLimiter,
    tasks: u64,
    run: Duration,
    max_timeout: Duration,
) -> Vec<u64> {
    let slots = Arc::new(Mutex::new(Vec::new()));
    let start = tokio::time::Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let limiter = limiter.clone();
            let slots = Arc::clone(&slots);
            tokio::spawn(async move {
                let mut x = task.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                while start.elapsed() < run {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let limit = max_timeout.mul_f64((x % 1000) as f64 / 1000.0);
                    if let Ok(slot) = timeout(limit, limiter.take()).await {
                        slots.lock().unwrap().push(slot.at().as_nanos() as u64);
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
    let mut slots = Arc::try_unwrap(slots).unwrap().into_inner().unwrap();
    slots.sort_unstable();
    slots
}

/// No slot twice; any `k + 1` permits span at least `(k - SLACK) * T`.
fn assert_consistent(slots: &[u64], interval: u64) {
    assert!(slots.len() > 100, "only {} permits", slots.len());
    assert!(
        slots.windows(2).all(|w| w[0] < w[1]),
        "a slot handed out twice"
    );
    for i in 0..slots.len() {
        for j in i + 1..slots.len() {
            let k = (j - i) as u64;
            assert!(
                slots[j] - slots[i] >= k.saturating_sub(SLACK) * interval,
                "{} permits within {} ns",
                k + 1,
                slots[j] - slots[i]
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn random_cancellations_keep_the_schedule_consistent_in_paused_time() {
    let limiter = AsyncLimiter::builder(Rate::per_second(1000))
        .slack(SLACK)
        .build()
        .unwrap();
    let slots = takes_under_random_timeouts(
        &limiter,
        200,
        Duration::from_secs(2),
        300 * Duration::from_millis(1),
    )
    .await;
    assert_consistent(&slots, 1_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_cancellations_keep_the_schedule_consistent_on_threads() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10_000))
        .slack(SLACK)
        .build()
        .unwrap();
    let slots = takes_under_random_timeouts(
        &limiter,
        200,
        Duration::from_millis(500),
        Duration::from_millis(30),
    )
    .await;
    assert_consistent(&slots, 100_000);
}
