//! `RedisLimiter` against a real `redis-server` this file starts itself: one
//! limit shared by clients on separate connections and in separate
//! processes, what callers see while the server is down or hung, and the
//! calls' meaning.
#![cfg(feature = "redis")]

#[cfg(feature = "tokio")]
use paceline::AsyncTake;
use paceline::Take;
#[path = "support/redis_server.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use paceline::redis::{Error, FailPolicy, RedisLimiter};
use paceline::Rate;
use support::{RedisCluster, RedisServer};

/// 1000 per second: T = 1 ms.
const T_NS: u64 = 1_000_000;
/// 50 ms banked. The rate holds while slack covers how late clients come
/// back (DESIGN §3); on a CI machine shared with busy jobs all clients may
/// stall together for over 10 ms, which the default slack of 10 would not
/// cover here.
const SLACK: u64 = 50;
/// How long the shared-limit runs measure.
const MEASURE: Duration = Duration::from_secs(3);

/// The shared-limit runs take one at a time: each keeps 8 clients busy, and
/// together they would starve each other's clients on a small machine.
static ONE_RUN_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_run_at_a_time() -> MutexGuard<'static, ()> {
    ONE_RUN_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

fn shared_limiter(url: &str) -> RedisLimiter {
    RedisLimiter::builder(url, Rate::per_second(1000))
        .slack(SLACK)
        .build()
        .unwrap()
}

/// The server's Unix time, ns.
fn server_time(server: &RedisServer) -> u64 {
    // *2\r\n$10\r\n<secs>\r\n$6\r\n<usecs>\r\n
    let reply = server.raw("TIME");
    let parts: Vec<u64> = reply
        .split("\r\n")
        .filter(|l| !l.is_empty() && !l.starts_with(['*', '$']))
        .map(|l| l.parse().unwrap())
        .collect();
    parts[0] * 1_000_000_000 + parts[1] * 1000
}

/// Takes permits of `key` until one goes at or after `stop` (server Unix
/// ns); returns when each went.
fn pace_until(limiter: &RedisLimiter, key: &str, stop: u64) -> Vec<u64> {
    let mut times = Vec::new();
    loop {
        let at = limiter.take(key).expect("take").at().as_nanos() as u64;
        times.push(at);
        if at >= stop {
            return times;
        }
    }
}

/// Checks permit times from every client against the limit: over any window
/// of length `w`, at most `slack + 1 + w / T`; and within 1 % of the rate over
/// `[from, from + MEASURE)`. Returns the achieved rate per second.
fn check_shared_limit(mut times: Vec<u64>, from: u64) -> f64 {
    times.sort_unstable();
    // No slot handed out twice.
    assert!(
        times.windows(2).all(|w| w[0] < w[1]),
        "two permits at one time"
    );
    // For sorted times g, the window [g_p, g_q] holds q - p + 1 permits:
    // (q - p) * T <= slack * T + g_q - g_p, i.e. h_q - h_p <= tau with
    // h_k = k * T - g_k. Track the smallest h seen so far.
    let tau = i128::from(SLACK * T_NS);
    let (mut min_h, mut worst) = (i128::MAX, 0);
    for (k, &g) in times.iter().enumerate() {
        let h = k as i128 * i128::from(T_NS) - i128::from(g);
        min_h = min_h.min(h);
        worst = worst.max(h - min_h);
        assert!(
            h - min_h <= tau,
            "more than slack + 1 + w / T permits in a window ending at permit {k}"
        );
    }
    // Once pacing (from `from` on): how much banked credit stalls used.
    let (mut min_h, mut later) = (i128::MAX, 0);
    for (k, &g) in times.iter().filter(|&&g| g >= from).enumerate() {
        let h = k as i128 * i128::from(T_NS) - i128::from(g);
        min_h = min_h.min(h);
        later = later.max(h - min_h);
    }
    println!(
        "largest excess over 1 + w / T in a window: {:.1} permits (the opening burst), \
         {:.1} once pacing; slack {SLACK}",
        worst as f64 / T_NS as f64,
        later as f64 / T_NS as f64
    );
    let to = from + MEASURE.as_nanos() as u64;
    let count = times.iter().filter(|&&g| g >= from && g < to).count();
    let rate = count as f64 / MEASURE.as_secs_f64();
    assert!(
        (rate - 1000.0).abs() <= 10.0,
        "achieved {rate}/s over {MEASURE:?}, not within 1 % of 1000/s"
    );
    rate
}

#[test]
fn eight_connections_share_one_limit_of_1000_per_second() {
    let _one = one_run_at_a_time();
    let server = RedisServer::start();
    // Measure once every client is pacing: skip the first 300 ms (and with
    // them the opening burst of slack + 1).
    let from = server_time(&server) + 300_000_000;
    let stop = from + MEASURE.as_nanos() as u64 + 50_000_000;
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let url = server.url();
            thread::spawn(move || {
                // Its own limiter: its own connection.
                let limiter = shared_limiter(&url);
                pace_until(&limiter, "shared", stop)
            })
        })
        .collect();
    let mut times = Vec::new();
    for c in clients {
        let mine = c.join().unwrap();
        assert!(
            mine[0] < from,
            "a client started after the measurement began"
        );
        times.extend(mine);
    }
    let rate = check_shared_limit(times, from);
    println!("8 connections, 1 process: {rate:.1}/s");
}

/// Set in the children of the test below: "socket url;from;stop".
const CHILD_ENV: &str = "PACELINE_REDIS_CHILD";

#[test]
fn eight_clients_in_four_processes_share_one_limit_of_1000_per_second() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        // The child's half: two clients, each on its own connection; print
        // every permit's time for the parent.
        let parts: Vec<&str> = spec.split(';').collect();
        let (url, stop) = (parts[0].to_owned(), parts[1].parse::<u64>().unwrap());
        let clients: Vec<_> = (0..2)
            .map(|_| {
                let url = url.clone();
                thread::spawn(move || pace_until(&shared_limiter(&url), "processes", stop))
            })
            .collect();
        for c in clients {
            for t in c.join().unwrap() {
                println!("PERMIT {t}");
            }
        }
        return;
    }
    let _one = one_run_at_a_time();
    let server = RedisServer::start();
    // Processes take longer to start than threads: skip the first second.
    let from = server_time(&server) + 1_000_000_000;
    let stop = from + MEASURE.as_nanos() as u64 + 50_000_000;
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "eight_clients_in_four_processes_share_one_limit_of_1000_per_second",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, format!("{};{stop}", server.url()))
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a child process")
        })
        .collect();
    let mut times = Vec::new();
    for mut child in children {
        let out = BufReader::new(child.stdout.take().unwrap());
        let mine: Vec<u64> = out
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| l.strip_prefix("PERMIT ").map(|t| t.parse().unwrap()))
            .collect();
        assert!(child.wait().unwrap().success(), "a child process failed");
        assert!(!mine.is_empty(), "a child process took nothing");
        assert!(
            mine.iter().min().unwrap() < &from,
            "a child process started after the measurement began"
        );
        times.extend(mine);
    }
    let rate = check_shared_limit(times, from);
    println!("8 connections, 4 processes: {rate:.1}/s");
}

