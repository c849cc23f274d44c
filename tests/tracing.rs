//! The `tracing` events, read through a real subscriber (tracing-subscriber's
//! `fmt`, installed for the whole process: a watcher sends from its own
//! thread) writing into a buffer: every row of the event table
//! (`src/observe/event.rs`, the guide's gRPC chapter): a refusal and a request
//! without a key at debug, a far side's pushback and its unreadable field
//! (once per header name), a reload applied and
//! refused, a remote limiter's server lost and back (once each), a lease's
//! unspent permits given back, a fleet layer applied and refused, a limits
//! document's server lost and back, and the debug build's warning of a
//! blocking take on a runtime thread.
#![cfg(all(feature = "tracing", feature = "tower"))]

use paceline::Take;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use paceline::config::watch::Watch;
use paceline::http::LimitLayer;
use paceline::remote::memory::{MemoryBackend, MemoryLimiter};
use paceline::remote::FailPolicy;
use paceline::{Limit, Rate};
use tower::{service_fn, Layer, ServiceExt};

/// Every line the subscriber wrote, for the whole test process.
fn log() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .init();
        log
    })
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The lines written so far that contain every one of `parts`.
fn lines(parts: &[&str]) -> Vec<String> {
    let log = log().lock().unwrap();
    String::from_utf8_lossy(&log)
        .lines()
        .filter(|line| parts.iter().all(|p| line.contains(p)))
        .map(str::to_owned)
        .collect()
}

/// Waits up to 5 s for a line with every one of `parts`.
fn wait_for(parts: &[&str]) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if !lines(parts).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[tokio::test]
async fn a_refused_request_is_a_debug_event_naming_its_key() {
    log();
    let layer = LimitLayer::per_header("x-tenant", Rate::per_minute(1))
        .slack(0)
        .build()
        .unwrap();
    let service = layer.layer(service_fn(|_: http::Request<()>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(bytes::Bytes::new()))
    }));
    let request = || {
        http::Request::builder()
            .header("x-tenant", "tenant-traced")
            .body(())
            .unwrap()
    };
    service.clone().oneshot(request()).await.unwrap();
    assert!(
        lines(&["tenant-traced"]).is_empty(),
        "an admitted request is no event"
    );
    let refused = service.oneshot(request()).await.unwrap();
    assert_eq!(refused.status(), 429);
    let events = lines(&["DEBUG", "request refused", "tenant-traced", "status=429"]);
    assert_eq!(events.len(), 1, "{events:?}");
}

#[test]
fn a_remote_server_lost_and_back_is_told_once_each() {
    log();
    let backend = MemoryBackend::new();
    let limiter = MemoryLimiter::with_backend(
        backend.clone(),
        Limit::new(Rate::per_second(1000), 10),
        FailPolicy::Open,
    )
    .unwrap();
    limiter.try_take("k").unwrap();
    let lost = || lines(&["WARN", "server is lost"]).len();
    let back = || lines(&["INFO", "server is back"]).len();
    assert_eq!((lost(), back()), (0, 0));
    backend.set_down(true);
    for _ in 0..3 {
        limiter.try_take("k").unwrap(); // admitted by the open policy
    }
    assert_eq!((lost(), back()), (1, 0));
    backend.set_down(false);
    for _ in 0..3 {
        limiter.try_take("k").unwrap();
    }
    assert_eq!((lost(), back()), (1, 1));
}

#[test]
fn a_lease_given_back_is_a_debug_event_with_its_count() {
    log();
    let clock = paceline::clock::ManualClock::new();
    let backend = MemoryBackend::with_clock(clock.clone());
    let limit = Limit::new(Rate::per_second(1_000_000), 1_000);
    let remote = MemoryLimiter::with_backend(backend, limit, FailPolicy::Closed).unwrap();
    let lease = paceline::lease::Leased::with_clock(
        paceline::take::OnKey::new(remote, "leased"),
        limit,
        Duration::from_micros(100),
        clock.clone(),
    )
    .unwrap();
    for _ in 0..100 {
        paceline::Take::try_take(&lease, &()).unwrap();
        clock.advance(Duration::from_nanos(250));
    }
    let held = lease.held();
    assert!(held > 0);
    assert!(lines(&["given back"]).is_empty());
    lease.release(); // nobody took since: all of it goes back
    let events = lines(&["DEBUG", "given back", &format!("permits={held}")]);
    assert_eq!(events.len(), 1, "{events:?}");
}

