//! A paced reqwest client that reads the far side's budget, against a real
//! far side that announces it: FastAPI with slowapi at 100 requests a
//! second (`X-RateLimit-*`), served by uvicorn on loopback (the harness of
//! `tests/far_side.rs`, its venv made by `scripts/far_side_venv.sh`).
//!
//! ```text
//! cargo run --release -p paceline-benches --features far-side --example far_side [-- SECS]
//! ```
//!
//! The client's limiter starts at four times the announced rate (its
//! slack the default);
//! `Pace::follow_budget` and `honour_retry_after` do the rest. One request
//! after another for SECS seconds (default 8). It prints the rate reached
//! over the run after its first two seconds, as a ratio of the announced
//! rate; the refusals; the rate the limiter was set to; and the time to
//! converge: from the first request to the first moment from which every
//! one-second window (stepped by 100 ms) holds at least 95 % of the
//! announced rate's answers.

use std::time::{Duration, Instant};

use paceline::reqwest::Pace;
use paceline::tokio::AsyncLimiter;
use paceline::Rate;
use reqwest_middleware::ClientBuilder;

#[path = "../../tests/support/slowapi_server.rs"]
mod slowapi_server;
use slowapi_server::{SlowapiServer, ANNOUNCED_PER_SECOND};

/// When the rate is measured from: past the learning.
const SETTLE: Duration = Duration::from_secs(2);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map_or(8.0, |a| a.parse().expect("SECS"));
    let run = Duration::from_secs_f64(secs);
    assert!(run > SETTLE + Duration::from_secs(1), "SECS over 3");
    let server = tokio::task::spawn_blocking(SlowapiServer::start)
        .await
        .unwrap();
    let start_rate = 4 * ANNOUNCED_PER_SECOND;
    let limiter = AsyncLimiter::new(Rate::per_second(start_rate));
    let pace = Pace::new(limiter.clone())
        .follow_budget()
        .honour_retry_after(Duration::from_secs(3));
    let inner = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let client = ClientBuilder::new(inner).with(pace).build();
    let url = server.url("/");

    let start = Instant::now();
    let (mut oks, mut refused) = (Vec::new(), 0u64);
    while start.elapsed() < run {
        let answer = client.get(&url).send().await.expect("the far side answers");
        match answer.status().as_u16() {
            200 => oks.push(start.elapsed()),
            429 => refused += 1,
            other => panic!("unexpected {other}"),
        }
    }
    let elapsed = start.elapsed();
    let announced = ANNOUNCED_PER_SECOND as f64;
    let measured = oks.iter().filter(|t| **t >= SETTLE).count() as f64;
    let rate = measured / (elapsed - SETTLE).as_secs_f64();
    let sent = oks.len() as u64 + refused;

    println!(
        "far side: slowapi {ANNOUNCED_PER_SECOND}/s (X-RateLimit-*), client limiter \
         starting at {start_rate}/s, {:.1} s, one request at a time",
        elapsed.as_secs_f64()
    );
    println!(
        "rate reached: {:.3} of announced ({rate:.1}/s after the first {} s)",
        rate / announced,
        SETTLE.as_secs()
    );
    println!("refused: {refused} of {sent} requests");
    match converged(&oks, elapsed, announced) {
        Some(at) => println!(
            "converged: {:.2} s (every 1 s window from then holds >= 95 % of the announced rate)",
            at.as_secs_f64()
        ),
        None => println!("converged: not within the run"),
    }
    println!(
        "learned: {:.2}/s",
        limiter.limiter().rate().per_second_f64()
    );
}

/// The first window start (a multiple of 100 ms) from which every
/// one-second window that ends within the run holds at least 95 % of
/// `announced` answers.
fn converged(oks: &[Duration], elapsed: Duration, announced: f64) -> Option<Duration> {
    let step = Duration::from_millis(100);
    let window = Duration::from_secs(1);
    let starts: Vec<Duration> = (0..)
        .map(|i| step * i)
        .take_while(|s| *s + window <= elapsed)
        .collect();
    let full = |s: &Duration| {
        let n = oks
            .iter()
            .filter(|t| **t >= *s && **t < *s + window)
            .count();
        n as f64 >= 0.95 * announced
    };
    // The last start that falls short; converged just after it.
    match starts.iter().rposition(|s| !full(s)) {
        None => starts.first().copied(),
        Some(i) if i + 1 < starts.len() => Some(starts[i + 1]),
        Some(_) => None,
    }
}
