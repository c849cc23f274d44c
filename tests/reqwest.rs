//! `paceline::reqwest::Pace` on a real reqwest client against a real axum
//! server on loopback: requests leave at the limiter's pace; a 429 with
//! `Retry-After` (or the draft's `RateLimit` field) holds the next one back
//! for as long as it says, up to the cap; a limiter that cannot pace fails
//! the request before it is sent.
#![cfg(feature = "reqwest")]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use paceline::remote::memory::{AsyncMemoryLimiter, MemoryBackend, MemoryLimiter};
use paceline::remote::FailPolicy;
use paceline::reqwest::Pace;
use paceline::tokio::AsyncLimiter;
use paceline::{take::OnKey, Limit, Rate};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

/// When each request reached the server.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Instant>>>);

impl Seen {
    fn arrive(&self) -> usize {
        let mut seen = self.0.lock().unwrap();
        seen.push(Instant::now());
        seen.len()
    }

    fn gaps(&self) -> Vec<Duration> {
        let seen = self.0.lock().unwrap();
        seen.windows(2).map(|w| w[1] - w[0]).collect()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Every arrival, as time since the `n`th (from 0).
    fn since(&self, n: usize) -> Vec<Duration> {
        let seen = self.0.lock().unwrap();
        seen[n..].iter().map(|t| *t - seen[n]).collect()
    }
}

/// The first request to each route is refused as the route's name says;
/// every later one (and `/`) is answered 200.
async fn serve(seen: Seen) -> SocketAddr {
    fn refuse_first(n: usize, field: (&'static str, &'static str)) -> (StatusCode, HeaderMap) {
        let mut headers = HeaderMap::new();
        if n > 1 {
            return (StatusCode::OK, headers);
        }
        headers.insert(
            HeaderName::from_static(field.0),
            HeaderValue::from_static(field.1),
        );
        (StatusCode::TOO_MANY_REQUESTS, headers)
    }
    let app = Router::new()
        .route(
            "/",
            get(|State(seen): State<Seen>| async move {
                seen.arrive();
                "ok"
            }),
        )
        .route(
            "/retry-after",
            get(|State(seen): State<Seen>| async move {
                refuse_first(seen.arrive(), ("retry-after", "1"))
            }),
        )
        .route(
            "/first-two",
            get(|State(seen): State<Seen>| async move {
                // The first two refused, as the first of another route.
                let n = if seen.arrive() <= 2 { 1 } else { 2 };
                refuse_first(n, ("retry-after", "1"))
            }),
        )
        .route(
            "/draft",
            get(|State(seen): State<Seen>| async move {
                refuse_first(seen.arrive(), ("ratelimit", "\"default\";r=0;t=1"))
            }),
        )
        .route(
            "/a-year",
            get(|State(seen): State<Seen>| async move {
                refuse_first(seen.arrive(), ("retry-after", "31536000"))
            }),
        )
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn client(pace: Pace<impl paceline::AsyncTake + 'static>) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    ClientBuilder::new(inner).with(pace).build()
}

/// Two requests to `path`, the first refused by the server; the gap
/// between their arrivals. Bounded: 20 s at most.
async fn twice(path: &str, pace: Pace) -> Duration {
    let seen = Seen::default();
    let addr = serve(seen.clone()).await;
    let client = client(pace);
    let url = format!("http://{addr}{path}");
    tokio::time::timeout(Duration::from_secs(20), async {
        let first = client.get(&url).send().await.unwrap();
        assert_eq!(first.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
        let second = client.get(&url).send().await.unwrap();
        assert_eq!(second.status(), reqwest::StatusCode::OK);
    })
    .await
    .expect("the two requests ended within 20 s");
    seen.gaps()[0]
}

fn fast() -> AsyncLimiter {
    AsyncLimiter::new(Rate::per_second(1000))
}

#[tokio::test]
async fn retry_after_holds_the_next_request_back() {
    let pace = Pace::new(fast()).honour_retry_after(Duration::from_secs(60));
    let gap = twice("/retry-after", pace).await;
    assert!(gap >= Duration::from_secs(1), "{gap:?}");
}

#[tokio::test]
async fn the_drafts_ratelimit_field_holds_it_back_too() {
    let pace = Pace::new(fast()).honour_retry_after(Duration::from_secs(60));
    let gap = twice("/draft", pace).await;
    assert!(gap >= Duration::from_secs(1), "{gap:?}");
}

#[tokio::test]
async fn a_far_side_asking_a_year_is_held_to_the_cap() {
    let pace = Pace::new(fast()).honour_retry_after(Duration::from_millis(300));
    // Within `twice`'s 20 s bound, not a year; and not before the cap.
    let gap = twice("/a-year", pace).await;
    assert!(gap >= Duration::from_millis(300), "{gap:?}");
}

#[tokio::test]
async fn requests_leave_at_the_limiters_pace() {
    let seen = Seen::default();
    let addr = serve(seen.clone()).await;
    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    let client = client(Pace::new(limiter));
    let url = format!("http://{addr}/");
    let start = Instant::now();
    for _ in 0..4 {
        tokio::time::timeout(Duration::from_secs(10), client.get(&url).send())
            .await
            .unwrap()
            .unwrap();
    }
    // Four permits at 10/s without slack: the fourth 300 ms after the
    // first (the last request's slot, however fast the server answers).
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(seen.count(), 4);
}

#[tokio::test]
async fn a_limiter_that_cannot_pace_fails_the_request_unsent() {
    let seen = Seen::default();
    let addr = serve(seen.clone()).await;
    let backend = MemoryBackend::new();
    let remote = MemoryLimiter::with_backend(
        backend.clone(),
        Limit::new(Rate::per_second(100), 1),
        FailPolicy::Closed,
    )
    .unwrap();
    let one_key = OnKey::new(AsyncMemoryLimiter::from(remote), "api.example".to_owned());
    let client = client(Pace::new(one_key));
    let url = format!("http://{addr}/");
    client.get(&url).send().await.unwrap();
    backend.set_down(true);
    let failed = client.get(&url).send().await.unwrap_err();
    assert!(
        matches!(failed, reqwest_middleware::Error::Middleware(_)),
        "{failed:?}"
    );
    assert!(failed.to_string().contains("unavailable"), "{failed}");
    assert_eq!(seen.count(), 1);
}

/// 10 a second with a burst of `burst`: what the pushback tests pace
/// through.
fn ten_a_second(burst: u64) -> AsyncLimiter {
    AsyncLimiter::builder(Rate::per_second(10))
        .slack(burst - 1)
        .build()
        .unwrap()
}

/// Sends `n` requests to `url` one after another, each answered `status`.
async fn send(client: &ClientWithMiddleware, url: &str, n: usize, status: u16) {
    for _ in 0..n {
        let answer = client.get(url).send().await.unwrap();
        assert_eq!(answer.status().as_u16(), status, "{url}");
    }
}

/// `times` (arrivals after a pushback, from its 429) start no earlier than
/// `from` and before `before`, one interval of 10/s apart (at least 50 ms
/// apart: not the burst the limiter would have banked while held).
fn paced_from(times: &[Duration], from: Duration, before: Duration) {
    assert!(times[0] >= from && times[0] < before, "{times:?}");
    for pair in times.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(50), "{times:?}");
    }
}

#[tokio::test]
async fn a_pushback_leaves_no_burst_behind() {
    let seen = Seen::default();
    let addr = serve(seen.clone()).await;
    let client = client(Pace::new(ten_a_second(5)).honour_retry_after(Duration::from_secs(60)));
    let url = format!("http://{addr}/retry-after");
    tokio::time::timeout(Duration::from_secs(20), async {
        send(&client, &url, 1, 429).await;
        send(&client, &url, 6, 200).await;
    })
    .await
    .expect("seven requests within 20 s");
    // The schedule was pushed out, not held: the six leave at about 1.1 s,
    // 1.2 s, ... after the 429, where a hold let the 5 banked meanwhile
    // leave at once at 1 s.
    let times = seen.since(0);
    paced_from(
        &times[1..],
        Duration::from_secs(1),
        Duration::from_millis(1600),
    );
}

/// A's request refused with `Retry-After: 1`, then three of B's through
/// the same limit: when B's arrived, from A's 429.
async fn after_a_pushback_to_another<L, M>(a: Pace<L>, b: Pace<M>) -> Vec<Duration>
where
    L: paceline::AsyncTake + 'static,
    M: paceline::AsyncTake + 'static,
{
    let (seen_a, seen_b) = (Seen::default(), Seen::default());
    let (addr_a, addr_b) = (serve(seen_a.clone()).await, serve(seen_b.clone()).await);
    let (a, b) = (
        client(a.honour_retry_after(Duration::from_secs(60))),
        client(b), // deaf to the far side itself
    );
    tokio::time::timeout(Duration::from_secs(20), async {
        send(&a, &format!("http://{addr_a}/retry-after"), 1, 429).await;
        send(&b, &format!("http://{addr_b}/"), 3, 200).await;
    })
    .await
    .expect("four requests within 20 s");
    let refused = seen_a.0.lock().unwrap()[0];
    let b_went = seen_b
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|t| *t - refused)
        .collect();
    b_went
}