/// A fresh directory of this test's own, removed at the end.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_reload_applied_and_one_refused_are_events_and_the_error_is_kept() {
    log();
    let dir =
        TempDir(std::env::temp_dir().join(format!("paceline-tracing-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = dir.0.join("traced-limits.txt");
    let write = |text: &str| {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    };
    write("10/s");
    let applied = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&applied);
    let watcher = Watch::new(&path)
        .every(Duration::from_millis(10))
        .settle(Duration::ZERO)
        .start(move |text| {
            let rate: Rate = text.trim().parse()?;
            seen.lock().unwrap().push(rate);
            Ok(())
        })
        .unwrap();
    assert!(watcher.last_error().is_none());
    write("ten a second");
    assert!(wait_for(&[
        "WARN",
        "limits not loaded",
        "traced-limits.txt"
    ]));
    let kept = watcher
        .last_error()
        .expect("the failed version's error is kept");
    assert!(kept.to_string().contains("not loaded"), "{kept}");
    write("20/s");
    assert!(wait_for(&["INFO", "limits reloaded", "traced-limits.txt"]));
    assert!(watcher.last_error().is_none(), "a good version clears it");
    assert_eq!(applied.lock().unwrap().len(), 2);
}

#[cfg(debug_assertions)]
#[test]
fn a_blocking_wait_on_a_runtime_thread_is_a_warning_not_a_print() {
    log();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let limiter = paceline::AtomicLimiter::builder(Rate::per_second(1000))
        .slack(0)
        .build()
        .unwrap();
    runtime.block_on(async {
        limiter.take();
        limiter.take(); // waits a millisecond, on the runtime's thread
    });
    assert!(wait_for(&[
        "WARN",
        "blocking take is waiting on a thread inside a Tokio runtime"
    ]));
}

#[cfg(all(feature = "fleet", feature = "keyed"))]
#[test]
fn a_fleet_layer_applied_and_one_refused_are_events_naming_the_layer() {
    use paceline::config::fleet::{Layer, Layers};
    use paceline::KeyedLimiter;

    log();
    let limiter = Arc::new(KeyedLimiter::<String>::new(Rate::per_second(1)));
    let target = Arc::clone(&limiter);
    let layers = Layers::new(move |limits| target.apply(limits));
    let feed = layers.add("traced-global");
    feed.offer(1, Layer::new().with_default(Rate::per_second(100)))
        .unwrap();
    assert!(wait_for(&[
        "INFO",
        "layer applied",
        "traced-global",
        "version=1"
    ]));
    assert!(feed.offer_text(2, "[default]\nrate = \"ten/s\"\n").is_err());
    assert!(wait_for(&["WARN", "layer not applied", "traced-global"]));
    assert_eq!(
        limiter.rate(),
        Rate::per_second(100),
        "the refused version changed nothing"
    );
}

#[cfg(all(feature = "fleet", feature = "redis", feature = "keyed"))]
#[path = "support/redis_server.rs"]
mod redis_server;

#[cfg(all(feature = "fleet", feature = "redis", feature = "keyed"))]
#[test]
fn a_limits_documents_server_lost_and_back_are_events_naming_the_document() {
    use paceline::config::fleet::{Document, Layers};
    use paceline::KeyedLimiter;

    log();
    let mut server = redis_server::RedisServer::start();
    let limiter = Arc::new(KeyedLimiter::<String>::new(Rate::per_second(1)));
    let target = Arc::clone(&limiter);
    let layers = Layers::new(move |limits| target.apply(limits));
    let name = "traced-limits-doc";
    Document::redis(&server.url(), Some(name))
        .unwrap()
        .set("[default]\nrate = \"50/s\"\n", None)
        .unwrap();
    let _watching = Document::redis(&server.url(), Some(name))
        .unwrap()
        .poll_every(Duration::from_millis(20))
        .feed(layers.add("traced-doc-layer"))
        .unwrap();
    assert!(wait_for(&["INFO", "layer applied", "traced-doc-layer"]));
    server.stop();
    assert!(wait_for(&["WARN", "limits server lost", name]));
    server.restart();
    assert!(wait_for(&["INFO", "limits server back", name]));
    assert_eq!(
        limiter.rate(),
        Rate::per_second(50),
        "the outage kept the set in force"
    );
}

#[tokio::test]
async fn a_request_without_a_key_is_a_debug_event_with_its_status() {
    log();
    let layer = LimitLayer::per_ip(Rate::per_second(10)).build().unwrap();
    let service = layer.layer(service_fn(|_: http::Request<()>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(bytes::Bytes::new()))
    }));
    // No peer address: neither axum's ConnectInfo nor a SocketAddr.
    let refused = service.oneshot(http::Request::new(())).await.unwrap();
    assert_eq!(refused.status(), 400);
    let events = lines(&["DEBUG", "a request without a key", "status=400"]);
    assert_eq!(events.len(), 1, "{events:?}");
}

