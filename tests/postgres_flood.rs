//! A flood of distinct keys on a `PostgresLimiter`: every call succeeds, and
//! the table stays bounded by the keys of the last few seconds, as the
//! module docs' bound says (`rows <= keys written in the last D + a batch
//! per prune in flight`, `D = cost·T + tau + 2 s`).
//!
//! `PACELINE_PG_FLOOD_KEYS` sets how many keys (default 100 000, in
//! `scripts/test.sh`). A million takes about 2.5 minutes here (~6 300 keys/s
//! on 2 shared cores), too long for CI's budget; run it by hand:
//! `PACELINE_PG_FLOOD_KEYS=1000000 cargo test --release --features postgres --test postgres_flood -- --nocapture`.
#![cfg(feature = "postgres")]

use paceline::Take;
#[path = "support/pg_server.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use paceline::postgres::PostgresLimiter;
use paceline::Rate;
use support::PgServer;

const CLIENTS: u64 = 8;
/// How far back the bound looks: `D` (2.01 s here) plus a second for the
/// prune tasks to catch up with what became prunable.
const WINDOW: Duration = Duration::from_secs(3);
/// Rows a prune batch may leave behind per client, on top.
const SLACK_ROWS: u64 = 128 * CLIENTS;

#[test]
fn a_flood_of_distinct_keys_keeps_the_table_bounded() {
    let keys: u64 = std::env::var("PACELINE_PG_FLOOD_KEYS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let server = PgServer::start();
    // 1000/s, slack 10: a row is at rest 11 ms after its grant.
    let lim = PostgresLimiter::builder(&server.conn(), Rate::per_second(1000))
        .slack(10)
        .pool_size(CLIENTS as usize + 2)
        .unlogged(true)
        .build()
        .unwrap();
    lim.install().unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (lim, written) = (lim.clone(), Arc::clone(&written));
            thread::spawn(move || {
                let mut i = c;
                while i < keys {
                    lim.try_take(&format!("flood:{i}"))
                        .expect("a flood call failed");
                    written.fetch_add(1, Ordering::Relaxed);
                    i += CLIENTS;
                }
            })
        })
        .collect();
    let mut max_rows = 0;
    let mut max_due = 0;
    let mut worst_ratio = 0.0f64;
    let mut history: Vec<(Instant, u64)> = Vec::new();
    while clients.iter().any(|c| !c.is_finished()) {
        thread::sleep(Duration::from_millis(500));
        let before = written.load(Ordering::Relaxed);
        let counted = server.psql(
            "SELECT count(*), count(*) FILTER (WHERE rest_at <= \
             floor(extract(epoch FROM clock_timestamp()))) FROM paceline_limits",
        );
        let (rows, due) = counted.split_once('|').unwrap();
        let (rows, due): (u64, u64) = (rows.parse().unwrap(), due.parse().unwrap());
        max_due = max_due.max(due);
        let now = Instant::now();
        history.push((now, before));
        // Keys written in the last WINDOW (counted from before the count
        // started, so the count sees at least these rows' fate).
        let long_ago = history
            .iter()
            .rev()
            .find(|(t, _)| now.duration_since(*t) >= WINDOW)
            .map_or(0, |&(_, n)| n);
        let after = written.load(Ordering::Relaxed);
        let bound = after - long_ago + SLACK_ROWS;
        max_rows = max_rows.max(rows);
        worst_ratio = worst_ratio.max(rows as f64 / bound as f64);
        assert!(
            rows <= bound,
            "{rows} rows after {after} keys: over the bound {bound} (keys of the last {WINDOW:?} + {SLACK_ROWS})"
        );
    }
    for c in clients {
        c.join().expect("a flood client failed");
    }
    let took = start.elapsed();
    let size = server.psql("SELECT pg_size_pretty(pg_total_relation_size('paceline_limits'))");
    println!(
        "{keys} keys in {took:.1?} ({:.0}/s): at most {max_rows} rows (at most {:.0} % of the \
         bound; at most {max_due} rows due for pruning), table and index {size}",
        keys as f64 / took.as_secs_f64(),
        worst_ratio * 100.0
    );
    // Once every key is at rest, prune() leaves nothing.
    thread::sleep(Duration::from_millis(2100));
    lim.prune().unwrap();
    assert_eq!(server.psql("SELECT count(*) FROM paceline_limits"), "0");
}
