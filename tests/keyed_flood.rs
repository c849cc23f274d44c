//! A flood of distinct keys at full speed: the map stays under its ceiling,
//! memory stays bounded, and nothing fails.
//!
//! The number of keys is `PACELINE_FLOOD_KEYS` (default: 10 million in a
//! release build, 300 000 in a debug build, where each call is ~10x slower).
//! `.ci/run` runs the full flood in release:
//!
//! ```text
//! PACELINE_FLOOD_KEYS=10000000 cargo test --release --test keyed_flood -- --nocapture
//! ```
//!
//! This file holds one test so that the process's peak RSS is its own.
#![cfg(feature = "keyed")]

use paceline::Take;
use std::time::{Duration, Instant};

use paceline::{keyed::WhenFull, KeyedLimiter, Rate};

const MAX_KEYS: usize = 100_000;
const THREADS: u64 = 2;

fn flood_keys() -> u64 {
    match std::env::var("PACELINE_FLOOD_KEYS") {
        Ok(v) => v.parse().expect("PACELINE_FLOOD_KEYS: a number of keys"),
        Err(_) if cfg!(debug_assertions) => 300_000,
        Err(_) => 10_000_000,
    }
}

/// `VmHWM` (peak resident set) and `VmRSS` of this process, in KiB.
fn memory_kib() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

#[test]
fn ten_million_distinct_keys_stay_under_the_ceiling() {
    let total = flood_keys();
    let before = memory_kib();
    // 1/s with slack 10: a key used once stays busy for a second, so the
    // flood outruns pruning and the ceiling (eviction) does the work.
    let limiter = KeyedLimiter::<u64>::builder(Rate::per_second(1))
        .max_keys(MAX_KEYS)
        .when_full(WhenFull::Evict)
        .build()
        .unwrap();
    let start = Instant::now();
    let per_thread = total / THREADS;
    let peak_len = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let limiter = &limiter;
                s.spawn(move || {
                    let mut peak = 0;
                    for i in 0..per_thread {
                        // Every key new: an attacker's random source addresses.
                        let key = t * per_thread + i;
                        assert_eq!(limiter.try_take(&key).map(drop), Ok(()), "key {key}");
                        if i % 100_000 == 0 {
                            peak = peak.max(limiter.len());
                        }
                    }
                    peak
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    });
    let elapsed = start.elapsed();
    let stats = limiter.keyed_stats();
    let after = memory_kib();
    println!(
        "flood: {} keys in {:.2?} ({:.0} ns/key/thread, {THREADS} threads); \
         peak tracked {peak_len}, now {}; evicted {}, pruned {}; \
         VmHWM before {:?} KiB, after {:?} KiB",
        per_thread * THREADS,
        elapsed,
        elapsed.as_nanos() as f64 / per_thread as f64,
        stats.keys,
        stats.evicted,
        stats.pruned,
        before.map(|m| m.0),
        after.map(|m| m.0),
    );
    assert!(peak_len <= MAX_KEYS && stats.keys <= MAX_KEYS);
    assert_eq!(stats.admitted, per_thread * THREADS);
    assert_eq!(
        stats.keys as u64 + stats.evicted + stats.pruned,
        stats.admitted
    );
    // Memory: the map at its ceiling is a few MB (about 100 bytes a key);
    // allow 64 MB over the start so that a leak of even 7 bytes a key fails.
    if let (Some((_, rss0)), Some((hwm, _))) = (before, after) {
        assert!(
            hwm < rss0 + 64 * 1024,
            "peak RSS {hwm} KiB, {rss0} KiB at start"
        );
    }
    assert!(elapsed < Duration::from_secs(600));
}