#[cfg(feature = "reqwest")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_sides_pushback_is_a_debug_event_with_its_wait() {
    use axum::routing::get;
    use paceline::reqwest::Pace;
    use paceline::tokio::AsyncLimiter;

    log();
    let app = axum::Router::new().route(
        "/traced-pushback",
        get(|| async { (http::StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")]) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let pace = Pace::new(AsyncLimiter::new(Rate::per_second(1000)))
        .honour_retry_after(Duration::from_secs(60));
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(pace)
        .build();
    let url = format!("http://{addr}/traced-pushback");
    let answer = tokio::time::timeout(Duration::from_secs(10), client.get(&url).send())
        .await
        .expect("answered within 10 s")
        .unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert!(wait_for(&[
        "DEBUG",
        "pushes the limiter's next slot out",
        "status=429",
        "wait_ms=1000",
        "traced-pushback"
    ]));
}

#[cfg(feature = "reqwest")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_sides_unreadable_field_is_a_warning_once_per_name_and_its_budget_a_debug_event() {
    use axum::routing::get;
    use paceline::reqwest::Pace;
    use paceline::tokio::AsyncLimiter;

    log();
    let app = axum::Router::new()
        .route(
            "/unreadable",
            get(|| async {
                (
                    [
                        ("x-ratelimit-reset-tokens", "5x"),
                        ("x-ratelimit-limit", "1e9"),
                    ],
                    "ok",
                )
            }),
        )
        .route(
            "/budget",
            get(|| async { ([("ratelimit-policy", "\"a\";q=10;w=1")], "ok") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let pace = Pace::new(AsyncLimiter::new(Rate::per_second(1000))).follow_budget();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(pace)
        .build();
    let url = format!("http://{addr}/unreadable");
    for _ in 0..3 {
        let answer = tokio::time::timeout(Duration::from_secs(10), client.get(&url).send())
            .await
            .expect("answered within 10 s")
            .unwrap();
        assert_eq!(answer.status(), reqwest::StatusCode::OK);
    }
    for name in ["x-ratelimit-reset-tokens", "x-ratelimit-limit"] {
        let header = format!("header=\"{name}\"");
        let events = lines(&["WARN", "could not be read", &header]);
        assert_eq!(events.len(), 1, "{name}: {events:?}");
    }
    let url = format!("http://{addr}/budget");
    let answer = tokio::time::timeout(Duration::from_secs(10), client.get(&url).send())
        .await
        .expect("answered within 10 s")
        .unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::OK);
    assert!(wait_for(&[
        "DEBUG",
        "paced to the far side's budget",
        "quota=10",
        "window_ms=1000"
    ]));
}
