//! One hot key shared by 8 processes through leased batches
//! (`paceline::lease::Leased`), on a `redis-server` (or, with `--postgres`,
//! a PostgreSQL) this program starts itself.
//!
//! ```text
//! cargo run --release -p paceline-benches --features redis --example hot_key
//! cargo run --release -p paceline-benches --features redis --example hot_key -- --postgres
//! ```
//!
//! Options: `--secs N` (the measured run, default 10), `--expiry-ms E`
//! (the lease's validity, default 4 for Redis, 8 for PostgreSQL), `--rate R`
//! (default 1000000 per second), `--slack S` (default 10000), `--processes N`
//! (default 8).
//!
//! The parent starts the server, then re-executes itself as 8 children.
//! Each child takes from the one key as fast as it can through its own
//! `Leased` (one thread), records the Unix time of every permit it spent
//! (the time the lease reports: its clock read after the spend), releases
//! what it holds at the end, and hands the times and its lease counts to
//! the parent. The parent checks every process's times together against
//! `S + 1 + w / T` for every window (in one pass: with the times sorted,
//! `(j - i) T <= S T + t_j - t_i` for all `i < j`), and prints one line:
//!
//! ```text
//! hot key: <grants/s> grants/s across 8 processes, <calls> remote calls per 1000 grants, over bound <n>, unspent <pct>%
//! ```
//!
//! `over bound` is the most permits any window held beyond the bound (0:
//! it held). Progress goes to stderr; stdout has that line only.

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;

#[cfg(feature = "postgres")]
#[path = "../../tests/support/pg_server.rs"]
mod pg_server;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use paceline::lease::{Leased, Lender};
use paceline::redis::{FailPolicy, RedisLimiter};
use paceline::{clock::Clock, take::OnKey, Limit, Rate, Take};

const CHILD_ENV: &str = "PACELINE_HOT_KEY_CHILD";
const KEY: &str = "hot";

/// The Unix time, ns: one clock every process reads alike.
#[derive(Clone, Copy, Debug, Default)]
struct Wall;

impl Clock for Wall {
    fn now(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    }
}

#[derive(Clone, Debug)]
struct Args {
    postgres: bool,
    secs: u64,
    expiry_ms: u64,
    rate: u64,
    slack: u64,
    processes: usize,
}

fn args() -> Args {
    let mut a = Args {
        postgres: false,
        secs: 10,
        expiry_ms: 0,
        rate: 1_000_000,
        slack: 10_000,
        processes: 8,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| -> u64 {
            let v = it.next().unwrap_or_else(|| panic!("{name} needs a value"));
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: not a number: {v:?}"))
        };
        match arg.as_str() {
            "--postgres" => a.postgres = true,
            "--secs" => a.secs = value("--secs"),
            "--expiry-ms" => a.expiry_ms = value("--expiry-ms"),
            "--rate" => a.rate = value("--rate"),
            "--slack" => a.slack = value("--slack"),
            "--processes" => a.processes = value("--processes") as usize,
            "--bench" => {}
            other => panic!("unknown argument {other:?}"),
        }
    }
    if a.expiry_ms == 0 {
        a.expiry_ms = if a.postgres { 8 } else { 4 };
    }
    a
}

fn limit(a: &Args) -> Limit {
    Limit::new(Rate::per_second(a.rate), a.slack)
}

/// A child's run: take until `stop` (Unix ns), from `start`; the times and
/// the counts go to stdout.
fn child<L: Lender>(lender: L, a: &Args, start: u64, stop: u64) {
    let leased = Leased::with_clock(lender, limit(a), Duration::from_millis(a.expiry_ms), Wall)
        .expect("the lease")
        .with_stats(true);
    while Wall.now() < start {
        std::thread::sleep(Duration::from_micros(200));
    }
    let mut times: Vec<u64> = Vec::with_capacity((a.rate * a.secs) as usize / a.processes * 2);
    let mut failures = 0u64;
    loop {
        match leased.try_take(&()) {
            Ok(taken) => {
                let at = taken.at().as_nanos() as u64;
                if at >= stop {
                    break;
                }
                times.push(at);
            }
            Err(refusal) if refusal.is_refusal() => {
                let wait = refusal.retry_after().unwrap_or(Duration::from_millis(1));
                if Wall.now() >= stop {
                    break;
                }
                if wait > Duration::from_micros(60) {
                    std::thread::sleep(wait - Duration::from_micros(50));
                } else {
                    std::thread::yield_now();
                }
            }
            Err(e) => {
                failures += 1;
                assert!(failures < 1000, "the server keeps failing: {e}");
                std::thread::sleep(Duration::from_millis(1));
                if Wall.now() >= stop {
                    break;
                }
            }
        }
    }
    leased.release();
    let s = leased.stats().unwrap().leases.unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "STATS {} {} {} {} {} {}",
        s.leased,
        s.spent,
        s.given_back,
        s.expired,
        s.round_trips,
        times.len()
    )
    .unwrap();
    let mut bytes = Vec::with_capacity(times.len() * 8);
    for t in &times {
        bytes.extend_from_slice(&t.to_le_bytes());
    }
    out.write_all(&bytes).unwrap();
    out.flush().unwrap();
}

