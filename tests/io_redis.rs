//! Paced byte streams through one key of a Redis limiter (a `redis-server`
//! this file starts itself): blocking and async, the bytes paced by the
//! server's schedule; and an unreachable server as an `io::Error`.
// The async half needs `tokio`; the file builds with both.
#![cfg(all(feature = "redis", feature = "tokio"))]

#[path = "support/redis_server.rs"]
mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use paceline::io::{OnKey, PacedReader, PacedWriter};
use paceline::redis::RedisLimiter;
use paceline::Rate;
use support::RedisServer;

/// 1 MB/s (1 µs a byte) with a burst of 64 000 bytes.
fn megabyte_per_second(url: &str) -> RedisLimiter {
    RedisLimiter::builder(url, Rate::per_second(1_000_000))
        .slack(63_999)
        .build()
        .unwrap()
}

/// 200 000 bytes through a key at rest: the first burst at once, the other
/// 136 000 bytes 1 µs apart.
const BYTES: usize = 200_000;
const PACED: Duration = Duration::from_millis(136);

fn data() -> Vec<u8> {
    (0..BYTES).map(|i| (i % 251) as u8).collect()
}

#[test]
fn a_paced_writer_paces_its_bytes_through_a_redis_key() {
    let server = RedisServer::start();
    let limiter = megabyte_per_second(&server.url());
    let sent = data();
    let mut paced = PacedWriter::new(Vec::new(), OnKey::new(&limiter, "upload".to_string()));
    let start = Instant::now();
    paced.write_all(&sent).unwrap();
    let elapsed = start.elapsed();
    assert_eq!(paced.get_ref(), &sent);
    assert!(elapsed >= PACED, "early: {elapsed:?}");
    // The key's schedule is in the server: another client finds the burst
    // spent, but for what the time since the last slot has banked (1 byte
    // a µs). That slot came 136 ms after the first call, which came after
    // `start`: a bound, not a guess (a loaded machine can take tens of ms
    // to wake the writer and get here).
    let other = megabyte_per_second(&server.url());
    let available = other.available("upload").unwrap();
    let banked = start.elapsed().saturating_sub(PACED).as_micros() as u64 + 1;
    assert!(
        available <= banked.min(64_000),
        "{available} bytes free at most {banked} µs after the last slot"
    );
    if banked < 64_000 {
        assert!(available < 64_000, "the burst was not spent");
    }
}

#[tokio::test]
async fn an_async_paced_reader_paces_its_bytes_through_a_redis_key() {
    let server = RedisServer::start();
    let limiter = paceline::redis::AsyncRedisLimiter::from(megabyte_per_second(&server.url()));
    let sent = data();
    let mut paced = PacedReader::new(&sent[..], OnKey::new(limiter, "download".to_string()));
    let mut received = Vec::new();
    let start = Instant::now();
    tokio::io::copy(&mut paced, &mut received).await.unwrap();
    let elapsed = start.elapsed();
    assert_eq!(received, sent);
    assert!(elapsed >= PACED, "early: {elapsed:?}");
}

#[tokio::test]
async fn an_unreachable_redis_server_fails_the_async_write_with_its_error() {
    use paceline::redis::{AsyncRedisLimiter, Error};
    use std::error::Error as _;
    use tokio::io::AsyncWriteExt;

    // Nothing listens on port 1.
    let limiter = AsyncRedisLimiter::from(
        RedisLimiter::builder("redis://127.0.0.1:1/", Rate::per_second(1_000_000))
            .slack(63_999)
            .connect_timeout(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let mut paced = PacedWriter::new(Vec::new(), OnKey::new(limiter, "upload".to_string()));
    let e = paced.write(&[1; 10]).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Other);
    assert!(
        matches!(
            e.source().and_then(|s| s.downcast_ref::<Error>()),
            Some(Error::Unavailable(_) | Error::Timeout)
        ),
        "{e:?}"
    );
    assert!(paced.get_ref().is_empty());
}
