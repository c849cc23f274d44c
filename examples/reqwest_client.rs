//! A reqwest client paced in one line, and slowed by the far side's word.
//!
//! ```text
//! cargo run -p paceline-examples --features reqwest --example reqwest_client
//! ```
//!
//! It serves a small API on a free loopback port that answers every fourth
//! request with `429` and `Retry-After: 1`, then sends 8 requests through a
//! client paced at 5 a second that honours `Retry-After`: each line shows
//! when a request went and what came back; after a 429 the limiter's
//! schedule is pushed out by the second the server asked for, then the
//! pace goes on (no burst banked meanwhile).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header::RETRY_AFTER, StatusCode};
use axum::response::IntoResponse;
use axum::{routing::get, Router};
use paceline::reqwest::Pace;
use paceline::tokio::AsyncLimiter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The far side: every fourth request is refused for a second.
    let count = Arc::new(AtomicU64::new(0));
    let api = Router::new().route(
        "/",
        get(move || {
            let n = count.fetch_add(1, Ordering::Relaxed) + 1;
            async move {
                if n.is_multiple_of(4) {
                    (StatusCode::TOO_MANY_REQUESTS, [(RETRY_AFTER, "1")]).into_response()
                } else {
                    "ok".into_response()
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, api).await });

    // The user code: a client paced at 5 a second that listens to the far side (for a minute at most).
    let limiter = AsyncLimiter::builder("5/s".parse()?).slack(0).build()?;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(Pace::new(limiter).honour_retry_after(Duration::from_secs(60)))
        .build();

    println!(
        "8 requests to http://{addr}/ (paced at 5/s; the server refuses every fourth for 1 s):"
    );
    let start = Instant::now();
    for i in 1..=8 {
        let response = client.get(format!("http://{addr}/")).send().await?;
        println!(
            "  {i}: {:>5} ms  {}",
            start.elapsed().as_millis(),
            response.status()
        );
    }
    Ok(())
}
