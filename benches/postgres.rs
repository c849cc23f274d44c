//! The PostgreSQL limiter, measured against its floors and a peer, on one
//! throwaway server this harness starts itself (unix socket, `fsync=off`):
//!
//! 1. per-call cost: a `try_take` against a `SELECT 1` round trip on the
//!    same limiter (same pool, same path), interleaved rounds, for the
//!    blocking face (whose calls hop to its runtime thread) and the async
//!    one;
//! 2. floors on one raw connection: `SELECT 1`, a one-row `UPDATE` (what
//!    any write costs), Pecorino's UPSERT, beside paceline's granted step;
//! 3. ops/s at 1, 8 and 64 connections, paceline's step (through
//!    `AsyncPostgresLimiter`, one task per connection) beside a
//!    Pecorino-style float leaky-bucket UPSERT (raw prepared statements on
//!    as many connections), on two loads: every task on its own key, each
//!    call granted (every call writes); and every task on one hot key at
//!    1000/s (nearly every call refused: paceline writes nothing then,
//!    Pecorino writes on every call).
//!
//! `cargo bench -p paceline-benches --features postgres --bench postgres`
//!
//! Each figure is the median of `ROUNDS` rounds, with the spread (min–max);
//! paceline and the peer alternate round by round.

#![allow(missing_docs)]

use paceline::AsyncTake;
use paceline::Take;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use paceline::postgres::tokio_postgres::{self, NoTls};
use paceline::postgres::{AsyncPostgresLimiter, PostgresLimiter};
use paceline::Rate;

#[path = "../tests/support/pg_server.rs"]
mod server;

const ROUNDS: usize = 5;

fn median_spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn per_call(n: u32, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed() / n
}

