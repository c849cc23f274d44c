//! The async limiter under Tokio's paused time: exact schedules, reservation
//! order, and what a dropped waiter does to the schedule.
#![cfg(feature = "tokio")]

use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use paceline::tokio::AsyncLimiter;
use paceline::{Error, Rate};
use tokio::time::{sleep, timeout, Instant};

const SECOND: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

/// `n` tasks share `limiter`, each taking in a loop for `run`; returns the
/// permits in the order they completed, as (slot, time the task resumed)
/// since `start`.
async fn run_tasks(
    limiter: &AsyncLimiter,
    n: usize,
    run: Duration,
    start: Instant,
) -> Vec<(Duration, Duration)> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let limiter = limiter.clone();
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                loop {
                    let slot = limiter.take().await.at();
                    let resumed = start.elapsed();
                    log.lock().unwrap().push((slot, resumed));
                }
            })
        })
        .collect();
    sleep(run).await;
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        let _ = task.await;
    }
    Arc::try_unwrap(log).unwrap().into_inner().unwrap()
}

#[tokio::test(start_paused = true)]
async fn tasks_sharing_a_limiter_get_ubers_counts() {
    let start = Instant::now();
    let limiter = AsyncLimiter::new(Rate::per_second(100));
    let log = run_tasks(&limiter, 10, Duration::from_millis(3500), start).await;
    let slots: Vec<Duration> = log.iter().map(|&(slot, _)| slot).collect();
    for secs in 1..=3 {
        let by = Duration::from_secs(secs);
        // The t = 0 permit counts: slots 0, 10, ..., 990 ms are 100 ...
        assert_eq!(slots.iter().filter(|&&s| s < by).count() as u64, 100 * secs);
        // ... and the one at exactly `secs` makes 101.
        assert_eq!(
            slots.iter().filter(|&&s| s <= by).count() as u64,
            100 * secs + 1
        );
    }
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_reservation_order_each_at_its_slot() {
    let start = Instant::now();
    let limiter = AsyncLimiter::new(Rate::per_second(100));
    let log = run_tasks(&limiter, 25, Duration::from_millis(995), start).await;
    // Every slot once, 10 ms apart, completed in slot order, each resumed
    // exactly at its slot (10 ms slots fall on the timer's ticks).
    assert_eq!(log.len(), 100);
    for (i, &(slot, resumed)) in log.iter().enumerate() {
        assert_eq!(slot, 10 * MS * i as u32);
        assert_eq!(resumed, slot);
    }
}

#[tokio::test(start_paused = true)]
async fn above_1000_per_second_permits_leave_in_millisecond_batches() {
    let start = Instant::now();
    let limiter = AsyncLimiter::new(Rate::per_second(10_000));
    // Ends at the 11 ms tick (which may race the permits due then).
    let log = run_tasks(&limiter, 50, Duration::from_micros(10_500), start).await;
    // Slots are exact (100 µs apart, the first at 0) ...
    let mut slots: Vec<Duration> = log
        .iter()
        .map(|&(slot, _)| slot)
        .filter(|&slot| slot < 10 * MS)
        .collect();
    slots.sort();
    let expected: Vec<Duration> = (0..100).map(|i| Duration::from_micros(100 * i)).collect();
    assert_eq!(slots, expected);
    // ... but each waiter resumes at the first millisecond tick at or after
    // its slot: ten per tick, the batches in slot order.
    for &(slot, resumed) in &log {
        let tick = MS * slot.as_micros().div_ceil(1000) as u32;
        assert_eq!(resumed, tick, "slot {slot:?}");
    }
    assert!(log.windows(2).all(|w| w[0].1 <= w[1].1));
}

#[tokio::test(start_paused = true)]
async fn dropped_waiter_gives_its_slot_back_when_no_one_reserved_after() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    assert_eq!(limiter.take().await.at(), Duration::ZERO);
    {
        let mut a = pin!(limiter.take());
        assert_eq!(a.as_mut().now_or_never(), None); // reserved the 100 ms slot
    } // dropped at 0 ms
    let start = Instant::now();
    // The next caller gets the dropped one's slot, not the one after it.
    assert_eq!(limiter.take().await.at(), 100 * MS);
    assert_eq!(start.elapsed(), 100 * MS);
    assert_eq!(limiter.take().await.at(), 200 * MS);
}

