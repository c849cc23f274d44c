//! The look inside at a million keys: a request's memory is bounded by the
//! rows it returns, not by the keys it walks. Four page requests for 10
//! rows each, at once, add at most 128 MiB to the process's resident set
//! (copying every key, as each request once did, took about 120 MiB a
//! request).
//!
//! This file holds one test so that the process's peak RSS is its own.
#![cfg(all(feature = "tower", feature = "keyed"))]

use paceline::Take;
use std::sync::Barrier;

use bytes::Bytes;
use http_body_util::Full;
use paceline::http::Inspect;
use paceline::{KeyedLimiter, Rate};
use tower::Service;

const KEYS: u32 = 1_000_000;
const REQUESTS: [&str; 4] = [
    "/json?limit=10",
    "/json?sort=fill&limit=10",
    "/json?sort=key&order=desc&limit=10",
    "/?prefix=10.1&limit=10",
];
/// What four requests may add to the resident set, in all.
const BOUND_KIB: u64 = 128 << 10;

/// Key `i`: an address-like text, as a per-IP layer's keys are.
fn key(i: u32) -> String {
    format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255)
}

/// A field of `/proc/self/status`, in KiB.
fn status_kib(name: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(name)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn four_concurrent_page_requests_at_a_million_keys_add_at_most_128_mib() {
    // 10 an hour: every key stays busy (listed) for the whole test.
    let limiter = KeyedLimiter::<String>::builder(Rate::per_hour(10))
        .max_keys(2 * KEYS as usize)
        .build()
        .unwrap();
    for i in 0..KEYS {
        limiter.try_take(key(i).as_str()).unwrap();
    }
    // The ten first keys, addresses sorted as addresses: 10.0.0.0 to 10.0.0.9.
    let first: Vec<String> = (0..10).map(key).collect();
    let service = Inspect::new().keyed("per_ip", limiter).service();

    // Peak RSS from here on (Linux: writing 5 to clear_refs resets VmHWM).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_kib("VmRSS:");
    let barrier = Barrier::new(REQUESTS.len());
    let bodies: Vec<Bytes> = std::thread::scope(|s| {
        let workers: Vec<_> = REQUESTS
            .iter()
            .map(|uri| {
                let (mut service, barrier) = (service.clone(), &barrier);
                s.spawn(move || {
                    let request = http::Request::get(*uri).body(()).unwrap();
                    barrier.wait();
                    let response = service.call(request).into_inner().unwrap();
                    assert_eq!(response.status(), 200, "{uri}");
                    into_bytes(response.into_body())
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let peak = status_kib("VmHWM:");
    let added = peak.saturating_sub(before);
    println!("VmRSS before {before} KiB, peak {peak} KiB: {added} KiB added");

    let json: serde_json::Value = serde_json::from_slice(&bodies[0]).unwrap();
    assert_eq!(json["matched"], KEYS);
    let keys: Vec<&str> = json["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, first);
    assert!(
        added <= BOUND_KIB,
        "four requests for 10 rows added {} MiB of RSS (at most {} MiB)",
        added >> 10,
        BOUND_KIB >> 10
    );
}

/// The bytes of a `Full` body, which holds them whole.
fn into_bytes(body: Full<Bytes>) -> Bytes {
    use http_body_util::BodyExt;
    let collected = futures_util::FutureExt::now_or_never(body.collect())
        .expect("a Full body is ready at once");
    collected.unwrap().to_bytes()
}
