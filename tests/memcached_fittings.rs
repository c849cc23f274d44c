//! The fittings written once over the take interface take a memcached
//! limiter as they take any other, with no code of their own for it: a
//! paced byte stream through one key, the interface's calls generic over
//! `Take` / `AsyncTake`, and (with `tower`) the HTTP layer answering 429,
//! then 503 when the server is gone.
#![cfg(all(feature = "memcached", feature = "tokio"))]

#[path = "support/memcached_server.rs"]
mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use paceline::io::{OnKey, PacedWriter};
use paceline::memcached::{AsyncMemcachedLimiter, MemcachedLimiter};
use paceline::{AsyncTake, Rate, Take};
use support::MemcachedServer;

/// 1 MB/s (1 µs a byte) with a burst of 64 000 bytes.
fn megabyte_per_second(addr: &str) -> MemcachedLimiter {
    MemcachedLimiter::builder(addr, Rate::per_second(1_000_000))
        .slack(63_999)
        .build()
        .unwrap()
}

#[test]
fn a_paced_writer_paces_its_bytes_through_a_memcached_key() {
    let server = MemcachedServer::start();
    let limiter = megabyte_per_second(&server.addr());
    // 200 000 bytes through a key at rest: the first 64 000 at once, the
    // other 136 000 1 µs apart.
    let sent: Vec<u8> = (0..200_000).map(|i| (i % 251) as u8).collect();
    let mut paced = PacedWriter::new(Vec::new(), OnKey::new(&limiter, "upload".to_string()));
    let start = Instant::now();
    paced.write_all(&sent).unwrap();
    let elapsed = start.elapsed();
    assert_eq!(paced.get_ref(), &sent);
    assert!(elapsed >= Duration::from_millis(136), "early: {elapsed:?}");
}

/// The interface's calls, whatever the kind: a burst of 3, then a refusal
/// that says when; the state seen by another call.
fn through_take(limiter: &impl Take<str>, key: &str) {
    let taken = limiter.try_take_n(key, 3).unwrap();
    assert_eq!(taken.available(), 0);
    let refused = limiter.try_take_n(key, 1).unwrap_err();
    assert!(refused.retry_after().is_some(), "{refused}");
    assert!(!limiter.can_take(key, 1).unwrap());
    assert_eq!(limiter.state(key).unwrap().available(), 0);
    assert_eq!(limiter.limit_for(key).unwrap().burst(), 3);
}

async fn through_async_take(limiter: &impl AsyncTake<str>, key: &str) {
    let taken = limiter.try_take_n(key, 3).await.unwrap();
    assert_eq!(taken.available(), 0);
    let refused = limiter.try_take_n(key, 1).await.unwrap_err();
    assert!(refused.retry_after().is_some(), "{refused}");
    assert!(!limiter.can_take(key, 1).await.unwrap());
}

#[test]
fn the_take_interface_answers_alike_on_both_faces() {
    let server = MemcachedServer::start();
    let limiter = MemcachedLimiter::builder(server.addr(), Rate::per_minute(1))
        .slack(2)
        .build()
        .unwrap();
    through_take(&limiter, "alice");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let limiter = AsyncMemcachedLimiter::from(limiter);
    runtime.block_on(through_async_take(&limiter, "bob"));
}

#[cfg(feature = "tower")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_layer_limits_per_client_through_memcached_and_fails_closed_with_503() {
    use std::convert::Infallible;
    use std::net::SocketAddr;

    use http::{Request, Response, StatusCode};
    use paceline::http::LimitLayer;
    use tower::{Layer, ServiceExt};

    let mut server = MemcachedServer::start();
    let limiter = AsyncMemcachedLimiter::from(
        MemcachedLimiter::builder(server.addr(), Rate::per_minute(1))
            .slack(1)
            .connect_timeout(Duration::from_millis(300))
            .response_timeout(Duration::from_millis(300))
            .build()
            .unwrap(),
    );
    let layer = LimitLayer::per_ip(Rate::per_second(1))
        .limiter(limiter)
        .build()
        .unwrap();
    let service = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let from = |ip: &str| {
        let mut request = Request::new(());
        let addr: SocketAddr = format!("{ip}:4000").parse().unwrap();
        request.extensions_mut().insert(addr);
        request
    };
    let status = |request| {
        let service = service.clone();
        async move { service.oneshot(request).await.unwrap().status() }
    };
    // A burst of 2 per client, then 429; another client has its own.
    assert_eq!(status(from("192.0.2.1")).await, StatusCode::OK);
    assert_eq!(status(from("192.0.2.1")).await, StatusCode::OK);
    assert_eq!(
        status(from("192.0.2.1")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status(from("192.0.2.2")).await, StatusCode::OK);
    // The server gone: closed, 503 within the timeouts.
    server.stop();
    let start = Instant::now();
    assert_eq!(
        status(from("192.0.2.3")).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(start.elapsed() < Duration::from_secs(2));
}