const TIMEOUT: Duration = Duration::from_millis(300);
/// Scheduling noise on a loaded machine, on top of a timeout.
const MARGIN: Duration = Duration::from_millis(300);

fn faulty_limiter(server: &RedisServer, policy: FailPolicy) -> RedisLimiter {
    // Slow enough that a refusal never depends on how fast calls come.
    RedisLimiter::builder(server.url(), Rate::per_minute(1))
        .on_error(policy)
        .connect_timeout(TIMEOUT)
        .response_timeout(TIMEOUT)
        .stats(true)
        .build()
        .unwrap()
}

/// Retries `try_take` until Redis answers again; how long that took.
fn recovery_time(limiter: &RedisLimiter) -> Duration {
    let start = Instant::now();
    loop {
        match limiter.try_take("k") {
            Ok(_) => return start.elapsed(),
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(5),
                "no recovery within 5 s: {e}"
            ),
        }
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn server_down_fails_closed_at_once_and_the_limiter_recovers_after_restart() {
    let mut server = RedisServer::start();
    let limiter = faulty_limiter(&server, FailPolicy::Closed);
    limiter.try_take("k").unwrap();

    server.stop();
    for _ in 0..3 {
        let start = Instant::now();
        assert!(matches!(limiter.try_take("k"), Err(Error::Unavailable(_))));
        assert!(matches!(limiter.take("k"), Err(Error::Unavailable(_))));
        assert!(matches!(
            limiter.can_take("k", 1),
            Err(Error::Unavailable(_))
        ));
        println!("three calls failed in {:?}", start.elapsed());
        assert!(start.elapsed() < TIMEOUT + MARGIN, "{:?}", start.elapsed());
    }

    server.restart();
    let took = recovery_time(&limiter);
    println!("recovered {took:?} after the restart");
    assert!(took < Duration::from_secs(2), "{took:?}");
    limiter.take("k").unwrap();
}

#[test]
fn server_down_fails_open_when_asked() {
    let mut server = RedisServer::start();
    let limiter = faulty_limiter(&server, FailPolicy::Open);
    limiter.try_take("k").unwrap();

    server.stop();
    let start = Instant::now();
    for _ in 0..100 {
        limiter.try_take("k").unwrap();
        limiter.take("k").unwrap();
        assert!(limiter.can_take("k", 1).unwrap());
    }
    assert!(start.elapsed() < TIMEOUT + MARGIN, "{:?}", start.elapsed());
    // A question with nothing to admit still reports the failure.
    assert!(matches!(limiter.available("k"), Err(Error::Unavailable(_))));
    // Refusals of the limit itself are not failures: a cost that can never
    // fit is refused whatever the policy.
    assert!(matches!(
        limiter.try_take_n("k", u64::MAX),
        Err(Error::CostTooLarge { .. })
    ));

    server.restart();
    recovery_time(&limiter);
    // Limiting again: the burst of slack + 1 = 11, then refusals. (On a
    // loaded machine a call may still time out after the restart, and be
    // admitted open: the counts tell those apart.)
    let failed_before = limiter.stats().unwrap().failed;
    let mut admitted = 0;
    let start = Instant::now();
    loop {
        match limiter.try_take("again") {
            Ok(_) => admitted += 1,
            Err(Error::RetryAfter(_)) => break,
            Err(e) => panic!("{e}"),
        }
        // A call the restarting server failed was admitted open: only the
        // answered ones count towards the burst (and a failure backs off).
        let failed = limiter.stats().unwrap().failed - failed_before;
        assert!(admitted - failed <= 30, "never refused again");
        assert!(start.elapsed() < Duration::from_secs(10), "no recovery");
        if failed > 0 {
            thread::sleep(Duration::from_millis(5));
        }
    }
    let failed = limiter.stats().unwrap().failed - failed_before;
    assert_eq!(
        admitted - failed,
        11,
        "{admitted} admitted, {failed} of them open"
    );
}

#[test]
fn a_hung_server_times_out_within_the_response_timeout_and_recovers() {
    let server = RedisServer::start();
    let limiter = faulty_limiter(&server, FailPolicy::Closed);
    limiter.try_take("k").unwrap();

    server.pause();
    for _ in 0..2 {
        let start = Instant::now();
        let result = limiter.try_take("k");
        let took = start.elapsed();
        assert!(matches!(result, Err(Error::Timeout)), "{result:?}");
        assert!(took < TIMEOUT + MARGIN, "{took:?}");
    }
    server.resume();
    let took = recovery_time(&limiter);
    println!("recovered {took:?} after the resume");
}

/// The URL's password and database reach the server when a connection is
/// made (`AUTH`, `SELECT`), and a wrong password fails the call as the
/// server's answer (`Script`), which `FailPolicy::Open` never admits: the
/// server could answer, and did.
#[test]
fn the_urls_password_and_database_are_sent_on_connect() {
    let server = RedisServer::start_with(Some(0), &[]);
    let port = server.port().unwrap();
    assert!(server.raw("CONFIG SET requirepass s3cret").contains("OK"));
    let limiter = |auth: &str, db: u32| {
        RedisLimiter::builder(
            format!("redis://{auth}127.0.0.1:{port}/{db}"),
            Rate::per_hour(1),
        )
        .slack(0)
        .build()
        .unwrap()
    };
    let db3 = limiter(":s3cret@", 3);
    db3.try_take("k").unwrap();
    assert!(db3.try_take("k").unwrap_err().is_refusal());
    // The same key in database 0 is another key.
    limiter(":s3cret@", 0).try_take("k").unwrap();
    assert!(matches!(
        limiter(":wrong@", 0).try_take("k"),
        Err(Error::Script(_))
    ));
    let open = RedisLimiter::builder(
        format!("redis://:wrong@127.0.0.1:{port}/0"),
        Rate::per_hour(1),
    )
    .slack(0)
    .on_error(FailPolicy::Open)
    .build()
    .unwrap();
    for _ in 0..3 {
        let result = open.try_take("k");
        assert!(matches!(result, Err(Error::Script(_))), "{result:?}");
    }
    #[cfg(feature = "tokio")]
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let open = paceline::redis::AsyncRedisLimiter::from(open);
        let result = rt.block_on(open.try_take("k"));
        assert!(matches!(result, Err(Error::Script(_))), "{result:?}");
    }
    assert!(matches!(
        limiter("", 3).try_take("k"),
        Err(Error::Script(_))
    ));
}

fn limiter(server: &RedisServer, rate: Rate, slack: u64) -> RedisLimiter {
    RedisLimiter::builder(server.url(), rate)
        .slack(slack)
        .build()
        .unwrap()
}

#[test]
fn take_waits_until_its_slot() {
    let server = RedisServer::start();
    let limiter = limiter(&server, Rate::per_second(100), 0);
    let start = Instant::now();
    let first = limiter.take("k").unwrap().at();
    for _ in 0..5 {
        limiter.take("k").unwrap();
    }
    assert!(start.elapsed() >= Duration::from_millis(50));
    let last = limiter.take("k").unwrap().at();
    // On the server's clock: 6 intervals, more only by late wake-ups (with
    // no slack, a caller that comes back late starts from its own now).
    let span = last - first;
    assert!(
        span >= Duration::from_millis(60) && span < Duration::from_millis(120),
        "{span:?}"
    );
}

