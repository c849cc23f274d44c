//! How async waiters wait: never before their slot, on any clock and with
//! either wait strategy, and the precise wait under paused time.
#![cfg(feature = "tokio")]

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use paceline::tokio::{AsyncLimiter, PRECISE};
use paceline::{Clock, DefaultClock, Rate, Wait};

/// Takes `n` permits and checks that each went no earlier than its slot.
async fn assert_never_early<C: Clock>(limiter: &AsyncLimiter<C>, n: usize) {
    for _ in 0..n {
        let slot = limiter.take().await;
        let went = limiter.clock().now();
        assert!(
            went >= slot.as_nanos() as u64,
            "went at {went} ns, slot {slot:?}"
        );
    }
}

#[tokio::test]
async fn timer_waiters_never_go_before_their_slot() {
    let limiter = AsyncLimiter::builder(Rate::per_second(2_000))
        .slack(0)
        .build()
        .unwrap();
    assert_never_early(&limiter, 40).await;
}

#[tokio::test]
async fn precise_waiters_never_go_before_their_slot() {
    let limiter = AsyncLimiter::builder(Rate::per_second(2_000))
        .slack(0)
        .wait(PRECISE)
        .build()
        .unwrap();
    assert_eq!(limiter.wait_strategy(), PRECISE);
    assert_never_early(&limiter, 40).await;
}

#[tokio::test]
async fn waiters_on_another_clock_never_go_before_their_slot() {
    for wait in [Wait::Sleep, PRECISE] {
        let limiter = AsyncLimiter::builder(Rate::per_second(2_000))
            .slack(0)
            .wait(wait)
            .clock(DefaultClock::new())
            .build()
            .unwrap();
        assert_never_early(&limiter, 40).await;
    }
}

#[test]
fn precise_wait_under_paused_time_falls_back_to_the_exact_timer() {
    // A spin that never ends would hang the paused runtime, so it runs on its
    // own thread and this one gives up after 30 s of real time.
    let (done, finished) = mpsc::channel();
    thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let elapsed = runtime.block_on(async {
            let limiter = AsyncLimiter::builder(Rate::per_second(100))
                .wait(PRECISE)
                .build()
                .unwrap();
            let start = tokio::time::Instant::now();
            for i in 0..=100u32 {
                assert_eq!(limiter.take().await, Duration::from_millis(10) * i);
            }
            start.elapsed()
        });
        done.send(elapsed).unwrap();
    });
    let elapsed = finished
        .recv_timeout(Duration::from_secs(30))
        .expect("the precise wait spun forever under paused time");
    assert_eq!(elapsed, Duration::from_secs(1));
}
