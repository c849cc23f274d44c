//! Leased batches across processes on a real `redis-server` and a real
//! PostgreSQL, each started by this file: 4 processes take from one key as
//! fast as they can, each pausing now and then with a batch in hand (past
//! its expiry, or most of the way and then spending it at once: late
//! spends bunched with the others' fresh ones, which an unreduced slack
//! lets over the bound by some 300 permits here), while the server itself
//! is paused for a while (an outage: calls time out, processes spend what
//! they hold); every process's spend times together hold `S + 1 + w / T`
//! exactly. A batch's unspent permits go back to the real server while its
//! state is still the batch's. And a process taking the key without a
//! lease, at the stated limit, keeps the bound beside a lease on Redis,
//! PostgreSQL and a real `memcached` too.
#![cfg(any(feature = "redis", feature = "postgres", feature = "memcached"))]
// With memcached alone only the plain taker's test runs: the processes'
// harness (Redis and PostgreSQL) is left unused.
#![cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(unused))]

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_support;

#[cfg(feature = "postgres")]
#[path = "support/pg_server.rs"]
mod pg_support;

#[cfg(feature = "memcached")]
#[path = "support/memcached_server.rs"]
mod memcached_support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use paceline::lease::{Leased, Lender};
use paceline::remote::FailPolicy;
use paceline::{clock::Clock, take::OnKey, Limit, Rate, Take};

const CHILD_ENV: &str = "PACELINE_LEASES_CHILD";
const PROCESSES: usize = 4;
const KEY: &str = "hot";
const TIMEOUT: Duration = Duration::from_millis(100);

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

/// One store's run: its limit and lease.
#[derive(Clone, Copy)]
struct Run {
    name: &'static str,
    rate: u64,
    slack: u64,
    expiry: Duration,
}

#[cfg(feature = "redis")]
const REDIS: Run = Run {
    name: "redis",
    rate: 100_000,
    slack: 1_000,
    expiry: Duration::from_millis(4),
};

#[cfg(feature = "postgres")]
const POSTGRES: Run = Run {
    name: "postgres",
    rate: 20_000,
    slack: 1_000,
    expiry: Duration::from_millis(20),
};

impl Run {
    fn limit(&self) -> Limit {
        Limit::new(Rate::per_second(self.rate), self.slack)
    }

    fn interval(&self) -> u64 {
        1_000_000_000 / self.rate
    }
}

