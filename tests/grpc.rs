//! The inbound layer's gRPC face on a real tonic server and client on
//! loopback (tonic-health's pre-generated service: no protoc): a refused
//! call is `RESOURCE_EXHAUSTED` with `RetryInfo` and the pushback
//! trailer, per peer, per metadata key and per method (with costs per
//! method), over the builder's keyed limiter, a shared one and a remote
//! one.
#![cfg(feature = "tonic")]

use std::net::SocketAddr;
use std::time::Duration;

use paceline::http::LimitLayer;
use paceline::remote::memory::{AsyncMemoryLimiter, MemoryBackend, MemoryLimiter};
use paceline::remote::FailPolicy;
use paceline::tokio::AsyncLimiter;
use paceline::{Limit, Rate};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_types::StatusExt;

const CHECK: &str = "/grpc.health.v1.Health/Check";

/// A tonic server with the health service behind `layer`, on a free
/// loopback port; it stops with the test's runtime.
async fn serve(layer: LimitLayer) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    tokio::spawn(
        Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    addr
}

async fn client(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

async fn check(client: &mut HealthClient<Channel>, api_key: Option<&str>) -> Result<(), Status> {
    let mut request = Request::new(HealthCheckRequest {
        service: String::new(),
    });
    if let Some(key) = api_key {
        request
            .metadata_mut()
            .insert("x-api-key", key.parse().unwrap());
    }
    client.check(request).await.map(drop)
}

/// A refusal as a gRPC client sees it: the code, the wait in `RetryInfo`
/// and in the pushback trailer (rounded up to whole milliseconds).
fn assert_exhausted(status: &Status, at_most: Duration) -> Duration {
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let wait = status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay)
        .expect("RetryInfo in the status details");
    assert!(wait > Duration::ZERO && wait <= at_most, "{wait:?}");
    let pushback: u64 = status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        pushback,
        u64::try_from(wait.as_nanos().div_ceil(1_000_000)).unwrap()
    );
    wait
}

#[tokio::test]
async fn a_peer_over_its_limit_gets_resource_exhausted_with_the_wait() {
    let layer = LimitLayer::per_ip(Rate::per_minute(1))
        .slack(1)
        .grpc()
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    let mut client = client(addr).await;
    check(&mut client, None).await.unwrap();
    check(&mut client, None).await.unwrap();
    let refused = check(&mut client, None).await.unwrap_err();
    assert_exhausted(&refused, Duration::from_secs(60));
    assert_eq!(layer.stats().refused, 1);
    // The peer's own key: 127.0.0.1.
    let keyed = layer.keyed_limiter().unwrap().limiter();
    assert_eq!(keyed.len(), 1);
}

#[tokio::test]
async fn each_metadata_key_has_its_own_limit_and_none_is_invalid() {
    let addr = serve(
        LimitLayer::per_metadata("x-api-key", Rate::per_minute(1))
            .slack(0)
            .grpc()
            .build()
            .unwrap(),
    )
    .await;
    let mut client = client(addr).await;
    check(&mut client, Some("a")).await.unwrap();
    assert_exhausted(
        &check(&mut client, Some("a")).await.unwrap_err(),
        Duration::from_secs(60),
    );
    check(&mut client, Some("b")).await.unwrap();
    let missing = check(&mut client, None).await.unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument, "{missing:?}");
    assert!(missing.message().contains("no client key"));
}

#[tokio::test]
async fn methods_have_their_own_limits_and_costs() {
    let addr = serve(
        LimitLayer::per_method(Rate::per_minute(1))
            .slack(2) // a burst of 3 per method
            .path_cost(CHECK, 2)
            .grpc()
            .build()
            .unwrap(),
    )
    .await;
    let mut client = client(addr).await;
    check(&mut client, None).await.unwrap(); // 2 of Check's 3
    assert_exhausted(
        &check(&mut client, None).await.unwrap_err(),
        Duration::from_secs(60),
    );
    // Watch is another method: its own bucket, at cost 1.
    let watch = Request::new(HealthCheckRequest {
        service: String::new(),
    });
    let mut stream = client.watch(watch).await.unwrap().into_inner();
    assert!(stream.message().await.unwrap().is_some());
}

#[tokio::test]
async fn a_cost_no_wait_admits_says_do_not_retry() {
    let addr = serve(
        LimitLayer::per_method(Rate::per_second(10))
            .slack(1)
            .path_cost(CHECK, 5)
            .grpc()
            .build()
            .unwrap(),
    )
    .await;
    let mut client = client(addr).await;
    let refused = check(&mut client, None).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(refused.get_details_retry_info().is_none());
    assert_eq!(
        refused.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "-1"
    );
}

#[tokio::test]
async fn one_shared_limiter_for_every_peer() {
    let shared = AsyncLimiter::builder(Rate::per_minute(1))
        .slack(0)
        .full_credit(true)
        .build()
        .unwrap();
    let addr = serve(
        LimitLayer::global(Rate::per_second(1))
            .limiter(shared)
            .grpc()
            .build()
            .unwrap(),
    )
    .await;
    let mut first = client(addr).await;
    let mut second = client(addr).await;
    check(&mut first, None).await.unwrap();
    assert_exhausted(
        &check(&mut second, None).await.unwrap_err(),
        Duration::from_secs(60),
    );
}

#[tokio::test]
async fn a_remote_limiter_refuses_the_same_way_and_its_failure_is_unavailable() {
    let backend = MemoryBackend::new();
    let remote = MemoryLimiter::with_backend(
        backend.clone(),
        Limit::new(Rate::per_minute(1), 0),
        FailPolicy::Closed,
    )
    .unwrap();
    let addr = serve(
        LimitLayer::per_ip(Rate::per_second(1))
            .limiter(AsyncMemoryLimiter::from(remote))
            .grpc()
            .build()
            .unwrap(),
    )
    .await;
    let mut client = client(addr).await;
    check(&mut client, None).await.unwrap();
    assert_exhausted(
        &check(&mut client, None).await.unwrap_err(),
        Duration::from_secs(60),
    );
    assert!(backend.round_trips() >= 2);
    backend.set_down(true);
    let failed = check(&mut client, None).await.unwrap_err();
    assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
    assert_eq!(
        failed.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "1000"
    );
}
