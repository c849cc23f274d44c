//! Paced byte streams through one key of a PostgreSQL limiter (a server
//! this file starts itself), blocking and async: what no per-backend code
//! in `io` made possible before, since `io` pays through the take
//! interface.
#![cfg(all(feature = "postgres", feature = "tokio"))]

#[path = "support/pg_server.rs"]
mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use paceline::io::{OnKey, PacedReader, PacedWriter};
use paceline::postgres::{AsyncPostgresLimiter, PostgresLimiter};
use paceline::Rate;
use support::PgServer;

/// 1 MB/s with a burst of 64 000 bytes: 200 000 bytes through a key at
/// rest go as the burst at once and the other 136 000 bytes 1 µs apart.
const BYTES: usize = 200_000;
const PACED: Duration = Duration::from_millis(136);

fn limiter(server: &PgServer) -> PostgresLimiter {
    let limiter = PostgresLimiter::builder(&server.conn(), Rate::per_second(1_000_000))
        .slack(63_999)
        .build()
        .unwrap();
    limiter.install().unwrap();
    limiter
}

fn data() -> Vec<u8> {
    (0..BYTES).map(|i| (i % 251) as u8).collect()
}

#[test]
fn a_paced_writer_paces_its_bytes_through_a_postgres_key() {
    let server = PgServer::start();
    let limiter = limiter(&server);
    let sent = data();
    let mut paced = PacedWriter::new(Vec::new(), OnKey::new(&limiter, "upload".to_string()));
    let start = Instant::now();
    paced.write_all(&sent).unwrap();
    assert!(start.elapsed() >= PACED, "early: {:?}", start.elapsed());
    assert_eq!(paced.get_ref(), &sent);
    // The schedule is in the table: the burst was spent there.
    assert!(limiter.available("upload").unwrap() < 64_000);
}

#[tokio::test]
async fn an_async_paced_reader_paces_its_bytes_through_a_postgres_key() {
    let server = PgServer::start();
    let limiter = AsyncPostgresLimiter::from(limiter(&server));
    let sent = data();
    let mut paced = PacedReader::new(&sent[..], OnKey::new(limiter, "download".to_string()));
    let mut received = Vec::new();
    let start = Instant::now();
    tokio::io::copy(&mut paced, &mut received).await.unwrap();
    assert!(start.elapsed() >= PACED, "early: {:?}", start.elapsed());
    assert_eq!(received, sent);
}
