//! A client's key costs bounded memory whatever its length: 2,000 distinct
//! 32 KiB header keys through `LimitLayer::per_header` add at most 18 MiB
//! of resident memory over 2,000 requests with one repeated key (each key
//! kept whole, as the layer once did, took 64 MiB and more).
//!
//! This file holds one test so that the process's memory is its own.
#![cfg(all(feature = "tower", feature = "keyed"))]

use std::convert::Infallible;

use http::{Request, Response};
use paceline::http::LimitLayer;
use paceline::Rate;
use tower::{Layer, ServiceExt};

const KEYS: usize = 2_000;
const KEY_BYTES: usize = 32 << 10;
/// What the distinct keys may add over the repeated one.
const BOUND_KIB: u64 = 18 << 10;

/// A field of `/proc/self/status`, in KiB.
fn status_kib(name: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(name)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Key `i`: 32 KiB of header-safe text, distinct in its last characters.
fn key(i: usize) -> String {
    let mut key = "k".repeat(KEY_BYTES - 8);
    key.push_str(&format!("{i:08}"));
    key
}

#[tokio::test]
async fn two_thousand_32_kib_keys_add_at_most_18_mib() {
    let layer = LimitLayer::per_header("x-api-key", Rate::per_hour(10))
        .build()
        .unwrap();
    let limiter = layer.keyed_limiter().expect("a keyed layer").clone();
    let service = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let send = |key: String| {
        let request = Request::get("/").header("x-api-key", key).body(()).unwrap();
        let service = service.clone();
        async move { service.oneshot(request).await.unwrap().status() }
    };

    // One key, repeated: the requests' own memory, reused from one to the next.
    let repeated = key(KEYS);
    for _ in 0..KEYS {
        send(repeated.clone()).await;
    }
    let before = status_kib("VmRSS:");
    for i in 0..KEYS {
        assert_eq!(send(key(i)).await, 200, "key {i}: a fresh key is admitted");
    }
    let after = status_kib("VmRSS:");
    let added = after.saturating_sub(before);
    println!("VmRSS {before} KiB after one key, {after} KiB after {KEYS} keys: {added} KiB added");
    assert_eq!(limiter.limiter().len(), KEYS + 1, "every key is limited");
    // The map's own count of what it holds: slots, not the keys' length.
    let bytes = limiter.limiter().keyed_stats().bytes;
    println!("the key map holds {bytes} bytes");
    assert!(
        bytes <= (KEYS + 1) * 256,
        "{bytes} bytes for {} keys",
        KEYS + 1
    );
    // Each key is still its own limit: a second burst's worth is refused.
    for _ in 0..20 {
        send(key(0)).await;
    }
    assert_eq!(send(key(0)).await, 429, "a long key is limited");
    assert!(
        added <= BOUND_KIB,
        "{KEYS} keys of {KEY_BYTES} bytes added {} MiB of RSS (at most {} MiB)",
        added >> 10,
        BOUND_KIB >> 10
    );
}
