//! A `try_take` round trip against its floor, one Redis `PING` on the same
//! connection, in the same run, on a `redis-server` this benchmark starts
//! itself (unix socket, and loopback TCP).
//!
//! `cargo bench --bench redis --features redis`

#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use paceline::redis::RedisLimiter;
use paceline::Rate;

#[path = "../tests/support/redis_server.rs"]
mod server;

fn round_trips(c: &mut Criterion) {
    let server = server::RedisServer::start_with(Some(0), &[]);
    for (transport, url) in [("unix", server.url()), ("tcp", server.tcp_url())] {
        // 1 per ns: every try_take is granted, so each one runs the whole
        // step and writes the key (the refused path skips the write).
        let limiter = RedisLimiter::builder(url, Rate::per_second(1_000_000_000))
            .build()
            .expect("limiter");
        limiter.ping().expect("redis answers");
        // One caller: the pool holds exactly one connection, used by both.
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
criterion_main!(benches);