#[tokio::test(start_paused = true)]
async fn dropped_waiter_slot_stays_spent_when_someone_reserved_after() {
    // 200/s: slots 5 and 10 ms away, within the 10 ms horizon, which takes
    // book at first poll (further ones only once within it).
    let limiter = AsyncLimiter::builder(Rate::per_second(200))
        .slack(0)
        .build()
        .unwrap();
    limiter.take().await;
    let mut b = Box::pin(limiter.take_timeout(SECOND));
    {
        let mut a = pin!(limiter.take_timeout(SECOND));
        assert_eq!(a.as_mut().now_or_never(), None); // 5 ms
        assert_eq!(b.as_mut().now_or_never(), None); // 10 ms
    } // a dropped: b reserved after it, so its slot is spent
    let c = limiter.take();
    let (b, c) = tokio::join!(b, c);
    assert_eq!((b.unwrap().at(), c.at()), (10 * MS, 15 * MS));
}

#[tokio::test(start_paused = true)]
async fn waiters_dropped_newest_first_give_all_their_slots_back() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    limiter.take().await;
    {
        let mut a = pin!(limiter.take());
        let mut b = pin!(limiter.take());
        assert_eq!(a.as_mut().now_or_never(), None); // 100 ms
        assert_eq!(b.as_mut().now_or_never(), None); // 200 ms
    } // locals drop in reverse order: b, then a
    assert_eq!(limiter.take().await.at(), 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn waiter_dropped_after_its_slot_has_taken_its_permit() {
    // 200/s: a slot 5 ms away, within the horizon: booked at first poll.
    let limiter = AsyncLimiter::builder(Rate::per_second(200))
        .slack(0)
        .build()
        .unwrap();
    limiter.take().await;
    {
        let mut a = pin!(limiter.take_timeout(SECOND));
        assert_eq!(a.as_mut().now_or_never(), None); // 5 ms
        tokio::time::advance(8 * MS).await; // its slot passes unpolled
    }
    assert_eq!(limiter.take().await.at(), 10 * MS);
}

#[tokio::test(start_paused = true)]
async fn take_under_a_timeout_that_fires_gives_the_slot_back() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    limiter.take().await;
    assert!(timeout(50 * MS, limiter.take()).await.is_err());
    // At 50 ms the dropped slot (100 ms) is still ahead: it is the next one.
    assert_eq!(limiter.take().await.at(), 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn dropped_take_n_gives_its_whole_cost_back() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    limiter.take().await;
    assert!(timeout(MS, limiter.take_n(5)).await.is_err()); // slot 500 ms
    assert_eq!(limiter.limiter().next_free(), 99 * MS);
    assert_eq!(limiter.take().await.at(), 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn dropped_take_timeout_gives_its_slot_back() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    limiter.take().await;
    assert!(timeout(MS, limiter.take_timeout(200 * MS)).await.is_err());
    assert_eq!(
        limiter.take_timeout(200 * MS).await.map(|t| t.at()),
        Ok(100 * MS)
    );
}

#[tokio::test(start_paused = true)]
async fn take_timeout_refuses_at_once_and_stores_nothing() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    limiter.take().await;
    let start = Instant::now();
    assert_eq!(
        limiter.take_timeout(50 * MS).await,
        Err(Error::QueueFull {
            wait: 100 * MS,
            max_wait: 50 * MS
        })
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(
        limiter.take_timeout(100 * MS).await.map(|t| t.at()),
        Ok(100 * MS)
    );
    assert_eq!(start.elapsed(), 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn take_n_pays_first_and_returns_its_slot() {
    let limiter = AsyncLimiter::builder(Rate::per_second(100))
        .slack(2)
        .full_credit(true)
        .build()
        .unwrap();
    // Burst 3 is banked: a cost of 5 waits for two more intervals.
    let start = Instant::now();
    assert_eq!(limiter.take_n(5).await.map(|t| t.at()), Ok(20 * MS));
    assert_eq!(start.elapsed(), 20 * MS);
    assert_eq!(limiter.take_n(0).await.map(|t| t.at()), Ok(20 * MS));
    assert_eq!(
        limiter.take_n(u64::MAX).await,
        Err(Error::CostTooLarge { cost: u64::MAX })
    );
}

#[tokio::test(start_paused = true)]
async fn banked_credit_completes_without_waiting() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .full_credit(true)
        .build()
        .unwrap();
    for _ in 0..11 {
        assert!(limiter.take().now_or_never().is_some());
    }
    assert!(limiter.take().now_or_never().is_none());
}

#[tokio::test(start_paused = true)]
async fn try_take_and_introspection_match_the_blocking_limiter() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(1)
        .build()
        .unwrap();
    // Fresh: one request may take the whole burst, but no credit is banked.
    assert_eq!(limiter.limiter().available(), 2);
    assert!(limiter.try_take().await.is_ok());
    assert_eq!(
        limiter.try_take().await,
        Err(Error::RetryAfter((100 * MS).into()))
    );
    assert_eq!(
        limiter.try_take_n(3).await,
        Err(Error::ExceedsBurst { cost: 3, burst: 2 })
    );
    assert!(!limiter.can_take(1).await);
    assert_eq!(limiter.limiter().next_free(), 100 * MS);
    sleep(300 * MS).await;
    assert_eq!(limiter.limiter().available(), 2);
    assert!(limiter.can_take(2).await);
    limiter.limiter().set_rate(Rate::per_second(100)).unwrap();
    assert_eq!(limiter.limiter().rate(), Rate::per_second(100));
    assert_eq!(limiter.limiter().slack(), 1);
    assert!(limiter.try_take_n(2).await.is_ok());
    assert_eq!(limiter.limiter().next_free(), 10 * MS);
}

/// A take reserved before a rate change and dropped after it keeps its slot
/// spent: the rebase can bring the state back to the reservation's `next`
/// word (here 8 ms, via a later reservation), and undoing it then would hand
/// the 6 ms slot out twice. (Slots within the 10 ms horizon, which takes
/// book at first poll.)
#[tokio::test(start_paused = true)]
async fn a_take_cancelled_across_a_rate_change_is_not_given_back() {
    let limiter = AsyncLimiter::builder(Rate::per_second(250))
        .slack(0)
        .full_credit(true)
        .build()
        .unwrap();
    limiter.try_take().await.unwrap(); // slot 0, next 4 ms
    let mut first = Box::pin(limiter.take_timeout(SECOND)); // slot 4 ms, next 8 ms
    assert!((&mut first).now_or_never().is_none());
    limiter.limiter().set_rate(Rate::per_second(500)).unwrap(); // next rebased to 6 ms
    let mut second = Box::pin(limiter.take_timeout(SECOND)); // slot 6 ms, next 8 ms
    assert!((&mut second).now_or_never().is_none());
    drop(first); // the state reads 8 ms again, but the rate changed since
    assert_eq!(second.await.unwrap().at(), 6 * MS);
    assert_eq!(
        limiter.try_take().await,
        Err(Error::RetryAfter((2 * MS).into()))
    );
}

/// Issue 30, item 7: a speed-up reaches the tasks already waiting. Five
/// tasks wait at 10/s; at 1 ms the rate becomes 1000/s: they wake and go
/// at the new pace (1-5 ms), not at their old slots less the 10 ms horizon
/// (90-94 ms). A slow-down reaches them too: they ask again and wait for
/// their new slots, never going early.
#[tokio::test(start_paused = true)]
async fn a_change_of_rate_reaches_the_tasks_already_waiting() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    let waiting = |limiter: &AsyncLimiter, n| {
        let start = Instant::now();
        (0..n)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    limiter.take().await;
                    start.elapsed()
                })
            })
            .collect::<Vec<_>>()
    };
    limiter.take().await; // slot 0, the next at 100 ms
    let tasks = waiting(&limiter, 5);
    sleep(MS).await;
    limiter.limiter().set_rate(Rate::per_second(1000)).unwrap();
    let mut went = Vec::new();
    for task in tasks {
        went.push(task.await.unwrap());
    }
    went.sort();
    assert!(
        went.iter().all(|t| *t < 20 * MS),
        "after the speed-up at 1 ms they went at {went:?}"
    );
    // Slower: two wait at 10/s; at 1 ms the rate becomes 1 per 5 s, and
    // they go at 5 s and 10 s (one interval after the last slot, 0).
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    limiter.take().await;
    let tasks = waiting(&limiter, 2);
    sleep(MS).await;
    limiter
        .limiter()
        .set_limit(Rate::per_minute(12), 0)
        .unwrap();
    let mut went = Vec::new();
    for task in tasks {
        went.push(task.await.unwrap());
    }
    went.sort();
    assert_eq!(went, [5 * SECOND, 10 * SECOND], "after the slow-down");
}