/// The most permits any window of `times` (sorted, one permit each) holds
/// beyond `slack + 1 + w / T`; 0 when the bound holds. (With the times
/// sorted, the bound is `(j - i) T <= S T + t_j - t_i` for all `i < j`.)
fn over_bound(times: &[u64], interval: u64, slack: u64) -> u64 {
    let (mut min_g, mut worst) = (i128::MAX, i128::MIN);
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

#[test]
fn the_window_check_counts_an_excess() {
    // S = 1, T = 10: three permits at once are one over.
    assert_eq!(over_bound(&[0, 0, 0], 10, 1), 1);
    assert_eq!(over_bound(&[0, 0, 10], 10, 1), 0);
    assert_eq!(over_bound(&[0, 5, 9, 10], 10, 1), 1);
}

/// A child's half: take until `stop`, pausing 2 E with a batch in hand
/// every 50 ms; print every spend's time, then the counts.
fn child<L: Lender>(lender: L, run: Run, stop: u64) {
    let leased = Leased::with_clock(lender, run.limit(), run.expiry, Wall)
        .unwrap()
        .with_stats(true);
    let mut times = Vec::new();
    let mut failures = 0u64;
    let mut next_pause = Wall.now() + 50_000_000;
    let mut pauses = 0u64;
    while Wall.now() < stop {
        match leased.try_take(&()) {
            Ok(taken) => times.push(taken.at().as_nanos() as u64),
            Err(e) if e.is_refusal() => {
                let wait = e.retry_after().unwrap_or(Duration::from_millis(1));
                std::thread::sleep(wait.min(Duration::from_millis(5)));
            }
            Err(_) => {
                failures += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        if Wall.now() > next_pause && leased.held() > 0 {
            pauses += 1;
            if pauses.is_multiple_of(2) {
                // Past the expiry: the batch in hand is lost (or goes back).
                std::thread::sleep(run.expiry * 2);
            } else {
                // Most of the way to the expiry, then the batch at once:
                // late spends bunched with the others' fresh ones, the
                // history the reduction is for.
                std::thread::sleep(run.expiry * 3 / 4);
                while leased.held() > 0 {
                    match leased.try_take(&()) {
                        Ok(taken) => times.push(taken.at().as_nanos() as u64),
                        Err(_) => break,
                    }
                }
            }
            next_pause = Wall.now() + 50_000_000;
        }
    }
    leased.release();
    let s = leased.stats().unwrap().leases.unwrap();
    // The test harness may have left its "test ... " on the line.
    println!();
    for t in &times {
        println!("T {t}");
    }
    println!(
        "C {} {} {} {} {} {failures}",
        s.leased, s.spent, s.given_back, s.expired, s.round_trips
    );
}

#[cfg(feature = "redis")]
fn redis_lender(url: &str, run: Run) -> OnKey<paceline::redis::RedisLimiter, &'static str> {
    let limiter = paceline::redis::RedisLimiter::builder(url, Rate::per_second(run.rate))
        .slack(run.slack)
        .on_error(FailPolicy::Closed)
        .response_timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .build()
        .unwrap();
    OnKey::new(limiter, KEY)
}

/// Creates the table, through a limiter with the default timeouts: a
/// fresh server on a loaded machine may take longer than the runs' 100 ms.
#[cfg(feature = "postgres")]
fn install(conn: &str) {
    paceline::postgres::PostgresLimiter::builder(conn, Rate::per_second(1))
        .build()
        .unwrap()
        .install()
        .unwrap();
}

#[cfg(feature = "postgres")]
fn pg_lender(conn: &str, run: Run) -> OnKey<paceline::postgres::PostgresLimiter, &'static str> {
    let limiter = paceline::postgres::PostgresLimiter::builder(conn, Rate::per_second(run.rate))
        .slack(run.slack)
        .on_error(FailPolicy::Closed)
        .response_timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .build()
        .unwrap();
    OnKey::new(limiter, KEY)
}

/// Runs the child's half if this process is a child of `test` for `run`.
fn as_child(run: Run) -> bool {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return false;
    };
    let parts: Vec<&str> = spec.split(';').collect();
    if parts[0] != run.name {
        return true;
    }
    let (url, stop) = (parts[1], parts[2].parse::<u64>().unwrap());
    match run.name {
        #[cfg(feature = "redis")]
        "redis" => child(redis_lender(url, run), run, stop),
        #[cfg(feature = "postgres")]
        "postgres" => child(pg_lender(url, run), run, stop),
        _ => unreachable!(),
    }
    true
}

/// What the children reported, all together.
#[derive(Debug, Default)]
struct Report {
    times: Vec<u64>,
    leased: u64,
    spent: u64,
    given_back: u64,
    expired: u64,
    round_trips: u64,
    failures: u64,
}

/// Starts the children of `test`, pauses the server (`pause`, `resume`)
/// from 1 s to 1.4 s, and collects the reports.
fn run_children(test: &str, run: Run, url: &str, pause: impl Fn(), resume: impl Fn()) -> Report {
    let stop = Wall.now() + 3_000_000_000;
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", test, "--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, format!("{};{url};{stop}", run.name))
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a child process")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1000));
    pause();
    std::thread::sleep(Duration::from_millis(400));
    resume();
    let mut r = Report::default();
    for mut c in children {
        let out = BufReader::new(c.stdout.take().unwrap());
        let mut counted = false;
        for line in out.lines().map_while(Result::ok) {
            if let Some(t) = line.strip_prefix("T ") {
                r.times.push(t.parse().unwrap());
            } else if let Some(c) = line.strip_prefix("C ") {
                let f: Vec<u64> = c.split(' ').map(|x| x.parse().unwrap()).collect();
                r.leased += f[0];
                r.spent += f[1];
                r.given_back += f[2];
                r.expired += f[3];
                r.round_trips += f[4];
                r.failures += f[5];
                counted = true;
            }
        }
        assert!(c.wait().unwrap().success(), "a child failed");
        assert!(counted, "a child reported no counts");
    }
    r.times.sort_unstable();
    r
}

