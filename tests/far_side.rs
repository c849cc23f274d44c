//! `paceline::reqwest::Pace` against a real far side that announces its
//! budget: FastAPI with slowapi (`X-RateLimit-*`, `Retry-After`), served
//! by uvicorn on loopback (`tests/support/slowapi_server.rs`). A client
//! that reads the headers, not told the rate, paces to the announced
//! 100 a second; `retry` sends a refused GET again and never a POST whose
//! body is a stream; the per-tokens fields (from an axum server, as
//! slowapi writes none) pace a tokens limiter that each request pays its
//! `Tokens` to. (The reset grammar's table and each header family's are
//! the unit tests of `src/reqwest/budget.rs`.)
#![cfg(feature = "reqwest")]

#[path = "support/slowapi_server.rs"]
mod support;

use std::time::{Duration, Instant};

use paceline::reqwest::{Pace, DEFAULT_RETRIES};
use paceline::tokio::AsyncLimiter;
use paceline::Rate;
use reqwest::StatusCode;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use support::{SlowapiServer, ANNOUNCED_PER_SECOND};

fn client(pace: Pace) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    ClientBuilder::new(inner).with(pace).build()
}

async fn far_side() -> SlowapiServer {
    tokio::task::spawn_blocking(SlowapiServer::start)
        .await
        .unwrap()
}

/// What one client saw over a phase.
#[derive(Debug, Default)]
struct Seen {
    ok: u64,
    refused: u64,
    elapsed: Duration,
}

/// Sends requests to `url` one after another for `phase` (each bounded by
/// the client's 10 s timeout), counting the answers.
async fn drive(client: &ClientWithMiddleware, url: &str, phase: Duration) -> Seen {
    let start = Instant::now();
    let mut seen = Seen::default();
    while start.elapsed() < phase {
        let answer = client.get(url).send().await.expect("the far side answers");
        match answer.status() {
            StatusCode::OK => seen.ok += 1,
            StatusCode::TOO_MANY_REQUESTS => seen.refused += 1,
            other => panic!("unexpected {other}"),
        }
    }
    seen.elapsed = start.elapsed();
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reading_the_headers_paces_to_the_announced_rate() {
    let server = far_side().await;
    // Four times the announced rate: the client is not told it.
    let limiter = AsyncLimiter::new(Rate::per_second(4 * ANNOUNCED_PER_SECOND));
    let pace = Pace::new(limiter.clone())
        .follow_budget()
        .honour_retry_after(Duration::from_secs(3));
    let client = client(pace);
    let url = server.url("/");
    // Two windows to learn the quota and the window, then six measured.
    let settling = drive(&client, &url, Duration::from_secs(2)).await;
    let measured = drive(&client, &url, Duration::from_secs(6)).await;
    let sent = settling.ok + settling.refused + measured.ok + measured.refused;
    let refused = settling.refused + measured.refused;
    assert!(
        refused * 100 <= sent,
        "refused {refused} of {sent} (settling {settling:?}, measured {measured:?})"
    );
    let rate = measured.ok as f64 / measured.elapsed.as_secs_f64();
    assert!(
        rate >= 0.95 * ANNOUNCED_PER_SECOND as f64,
        "{rate:.1}/s of {ANNOUNCED_PER_SECOND}/s announced ({measured:?})"
    );
    // Paced at what it learned: under the announced rate, never over.
    let learned = limiter.limiter().rate().per_second_f64();
    assert!(
        learned <= ANNOUNCED_PER_SECOND as f64 && learned >= 0.95 * ANNOUNCED_PER_SECOND as f64,
        "{learned}/s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_sends_a_refused_get_again() {
    let server = far_side().await;
    let pace = Pace::new(AsyncLimiter::new(Rate::per_second(1000)))
        .honour_retry_after(Duration::from_secs(3))
        .retry(DEFAULT_RETRIES);
    let client = client(pace);
    let url = server.url("/once");
    tokio::time::timeout(Duration::from_secs(20), async {
        // The window's one request, by another client (this one, told that
        // nothing is left, would hold its next request until the reset),
        // then this one's, refused and sent again after the far side's
        // Retry-After.
        let first = reqwest::get(&url).await.unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        let start = Instant::now();
        let again = client.get(&url).send().await.unwrap();
        assert_eq!(again.status(), StatusCode::OK);
        assert!(
            start.elapsed() >= Duration::from_millis(500),
            "{:?}",
            start.elapsed()
        );
    })
    .await
    .expect("within 20 s");
    assert_eq!(server.hits("GET", "/once"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_never_sends_a_streamed_body_or_a_post_again() {
    let server = far_side().await;
    let url = server.url("/once-post");
    let any_method = client(
        Pace::new(AsyncLimiter::new(Rate::per_second(1000)))
            .honour_retry_after(Duration::from_secs(3))
            .retry(DEFAULT_RETRIES)
            .retry_any_method(),
    );
    let idempotent_only =
        client(Pace::new(AsyncLimiter::new(Rate::per_second(1000))).retry(DEFAULT_RETRIES));
    tokio::time::timeout(Duration::from_secs(20), async {
        // The window's one request, by a client of its own.
        let first = reqwest::Client::new()
            .post(&url)
            .body("a")
            .send()
            .await
            .unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        // A body that is a stream cannot be sent twice: the refusal comes back.
        let stream = reqwest::Body::wrap(http_body_util::Full::new(bytes::Bytes::from("b")));
        let refused = any_method.post(&url).body(stream).send().await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        // Nor is a POST without `retry_any_method`, whatever its body.
        let refused = idempotent_only.post(&url).body("c").send().await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    })
    .await
    .expect("within 20 s");
    assert_eq!(server.hits("POST", "/once-post"), 3);
}

/// The per-tokens fields (OpenAI's, which slowapi does not write) from a
/// real axum server on loopback: the tokens limiter is paced at the quota
/// per refill, each request pays its `Tokens` there, and the requests
/// limiter is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_tokens_fields_pace_the_tokens_limiter() {
    use axum::routing::post;
    use paceline::reqwest::Tokens;

    // 6000 tokens a minute: half left, whole again in 30 s.
    let app = axum::Router::new().route(
        "/complete",
        post(|| async {
            [
                ("x-ratelimit-limit-tokens", "6000"),
                ("x-ratelimit-remaining-tokens", "3000"),
                ("x-ratelimit-reset-tokens", "30s"),
            ]
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let requests = AsyncLimiter::new(Rate::per_second(1000));
    let tokens = AsyncLimiter::new(Rate::per_second(100_000));
    let client = client(
        Pace::new(requests.clone())
            .follow_budget()
            .tokens(tokens.clone()),
    );
    let url = format!("http://{addr}/complete");
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        client.post(&url).with_extension(Tokens(700)).send(),
    )
    .await
    .expect("within 10 s")
    .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    // 6000 per 60 s, less the margin: about 97 a second.
    let learned = tokens.limiter().rate().per_second_f64();
    assert!((96.0..100.0).contains(&learned), "{learned}/s");
    // A request that carries 50 tokens pays them there first: half a
    // second at that rate.
    let start = Instant::now();
    tokio::time::timeout(
        Duration::from_secs(10),
        client.post(&url).with_extension(Tokens(50)).send(),
    )
    .await
    .expect("within 10 s")
    .unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(requests.limiter().rate(), Rate::per_second(1000));
}