fn run_child(spec: &str) {
    let parts: Vec<&str> = spec.split(';').collect();
    let (url, start, stop) = (
        parts[0],
        parts[1].parse::<u64>().unwrap(),
        parts[2].parse::<u64>().unwrap(),
    );
    let a = args();
    if a.postgres {
        #[cfg(feature = "postgres")]
        {
            let pg = paceline::postgres::PostgresLimiter::builder(url, Rate::per_second(a.rate))
                .slack(a.slack)
                .on_error(FailPolicy::Closed)
                .build()
                .expect("the PostgreSQL limiter");
            child(OnKey::new(pg, KEY), &a, start, stop);
        }
        return;
    }
    let redis = RedisLimiter::builder(url, Rate::per_second(a.rate))
        .slack(a.slack)
        .on_error(FailPolicy::Closed)
        .build()
        .expect("the Redis limiter");
    child(OnKey::new(redis, KEY), &a, start, stop);
}

/// The most permits any window of `times` (sorted, one permit each) holds
/// beyond `slack + 1 + w / T`; 0 when the bound holds.
fn over_bound(times: &[u64], interval: u64, slack: u64) -> u64 {
    // (j - i) T <= S T + t_j - t_i  <=>  g(j) - g(i) <= S T, g(k) = k T - t_k.
    let mut min_g = i128::MAX;
    let mut worst = i128::MIN;
    for (k, &t) in times.iter().enumerate() {
        let g = k as i128 * interval as i128 - t as i128;
        min_g = min_g.min(g);
        worst = worst.max(g - min_g);
    }
    let excess = worst - slack as i128 * interval as i128;
    if excess <= 0 {
        0
    } else {
        (excess as u64).div_ceil(interval)
    }
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        run_child(&spec);
        return;
    }
    let a = args();
    let interval = 1_000_000_000 / a.rate;
    #[cfg(not(feature = "postgres"))]
    assert!(
        !a.postgres,
        "--postgres needs the postgres feature: --features redis,postgres"
    );
    // The server, kept until the end (each stops by its pid when dropped).
    let redis;
    #[cfg(feature = "postgres")]
    let pg;
    let url = if a.postgres {
        #[cfg(feature = "postgres")]
        {
            pg = pg_server::PgServer::start();
            let limiter =
                paceline::postgres::PostgresLimiter::builder(&pg.conn(), Rate::per_second(a.rate))
                    .build()
                    .unwrap();
            limiter.install().unwrap();
            pg.conn()
        }
        #[cfg(not(feature = "postgres"))]
        unreachable!()
    } else {
        redis = redis_server::RedisServer::start();
        redis.url()
    };
    eprintln!(
        "hot key: {} at {}/s, slack {}, leases of {} ms, {} processes, {} s",
        if a.postgres { "PostgreSQL" } else { "Redis" },
        a.rate,
        a.slack,
        a.expiry_ms,
        a.processes,
        a.secs
    );
    // Children start together, a second from now.
    let start = Wall.now() + 1_000_000_000;
    let stop = start + a.secs * 1_000_000_000;
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..a.processes)
        .map(|_| {
            Command::new(&exe)
                .args(std::env::args().skip(1))
                .env(CHILD_ENV, format!("{url};{start};{stop}"))
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a child")
        })
        .collect();
    let mut times = Vec::new();
    let (mut leased, mut spent, mut given_back, mut expired, mut trips) = (0, 0, 0, 0, 0);
    for mut c in children {
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let f: Vec<u64> = line
            .strip_prefix("STATS ")
            .unwrap_or_else(|| panic!("a child said {line:?}"))
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        leased += f[0];
        spent += f[1];
        given_back += f[2];
        expired += f[3];
        trips += f[4];
        let mut bytes = Vec::with_capacity(f[5] as usize * 8);
        out.read_to_end(&mut bytes).unwrap();
        assert!(c.wait().unwrap().success(), "a child failed");
        times.extend(
            bytes
                .chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap())),
        );
        eprintln!(
            "  process: {} spent, {} leased, {} given back, {} expired, {} round trips",
            f[1], f[0], f[2], f[3], f[4]
        );
    }
    times.sort_unstable();
    let over = over_bound(&times, interval, a.slack);
    let secs = (stop - start) as f64 / 1e9;
    let grants = times.len() as f64 / secs;
    let calls = trips as f64 * 1000.0 / (spent.max(1)) as f64;
    let unspent = expired as f64 * 100.0 / (leased.max(1)) as f64;
    eprintln!("  {given_back} given back in all");
    println!(
        "hot key: {grants:.0} grants/s across {} processes, {calls:.2} remote calls per 1000 grants, over bound {over}, unspent {unspent:.3}%",
        a.processes
    );
}
