//! Requests per second and latency through a real server on loopback: no
//! layer, paceline's `LimitLayer` and tower_governor's `GovernorLayer`, on
//! three routes of one axum server, driven by one hyper-util client.
//!
//! ```text
//! cargo run --release -p paceline-benches --features http --example http_load [-- SECONDS_PER_RUN ROUNDS CONNECTIONS]
//! ```
//!
//! The server runs on one worker thread, the client on another. Each round
//! runs each route for the same time with `CONNECTIONS` keep-alive
//! connections sending one request after another, in a rotating order;
//! the report gives, per route, the median over rounds of requests/s and of
//! the p50 and p99 latency, and their ratio to the route with no layer in
//! the same round. The limits are far above the load (every request is
//! admitted): this is the cost of the layer, not of refusals.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use paceline::http::LimitLayer;
use paceline::Rate;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

const ROUTES: [&str; 3] = ["none", "paceline", "tower_governor"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let seconds = args.first().copied().unwrap_or(2);
    let rounds = args.get(1).copied().unwrap_or(5) as usize;
    let connections = args.get(2).copied().unwrap_or(16) as usize;

    let paceline = LimitLayer::per_ip(Rate::per_second(1_000_000_000))
        .slack(999_999_999)
        .build()?;
    let governor = GovernorConfigBuilder::default()
        .period(Duration::from_nanos(1))
        .burst_size(u32::MAX)
        .finish()
        .ok_or("governor config")?;
    let app = Router::new()
        .route("/none", get(|| async { "ok" }))
        .merge(
            Router::new()
                .route("/paceline", get(|| async { "ok" }))
                .layer(paceline),
        )
        .merge(
            Router::new()
                .route("/tower_governor", get(|| async { "ok" }))
                .layer(GovernorLayer::<_, _, axum::body::Body>::new(governor)),
        );

    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let listener = server_rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    server_rt.spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });

    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());

    println!(
        "{rounds} rounds of {seconds} s per route, {connections} connections, server and client on one thread each"
    );
    // results[route] = per round (req/s, p50 µs, p99 µs)
    let mut results: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); ROUTES.len()];
    for round in 0..rounds {
        for k in 0..ROUTES.len() {
            let route = (round + k) % ROUTES.len();
            let run = client_rt.block_on(drive(
                &client,
                addr,
                ROUTES[route],
                connections,
                Duration::from_secs(seconds),
            ));
            results[route].push(run);
        }
    }

    println!("\n| route | requests/s | × none | p50 µs | × none | p99 µs | × none |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (route, runs) in results.iter().enumerate() {
        let ratio = |f: fn(&(f64, f64, f64)) -> f64| {
            let mut r: Vec<f64> = runs
                .iter()
                .zip(&results[0])
                .map(|(a, b)| f(a) / f(b))
                .collect();
            summary(&mut r)
        };
        let value = |f: fn(&(f64, f64, f64)) -> f64| {
            let mut v: Vec<f64> = runs.iter().map(f).collect();
            summary(&mut v)
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            ROUTES[route],
            value(|r| r.0),
            ratio(|r| r.0),
            value(|r| r.1),
            ratio(|r| r.1),
            value(|r| r.2),
            ratio(|r| r.2),
        );
    }
    println!(
        "\n(median over rounds, min–max in brackets; ratios per round to /none of the same round)"
    );
    Ok(())
}

/// `median (min–max)`.
fn summary(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    let fmt = |x: f64| {
        if x >= 100.0 {
            format!("{x:.0}")
        } else {
            format!("{x:.3}")
        }
    };
    format!(
        "{} ({}–{})",
        fmt(v[v.len() / 2]),
        fmt(v[0]),
        fmt(v[v.len() - 1])
    )
}

/// `connections` loops of requests to `/path` for `length`: requests/s,
/// and the p50 and p99 latency in µs.
async fn drive(
    client: &Client<HttpConnector, Empty<Bytes>>,
    addr: SocketAddr,
    path: &str,
    connections: usize,
    length: Duration,
) -> (f64, f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (client, stop) = (client.clone(), Arc::clone(&stop));
            let uri: http::Uri = format!("http://{addr}/{path}").parse().unwrap();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    let response = client.get(uri.clone()).await.unwrap();
                    assert!(response.status().is_success(), "{}", response.status());
                    response.into_body().collect().await.unwrap();
                    latencies.push(sent.elapsed().as_nanos() as u64);
                }
                latencies
            })
        })
        .collect();
    tokio::time::sleep(length).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |p: f64| all[((all.len() - 1) as f64 * p) as usize] as f64 / 1000.0;
    (all.len() as f64 / elapsed, pct(0.5), pct(0.99))
}
