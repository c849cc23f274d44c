//! paceline's `KeyedLimiter` beside governor's keyed limiter (dashmap, its
//! default) in one criterion run, every call a non-blocking check that is
//! admitted:
//!
//! - `hot_key`: one key, on 1, 2 and 8 threads;
//! - `many_keys`: a random walk over 100 000 busy keys (1/s with a burst of
//!   a billion: every call admitted, no key ever back at rest);
//! - `idle_keys`: the same walk at 10^9/s with a slack of 10 (governor's
//!   burst of 11), where every key is back at rest between two visits.
//!   governor keeps every key (its memory only shrinks on
//!   `retain_recent`); paceline drops a key at rest only when its shard's
//!   table needs the room: one thread's walk (65,536 calls over about
//!   48,000 keys) fits the tables and finds its keys, two threads' walks
//!   track a new key on about three calls in four.
//!
//! The `floor` line is a lone `AtomicLimiter`: one clock read and one CAS.
//! Before the benchmarks it prints the memory each limiter takes per key
//! (RSS growth over a million keys, each in a fresh child process).
//!
//! ```text
//! cargo bench -p paceline-benches --bench keyed
//! ```
//!
//! Multi-threaded lines are wall time per call on each thread: T threads
//! each make `iters` calls at once, so throughput is T calls per that time.

use paceline::Take;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use governor::{Quota, RateLimiter};
use paceline::{AtomicLimiter, KeyedLimiter, Rate};

/// Many-keys working set.
const KEYS: u64 = 100_000;
/// Keys inserted to measure memory per key.
const MEMORY_KEYS: u64 = 1_000_000;

/// A burst of a billion: no key runs out or comes back to rest in a run.
const BIG_BURST: u32 = 1_000_000_000;

/// 1/s with a burst of a billion (busy keys), or one per ns with slack 10
/// (keys at rest between visits).
fn paceline_limiter(busy: bool) -> KeyedLimiter<u64> {
    let builder = if busy {
        KeyedLimiter::builder(Rate::per_second(1)).slack(u64::from(BIG_BURST) - 1)
    } else {
        // Slack 10 as governor's burst of 11: the default slack (10 ms of
        // permits at this rate) would keep a key busy for 10 ms, and a
        // walk that visits a key more often than that would find it busy.
        KeyedLimiter::builder(Rate::per_second(1_000_000_000)).slack(10)
    };
    builder.max_keys(1_000_000).build().unwrap()
}

type Governor = governor::DefaultKeyedRateLimiter<u64>;

/// The same two configurations for governor.
fn governor_limiter(busy: bool) -> Governor {
    let quota = if busy {
        Quota::per_second(NonZeroU32::new(1).unwrap())
            .allow_burst(NonZeroU32::new(BIG_BURST).unwrap())
    } else {
        Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap())
            .allow_burst(NonZeroU32::new(11).unwrap())
    };
    RateLimiter::keyed(quota)
}

/// A fixed pseudo-random walk over `0..KEYS`, different per thread.
fn walk(thread: u64, len: usize) -> Vec<u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (thread + 1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % KEYS
        })
        .collect()
}

/// Runs `op(thread, i)` `iters` times on each of `threads` threads at once;
/// the wall time of the slowest.
fn on_threads(threads: u64, iters: u64, op: &(dyn Fn(u64, u64) + Sync)) -> Duration {
    let barrier = Barrier::new(threads as usize + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for i in 0..iters {
                    op(t, i);
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

fn keyed(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed");
    let walks: Vec<Vec<u64>> = (0..8).map(|t| walk(t, 1 << 16)).collect();
    let walk_key = |t: u64, i: u64| walks[t as usize][(i & 0xFFFF) as usize];
    for threads in [1u64, 2, 8] {
        let floor = AtomicLimiter::builder(Rate::per_second(1))
            .slack(u64::from(BIG_BURST) - 1)
            .full_credit(true)
            .build()
            .unwrap();
        g.bench_function(format!("floor_atomic_limiter/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, &|_, _| {
                    let _ = black_box(floor.try_take());
                })
            })
        });
        let (pl, gv) = (paceline_limiter(true), governor_limiter(true));
        g.bench_function(format!("hot_key/paceline/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, &|_, _| {
                    let _ = black_box(pl.try_take(&42));
                })
            })
        });
        g.bench_function(format!("hot_key/governor/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, &|_, _| {
                    let _ = black_box(gv.check_key(&42));
                })
            })
        });
        for k in 0..KEYS {
            let _ = pl.try_take(&k);
            let _ = gv.check_key(&k);
        }
        g.bench_function(format!("many_keys/paceline/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, &|t, i| {
                    let _ = black_box(pl.try_take(&walk_key(t, i)));
                })
            })
        });
        g.bench_function(format!("many_keys/governor/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, &|t, i| {
                    let _ = black_box(gv.check_key(&walk_key(t, i)));
                })
            })
        });
        if threads == 8 {
            continue;
        }
        let (pl, gv) = (paceline_limiter(false), governor_limiter(false));
        g.bench_function(format!("idle_keys/paceline/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, &|t, i| {
                    let _ = black_box(pl.try_take(&walk_key(t, i)));
                })
            })
        });
        g.bench_function(format!("idle_keys/governor/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, &|t, i| {
                    let _ = black_box(gv.check_key(&walk_key(t, i)));
                })
            })
        });
    }
    g.finish();
}

/// This process's resident set, in bytes.
fn rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// Fills one limiter (`which`) with a million keys and prints the RSS it
/// grew by per key. Run in a child process so the allocator starts fresh.
fn bytes_per_key(which: &str) {
    let before = rss();
    let len = match which {
        "paceline" => {
            let pl = KeyedLimiter::<u64>::builder(Rate::per_second(1))
                .max_keys(2 * MEMORY_KEYS as usize)
                .build()
                .unwrap();
            for k in 0..MEMORY_KEYS {
                let _ = pl.try_take(&k);
            }
            let len = pl.len();
            std::mem::forget(pl);
            len
        }
        _ => {
            let gv = governor_limiter(true);
            for k in 0..MEMORY_KEYS {
                let _ = gv.check_key(&k);
            }
            let len = gv.len();
            std::mem::forget(gv);
            len
        }
    };
    let per_key = match (before, rss()) {
        (Some(b), Some(a)) => format!("{:.1}", a.saturating_sub(b) as f64 / len as f64),
        _ => "n/a".to_string(),
    };
    println!("memory: {which} keyed limiter, {len} u64 keys: {per_key} bytes per key");
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = keyed
}

fn main() {
    if let Ok(which) = std::env::var("PACELINE_BENCH_MEMORY") {
        return bytes_per_key(&which);
    }
    for which in ["paceline", "governor"] {
        let exe = std::env::current_exe().expect("the bench's own path");
        let status = std::process::Command::new(exe)
            .env("PACELINE_BENCH_MEMORY", which)
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            println!("memory: {which}: measurement failed ({status:?})");
        }
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
