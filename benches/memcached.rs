//! A memcached `try_take` against its floor, one memcached get (`mg` of a
//! key nobody stores) on the same connection, in the same run; and grants
//! per second with eight clients racing on one hot key and spread over
//! many keys, on a `memcached` this benchmark starts itself (unix socket,
//! and loopback TCP).
//!
//! `cargo bench -p paceline-benches --features memcached --bench memcached`
//!
//! Before criterion's groups it prints the ratio measured interleaved (20
//! rounds of 2 000 gets then 2 000 try_takes, median and spread), and the
//! grants per second (each for one second), which hold up better than
//! separate criterion runs on a busy machine.

#![allow(missing_docs)]

use paceline::Take;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use paceline::memcached::MemcachedLimiter;
use paceline::Rate;

#[path = "../tests/support/memcached_server.rs"]
mod server;

/// 1 per ns: every try_take is granted, so each one reads and writes the
/// key (a refusal skips the write: one round trip).
fn limiter(addr: &str) -> MemcachedLimiter {
    let limiter = MemcachedLimiter::builder(addr, Rate::per_second(1_000_000_000))
        .build()
        .expect("limiter");
    limiter.ping().expect("memcached answers");
    limiter
}

fn per_call(n: u32, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed() / n
}

fn interleaved(transport: &str, limiter: &MemcachedLimiter) {
    const ROUNDS: usize = 20;
    const N: u32 = 2_000;
    let mut ratios = Vec::with_capacity(ROUNDS);
    let (mut gets, mut takes) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let get = per_call(N, || limiter.ping().unwrap());
        let take = per_call(N, || limiter.try_take("bench").map(drop).unwrap());
        ratios.push(take.as_secs_f64() / get.as_secs_f64());
        gets.push(get);
        takes.push(take);
    }
    ratios.sort_by(f64::total_cmp);
    gets.sort();
    takes.sort();
    println!(
        "{transport}: try_take / get = {:.2} (median of {ROUNDS}; min {:.2}, max {:.2}); \
         get {:?}, try_take {:?} (medians)",
        ratios[ROUNDS / 2],
        ratios[0],
        ratios[ROUNDS - 1],
        gets[ROUNDS / 2],
        takes[ROUNDS / 2],
    );
}

/// Grants per second with `clients` threads, each its own limiter (its own
/// connection), for one second: all on one key, or each call on the next
/// of 10 000 keys. Every try is granted (1 per ns), so every call writes.
fn grants_per_second(addr: &str, clients: usize, hot: bool) {
    let run_for = Duration::from_secs(1);
    let limiters: Vec<_> = (0..clients).map(|_| limiter(addr)).collect();
    let counts: Vec<(u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = limiters
            .iter()
            .enumerate()
            .map(|(c, limiter)| {
                s.spawn(move || {
                    let start = Instant::now();
                    let mut grants = 0u64;
                    let mut i = c * 1_000;
                    while start.elapsed() < run_for {
                        let key = if hot {
                            "hot".to_owned()
                        } else {
                            i = (i + 1) % 10_000;
                            format!("k{i}")
                        };
                        if limiter.try_take(&key).is_ok() {
                            grants += 1;
                        }
                    }
                    (grants, limiter.cas_conflicts())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let grants: u64 = counts.iter().map(|c| c.0).sum();
    let conflicts: u64 = counts.iter().map(|c| c.1).sum();
    println!(
        "{clients} clients, {}: {grants} grants/s, {conflicts} CAS races lost ({:.2} a grant)",
        if hot { "one hot key" } else { "10 000 keys" },
        conflicts as f64 / grants.max(1) as f64
    );
}

fn round_trips(c: &mut Criterion) {
    let unix = server::MemcachedServer::start();
    let tcp = server::MemcachedServer::start_with(Some(0), 64);
    for (transport, addr) in [("unix", unix.addr()), ("tcp", tcp.addr())] {
        // One caller: the pool holds exactly one connection, used by both.
        let limiter = limiter(&addr);
        interleaved(transport, &limiter);
        if transport == "unix" {
            for clients in [1, 8] {
                grants_per_second(&addr, clients, true);
                grants_per_second(&addr, clients, false);
            }
        }
        let mut group = c.benchmark_group(format!("memcached_{transport}"));
        group.measurement_time(Duration::from_secs(3));
        group.bench_function("get", |b| b.iter(|| limiter.ping().unwrap()));
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