#[test]
fn try_take_refuses_with_the_wait_and_stores_nothing() {
    let server = RedisServer::start();
    let limiter = limiter(&server, Rate::per_minute(1), 1);
    limiter.try_take_n("k", 2).unwrap();
    for _ in 0..3 {
        match limiter.try_take("k") {
            Err(Error::RetryAfter(d)) => {
                assert!(
                    d.duration() > Duration::from_secs(59)
                        && d.duration() <= Duration::from_secs(60),
                    "{d:?}"
                )
            }
            other => panic!("expected RetryAfter, got {other:?}"),
        }
    }
    assert!(matches!(
        limiter.try_take_n("k", 3),
        Err(Error::ExceedsBurst { cost: 3, burst: 2 })
    ));
    assert_eq!(limiter.available("k").unwrap(), 0);
    assert!(limiter.next_free("k").unwrap() > Duration::from_secs(59));
}

#[test]
fn take_timeout_waits_only_within_its_bound() {
    let server = RedisServer::start();
    let limiter = limiter(&server, Rate::per_second(4), 0); // T = 250 ms
    limiter.take("k").unwrap();
    match limiter.take_timeout("k", Duration::from_millis(10)) {
        Err(Error::QueueFull { wait, max_wait }) => {
            assert!(wait > Duration::from_millis(10) && wait <= Duration::from_millis(250));
            assert_eq!(max_wait, Duration::from_millis(10));
        }
        other => panic!("expected QueueFull, got {other:?}"),
    }
    let start = Instant::now();
    limiter
        .take_timeout("k", Duration::from_millis(500))
        .unwrap();
    assert!(start.elapsed() >= Duration::from_millis(100));
}

#[test]
fn can_take_consumes_nothing() {
    let server = RedisServer::start();
    let limiter = limiter(&server, Rate::per_minute(1), 2);
    for _ in 0..10 {
        assert!(limiter.can_take("k", 3).unwrap());
    }
    assert!(!limiter.can_take("k", 4).unwrap());
    assert_eq!(server.raw("EXISTS paceline:k"), ":0\r\n");
    limiter.try_take_n("k", 3).unwrap();
    assert!(!limiter.can_take("k", 1).unwrap());
}

#[test]
fn keys_are_separate_limits_and_with_limit_sets_another_rate() {
    let server = RedisServer::start();
    let users = limiter(&server, Rate::per_minute(1), 0);
    let partners = users.with_limit(Rate::per_minute(1), 4).unwrap();
    users.try_take("user:1").unwrap();
    users.try_take("user:2").unwrap();
    assert!(users.try_take("user:1").is_err());
    for _ in 0..5 {
        partners.try_take("user:3").unwrap();
    }
    assert!(partners.try_take("user:3").is_err());
}

#[test]
fn reset_deletes_the_key_and_gives_back_its_whole_burst() {
    let server = RedisServer::start();
    let limiter = limiter(&server, Rate::per_minute(1), 2);
    limiter.try_take_n("k", 3).unwrap();
    limiter.try_take("other").unwrap();
    assert!(matches!(limiter.try_take("k"), Err(Error::RetryAfter(_))));
    assert!(limiter.reset("k").unwrap());
    assert_eq!(server.raw("EXISTS paceline:k"), ":0\r\n");
    assert!(!limiter.reset("k").unwrap(), "nothing left to delete");
    // A new key's burst; the other key untouched.
    assert_eq!(limiter.available("k").unwrap(), 3);
    assert_eq!(limiter.available("other").unwrap(), 2);
    limiter.try_take_n("k", 3).unwrap();
    assert!(limiter.try_take("k").is_err());
}

#[test]
fn reset_reports_a_failure_whatever_the_policy() {
    let mut server = RedisServer::start();
    for policy in [FailPolicy::Closed, FailPolicy::Open] {
        let limiter = faulty_limiter(&server, policy);
        limiter.try_take("k").unwrap();
        server.stop();
        assert!(
            matches!(limiter.reset("k"), Err(Error::Unavailable(_))),
            "{policy:?}"
        );
        server.restart();
        // A question, never admitted by a policy, tells when the server
        // answers again (under `Open` a take would pass at once, unstored,
        // and the reset would meet the reconnect's backoff); then a take
        // stores the key the reset must find.
        let start = Instant::now();
        while limiter.available("k").is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "no recovery within 5 s"
            );
            thread::sleep(Duration::from_millis(5));
        }
        recovery_time(&limiter);
        assert!(limiter.reset("k").unwrap(), "{policy:?}");
    }
}

#[test]
fn the_prefix_names_the_keys() {
    let server = RedisServer::start();
    let limiter = RedisLimiter::builder(server.url(), Rate::per_second(1))
        .prefix("{app}:rl:")
        .build()
        .unwrap();
    limiter.try_take("user:42").unwrap();
    assert_eq!(server.raw("EXISTS {app}:rl:user:42"), ":1\r\n");
}

fn dbsize(server: &RedisServer) -> u64 {
    server
        .raw("DBSIZE")
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap()
}

#[test]
fn cluster_paces_keys_on_every_primary_and_reloads_the_script() {
    let cluster = RedisCluster::start();
    let limiter = RedisLimiter::cluster_builder(cluster.urls(), Rate::per_minute(1))
        .slack(2)
        .build()
        .unwrap();
    let keys: Vec<String> = (0..30).map(|i| format!("user:{i}")).collect();
    for key in &keys {
        limiter.try_take_n(key, 3).unwrap();
        assert!(matches!(limiter.try_take(key), Err(Error::RetryAfter(_))));
    }
    // The keys spread over the three primaries.
    for node in &cluster.nodes {
        assert!(dbsize(node) > 0, "a primary holds no key");
    }
    // NOSCRIPT everywhere: loaded again, state intact.
    for node in &cluster.nodes {
        assert_eq!(node.raw("SCRIPT FLUSH"), "+OK\r\n");
    }
    for key in &keys {
        assert!(limiter.try_take(key).is_err(), "{key} forgot its state");
    }
    limiter.try_take("user:new").unwrap();
}

#[test]
fn cluster_shares_one_hash_tagged_limit_across_eight_connections() {
    let _one = one_run_at_a_time();
    let cluster = RedisCluster::start();
    let key = "{tenant:7}:api";
    // The nodes run on this host: one clock.
    let from = server_time(&cluster.nodes[0]) + 300_000_000;
    let stop = from + MEASURE.as_nanos() as u64 + 50_000_000;
    let urls = cluster.urls();
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let urls = urls.clone();
            thread::spawn(move || {
                let limiter = RedisLimiter::cluster_builder(urls, Rate::per_second(1000))
                    .slack(SLACK)
                    .build()
                    .unwrap();
                pace_until(&limiter, key, stop)
            })
        })
        .collect();
    let mut times = Vec::new();
    for c in clients {
        let mine = c.join().unwrap();
        assert!(
            mine[0] < from,
            "a client started after the measurement began"
        );
        times.extend(mine);
    }
    let rate = check_shared_limit(times, from);
    println!("8 connections, cluster of 3: {rate:.1}/s");
}

