//! `RedisLimiter` against a real `redis-server` this file starts itself: one
//! limit shared by clients on separate connections and in separate
//! processes, what callers see while the server is down or hung, and the
//! calls' meaning.
#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use paceline::redis::{Error, FailPolicy, RedisLimiter};
use paceline::{Rate, TakeError};
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
        let at = limiter.take(key).expect("take").as_nanos() as u64;
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
        .build()
        .unwrap()
}

/// Retries `try_take` until Redis answers again; how long that took.
fn recovery_time(limiter: &RedisLimiter) -> Duration {
    let start = Instant::now();
    loop {
        match limiter.try_take("k") {
            Ok(()) => return start.elapsed(),
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
        Err(Error::Refused(TakeError::CostTooLarge { .. }))
    ));

    server.restart();
    recovery_time(&limiter);
    // Limiting again: the burst of slack + 1 = 11, then refusals.
    for _ in 0..11 {
        limiter.try_take("again").unwrap();
    }
    assert!(matches!(
        limiter.try_take("again"),
        Err(Error::Refused(TakeError::RetryAfter(_)))
    ));
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
    let first = limiter.take("k").unwrap();
    for _ in 0..5 {
        limiter.take("k").unwrap();
    }
    assert!(start.elapsed() >= Duration::from_millis(50));
    let last = limiter.take("k").unwrap();
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
            Err(Error::Refused(TakeError::RetryAfter(d))) => {
                assert!(
                    d > Duration::from_secs(59) && d <= Duration::from_secs(60),
                    "{d:?}"
                )
            }
            other => panic!("expected RetryAfter, got {other:?}"),
        }
    }
    assert!(matches!(
        limiter.try_take_n("k", 3),
        Err(Error::Refused(TakeError::ExceedsBurst {
            cost: 3,
            burst: 2
        }))
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
        Err(Error::Refused(TakeError::QueueFull { wait, max_wait })) => {
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
        assert!(matches!(
            limiter.try_take(key),
            Err(Error::Refused(TakeError::RetryAfter(_)))
        ));
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

/// The async limiter: the same limit, failures and recovery, under Tokio.
#[cfg(feature = "tokio")]
mod tokio_calls {
    use super::*;
    use paceline::redis::AsyncRedisLimiter;

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
                        let at = limiter.take("async").await.unwrap().as_nanos() as u64;
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
            Err(Error::Refused(TakeError::RetryAfter(_)))
        ));
        assert!(matches!(
            limiter.take_timeout("k", Duration::from_secs(1)).await,
            Err(Error::Refused(TakeError::QueueFull { .. }))
        ));
        assert_eq!(limiter.available("k").await.unwrap(), 0);
        assert!(limiter.next_free("k").await.unwrap() > Duration::from_secs(59));
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
                Err(Error::Refused(TakeError::RetryAfter(_)))
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
}
