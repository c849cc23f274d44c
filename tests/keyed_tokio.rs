//! KeyedLimiter's async calls, in Tokio's paused time.
#![cfg(all(feature = "tokio", feature = "keyed"))]

use paceline::AsyncTake;
use std::time::Duration;

use paceline::tokio::AsyncKeyedLimiter;
use paceline::{clock::Clock, Error, KeyedLimiter, Limit, Limits, Rate};
use tokio::time::Instant;

/// A clock on Tokio's time, so that pausing it pauses the limiter.
struct TokioTime(Instant);

impl Clock for TokioTime {
    fn now(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// 10/s with slack 2, on paused Tokio time.
fn limiter() -> AsyncKeyedLimiter<u32, TokioTime> {
    AsyncKeyedLimiter::from(
        KeyedLimiter::builder(Rate::per_second(10))
            .slack(2)
            .clock(TokioTime(Instant::now()))
            .build()
            .unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn take_sleeps_until_the_keys_slot() {
    let l = limiter();
    let start = Instant::now();
    for _ in 0..3 {
        assert_eq!(l.take(&1).await.map(|t| t.at()), Ok(Duration::ZERO));
    }
    assert_eq!(l.take(&1).await.map(|t| t.at()), Ok(ms(100)));
    assert_eq!(start.elapsed(), ms(100));
    // Another key has its own burst.
    assert_eq!(l.take_n(&2, 3).await.map(|t| t.at()), Ok(ms(100)));
    assert_eq!(
        l.take_n_timeout(&1, 1, ms(50)).await,
        Err(Error::QueueFull {
            wait: ms(100),
            max_wait: ms(50)
        })
    );
    // Key 2 spent its burst at 100 ms: its next slot is 100 ms later.
    assert_eq!(
        l.take_timeout(&2, ms(100)).await.map(|t| t.at()),
        Ok(ms(200))
    );
    // Even a timeout of zero is refused as a full queue, not `RetryAfter`.
    assert_eq!(
        l.take_timeout(&2, Duration::ZERO).await,
        Err(Error::QueueFull {
            wait: ms(100),
            max_wait: Duration::ZERO
        })
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_take_gives_its_slot_back() {
    let l = limiter();
    l.try_take_n(&1, 3).await.unwrap();
    // Reserves the slot at 100 ms, then is dropped at 10 ms.
    assert!(tokio::time::timeout(ms(10), l.take(&1)).await.is_err());
    tokio::time::sleep(ms(90)).await;
    // The slot at 100 ms is free again.
    assert_eq!(l.try_take(&1).await.map(drop), Ok(()));
    assert_eq!(l.try_take(&1).await, Err(Error::RetryAfter(ms(100).into())));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_take_keeps_its_slot_spent_once_someone_reserved_after_it() {
    // 1000/s, slack 2: slots within the 10 ms horizon, which takes book at
    // first poll (further ones are booked only once within it).
    let l = AsyncKeyedLimiter::from(
        KeyedLimiter::<u32, _>::builder(Rate::per_second(1000))
            .slack(2)
            .clock(TokioTime(Instant::now()))
            .build()
            .unwrap(),
    );
    l.try_take_n(&1, 3).await.unwrap();
    let mut first = Box::pin(l.take_timeout(&1, ms(1000))); // will reserve 1 ms
    let mut second = Box::pin(l.take_timeout(&1, ms(1000))); // will reserve 2 ms
    let both = async {
        // Poll both once so both reserve, then drop the first only.
        tokio::select! {
            biased;
            _ = &mut first => unreachable!("the slot is 1 ms away"),
            _ = &mut second => unreachable!("the slot is 2 ms away"),
            _ = std::future::ready(()) => {}
        }
        drop(first);
        second.await
    };
    assert_eq!(both.await.map(|t| t.at()), Ok(ms(2)));
    // The cancelled slot stayed spent: the next is at 3 ms.
    assert_eq!(l.try_take(&1).await, Err(Error::RetryAfter(ms(1).into())));
}

/// A take reserved before a rate change and cancelled after it keeps its
/// slot spent, even when the rebased schedule comes back to the very state
/// its grant left: undoing it then would erase the slot handed out since
/// (two permits at 7 ms with no slack). Slots within the 10 ms horizon,
/// which bounded takes book at first poll.
#[tokio::test(start_paused = true)]
async fn a_take_cancelled_across_a_rate_change_keeps_its_slot_spent() {
    let l = AsyncKeyedLimiter::from(
        KeyedLimiter::<u32, _>::builder(Rate::per_second(200))
            .slack(0)
            .clock(TokioTime(Instant::now()))
            .build()
            .unwrap(),
    );
    l.try_take(&1).await.unwrap();
    let mut first = Box::pin(l.take_timeout(&1, ms(1000))); // will reserve 5 ms
    let mut second = Box::pin(l.take_timeout(&1, ms(1000)));
    let both = async {
        tokio::select! {
            biased;
            _ = &mut first => unreachable!("the slot is 5 ms away"),
            _ = std::future::ready(()) => {}
        }
        // 500/s: the next slot is 2 ms after the one at 5 ms.
        l.limiter()
            .set_override(1, Rate::per_second(500), 0)
            .unwrap();
        tokio::select! {
            biased;
            _ = &mut second => unreachable!("the slot is 7 ms away"),
            _ = std::future::ready(()) => {}
        }
        drop(first);
        second.await
    };
    assert_eq!(both.await.map(|t| t.at()), Ok(ms(7)));
    assert_eq!(l.try_take(&1).await, Err(Error::RetryAfter(ms(2).into())));
}

/// Issue 30, item 7, keyed: a change of limits reaches the tasks already
/// waiting on a key, unbounded takes and held `take_timeout`s alike. Five
/// of each wait at 10/s; at 1 ms `apply` puts 1000/s in force for their
/// keys: they go within a few ms, not at their old slots (90 ms and on).
#[tokio::test(start_paused = true)]
async fn a_change_of_limits_reaches_the_keyed_tasks_already_waiting() {
    let l = AsyncKeyedLimiter::from(
        KeyedLimiter::<String, _>::builder(Rate::per_second(10))
            .slack(0)
            .clock(TokioTime(Instant::now()))
            .build()
            .unwrap(),
    );
    let start = Instant::now();
    let mut tasks = Vec::new();
    for key in ["take", "held"] {
        l.take(key).await.unwrap(); // slot 0, the next at 100 ms
        for _ in 0..5 {
            let l = l.clone();
            tasks.push(tokio::spawn(async move {
                if key == "take" {
                    l.take(key).await.unwrap();
                } else {
                    l.take_timeout(key, Duration::from_secs(10)).await.unwrap();
                }
                (key, start.elapsed())
            }));
        }
    }
    tokio::time::sleep(ms(1)).await;
    let fast = Limit::new(Rate::per_second(1000), 0);
    l.limiter()
        .apply(
            &Limits::new(Limit::new(Rate::per_second(10), 0))
                .with_override("take", fast)
                .with_override("held", fast),
        )
        .unwrap();
    let mut went = Vec::new();
    for task in tasks {
        went.push(task.await.unwrap());
    }
    assert!(
        went.iter().all(|(_, t)| *t < ms(20)),
        "after the change at 1 ms they went at {went:?}"
    );
}
