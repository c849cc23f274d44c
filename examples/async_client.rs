//! An async client that paces its requests through one `AsyncLimiter`,
//! against a fake server (a sleep of 5–45 ms per request), so it runs
//! without a network. Three ways to use it:
//!
//! 1. workers: 50 tasks each send requests in a loop, `take().await` first;
//! 2. a burst: 300 requests arrive at once, each willing to wait 100 ms
//!    (`take_timeout`): those the queue cannot serve in time are shed at once;
//! 3. a job stream: ids paced by `PacedStreamExt::paced`, each request spawned
//!    as its permit comes, so slow responses never slow the pacing.
//!
//! ```text
//! cargo run --release --features tokio --example async_client [RATE_PER_SEC] [SECONDS]
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use paceline::tokio::{AsyncLimiter, PacedStreamExt};
use paceline::{Error, Rate};
use tokio::task::JoinSet;
use tokio::time::{sleep, Instant};

/// A client whose every request waits for a permit first.
#[derive(Clone)]
struct Client {
    limiter: AsyncLimiter,
    sent: Arc<AtomicU64>,
}

impl Client {
    /// Sends a request once the limiter allows it.
    async fn get(&self, id: u64) -> u64 {
        self.limiter.take().await;
        self.send(id).await
    }

    /// Sends a request only if its permit comes within `max_wait`; sheds it
    /// otherwise, at once.
    async fn get_within(&self, id: u64, max_wait: Duration) -> Result<u64, Error> {
        self.limiter.take_timeout(max_wait).await?;
        Ok(self.send(id).await)
    }

    /// The fake server: answers after 5–45 ms.
    async fn send(&self, id: u64) -> u64 {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let latency = 5 + id.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 41;
        sleep(Duration::from_millis(latency)).await;
        id
    }

    fn sent(&self) -> u64 {
        self.sent.swap(0, Ordering::Relaxed)
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let rate: u64 = args
        .next()
        .map_or(500, |a| a.parse().expect("RATE_PER_SEC"));
    let secs: f64 = args.next().map_or(2.0, |a| a.parse().expect("SECONDS"));
    let run = Duration::from_secs_f64(secs);
    let client = Client {
        limiter: AsyncLimiter::new(Rate::per_second(rate)),
        sent: Arc::default(),
    };
    println!(
        "async client paced at {rate}/s (slack {})\n",
        client.limiter.limiter().slack()
    );

    // 1. Workers sending in a loop, stopped (aborted) after `run`.
    let mut workers = JoinSet::new();
    for w in 0..50 {
        let client = client.clone();
        workers.spawn(async move {
            for id in (w..).step_by(50) {
                client.get(id).await;
            }
        });
    }
    sleep(run).await;
    let sent = client.sent();
    workers.shutdown().await; // waiting takes are cancel safe
    println!(
        "1. 50 workers for {secs} s: {sent} requests, {:.1}/s (target {rate}/s)",
        sent as f64 / secs
    );

    // 2. A burst, each request willing to wait 100 ms.
    sleep(Duration::from_millis(200)).await; // let slack build up again
    let max_wait = Duration::from_millis(100);
    let mut burst = JoinSet::new();
    for id in 0..300 {
        let client = client.clone();
        burst.spawn(async move { client.get_within(id, max_wait).await });
    }
    let results = burst.join_all().await;
    let shed = results
        .iter()
        .filter(|r| matches!(r, Err(Error::QueueFull { .. })))
        .count();
    println!(
        "2. burst of 300 willing to wait {max_wait:?}: {} served (slack + 1 + {} in 100 ms), {shed} shed at once",
        results.len() - shed,
        rate / 10
    );
    if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        println!("   e.g. {e}");
    }
    client.sent();

    // 3. A paced job stream, each request spawned as its permit comes.
    let jobs = (rate as f64 * secs) as u64;
    let start = Instant::now();
    let mut in_flight = JoinSet::new();
    let mut paced = futures_util::stream::iter(0..jobs).paced(&client.limiter);
    while let Some(id) = paced.next().await {
        let client = client.clone();
        in_flight.spawn(async move { client.send(id).await });
    }
    let paced_for = start.elapsed();
    in_flight.join_all().await;
    println!(
        "3. {jobs} jobs paced as a stream: released over {paced_for:.2?} ({:.1}/s), all answered after {:.2?}",
        jobs as f64 / paced_for.as_secs_f64(),
        start.elapsed()
    );
}