#[tokio::test]
async fn a_pushback_slows_every_user_of_a_shared_limiter() {
    // Two middlewares on one in-process limiter.
    // (An async face's clones share one limit.)
    let limiter = ten_a_second(5);
    let b_went = after_a_pushback_to_another(Pace::new(limiter.clone()), Pace::new(limiter)).await;
    // B's requests wait behind the push, where under a hold of A's own
    // the first went at the next slot, 100 ms after A's.
    paced_from(
        &b_went,
        Duration::from_millis(950),
        Duration::from_millis(1600),
    );

    // Two middlewares on one key of a remote limiter (as two processes
    // would be): a fresh key has its burst, which B took at once, 4 of
    // them right after A's 429, under a hold of A's own.
    let remote = MemoryLimiter::with_backend(
        MemoryBackend::new(),
        Limit::new(Rate::per_second(10), 4),
        FailPolicy::Closed,
    )
    .unwrap();
    let shared = AsyncMemoryLimiter::from(remote);
    let b_went = after_a_pushback_to_another(
        Pace::new(OnKey::new(shared.clone(), "api".to_owned())),
        Pace::new(OnKey::new(shared, "api".to_owned())),
    )
    .await;
    paced_from(
        &b_went,
        Duration::from_millis(950),
        Duration::from_millis(1600),
    );
}

