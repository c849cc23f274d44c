//! A client of a metered API, paced by requests and by tokens at once,
//! each call's tokens settled from its answer's usage.
//!
//! ```text
//! cargo run -p paceline-examples --features reqwest --example llm_client
//! ```
//!
//! It serves a small model API on a free loopback port that meters as LLM
//! APIs do, with a second standing in for a minute: at most 20 requests
//! and 3000 tokens a second, counting a call's tokens (its prompt and its
//! answer) when it answers, and refusing with `429` past either. Each call
//! sends a prompt of 100 tokens and allows an answer of up to 300; the
//! answer's length, and so its usage, is known only once it has come.
//!
//! The client books each call on both limits at once (`AsyncAll`): 1
//! request, and its largest cost in tokens, 400. Once the answer says
//! what it used, the booking is settled with it, and the tokens it did not
//! use go back to the schedule: the next calls go sooner. It prints what
//! it reached of the server's limits and how many calls were refused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header::RETRY_AFTER, StatusCode};
use axum::response::IntoResponse;
use axum::{routing::get, Router};
use paceline::all::AsyncAll;
use paceline::take::Within;
use paceline::tokio::AsyncLimiter;
use paceline::{AtomicLimiter, Rate};

/// The server's limits, a second standing in for a minute.
const REQUESTS_PER_SECOND: u64 = 20;
const TOKENS_PER_SECOND: u64 = 3000;
/// Every call's prompt, and the most its answer may use.
const PROMPT: u64 = 100;
const MAX_ANSWER: u64 = 300;
const RUN: Duration = Duration::from_secs(6);

/// The far side: meters requests and tokens, each a bucket of one second.
struct Meter {
    requests: AtomicLimiter,
    tokens: AtomicLimiter,
    /// Drives the answers' lengths (a fixed sequence: every run the same).
    calls: AtomicU64,
}

async fn complete(State(meter): State<Arc<Meter>>) -> impl IntoResponse {
    let n = meter.calls.fetch_add(1, Ordering::Relaxed);
    // An answer of 10 to 300 tokens, 155 on average.
    let answer = 10 + (n * 7919 % 291);
    let usage = PROMPT + answer;
    let refused = |e: paceline::Error| {
        let wait = e.retry_after().unwrap_or(Duration::from_secs(1));
        let secs = wait.as_secs_f64().ceil().max(1.0).to_string();
        (StatusCode::TOO_MANY_REQUESTS, [(RETRY_AFTER, secs)]).into_response()
    };
    if let Err(e) = meter.requests.try_take() {
        return refused(e);
    }
    if let Err(e) = meter.tokens.try_take_n(usage) {
        return refused(e);
    }
    format!("usage {usage}").into_response()
}

fn per_second(n: u64) -> Result<AtomicLimiter, paceline::BuildError> {
    // Full at the start, as an API's budget is, with a second's burst.
    AtomicLimiter::builder(Rate::per_second(n))
        .slack(n - 1)
        .full_credit(true)
        .build()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let meter = Arc::new(Meter {
        requests: per_second(REQUESTS_PER_SECOND)?,
        tokens: per_second(TOKENS_PER_SECOND)?,
        calls: AtomicU64::new(0),
    });
    let api = Router::new()
        .route("/complete", get(complete))
        .with_state(Arc::clone(&meter));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, api).await });

    // The user code: both limits, told as the API's documentation states
    // them, with no burst of their own (a steady pace from the first call).
    let requests = AsyncLimiter::builder(Rate::per_second(REQUESTS_PER_SECOND))
        .slack(0)
        .build()?;
    let tokens = AsyncLimiter::builder(Rate::per_second(TOKENS_PER_SECOND))
        .slack(MAX_ANSWER + PROMPT - 1) // room for one call's largest cost
        .build()?;
    let both = AsyncAll::new([&requests, &tokens]);
    let client = reqwest::Client::new();

    println!(
        "{} s of calls to http://{addr}/complete (the server meters {REQUESTS_PER_SECOND} requests \
         and {TOKENS_PER_SECOND} tokens a second):",
        RUN.as_secs()
    );
    let (start, mut calls, mut refused, mut used) = (Instant::now(), 0u64, 0u64, 0u64);
    while start.elapsed() < RUN {
        // Booked at the most the call may cost: its prompt and the longest answer.
        let booked = both
            .book_each([1, PROMPT + MAX_ANSWER], Within::Any)
            .await?;
        let response = client.get(format!("http://{addr}/complete")).send().await?;
        calls += 1;
        let usage = if response.status() == StatusCode::TOO_MANY_REQUESTS.as_u16() {
            refused += 1;
            0
        } else {
            let text = response.text().await?;
            let usage = text.strip_prefix("usage ").and_then(|u| u.parse().ok());
            usage.ok_or_else(|| format!("an answer without its usage: {text:?}"))?
        };
        used += usage;
        // Settled from the answer: the tokens it did not use go back.
        both.settle_each(booked, [1, usage]).await?;
    }
    let secs = start.elapsed().as_secs_f64();
    let rate = calls as f64 / secs;
    let tokens_rate = used as f64 / secs;
    println!("  calls: {calls}, refused by the server: {refused}");
    println!(
        "  requests: {rate:.1}/s, {:.2} of the server's limit",
        rate / REQUESTS_PER_SECOND as f64
    );
    println!(
        "  tokens: {tokens_rate:.0}/s, {:.2} of the server's limit (each call booked at {}, {:.0} used on average)",
        tokens_rate / TOKENS_PER_SECOND as f64,
        PROMPT + MAX_ANSWER,
        used as f64 / calls.max(1) as f64
    );
    Ok(())
}
