//! How async waiters wait: never before their slot, on any clock and with
//! either wait strategy, and the precise wait under paused time.
#![cfg(feature = "tokio")]

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use paceline::tokio::{AsyncLimiter, PRECISE};
use paceline::{clock::Clock, clock::DefaultClock, Rate, Wait};

/// Takes `n` permits and checks that each went no earlier than its slot.
async fn assert_never_early<C: Clock>(limiter: &AsyncLimiter<C>, n: usize) {
    for _ in 0..n {
        let slot = limiter.take().await.at();
        let went = limiter.limiter().clock().now();
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
    assert_eq!(limiter.limiter().wait_strategy(), PRECISE);
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
            // 10 ms apart (the yield loop), and 1 µs apart (the spin in
            // place of the last 2 µs, which must give up on a clock that
            // does not move: the timer then wakes it, at the paused
            // timer's 1 ms granularity, never early).
            let mut elapsed = vec![];
            for (rate, interval) in [
                (100, Duration::from_millis(10)),
                (1_000_000, Duration::from_micros(1)),
            ] {
                let limiter = AsyncLimiter::builder(Rate::per_second(rate))
                    .slack(0)
                    .wait(PRECISE)
                    .build()
                    .unwrap();
                let start = tokio::time::Instant::now();
                let origin = limiter.take().await.at();
                for i in 1..=100u32 {
                    let went = limiter.take().await.at();
                    if rate == 100 {
                        assert_eq!(went, origin + interval * i);
                    } else {
                        assert!(went >= origin + interval * i, "{went:?}, slot {i}");
                    }
                }
                elapsed.push(start.elapsed());
            }
            elapsed
        });
        done.send(elapsed).unwrap();
    });
    let elapsed = finished
        .recv_timeout(Duration::from_secs(30))
        .expect("the precise wait spun forever under paused time");
    // At 1M/s with no slack, every other take lands 1 µs past a timer tick
    // and waits for the next: 50 paused milliseconds for 100 takes.
    assert_eq!(elapsed, [Duration::from_secs(1), Duration::from_millis(50)]);
}