#[tokio::test]
async fn concurrent_pushbacks_do_not_add_up() {
    let seen = Seen::default();
    let addr = serve(seen.clone()).await;
    // A burst of 10: a push gives up a burst's worth of intervals after
    // its reach, so two pushes that added up would show at 2.1 s.
    let client = client(Pace::new(ten_a_second(10)).honour_retry_after(Duration::from_secs(60)));
    let url = format!("http://{addr}/first-two");
    tokio::time::timeout(Duration::from_secs(20), async {
        // Bank the whole burst, so that the two go at once (a server of
        // its own: every arrival at `addr` counts).
        let other = serve(Seen::default()).await;
        send(&client, &format!("http://{other}/"), 1, 200).await;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (one, two) = tokio::join!(client.get(&url).send(), client.get(&url).send());
        assert_eq!(one.unwrap().status().as_u16(), 429);
        assert_eq!(two.unwrap().status().as_u16(), 429);
        send(&client, &url, 3, 200).await;
    })
    .await
    .expect("six requests within 20 s");
    // Both said "1 s": the schedule is pushed 1 s out once, not twice.
    let times = seen.since(0);
    assert!(times[1] < Duration::from_millis(100), "{times:?}");
    paced_from(
        &times[2..],
        Duration::from_secs(1),
        Duration::from_millis(1600),
    );
}

#[tokio::test]
async fn a_push_that_fails_fails_the_request_waiting_on_it() {
    let backend = MemoryBackend::new();
    // The far side refuses the first request, and the limit's server goes
    // down meanwhile: the push meets the failure.
    let seen = Seen::default();
    let app = Router::new()
        .route(
            "/",
            get(
                |State((seen, backend)): State<(Seen, MemoryBackend)>| async move {
                    if seen.arrive() > 1 {
                        return StatusCode::OK.into_response();
                    }
                    backend.set_down(true);
                    (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")]).into_response()
                },
            ),
        )
        .with_state((seen.clone(), backend.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let remote = MemoryLimiter::with_backend(
        backend,
        Limit::new(Rate::per_second(10), 4),
        FailPolicy::Closed,
    )
    .unwrap();
    let one_key = OnKey::new(AsyncMemoryLimiter::from(remote), "api".to_owned());
    let client = client(Pace::new(one_key).honour_retry_after(Duration::from_secs(60)));
    let url = format!("http://{addr}/");
    send(&client, &url, 1, 429).await;
    let start = Instant::now();
    let failed = tokio::time::timeout(Duration::from_secs(10), client.get(&url).send())
        .await
        .expect("an answer within 10 s")
        .unwrap_err();
    // The push's own error, at once: not the hold waited out first.
    assert!(failed.to_string().contains("unavailable"), "{failed}");
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(seen.count(), 1);
}

#[tokio::test]
async fn a_request_dropped_while_a_push_runs_neither_books_nor_ends_it() {
    let seen = Seen::default();
    let addr = serve(seen.clone()).await;
    // 5 a second: a slot left booked by the dropped request would show as
    // 200 ms more.
    let limiter = AsyncLimiter::builder(Rate::per_second(5))
        .slack(4)
        .build()
        .unwrap();
    let client = client(Pace::new(limiter).honour_retry_after(Duration::from_secs(60)));
    let url = format!("http://{addr}/retry-after");
    tokio::time::timeout(Duration::from_secs(20), async {
        send(&client, &url, 1, 429).await;
        let dropped =
            tokio::time::timeout(Duration::from_millis(300), client.get(&url).send()).await;
        assert!(dropped.is_err(), "it waits for the push");
        send(&client, &url, 3, 200).await;
    })
    .await
    .expect("five requests within 20 s");
    // The push reaches the first slot at least 1 s after the 429's reply:
    // 1.2 s after its own (at 0 s, the next at 0.2 s, then 5 more slots);
    // one left booked for the dropped request would make it 1.4 s. And the
    // push went on without the request: the three leave 200 ms apart, not
    // as the burst a limiter banks while nothing takes.
    let times = seen.since(0);
    assert_eq!(times.len(), 4, "{times:?}");
    assert!(
        times[1] >= Duration::from_secs(1) && times[1] < Duration::from_millis(1350),
        "{times:?}"
    );
    for pair in times[1..].windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(100), "{times:?}");
    }
}
