//! A `try_take` round trip against its floor, one Redis `PING` on the same
//! connection, in the same run, on a `redis-server` this benchmark starts
//! itself (unix socket, and loopback TCP).
//!
//! `cargo bench -p paceline-benches --features redis --bench redis`
//!
//! Before criterion's groups it prints the ratio measured interleaved (20
//! rounds of 2 000 pings then 2 000 try_takes, median and spread), which
//! holds up better than two separate criterion runs on a busy machine.

#![allow(missing_docs)]

use paceline::Take;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use paceline::redis::RedisLimiter;
use paceline::Rate;

#[path = "../tests/support/redis_server.rs"]
mod server;

/// 1 per ns: every try_take is granted, so each one runs the whole step and
/// writes the key (the refused path skips the write).
fn limiter(url: String) -> RedisLimiter {
    let limiter = RedisLimiter::builder(url, Rate::per_second(1_000_000_000))
        .build()
        .expect("limiter");
    limiter.ping().expect("redis answers");
    limiter
}

fn per_call(n: u32, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed() / n
}

fn interleaved(transport: &str, limiter: &RedisLimiter) {
    const ROUNDS: usize = 20;
    const N: u32 = 2_000;
    let mut ratios = Vec::with_capacity(ROUNDS);
    let (mut pings, mut takes) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let ping = per_call(N, || limiter.ping().unwrap());
        let take = per_call(N, || limiter.try_take("bench").map(drop).unwrap());
        ratios.push(take.as_secs_f64() / ping.as_secs_f64());
        pings.push(ping);
        takes.push(take);
    }
    ratios.sort_by(f64::total_cmp);
    pings.sort();
    takes.sort();
    println!(
        "{transport}: try_take / ping = {:.2} (median of {ROUNDS}; min {:.2}, max {:.2}); \
         ping {:?}, try_take {:?} (medians)",
        ratios[ROUNDS / 2],
        ratios[0],
        ratios[ROUNDS - 1],
        pings[ROUNDS / 2],
        takes[ROUNDS / 2],
    );
}

/// Where a try_take's time goes beyond a PING, on a plain redis-rs
/// connection: an `EVALSHA` of a script that only returns (Redis's cost of
/// running any script, and the client's of sending one), and of paceline's
/// step with a try_take's arguments; plus the server's own CPU time per call
/// from `INFO commandstats`.
fn breakdown(url: &str) {
    const N: u32 = 5_000;
    let client = redis::Client::open(url).expect("client");
    let mut con = client.get_connection().expect("connection");
    let empty = redis::Script::new("return 1");
    let step = redis::Script::new(include_str!("../src/remote/redis/step.lua"));
    let mut empty_call = empty.key("paceline:breakdown");
    empty_call.arg(1).arg(0);
    // As `try_take` asks it (src/remote/redis/script.rs): "take", span, tau,
    // lead, 0 for the longest wait, and how long the state lives (tau's).
    let mut step_call = step.key("paceline:breakdown");
    step_call.arg("take").arg(1).arg(0).arg(0).arg(0).arg(0);
    let _: redis::Value = step_call.invoke(&mut con).expect("step");
    let _: i64 = empty_call.invoke(&mut con).expect("empty script");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    let ping = per_call(N, || {
        let _: String = redis::cmd("PING").query(&mut con).unwrap();
    });
    let empty = per_call(N, || {
        let _: i64 = empty_call.invoke(&mut con).unwrap();
    });
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    let step = per_call(N, || {
        let _: redis::Value = step_call.invoke(&mut con).unwrap();
    });
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con)
        .unwrap();
    let server_us = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("usec_per_call=").nth(1))
        .and_then(|v| v.split(',').next())
        .unwrap_or("?");
    println!(
        "breakdown: ping {ping:?}, empty script {empty:?}, step {step:?} \
         (server CPU per step call: {server_us} µs)"
    );
}

fn round_trips(c: &mut Criterion) {
    let server = server::RedisServer::start_with(Some(0), &[]);
    for (transport, url) in [("unix", server.url()), ("tcp", server.tcp_url())] {
        // One caller: the pool holds exactly one connection, used by both.
        if transport == "unix" {
            breakdown(&url);
        }
        let limiter = limiter(url);
        interleaved(transport, &limiter);
        let mut group = c.benchmark_group(format!("redis_{transport}"));
        group.measurement_time(Duration::from_secs(3));
        group.bench_function("ping", |b| b.iter(|| limiter.ping().unwrap()));
        group.bench_function("try_take", |b| {
            b.iter(|| limiter.try_take("bench").unwrap())
        });
        group.finish();
    }
}

criterion_group!(benches, round_trips);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
