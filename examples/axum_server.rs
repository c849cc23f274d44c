//! Per-client 429s in an axum server: the layer is one expression, and the
//! look inside its limiter (a page, JSON, Prometheus text) one call more.
//!
//! ```text
//! cargo run -p paceline-examples --features tower --example axum_server            # a self-test, with figures
//! cargo run -p paceline-examples --features tower --example axum_server -- --serve # serve on 127.0.0.1:3000
//! ```
//!
//! The self-test serves on a free loopback port, sends 12 requests in a row
//! from one client and prints what came back: the burst of 6 goes, the
//! rest are told when to come back (`Retry-After`, and the IETF draft's
//! `RateLimit` fields); then what `/limits/metrics` counted. With `--serve`,
//! open http://127.0.0.1:3000/limits for the page (in a real app, mount it
//! behind your own authentication: its keys are client addresses).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use axum::{routing::get, Router};
use paceline::http::{Inspect, LimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The user code: a route, the layer (5/s per client, a burst of 6), serving with the peer's address.
    let per_ip = LimitLayer::per_ip("5/s".parse()?).slack(5).build()?;
    // The look inside the layer's own limiter, mounted after it: not limited by it.
    let inspect = Inspect::new().layer("per_ip", &per_ip);
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(per_ip)
        .nest_service("/limits", inspect.service());
    let serve = std::env::args().any(|a| a == "--serve");
    let listener = tokio::net::TcpListener::bind(if serve {
        "127.0.0.1:3000"
    } else {
        "127.0.0.1:0"
    })
    .await?;
    let addr = listener.local_addr()?;
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    );
    if serve {
        println!("serving on http://{addr}/ (5/s per client, burst 6), the page at /limits");
        return Ok(server.await?);
    }
    tokio::spawn(async move { server.await });

    println!("12 requests in a row from 127.0.0.1 to http://{addr}/ (5/s per client, burst 6):");
    let (answers, metrics) = tokio::task::spawn_blocking(move || {
        let answers = (0..12)
            .map(|_| fetch(addr))
            .collect::<std::io::Result<Vec<_>>>();
        (answers, request(addr, "/limits/metrics"))
    })
    .await?;
    for (i, head) in answers?.iter().enumerate() {
        println!("  {:>2}: {head}", i + 1);
    }
    println!("GET /limits/metrics (its per_ip series):");
    for line in metrics?
        .lines()
        .filter(|l| l.contains("{limiter=\"per_ip\"}"))
    {
        println!("  {line}");
    }
    Ok(())
}

/// GETs `path` over a new connection: the whole response.
fn request(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

/// GETs `/`; the status line and the limit's fields.
fn fetch(addr: SocketAddr) -> std::io::Result<String> {
    let response = request(addr, "/")?;
    let mut lines = response.lines();
    let status = lines.next().unwrap_or_default().to_owned();
    let fields: Vec<&str> = lines
        .take_while(|l| !l.is_empty())
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.starts_with("retry-after") || l.starts_with("ratelimit")
        })
        .collect();
    Ok(format!("{status}  {}", fields.join("  ")))
}