fn check(r: &Report, run: Run) {
    println!(
        "{}: {} spent ({} leased, {} given back, {} expired, {} round trips, {} failed calls)",
        run.name,
        r.times.len(),
        r.leased,
        r.given_back,
        r.expired,
        r.round_trips,
        r.failures
    );
    assert_eq!(r.spent, r.times.len() as u64);
    assert_eq!(r.leased, r.spent + r.given_back + r.expired, "{r:?}");
    // What the run is for: leases expired, the outage failed calls, and
    // the processes went on after it.
    assert!(r.expired > 0, "no lease expired: {r:?}");
    assert!(r.failures > 0, "the outage failed no call: {r:?}");
    let after = Wall.now() - 1_000_000_000;
    assert!(
        r.times.iter().any(|&t| t > after - 500_000_000),
        "nothing spent after the outage"
    );
    assert_eq!(over_bound(&r.times, run.interval(), run.slack), 0);
}

#[cfg(feature = "redis")]
#[test]
fn four_processes_on_redis_hold_the_bound_through_expiries_and_an_outage() {
    const TEST: &str = "four_processes_on_redis_hold_the_bound_through_expiries_and_an_outage";
    if as_child(REDIS) {
        return;
    }
    let server = redis_support::RedisServer::start();
    let r = run_children(
        TEST,
        REDIS,
        &server.url(),
        || server.pause(),
        || server.resume(),
    );
    check(&r, REDIS);
}

#[cfg(feature = "postgres")]
#[test]
fn four_processes_on_postgres_hold_the_bound_through_expiries_and_an_outage() {
    const TEST: &str = "four_processes_on_postgres_hold_the_bound_through_expiries_and_an_outage";
    if as_child(POSTGRES) {
        return;
    }
    let server = pg_support::PgServer::start();
    let conn = server.conn();
    install(&conn);
    let r = run_children(TEST, POSTGRES, &conn, || server.pause(), || server.resume());
    check(&r, POSTGRES);
}

/// One process: its batch's unspent permits go back to the server, since
/// nobody took after it; the key then has them again.
fn given_back_to_the_server<L: Lender>(lender: L, run: Run) {
    let leased = Leased::with_clock(lender, run.limit(), run.expiry, Wall)
        .unwrap()
        .with_stats(true);
    // Demand: the batches grow.
    while leased.held() < 10 {
        leased.try_take(&()).unwrap();
    }
    let held = leased.held();
    // A batch whose reply came back after its expiry (a cold connection on
    // a loaded machine) was given back whole already: not this release's.
    let before = leased.stats().unwrap().leases.unwrap().given_back;
    leased.release();
    let s = leased.stats().unwrap().leases.unwrap();
    assert_eq!(s.given_back - before, held, "{s:?}");
    assert_eq!(s.leased, s.spent + s.given_back + s.expired);
    // The server has them free again (and what accrued since).
    assert_eq!(leased.held(), 0);
    let free = leased.state(&()).unwrap().available();
    assert!(free >= held, "{free} free after {held} went back");
}

#[cfg(feature = "redis")]
#[test]
fn unspent_permits_go_back_to_redis() {
    if as_child(REDIS) {
        return;
    }
    let server = redis_support::RedisServer::start();
    given_back_to_the_server(redis_lender(&server.url(), REDIS), REDIS);
}

#[cfg(feature = "postgres")]
#[test]
fn unspent_permits_go_back_to_postgres() {
    if as_child(POSTGRES) {
        return;
    }
    let server = pg_support::PgServer::start();
    let conn = server.conn();
    install(&conn);
    let lender = pg_lender(&conn, POSTGRES);
    given_back_to_the_server(lender, POSTGRES);
}

/// A process that takes the key without a lease, beside one that leases,
/// at the stated limit (the guide's rule; the reduced one is only
/// tighter): the spends of both hold `S + 1 + w / T`. The history is the
/// one a key forgotten early breaks: the lease holds a batch to spend
/// late, the key comes to rest at the reduced slack, `forget` lets the
/// server drop what it may (PostgreSQL's prune), and `late` after the
/// batch the plain taker bursts just before the late spends. The key lives
/// until at rest at the stated slack, so the plain taker finds it.
fn a_plain_taker_beside_a_lease<L: Lender>(
    lender: L,
    plain: impl Take,
    run: Run,
    late: Duration,
    forget: impl Fn(),
) {
    let t = Duration::from_nanos(run.interval());
    let leased = Leased::with_clock(lender, run.limit(), run.expiry, Wall).unwrap();
    assert_eq!(plain.limit_for(&()), Some(run.limit()));
    let mut times = Vec::new();
    let mut spend = |taken: Result<paceline::Taken, paceline::Error>| {
        taken
            .map(|taken| times.push(taken.at().as_nanos() as u64))
            .is_ok()
    };
    // Demand: the next batch is the reduced burst, S' + 1, free a T later;
    // one of it spent, the rest held.
    assert!(spend(leased.try_take(&())));
    for _ in 0..20 {
        if leased.held() > 0 {
            break;
        }
        std::thread::sleep(t / 4);
        spend(leased.try_take(&()));
    }
    assert!(leased.held() > 0, "no batch held");
    // Past the key's rest time at S' (and the store's grace), before the
    // batch's expiry: the plain taker's burst, then the late spends.
    std::thread::sleep(late);
    forget();
    let mut burst = 0;
    while burst <= run.slack && spend(plain.try_take(&())) {
        burst += 1;
    }
    let mut spent_late = 0;
    while leased.held() > 0 && spend(leased.try_take(&())) {
        spent_late += 1;
    }
    assert!(
        burst > 0 && spent_late > 0,
        "burst {burst}, late {spent_late}: no history"
    );
    times.sort_unstable();
    assert_eq!(
        over_bound(&times, run.interval(), run.slack),
        0,
        "{times:?}"
    );
}

