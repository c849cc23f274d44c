//! Per-client limits on a tonic gRPC server: the layer is one expression,
//! and a refused call is `RESOURCE_EXHAUSTED` with the wait in its
//! `RetryInfo` and the `grpc-retry-pushback-ms` trailer.
//!
//! ```text
//! cargo run -p paceline-examples --features tonic --example grpc_server            # a self-test
//! cargo run -p paceline-examples --features tonic --example grpc_server -- --serve # serve on 127.0.0.1:50051
//! ```
//!
//! The self-test serves tonic-health's service on a free loopback port and
//! calls `Check` 6 times in a row: the burst of 3 goes, the rest are told
//! when to come back.

use std::time::Duration;

use paceline::http::LimitLayer;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_types::StatusExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let serve = std::env::args().any(|a| a == "--serve");
    let listener = tokio::net::TcpListener::bind(if serve {
        "127.0.0.1:50051"
    } else {
        "127.0.0.1:0"
    })
    .await?;
    let addr = listener.local_addr()?;
    let (_reporter, health) = tonic_health::server::health_reporter();
    // The user code: 2 calls a second per peer, a burst of 3, answered the gRPC way.
    let server = Server::builder()
        .layer(LimitLayer::per_ip("2/s".parse()?).slack(2).grpc().build()?)
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    if serve {
        println!("serving grpc.health.v1.Health on {addr} (2/s per peer, burst 3)");
        return Ok(server.await?);
    }
    tokio::spawn(server);

    let channel = Channel::from_shared(format!("http://{addr}"))?
        .timeout(Duration::from_secs(5))
        .connect()
        .await?;
    let mut client = HealthClient::new(channel);
    println!("6 calls of Check in a row from 127.0.0.1 to {addr} (2/s per peer, burst 3):");
    for i in 1..=6 {
        let request = HealthCheckRequest {
            service: String::new(),
        };
        match client.check(request).await {
            Ok(answer) => println!("  {i}: OK, {:?}", answer.into_inner().status()),
            Err(status) => {
                let wait = status.get_details_retry_info().and_then(|r| r.retry_delay);
                let pushback = status
                    .metadata()
                    .get("grpc-retry-pushback-ms")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-");
                println!(
                    "  {i}: {:?} \"{}\", RetryInfo {wait:?}, grpc-retry-pushback-ms {pushback}",
                    status.code(),
                    status.message()
                );
            }
        }
    }
    Ok(())
}