/// The bulk strings of a raw reply (`*2\r\n$3\r\nabc\r\n…`, or one `$3…`).
fn bulk_strings(reply: &str) -> Vec<String> {
    reply
        .split("\r\n")
        .filter(|l| !l.is_empty() && !l.starts_with(['*', '$']))
        .map(str::to_owned)
        .collect()
}

fn assert_ok(reply: String, what: &str) {
    assert_eq!(reply, "+OK\r\n", "{what}");
}

/// Moves `slot` from node `from` to node `to` of `cluster`, its keys
/// first, then in the order that redirects calls in a loop: the source
/// learns that the slot moved `gap` before the target does (redis-cli's
/// own order tells the target first). Meanwhile each sends a call on the
/// slot to the other.
fn move_slot_source_first(
    cluster: &RedisCluster,
    slot: u16,
    from: usize,
    to: usize,
    gap: Duration,
) {
    let (src, dst) = (&cluster.nodes[from], &cluster.nodes[to]);
    let src_id = bulk_strings(&src.raw("CLUSTER MYID")).remove(0);
    let dst_id = bulk_strings(&dst.raw("CLUSTER MYID")).remove(0);
    let port = dst.port().unwrap();
    assert_ok(
        dst.raw(&format!("CLUSTER SETSLOT {slot} IMPORTING {src_id}")),
        "importing",
    );
    assert_ok(
        src.raw(&format!("CLUSTER SETSLOT {slot} MIGRATING {dst_id}")),
        "migrating",
    );
    for _ in 0..100 {
        let keys = bulk_strings(&src.raw(&format!("CLUSTER GETKEYSINSLOT {slot} 100")));
        if keys.is_empty() {
            break;
        }
        for key in keys {
            let moved = src.raw(&format!("MIGRATE 127.0.0.1 {port} {key} 0 5000"));
            assert!(
                moved == "+OK\r\n" || moved == "+NOKEY\r\n",
                "MIGRATE: {moved}"
            );
        }
    }
    assert_ok(
        src.raw(&format!("CLUSTER SETSLOT {slot} NODE {dst_id}")),
        "source",
    );
    thread::sleep(gap);
    assert_ok(
        dst.raw(&format!("CLUSTER SETSLOT {slot} NODE {dst_id}")),
        "target",
    );
}

/// What one caller saw while slots moved: calls, and failures with the
/// first one's message.
#[derive(Debug, Default)]
struct Seen {
    calls: u64,
    failed: u64,
    first: Option<String>,
}

/// Calls `call` on `keys` in turn until `stop`.
fn call_until(
    stop: &AtomicBool,
    keys: &[String],
    mut call: impl FnMut(&str) -> Result<(), Error>,
) -> Seen {
    let mut seen = Seen::default();
    for key in keys.iter().cycle() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        seen.calls += 1;
        match call(key) {
            Ok(()) => {}
            Err(e) if e.is_refusal() => {}
            Err(e) => {
                seen.failed += 1;
                seen.first.get_or_insert_with(|| e.to_string());
            }
        }
    }
    seen
}

/// A resharding fails no call and lifts no limit: while
/// a slot moves in the order that makes its two nodes redirect each call
/// to each other for 100 ms, calls on its keys used to fail with `MOVED`
/// (an error under `Closed`, a failure under `Open`, counted in `failed`;
/// before fail-open was narrowed, an unmetered admission). The limiter
/// follows the redirections within the call's budget: through four such
/// moves, no call fails under `Closed`, blocking or async, and `Open`
/// counts no failure (nothing admitted unmetered).
#[test]
fn a_resharding_fails_no_call_and_admits_none_unmetered() {
    let _one = one_run_at_a_time();
    let cluster = RedisCluster::start();
    // Every key in the slot of the hash tag "mv"; a limit that refuses
    // none of these calls, whose keys live a second (so there are keys to
    // migrate).
    let keys: Vec<String> = (0..8).map(|i| format!("{{mv}}:{i}")).collect();
    let slot: u16 = cluster.nodes[0]
        .raw("CLUSTER KEYSLOT mv")
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap();
    let owner = (0..3)
        .find(|&i| !cluster.nodes[i].raw("EXISTS {mv}").starts_with("-MOVED"))
        .unwrap();
    let other = (owner + 1) % 3;
    let build = |policy| {
        RedisLimiter::cluster_builder(cluster.urls(), Rate::per_second(1_000_000))
            .slack(1_000_000)
            .on_error(policy)
            .stats(true)
            .build()
            .unwrap()
    };
    let closed = build(FailPolicy::Closed);
    let open = build(FailPolicy::Open);
    #[cfg(feature = "tokio")]
    let in_async = paceline::redis::AsyncRedisLimiter::from(build(FailPolicy::Closed));
    for key in &keys {
        closed.try_take(key).unwrap();
        open.try_take(key).unwrap();
    }
    let stop = AtomicBool::new(false);
    let (closed_seen, open_seen, async_seen) = thread::scope(|s| {
        let closed_seen = s.spawn(|| call_until(&stop, &keys, |k| closed.try_take(k).map(drop)));
        let open_seen = s.spawn(|| call_until(&stop, &keys, |k| open.try_take(k).map(drop)));
        #[cfg(feature = "tokio")]
        let async_seen = s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            call_until(&stop, &keys, |k| {
                rt.block_on(in_async.try_take(k)).map(drop)
            })
        });
        thread::sleep(Duration::from_millis(100));
        for round in 0..4 {
            let (from, to) = if round % 2 == 0 {
                (owner, other)
            } else {
                (other, owner)
            };
            move_slot_source_first(&cluster, slot, from, to, Duration::from_millis(100));
            thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, Ordering::Relaxed);
        #[cfg(feature = "tokio")]
        let async_seen = Some(async_seen.join().unwrap());
        #[cfg(not(feature = "tokio"))]
        let async_seen: Option<Seen> = None;
        (
            closed_seen.join().unwrap(),
            open_seen.join().unwrap(),
            async_seen,
        )
    });
    println!("closed: {closed_seen:?}\nopen: {open_seen:?}\nasync: {async_seen:?}");
    let open_stats = open.stats().unwrap();
    println!("open's stats: {open_stats:?}");
    assert!(
        closed_seen.calls >= 100 && open_seen.calls >= 100,
        "too few calls to tell"
    );
    assert_eq!(closed_seen.failed, 0, "Closed: {:?}", closed_seen.first);
    assert_eq!(
        open_stats.failed, 0,
        "Open counted failures, admitted unmetered"
    );
    assert_eq!(open_seen.failed, 0, "Open: {:?}", open_seen.first);
    if let Some(seen) = async_seen {
        assert_eq!(seen.failed, 0, "async Closed: {:?}", seen.first);
    }
}

