//! `PacedStreamExt`: a stream's items paced through an async limiter.
#![cfg(feature = "tokio")]

use std::time::Duration;

use futures_util::{stream, FutureExt, Stream, StreamExt};
use paceline::tokio::{AsyncLimiter, PacedStreamExt};
use paceline::Rate;
use tokio::time::{timeout, Instant};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn paced_stream_yields_every_item_at_its_slot() {
    let limiter = AsyncLimiter::new(Rate::per_second(50));
    let start = Instant::now();
    let times: Vec<(u32, Duration)> = stream::iter(0..5)
        .paced(&limiter)
        .map(|item| (item, start.elapsed()))
        .collect()
        .await;
    let expected: Vec<(u32, Duration)> = (0..5).map(|i| (i, 20 * MS * i)).collect();
    assert_eq!(times, expected);
}

#[tokio::test(start_paused = true)]
async fn ended_stream_spends_no_permit() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    let items: Vec<u8> = stream::iter([1u8]).paced(&limiter).collect().await;
    assert_eq!(items, [1]);
    // One permit (t = 0) spent; pulling `None` reserved nothing more.
    assert_eq!(limiter.limiter().next_free(), 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn paced_stream_dropped_while_waiting_gives_the_slot_back() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    let mut paced = stream::iter(0..10).paced(&limiter);
    assert_eq!(paced.next().now_or_never(), Some(Some(0)));
    assert_eq!(paced.next().now_or_never(), None); // item 1 waits for 100 ms
    assert_eq!(paced.size_hint(), (9, Some(9)));
    drop(paced);
    assert_eq!(limiter.take().await.at(), 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn paced_stream_is_cancel_safe_between_polls() {
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    let mut paced = stream::iter(0..3).paced(&limiter);
    // A timeout that fires mid-wait loses nothing: the item is kept and
    // yielded at its slot on the next poll.
    assert_eq!(paced.next().await, Some(0));
    assert!(timeout(50 * MS, paced.next()).await.is_err());
    let start = Instant::now();
    assert_eq!(paced.next().await, Some(1));
    assert_eq!(start.elapsed(), 50 * MS);
    assert_eq!(paced.next().await, Some(2));
    assert_eq!(paced.next().await, None);
}

#[tokio::test(start_paused = true)]
async fn streams_and_takes_share_one_schedule() {
    let limiter = AsyncLimiter::new(Rate::per_second(100));
    let start = Instant::now();
    let paced = stream::iter(0..50).paced(&limiter).count();
    let direct = async {
        for _ in 0..50 {
            limiter.take().await;
        }
    };
    let (n, ()) = tokio::join!(paced, direct);
    assert_eq!(n, 50);
    // 100 permits at 100/s: the last at 990 ms.
    assert_eq!(start.elapsed(), 990 * MS);
}

#[test]
fn limiter_futures_and_paced_streams_can_move_between_threads() {
    fn send<T: Send + 'static>(_: T) {}
    fn sync<T: Sync>(_: &T) {}
    let limiter = AsyncLimiter::new(Rate::per_second(10));
    sync(&limiter);
    send(stream::iter(0..3).paced(&limiter));
    let owned = limiter.clone();
    send(async move {
        owned.take().await;
        owned.take_n(2).await.ok();
        owned.take_timeout(MS).await.ok();
    });
}