/// T = 100 ms, S = 61, E = 5.8 s: the leases run at S' = 3, the key at
/// rest 0.3 s after its state, which PostgreSQL's prune (a second of
/// grace, rounded up to seconds) or memcached's expiry (two, and its
/// clock's second) forgets by 4 s later; the plain taker bursts at 4.8 s.
#[cfg(any(feature = "postgres", feature = "memcached"))]
const SLOW: Run = Run {
    name: "slow",
    rate: 10,
    slack: 61,
    expiry: Duration::from_millis(5_800),
};

/// T = 100 ms, S = 10, E = 800 ms: the leases run at S' = 2; the key is
/// at rest at S' 3 T after the batch, the burst at 6 T.
#[cfg(feature = "redis")]
const FAST: Run = Run {
    name: "redis",
    rate: 10,
    slack: 10,
    expiry: Duration::from_millis(800),
};

#[cfg(feature = "redis")]
#[test]
fn a_plain_taker_at_the_stated_limit_beside_a_lease_holds_the_bound_on_redis() {
    if as_child(REDIS) {
        return;
    }
    let server = redis_support::RedisServer::start();
    let lender = || redis_lender(&server.url(), FAST);
    a_plain_taker_beside_a_lease(lender(), lender(), FAST, FAST.expiry * 3 / 4, || ());
}

#[cfg(feature = "redis")]
#[test]
fn a_plain_taker_at_the_stated_limit_beside_a_lease_holds_the_bound_on_a_redis_cluster() {
    if as_child(REDIS) {
        return;
    }
    let cluster = redis_support::RedisCluster::start();
    let lender = || {
        let rate = Rate::per_second(FAST.rate);
        let limiter = paceline::redis::RedisLimiter::cluster_builder(cluster.urls(), rate)
            .slack(FAST.slack)
            .build()
            .unwrap();
        OnKey::new(limiter, KEY)
    };
    a_plain_taker_beside_a_lease(lender(), lender(), FAST, FAST.expiry * 3 / 4, || ());
}

#[cfg(feature = "postgres")]
#[test]
fn a_plain_taker_at_the_stated_limit_beside_a_lease_holds_the_bound_on_postgres() {
    if as_child(POSTGRES) {
        return;
    }
    let server = pg_support::PgServer::start();
    install(&server.conn());
    // The default timeouts: nothing here is about an outage.
    let lender = || {
        let rate = Rate::per_second(SLOW.rate);
        let limiter = paceline::postgres::PostgresLimiter::builder(&server.conn(), rate)
            .slack(SLOW.slack)
            .build()
            .unwrap();
        OnKey::new(limiter, KEY)
    };
    let plain = lender();
    let prune = || {
        plain.limiter().prune().unwrap();
    };
    a_plain_taker_beside_a_lease(lender(), &plain, SLOW, Duration::from_millis(4_800), prune);
}

#[cfg(feature = "memcached")]
#[test]
fn a_plain_taker_at_the_stated_limit_beside_a_lease_holds_the_bound_on_memcached() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let server = memcached_support::MemcachedServer::start();
    let lender = || {
        let limiter = paceline::memcached::MemcachedLimiter::builder(
            server.addr(),
            Rate::per_second(SLOW.rate),
        )
        .slack(SLOW.slack)
        .build()
        .unwrap();
        OnKey::new(limiter, KEY)
    };
    a_plain_taker_beside_a_lease(
        lender(),
        lender(),
        SLOW,
        Duration::from_millis(4_800),
        || (),
    );
}