/// Pecorino's table, as its migration makes it (a logged table, three
/// indexes: the uuid key, the unique `key`, `may_be_deleted_after`; Rails'
/// `string` and `datetime` read here as `text` and `timestamptz`).
const PECORINO_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS pecorino_leaky_buckets (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  key text NOT NULL,
  level double precision NOT NULL,
  last_touched_at timestamptz NOT NULL,
  may_be_deleted_after timestamptz NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS pecorino_key ON pecorino_leaky_buckets (key);
CREATE INDEX IF NOT EXISTS pecorino_expiry ON pecorino_leaky_buckets (may_be_deleted_after);";

/// Pecorino's `add_tokens` (cheddar-me/pecorino,
/// lib/pecorino/adapters/postgres_adapter.rb): one UPSERT, as written
/// there; $1 key, $2 capacity, $3 leak rate per s, $4 fillup (its
/// `delete_after_s`, `2 * capacity / leak_rate`, computed in SQL here).
const PECORINO_ADD_TOKENS: &str = "
INSERT INTO pecorino_leaky_buckets AS t (key, last_touched_at, may_be_deleted_after, level)
VALUES ($1, clock_timestamp(),
        clock_timestamp() + ((2 * $2::float8 / $3::float8) * interval '1 second'),
        GREATEST(0.0, LEAST($2::float8, $4::float8)))
ON CONFLICT (key) DO UPDATE SET
  last_touched_at = EXCLUDED.last_touched_at,
  may_be_deleted_after = EXCLUDED.may_be_deleted_after,
  level = GREATEST(0.0, LEAST($2::float8,
    t.level + $4::float8
    - (extract(epoch FROM (EXCLUDED.last_touched_at - t.last_touched_at))::float8 * $3::float8)))
RETURNING level, level >= $2::float8 AS at_capacity";

/// A limiter with slack 0 for the async face (no call made yet).
fn async_only(conn: &str, rate: Rate) -> PostgresLimiter {
    PostgresLimiter::builder(conn, rate)
        .slack(0)
        .build()
        .unwrap()
}

fn per_call_ratios(conn: &str, blocking: &PostgresLimiter, rt: &tokio::runtime::Runtime) {
    const N: u32 = 2_000;
    let granted = blocking
        .with_limit(Rate::per_second(1_000_000_000), 0)
        .unwrap();
    let (mut ratios, mut pings, mut takes) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS * 2 {
        let ping = per_call(N, || blocking.ping().unwrap());
        let take = per_call(N, || granted.try_take("percall").map(drop).unwrap());
        ratios.push(take.as_secs_f64() / ping.as_secs_f64());
        pings.push(ping.as_secs_f64() * 1e6);
        takes.push(take.as_secs_f64() * 1e6);
    }
    let (r, rmin, rmax) = median_spread(ratios);
    let (p, _, _) = median_spread(pings);
    let (t, _, _) = median_spread(takes);
    println!(
        "blocking: try_take (granted, writes) / SELECT 1 = {r:.2} (median of {}; {rmin:.2}–{rmax:.2}); \
         SELECT 1 {p:.0} µs, try_take {t:.0} µs",
        ROUNDS * 2
    );
    // The async face of a limiter never used blocking: its connections are
    // made, and run, on this runtime.
    let lim = AsyncPostgresLimiter::from(async_only(conn, Rate::per_second(1_000_000_000)));
    let (mut ratios, mut pings, mut takes) = (Vec::new(), Vec::new(), Vec::new());
    rt.block_on(async {
        for _ in 0..ROUNDS * 2 {
            let start = Instant::now();
            for _ in 0..N {
                lim.ping().await.unwrap();
            }
            let ping = start.elapsed() / N;
            let start = Instant::now();
            for _ in 0..N {
                lim.try_take("percall-async").await.unwrap();
            }
            let take = start.elapsed() / N;
            ratios.push(take.as_secs_f64() / ping.as_secs_f64());
            pings.push(ping.as_secs_f64() * 1e6);
            takes.push(take.as_secs_f64() * 1e6);
        }
    });
    let (r, rmin, rmax) = median_spread(ratios);
    let (p, _, _) = median_spread(pings);
    let (t, _, _) = median_spread(takes);
    println!(
        "async:    try_take (granted, writes) / SELECT 1 = {r:.2} (median of {}; {rmin:.2}–{rmax:.2}); \
         SELECT 1 {p:.0} µs, try_take {t:.0} µs",
        ROUNDS * 2
    );
    // The refused path: a plain read of the snapshot, no write.
    let refused = AsyncPostgresLimiter::from(blocking.with_limit(Rate::per_minute(1), 0).unwrap());
    let mut ratios = Vec::new();
    rt.block_on(async {
        let _ = refused.try_take("refused").await;
        for _ in 0..ROUNDS * 2 {
            let start = Instant::now();
            for _ in 0..N {
                refused.ping().await.unwrap();
            }
            let ping = start.elapsed();
            let start = Instant::now();
            for _ in 0..N {
                assert!(refused.try_take("refused").await.is_err());
            }
            ratios.push(start.elapsed().as_secs_f64() / ping.as_secs_f64());
        }
    });
    let (r, rmin, rmax) = median_spread(ratios);
    println!(
        "async:    try_take (refused, writes nothing) / SELECT 1 = {r:.2} ({rmin:.2}–{rmax:.2})"
    );
}

/// Round trips on one raw connection (no pool, no limiter), interleaved:
/// `SELECT 1`; the floor of any write, a one-row `UPDATE` (a row version, WAL
/// and a commit); Pecorino's UPSERT; paceline's step as the limiter sends it
/// (granted), through `AsyncPostgresLimiter` on its own pool; the step's
/// function called on the raw connection; and `SELECT 1` through the
/// limiter (`ping`). The last two split a take's cost between the server's
/// work and the client's (the pool, the timeouts). The step's cost over
/// `SELECT 1` is mostly the write's.
fn floors(conn: &str, rt: &tokio::runtime::Runtime) {
    const N: u32 = 2_000;
    // A limiter of its own, whose connections run on this runtime.
    let lim = AsyncPostgresLimiter::from(async_only(conn, Rate::per_second(1_000_000_000)));
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(conn, NoTls).await.unwrap();
        tokio::spawn(connection);
        let one = client.prepare("SELECT 1").await.unwrap();
        client
            .execute(
                // `rest_at` at its largest: the limiter's pruning never
                // deletes it (at 0 it did, and the update then found no row).
                "INSERT INTO paceline_limits VALUES ('floor', 0, NULL, 9223372036854775807) \
                 ON CONFLICT DO NOTHING",
                &[],
            )
            .await
            .unwrap();
        let update = client
            .prepare("UPDATE paceline_limits SET tat = tat + 1 WHERE key = 'floor'")
            .await
            .unwrap();
        let pecorino = client.prepare(PECORINO_ADD_TOKENS).await.unwrap();
        // The step's function as the limiter calls it, for a granted take
        // (span 1 ns, tau 1 s, any wait admitted, the server's clock, the
        // `rest_at` constants of tau), without the pool or the limiter.
        let step = {
            use tokio_postgres::types::Type;
            let types = [
                Type::TEXT,
                Type::INT8,
                Type::INT8,
                Type::TEXT,
                Type::INT8,
                Type::INT8,
                Type::INT8,
            ];
            let sql = "SELECT paceline_limits_step($1, $2, $3, $4::numeric, $5, $6, $7)";
            client.prepare_typed(sql, &types).await.unwrap()
        };
        let (span, tau, secs, rem) = (1i64, 1_000_000_000i64, 4_611_686_020i64, 1_427_387_903i64);
        let (within, now): (Option<&str>, Option<i64>) = (None, None);
        lim.ping().await.unwrap();
        let mut r: [Vec<f64>; 6] = Default::default();
        let mut us: [Vec<f64>; 6] = Default::default();
        for _ in 0..ROUNDS * 2 {
            let mut t = [0f64; 6];
            let start = Instant::now();
            for _ in 0..N {
                client.query_one(&one, &[]).await.unwrap();
            }
            t[0] = start.elapsed().as_secs_f64() / f64::from(N);
            let start = Instant::now();
            for _ in 0..N {
                client.execute(&update, &[]).await.unwrap();
            }
            t[1] = start.elapsed().as_secs_f64() / f64::from(N);
            let start = Instant::now();
            for _ in 0..N {
                client
                    .query_one(&pecorino, &[&"floor-pecorino", &1e9f64, &1e9f64, &1.0f64])
                    .await
                    .unwrap();
            }
            t[2] = start.elapsed().as_secs_f64() / f64::from(N);
            let start = Instant::now();
            for _ in 0..N {
                lim.try_take("floor-paceline").await.unwrap();
            }
            t[3] = start.elapsed().as_secs_f64() / f64::from(N);
            let start = Instant::now();
            for _ in 0..N {
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
                    [&"floor-raw", &span, &tau, &within, &now, &secs, &rem];
                client.query_one(&step, &params).await.unwrap();
            }
            t[4] = start.elapsed().as_secs_f64() / f64::from(N);
            let start = Instant::now();
            for _ in 0..N {
                lim.ping().await.unwrap();
            }
            t[5] = start.elapsed().as_secs_f64() / f64::from(N);
            for i in 0..6 {
                r[i].push(t[i] / t[0]);
                us[i].push(t[i] * 1e6);
            }
        }
        let names = [
            "SELECT 1 (raw connection)",
            "UPDATE of one row (raw)",
            "Pecorino add_tokens (raw)",
            "paceline try_take, granted (async limiter)",
            "paceline's step function, granted (raw)",
            "SELECT 1 (async limiter's ping)",
        ];
        println!(
            "\nper call, × SELECT 1 (median of {} interleaved rounds of {N}; min–max):",
            ROUNDS * 2
        );
        for i in 0..6 {
            let (m, lo, hi) = median_spread(r[i].clone());
            let (u, _, _) = median_spread(us[i].clone());
            println!("  {:<44} {u:>6.0} µs  {m:.2}× ({lo:.2}–{hi:.2})", names[i]);
        }
    });
}

