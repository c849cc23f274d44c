//! Counts for Prometheus: limiters that count what they decide
//! (`.stats(true)`), and a `/metrics` page that writes them in
//! Prometheus' text format (`paceline::stats::prometheus`).
//!
//! ```text
//! cargo run -p paceline-examples --example metrics
//! ```
//!
//! Four threads take from a global limit and a per-user one at once for
//! a second; the program then scrapes its own page, as Prometheus would,
//! and prints it. The paceline part is two lines (marked); the rest is the
//! HTTP server a program already has.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use paceline::all::All;
use paceline::{stats, AtomicLimiter, KeyedLimiter, Rate, Take};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // paceline, 1 of 2: limiters that count.
    let global = Arc::new(
        AtomicLimiter::builder(Rate::per_second(2000))
            .stats(true)
            .build()?,
    );
    let per_user = Arc::new(
        KeyedLimiter::<String>::builder(Rate::per_second(300))
            .stats(true)
            .build()?,
    );

    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    {
        let (global, per_user) = (Arc::clone(&global), Arc::clone(&per_user));
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                // paceline, 2 of 2: the page's body.
                let body = stats::prometheus(&[("global", &global), ("per_user", &per_user)]);
                let _ = respond(stream, &body);
            }
        });
    }

    let deadline = Instant::now() + Duration::from_secs(1);
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let (global, per_user) = (Arc::clone(&global), Arc::clone(&per_user));
            thread::spawn(move || {
                let user = format!("user-{}", t % 2);
                while Instant::now() < deadline {
                    if All::new([&per_user.bucket(user.as_str()), &*global])
                        .try_take(&())
                        .is_err()
                    {
                        thread::sleep(Duration::from_micros(200));
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }

    println!("GET http://{addr}/metrics\n");
    print!("{}", scrape(addr)?);
    Ok(())
}

/// Answers one request with `body` as Prometheus text.
fn respond(mut stream: TcpStream, body: &str) -> std::io::Result<()> {
    let mut request_line = String::new();
    BufReader::new(&stream).read_line(&mut request_line)?;
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// GETs `/metrics` and returns the body.
fn scrape(addr: std::net::SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or(response))
}