/// `INFO stats`' count of connections the server has accepted.
fn connections_received(server: &RedisServer) -> u64 {
    let info = server.raw("INFO stats");
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .expect("INFO stats lists total_connections_received")
        .trim()
        .parse()
        .unwrap()
}

/// Puts a non-UTF-8 value under `paceline:bin` and 10 MB of garbage under
/// `paceline:huge` (through redis-rs: `raw` sends text).
fn poison(server: &RedisServer) {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let bin: &[u8] = &[0xff, 0xfe, 0x80, b'1', 0xc3];
    let huge: Vec<u8> = (0..10 << 20).map(|i: u32| (i % 251) as u8).collect();
    let _: () = redis::cmd("SET")
        .arg("paceline:bin")
        .arg(bin)
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("paceline:huge")
        .arg(huge)
        .query(&mut conn)
        .unwrap();
}

/// A poisoned key's failure: a script error naming the key, short, whatever
/// the value held.
fn assert_poisoned<T: std::fmt::Debug>(result: Result<T, Error>, key: &str) {
    match result {
        Err(Error::Script(e)) => {
            let msg = e.to_string();
            assert!(msg.contains("not a paceline state"), "{msg}");
            assert!(msg.contains(key), "{msg}");
            assert!(msg.len() < 300, "the message is {} bytes", msg.len());
        }
        other => panic!("expected a script error for {key}, got {other:?}"),
    }
}

#[test]
fn a_poisoned_key_fails_alone_and_the_pool_keeps_its_connections() {
    let _one = one_run_at_a_time();
    let server = RedisServer::start();
    poison(&server);
    // A limit no healthy call here can exhaust.
    let limiter = limiter(&server, Rate::every(Duration::from_nanos(1)).unwrap(), 1000);
    limiter.try_take("ok").unwrap(); // opens the pool's connection
    let before = connections_received(&server);
    let start = Instant::now();
    for i in 0..2000 {
        limiter.try_take("ok").unwrap();
        if i % 100 == 0 {
            assert_poisoned(limiter.try_take("bin"), "paceline:bin");
            assert_poisoned(limiter.try_take("huge"), "paceline:huge");
        }
    }
    println!("2000 healthy calls, 40 poisoned, in {:?}", start.elapsed());
    // One more for the INFO above's own connection; none for the pool.
    let opened = connections_received(&server) - before;
    assert!(opened <= 1, "the pool opened {} connections", opened - 1);
    // Fail-open does not admit through it: the server answered, and the
    // key (the caller's choice) caused the error.
    let open = RedisLimiter::builder(server.url(), Rate::per_minute(1))
        .on_error(FailPolicy::Open)
        .build()
        .unwrap();
    assert!(matches!(open.try_take("huge"), Err(Error::Script(_))));
}

/// An empty value is foreign like any other: every call on it fails with a
/// script error naming the key, and the value stays as it was (not taken
/// for a fresh key, granted a burst and overwritten).
#[test]
fn an_empty_value_is_a_foreign_value_left_as_it_was() {
    let server = RedisServer::start();
    let limiter = limiter(&server, Rate::per_minute(1), 4);
    assert_eq!(server.raw("SET paceline:empty \"\""), "+OK\r\n");
    assert_poisoned(limiter.try_take("empty"), "paceline:empty");
    assert_poisoned(limiter.take_n("empty", 2).map(drop), "paceline:empty");
    assert_poisoned(limiter.available("empty").map(drop), "paceline:empty");
    assert_eq!(server.raw("GET paceline:empty"), "$0\r\n\r\n");
    assert_eq!(server.raw("PTTL paceline:empty"), ":-1\r\n");
    // An absent key is still a bucket at rest.
    limiter.try_take_n("absent", 5).unwrap();
}

#[test]
fn flushall_forgets_every_limit_as_the_docs_warn() {
    let server = RedisServer::start();
    let limiter = limiter(&server, Rate::per_minute(1), 4);
    let start = Instant::now();
    let mut granted = 0;
    for _ in 0..2 {
        while limiter.try_take("k").is_ok() {
            granted += 1;
        }
        assert_eq!(server.raw("FLUSHALL"), "+OK\r\n");
    }
    // Two bursts of slack + 1 at 1 per minute, within seconds.
    assert_eq!(granted, 10);
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// `len` bytes of printable ASCII that do not compress (a fixed LCG).
fn random_text(len: usize, seed: u64) -> String {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            char::from(b'!' + (x >> 58) as u8)
        })
        .collect()
}

/// `n` `try_take`s on `key`: how many were admitted; every other one must
/// be the limit's refusal, not an error.
fn admitted_of(limiter: &RedisLimiter, key: &str, n: usize, name: &str) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        match limiter.try_take(key) {
            Ok(_) => admitted += 1,
            Err(e) if e.is_refusal() => {}
            Err(e) => panic!("{name}: {e}"),
        }
    }
    admitted
}

/// Every key a limiter accepts is limited, whatever its length or
/// bytes, and a key costs Redis at most 512 bytes however
/// long it is: a 1 MB key used to be stored whole (a megabyte of server
/// memory per key while it lives, and in every error naming it); it is
/// stored under its digest, and still limited: 3 of 100 calls at 1/min
/// with a burst of 3, under either policy, as a 3 KB key of random text,
/// one with a NUL byte and a non-ASCII one; reset finds the same key.
#[test]
fn every_key_is_limited_and_a_long_one_costs_redis_a_digest() {
    let server = RedisServer::start();
    let long = random_text(3 << 10, 1);
    let huge = "x".repeat(1 << 20);
    for policy in [FailPolicy::Closed, FailPolicy::Open] {
        let limiter = RedisLimiter::builder(server.url(), Rate::per_minute(1))
            .slack(2)
            .on_error(policy)
            .stats(true)
            .build()
            .unwrap();
        let tag = format!("{policy:?}");
        let keys = [
            ("3 KB of random text", format!("{tag}:{long}"), 100),
            ("a NUL byte", format!("{tag}:a\0b"), 100),
            ("non-ASCII", format!("{tag}:ключ🙂"), 100),
            // Each call sends the megabyte: a few are enough.
            ("1 MB", format!("{tag}:{huge}"), 10),
        ];
        for (name, key, n) in &keys {
            assert_eq!(
                admitted_of(&limiter, key, *n, name),
                3,
                "{name} under {policy:?}"
            );
            assert_eq!(limiter.available(key).unwrap(), 0, "{name}");
            assert!(limiter.reset(key).unwrap(), "{name}: reset found no key");
            assert_eq!(admitted_of(&limiter, key, *n, name), 3, "{name}");
        }
        assert_eq!(limiter.stats().unwrap().failed, 0, "{policy:?}");
    }
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let stored: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    assert_eq!(stored.len(), 8);
    let longest = stored.iter().map(Vec::len).max().unwrap();
    assert!(
        longest <= "paceline:".len() + 512,
        "a key of {longest} bytes is stored"
    );
    // A key short enough is stored as given, NUL and all.
    assert!(stored.contains(&b"paceline:Open:a\0b".to_vec()));
}