#[derive(Clone, Copy, PartialEq)]
enum Load {
    /// Each task its own key, every call granted.
    OwnKeys,
    /// Every task on one key at 1000/s, slack 10.
    HotKey,
}

/// Calls per second of paceline's async try_take, `conns` tasks on a pool
/// of `conns`, for `for_`.
fn paceline_ops(
    conn: &str,
    conns: usize,
    load: Load,
    for_: Duration,
    rt: &tokio::runtime::Runtime,
) -> f64 {
    let rate = match load {
        Load::OwnKeys => Rate::per_second(1_000_000_000),
        Load::HotKey => Rate::per_second(1000),
    };
    let lim = PostgresLimiter::builder(conn, rate)
        .slack(10)
        .pool_size(conns)
        .connect_timeout(Duration::from_secs(10))
        .response_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let lim = AsyncPostgresLimiter::from(lim);
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    rt.block_on(async {
        // Open every connection first.
        let warm: Vec<_> = (0..conns)
            .map(|_| {
                let lim = lim.clone();
                tokio::spawn(async move { lim.ping().await.unwrap() })
            })
            .collect();
        for w in warm {
            w.await.unwrap();
        }
        let tasks: Vec<_> = (0..conns)
            .map(|i| {
                let (lim, count, stop) = (lim.clone(), Arc::clone(&count), Arc::clone(&stop));
                let key = match load {
                    Load::OwnKeys => format!("own:{i}"),
                    Load::HotKey => "hot".to_owned(),
                };
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        match lim.try_take(&key).await {
                            Ok(_) => {}
                            Err(e) if e.is_refusal() => {}
                            Err(e) => panic!("{e}"),
                        }
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let start = Instant::now();
        let c0 = count.load(Ordering::Relaxed);
        tokio::time::sleep(for_).await;
        let n = count.load(Ordering::Relaxed) - c0;
        let secs = start.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        n as f64 / secs
    })
}

/// Calls per second of Pecorino's add_tokens, on `conns` connections.
fn pecorino_ops(
    conn: &str,
    conns: usize,
    load: Load,
    for_: Duration,
    rt: &tokio::runtime::Runtime,
) -> f64 {
    let (capacity, leak) = match load {
        Load::OwnKeys => (1e9f64, 1e9f64),
        Load::HotKey => (11.0f64, 1000.0f64),
    };
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    rt.block_on(async {
        let mut clients = Vec::new();
        for _ in 0..conns {
            let (client, connection) = tokio_postgres::connect(conn, NoTls).await.unwrap();
            tokio::spawn(connection);
            let st = client.prepare(PECORINO_ADD_TOKENS).await.unwrap();
            clients.push((client, st));
        }
        let tasks: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(i, (client, st))| {
                let (count, stop) = (Arc::clone(&count), Arc::clone(&stop));
                let key = match load {
                    Load::OwnKeys => format!("own:{i}"),
                    Load::HotKey => "hot".to_owned(),
                };
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        client
                            .query_one(&st, &[&key, &capacity, &leak, &1.0f64])
                            .await
                            .unwrap();
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let start = Instant::now();
        let c0 = count.load(Ordering::Relaxed);
        tokio::time::sleep(for_).await;
        let n = count.load(Ordering::Relaxed) - c0;
        let secs = start.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        n as f64 / secs
    })
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not used.
    let server = server::PgServer::start();
    let conn = server.conn();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let blocking = PostgresLimiter::builder(&conn, Rate::per_second(1000))
        .build()
        .unwrap();
    blocking.install().unwrap();
    server.psql(PECORINO_SCHEMA);
    println!(
        "PostgreSQL {} on a unix socket, fsync=off; both tables logged",
        server.psql("SHOW server_version")
    );
    per_call_ratios(&conn, &blocking, &rt);
    floors(&conn, &rt);
    let for_ = Duration::from_millis(1500);
    for load in [Load::OwnKeys, Load::HotKey] {
        let name = match load {
            Load::OwnKeys => "own key per connection, every call granted",
            Load::HotKey => "one hot key at 1000/s, nearly every call refused",
        };
        println!("\nops/s, {name} (median of {ROUNDS} rounds of {for_:?}; min–max):");
        for conns in [1usize, 8, 64] {
            let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                let p = paceline_ops(&conn, conns, load, for_, &rt);
                let q = pecorino_ops(&conn, conns, load, for_, &rt);
                ratios.push(p / q);
                ours.push(p);
                theirs.push(q);
            }
            let (p, pmin, pmax) = median_spread(ours);
            let (q, qmin, qmax) = median_spread(theirs);
            let (r, rmin, rmax) = median_spread(ratios);
            println!(
                "  {conns:>2} conns: paceline {p:>7.0} ({pmin:.0}–{pmax:.0}), pecorino {q:>7.0} \
                 ({qmin:.0}–{qmax:.0}); paceline / pecorino {r:.2} ({rmin:.2}–{rmax:.2})"
            );
        }
    }
}