/// The async limiter: the same limit, failures and recovery, under Tokio.
#[cfg(feature = "tokio")]
mod tokio_calls {
    use super::*;
    use paceline::redis::AsyncRedisLimiter;
    use paceline::AsyncTake;
    use paceline::Wait;

    fn async_limiter(server: &RedisServer, policy: FailPolicy) -> AsyncRedisLimiter {
        RedisLimiter::builder(server.url(), Rate::per_second(1000))
            .slack(SLACK)
            .on_error(policy)
            .connect_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            .build()
            .map(AsyncRedisLimiter::from)
            .unwrap()
    }

    /// Async takes that wait past the horizon are admitted once each, as
    /// their callers saw: asking the server again is no refusal.
    #[tokio::test]
    async fn async_takes_that_wait_count_as_admitted_not_refused() {
        let server = RedisServer::start();
        // 20/s, no slack: T = 50 ms, five horizons.
        let limiter = RedisLimiter::builder(server.url(), Rate::per_second(20))
            .slack(0)
            .stats(true)
            .build()
            .map(AsyncRedisLimiter::from)
            .unwrap();
        for _ in 0..4 {
            limiter.take("k").await.unwrap();
        }
        limiter.take_n("k", 2).await.unwrap(); // above the burst
        let stats = limiter.stats().unwrap();
        assert_eq!((stats.admitted, stats.permits, stats.refused), (5, 6, 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // Held for the whole run on purpose; only other tests' threads wait on it.
    #[allow(clippy::await_holding_lock)]
    async fn eight_tasks_on_one_async_limiter_share_its_limit() {
        let _one = one_run_at_a_time();
        let server = RedisServer::start();
        let limiter = async_limiter(&server, FailPolicy::Closed);
        let from = server_time(&server) + 300_000_000;
        let stop = from + MEASURE.as_nanos() as u64 + 50_000_000;
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let mut times = Vec::new();
                    loop {
                        let at = limiter.take("async").await.unwrap().at().as_nanos() as u64;
                        times.push(at);
                        if at >= stop {
                            return times;
                        }
                    }
                })
            })
            .collect();
        let mut times = Vec::new();
        for t in tasks {
            times.extend(t.await.unwrap());
        }
        let rate = check_shared_limit(times, from);
        println!("8 tasks, 1 async limiter: {rate:.1}/s");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_calls_refuse_like_the_blocking_ones() {
        let server = RedisServer::start();
        let limiter = RedisLimiter::builder(server.url(), Rate::per_minute(1))
            .slack(1)
            .build()
            .map(AsyncRedisLimiter::from)
            .unwrap();
        assert!(limiter.can_take("k", 2).await.unwrap());
        limiter.try_take_n("k", 2).await.unwrap();
        assert!(matches!(
            limiter.try_take("k").await,
            Err(Error::RetryAfter(_))
        ));
        assert!(matches!(
            limiter.take_timeout("k", Duration::from_secs(1)).await,
            Err(Error::QueueFull { .. })
        ));
        assert_eq!(limiter.available("k").await.unwrap(), 0);
        assert!(limiter.next_free("k").await.unwrap() > Duration::from_secs(59));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_reset_deletes_the_key_and_a_dropped_take_gives_nothing_back() {
        let server = RedisServer::start();
        let limiter = RedisLimiter::builder(server.url(), Rate::per_second(10))
            .slack(0)
            .build()
            .map(AsyncRedisLimiter::from)
            .unwrap();
        limiter.take("k").await.unwrap();
        // A take booked ~100 ms ahead, dropped after a reset: its give-back
        // finds the key gone and restores nothing.
        let booked = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.take_timeout("k", Duration::from_secs(1)).await })
        };
        tokio::time::sleep(Duration::from_millis(30)).await; // booked by now
        assert_eq!(server.raw("EXISTS paceline:k"), ":1\r\n");
        assert!(limiter.reset("k").await.unwrap());
        booked.abort();
        assert!(booked.await.unwrap_err().is_cancelled());
        tokio::time::sleep(Duration::from_millis(50)).await; // the give-back ran
        assert_eq!(server.raw("EXISTS paceline:k"), ":0\r\n");
        assert!(!limiter.reset("k").await.unwrap());
        assert_eq!(limiter.available("k").await.unwrap(), 1);
        limiter.try_take("k").await.unwrap();
        assert!(limiter.try_take("k").await.is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_server_down_fails_closed_then_recovers_after_restart() {
        let mut server = RedisServer::start();
        let limiter = async_limiter(&server, FailPolicy::Closed);
        limiter.try_take("k").await.unwrap();
        server.stop();
        for _ in 0..3 {
            let start = Instant::now();
            let result = limiter.try_take("k").await;
            assert!(
                matches!(result, Err(Error::Unavailable(_) | Error::Timeout)),
                "{result:?}"
            );
            assert!(
                start.elapsed() < 2 * TIMEOUT + MARGIN,
                "{:?}",
                start.elapsed()
            );
        }
        server.restart();
        let start = Instant::now();
        while limiter.try_take("k").await.is_err() {
            assert!(start.elapsed() < Duration::from_secs(5), "no recovery");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!("async: recovered {:?} after the restart", start.elapsed());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_hung_server_times_out_and_fails_open_when_asked() {
        let server = RedisServer::start();
        let closed = async_limiter(&server, FailPolicy::Closed);
        let open = async_limiter(&server, FailPolicy::Open);
        closed.try_take("k").await.unwrap();
        open.try_take("k").await.unwrap();
        server.pause();
        let start = Instant::now();
        let result = closed.try_take("k").await;
        assert!(matches!(result, Err(Error::Timeout)), "{result:?}");
        assert!(
            start.elapsed() < 2 * TIMEOUT + MARGIN,
            "{:?}",
            start.elapsed()
        );
        let start = Instant::now();
        open.take("k").await.unwrap();
        assert!(
            start.elapsed() < 2 * TIMEOUT + MARGIN,
            "{:?}",
            start.elapsed()
        );
        server.resume();
        let start = Instant::now();
        while closed.try_take("k").await.is_err() {
            assert!(start.elapsed() < Duration::from_secs(5), "no recovery");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_limiter_paces_keys_on_a_cluster_and_reloads_the_script() {
        let cluster = RedisCluster::start();
        let limiter = RedisLimiter::cluster_builder(cluster.urls(), Rate::per_minute(1))
            .slack(2)
            .build()
            .map(AsyncRedisLimiter::from)
            .unwrap();
        limiter.ping().await.unwrap();
        let keys: Vec<String> = (0..30).map(|i| format!("user:{i}")).collect();
        for key in &keys {
            limiter.try_take_n(key, 3).await.unwrap();
            assert!(matches!(
                limiter.try_take(key).await,
                Err(Error::RetryAfter(_))
            ));
        }
        for node in &cluster.nodes {
            assert!(dbsize(node) > 0, "a primary holds no key");
            assert_eq!(node.raw("SCRIPT FLUSH"), "+OK\r\n");
        }
        for key in &keys {
            assert!(
                limiter.try_take(key).await.is_err(),
                "{key} forgot its state"
            );
        }
        limiter.try_take("user:new").await.unwrap();
    }

    /// On a cluster the give-back goes through its own never-retrying
    /// client (and connection): it must reach the key's node all the same.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_take_gives_its_slot_back_on_a_cluster() {
        let cluster = RedisCluster::start();
        let limiter = RedisLimiter::cluster_builder(cluster.urls(), Rate::per_second(1))
            .slack(0)
            .build()
            .map(AsyncRedisLimiter::from)
            .unwrap();
        // Keys on different slots, so different nodes.
        for key in ["a", "b", "c", "user:1", "user:2"] {
            limiter.try_take(key).await.unwrap();
            let take = limiter.take_timeout(key, Duration::from_secs(5));
            assert!(tokio::time::timeout(Duration::from_millis(50), take)
                .await
                .is_err());
            let wait = next_free_once(&limiter, key, |w| w < Duration::from_millis(1000)).await;
            assert!(
                wait < Duration::from_millis(1000),
                "{key}: next free in {wait:?}"
            );
        }
    }

    /// The server's Unix time minus the local one, ns, from the midpoint of
    /// a round trip: both read the same clock here, so this is about 0.
    fn local_unix_ns() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    }

    /// Takes 30 permits at 100/s (slack 0), checking that none left before
    /// its slot on the server's clock (same host: same clock), and returns
    /// the CPU time this thread spent meanwhile, ns.
    async fn cpu_while_taking(limiter: &AsyncRedisLimiter, key: &str) -> u64 {
        // Connect first: the measure is of waiting.
        limiter.take(key).await.unwrap();
        let before = thread_cpu_ns();
        for _ in 0..30 {
            let slot = limiter.take(key).await.unwrap().at().as_nanos() as u64;
            let now = local_unix_ns();
            // Redis's TIME has microsecond resolution.
            assert!(now + 1_000 >= slot, "a permit left {} ns early", slot - now);
        }
        thread_cpu_ns() - before
    }

    /// The time the calling thread has run on a CPU, ns (Linux's schedstat).
    fn thread_cpu_ns() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/schedstat")
            .expect("/proc/thread-self/schedstat: the test needs Linux");
        stat.split_whitespace().next().unwrap().parse().unwrap()
    }

    /// A precise wait yields in a loop for its last `spin` before each slot,
    /// so it keeps its thread on a CPU; a sleeping wait parks it. What is
    /// checked is that CPU time, not lateness: on a loaded machine the
    /// scheduler favours a thread waking from sleep over one that kept
    /// running, so which strategy returns closer to its slot there is not
    /// a property of the limiter.
    #[tokio::test(flavor = "current_thread")]
    // Held for the whole run on purpose: one Redis test at a time.
    #[allow(clippy::await_holding_lock)]
    async fn async_takes_wait_with_the_builders_wait_strategy() {
        let _one = one_run_at_a_time();
        let server = RedisServer::start();
        let build = |wait: Wait| {
            RedisLimiter::builder(server.url(), Rate::per_second(100))
                .slack(0)
                .wait(wait)
                .build()
                .map(AsyncRedisLimiter::from)
                .unwrap()
        };
        // Most of each 10 ms interval.
        let precise = Wait::Precise {
            spin: Duration::from_millis(8),
        };
        let (sleeping, spinning) = (build(Wait::Sleep), build(precise));
        assert_eq!(sleeping.wait_strategy(), Wait::Sleep);
        assert_eq!(spinning.wait_strategy(), precise);
        let asleep = cpu_while_taking(&sleeping, "sleep").await;
        let spun = cpu_while_taking(&spinning, "precise").await;
        println!("CPU time over 30 takes: Sleep {asleep} ns, Precise {spun} ns");
        // 30 spins of up to 8 ms: 240 ms if the thread had a core to
        // itself (about 210 ms measured, Sleep 9-13 ms). On a machine whose
        // cores are taken by other work the spinner gets a share of one
        // (54-62 ms beside two CPU hogs and a build, Sleep 9-17 ms), so the test
        // asks for a multiple of what the round trips cost, which both
        // strategies pay, not for an absolute time.
        assert!(
            spun > 2 * asleep + 10_000_000,
            "Precise {spun} ns on a CPU, Sleep {asleep} ns"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[allow(clippy::await_holding_lock)]
    async fn takes_cancelled_by_a_timeout_keep_the_rate_and_the_key_frees_up() {
        let _one = one_run_at_a_time();
        let server = RedisServer::start();
        // 100/s, slack 10: one burst window is 100 ms.
        let limiter = RedisLimiter::builder(server.url(), Rate::per_second(100))
            .slack(10)
            .build()
            .map(AsyncRedisLimiter::from)
            .unwrap();
        let run = Duration::from_millis(1500);
        let start = Instant::now();
        let tasks: Vec<_> = (0..6)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let (mut granted, mut cancelled) = (0u64, 0u64);
                    while start.elapsed() < run {
                        let take = limiter.take("cancel");
                        match tokio::time::timeout(Duration::from_millis(50), take).await {
                            Ok(result) => {
                                result.unwrap();
                                granted += 1;
                            }
                            Err(_) => cancelled += 1,
                        }
                    }
                    (granted, cancelled)
                })
            })
            .collect();
        let (mut granted, mut cancelled) = (0, 0);
        for t in tasks {
            let (g, c) = t.await.unwrap();
            granted += g;
            cancelled += c;
        }
        let elapsed = start.elapsed();
        let stopped = Instant::now();
        // The key at rest grants its burst of 11 at once, then 100/s.
        let due = 11.0 + elapsed.as_secs_f64() * 100.0;
        println!(
            "{granted} permits ({:.1} % of {due:.0}) and {cancelled} cancelled takes in {elapsed:?}",
            100.0 * granted as f64 / due
        );
        // Issue 16's goal: 90 % (main before the horizon and the
        // give-back: 11 permits in 1.5 s; the horizon alone, 87-96 %).
        assert!(
            granted as f64 >= 0.90 * due,
            "{granted} of {due:.0} permits"
        );
        assert!(
            granted as f64 <= due + 2.0,
            "{granted} permits: over the limit"
        );
        // Nothing cancelled stays booked far ahead: the key is free again
        // within one burst window (generously: a shared machine stalls).
        loop {
            let wait = limiter.next_free("cancel").await.unwrap();
            if wait.is_zero() {
                break;
            }
            assert!(
                stopped.elapsed() < Duration::from_millis(300),
                "still {wait:?} to wait {:?} after the load stopped",
                stopped.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        println!("free again {:?} after the load stopped", stopped.elapsed());
    }

    /// Polls `key`'s `next_free` until `done` holds of it, for up to a
    /// second (a give-back is a round trip of its own, spawned at the
    /// cancellation), and returns the last reading.
    async fn next_free_once(
        limiter: &AsyncRedisLimiter,
        key: &str,
        done: impl Fn(Duration) -> bool,
    ) -> Duration {
        let start = Instant::now();
        loop {
            let wait = limiter.next_free(key).await.unwrap();
            if done(wait) || start.elapsed() > Duration::from_secs(1) {
                return wait;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[allow(clippy::await_holding_lock)]
    async fn a_take_cancelled_before_its_slot_gives_the_slot_back() {
        let _one = one_run_at_a_time();
        let server = RedisServer::start();
        // 1/s, no slack: each booking moves the key a whole second ahead.
        let limiter = AsyncRedisLimiter::from(limiter(&server, Rate::per_second(1), 0));
        limiter.try_take("k").await.unwrap();
        // Books the slot one second ahead at once, then is cancelled.
        let take = limiter.take_timeout("k", Duration::from_secs(5));
        assert!(tokio::time::timeout(Duration::from_millis(50), take)
            .await
            .is_err());
        // Given back: the next free slot is the one after the first take,
        // under a second away, not the cancelled one's, nearly two.
        let wait = next_free_once(&limiter, "k", |w| w < Duration::from_millis(1000)).await;
        assert!(wait < Duration::from_millis(1000), "next free in {wait:?}");
        // And a take gets that slot, not one after it.
        let started = Instant::now();
        limiter
            .take_timeout("k", Duration::from_secs(5))
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_millis(1500));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[allow(clippy::await_holding_lock)]
    async fn a_cancelled_take_gives_nothing_back_once_someone_booked_after_it() {
        let _one = one_run_at_a_time();
        let server = RedisServer::start();
        let limiter = AsyncRedisLimiter::from(limiter(&server, Rate::per_second(1), 0));
        limiter.try_take("k").await.unwrap();
        // The first waiter books 1 s ahead, the second 2 s ahead.
        let first = tokio::spawn({
            let limiter = limiter.clone();
            async move { limiter.take_timeout("k", Duration::from_secs(5)).await }
        });
        let booked = next_free_once(&limiter, "k", |w| w > Duration::from_millis(1500)).await;
        assert!(
            booked > Duration::from_millis(1500),
            "next free in {booked:?}"
        );
        let second = tokio::spawn({
            let limiter = limiter.clone();
            async move { limiter.take_timeout("k", Duration::from_secs(5)).await }
        });
        let booked = next_free_once(&limiter, "k", |w| w > Duration::from_millis(2500)).await;
        assert!(
            booked > Duration::from_millis(2500),
            "next free in {booked:?}"
        );
        // Cancelling the first must not free its slot: the key now holds
        // the second's booking, which a restore would erase.
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        tokio::time::sleep(Duration::from_millis(100)).await;
        let wait = limiter.next_free("k").await.unwrap();
        assert!(wait > Duration::from_millis(2000), "next free in {wait:?}");
        // Cancelling the second (the last booking) gives its slot back.
        second.abort();
        assert!(second.await.unwrap_err().is_cancelled());
        let wait = next_free_once(&limiter, "k", |w| w < Duration::from_millis(2000)).await;
        assert!(wait < Duration::from_millis(2000), "next free in {wait:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[allow(clippy::await_holding_lock)]
    async fn a_poisoned_key_never_breaks_the_shared_async_connection() {
        let _one = one_run_at_a_time();
        let server = RedisServer::start();
        poison(&server);
        let limiter = limiter(&server, Rate::every(Duration::from_nanos(1)).unwrap(), 1000);
        let limiter = AsyncRedisLimiter::from(limiter);
        limiter.ping().await.unwrap();
        let before = connections_received(&server);
        for i in 0..2000 {
            limiter.try_take("ok").await.unwrap();
            if i % 100 == 0 {
                let start = Instant::now();
                assert_poisoned(limiter.try_take("bin").await, "paceline:bin");
                assert_poisoned(limiter.try_take("huge").await, "paceline:huge");
                assert!(start.elapsed() < Duration::from_secs(1));
            }
        }
        // Concurrently on the one connection, too.
        let calls: Vec<_> = (0..200)
            .map(|i| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    match i % 20 {
                        0 if i % 100 == 0 => {
                            assert_poisoned(limiter.try_take("huge").await, "paceline:huge")
                        }
                        0 => assert_poisoned(limiter.try_take("bin").await, "paceline:bin"),
                        1..=5 => assert_poisoned(limiter.try_take("bin").await, "paceline:bin"),
                        _ => drop(limiter.try_take("ok").await.unwrap()),
                    }
                })
            })
            .collect();
        for c in calls {
            c.await.unwrap();
        }
        let opened = connections_received(&server) - before;
        assert!(opened <= 1, "the connection was made {} times", opened - 1);
    }
}

/// The Redis limiter resolves a slack in time as the in-process ones do,
/// the default included (10 permits or 10 ms, whichever is more), for its
/// own limit and for `with_limit`. Building connects to nothing.
#[test]
fn a_slack_in_time_resolves_at_the_rate() {
    let url = "redis://127.0.0.1:1/";
    let default = RedisLimiter::builder(url, Rate::per_second(100_000))
        .build()
        .unwrap();
    assert_eq!(default.slack(), 1000);
    let slow = RedisLimiter::builder(url, Rate::per_second(100))
        .build()
        .unwrap();
    assert_eq!(slow.slack(), 10);
    let other = slow
        .with_limit(Rate::per_second(4000), Duration::from_millis(5))
        .unwrap();
    assert_eq!(other.slack(), 20);
}

#[test]
fn stats_count_decisions_and_the_server_failures_under_either_policy() {
    for policy in [FailPolicy::Closed, FailPolicy::Open] {
        let mut server = RedisServer::start();
        // 1 a minute, slack 1: a burst of 2, then refusals.
        let limiter = RedisLimiter::builder(server.url(), Rate::per_minute(1))
            .slack(1)
            .on_error(policy)
            .connect_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            .stats(true)
            .build()
            .unwrap();
        let sibling = limiter.with_limit(Rate::per_minute(1), 0).unwrap();
        limiter.try_take("a").unwrap();
        limiter.take_n("b", 2).unwrap();
        assert!(limiter.try_take("b").is_err());
        assert!(limiter.try_take_n("c", 3).is_err()); // ExceedsBurst, no round trip
        assert!(sibling.try_take_n("d", u64::MAX).is_err()); // CostTooLarge
        sibling.try_take("d").unwrap();
        let stats = limiter.stats().unwrap();
        assert_eq!((stats.admitted, stats.permits, stats.refused), (3, 4, 3));
        assert_eq!((stats.failed, stats.cancelled), (0, 0));
        assert_eq!(sibling.stats(), Some(stats)); // one limiter's counts

        server.stop();
        let failed = limiter.try_take("e");
        let stats = limiter.stats().unwrap();
        assert_eq!(stats.failed, 1, "{policy:?}");
        match policy {
            FailPolicy::Closed => {
                assert!(failed.is_err());
                assert_eq!((stats.admitted, stats.refused), (3, 4));
            }
            FailPolicy::Open => {
                failed.unwrap();
                assert_eq!((stats.admitted, stats.refused), (4, 3));
            }
        }
    }
    // Without `.stats(true)`, nothing is counted.
    let server = RedisServer::start();
    let limiter = RedisLimiter::builder(server.url(), Rate::per_second(1))
        .build()
        .unwrap();
    limiter.try_take("a").unwrap();
    assert_eq!(limiter.stats(), None);
}
