//! `MemcachedLimiter` against a real `memcached` this file starts itself:
//! one limit shared by clients in separate processes, with one client's
//! clock set ahead on purpose, the CAS loop under contention, what callers
//! see while the server is down, hung or back, an eviction under a small
//! `-m`, hostile keys and the counts.
#![cfg(feature = "memcached")]

use paceline::Take;
#[path = "support/memcached_server.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use paceline::clock::UnixClock;
use paceline::memcached::{Error, FailPolicy, MemcachedLimiter};
use paceline::{clock::Clock, Rate};
use support::MemcachedServer;

/// 1000 per second: T = 1 ms.
const T_NS: u64 = 1_000_000;
/// 50 ms banked: the rate holds while slack covers how late clients come
/// back, and on a shared machine all clients may stall together for over
/// 10 ms (as in `tests/redis.rs`).
const SLACK: u64 = 50;
/// How long the shared-limit runs measure.
const MEASURE: Duration = Duration::from_secs(2);

/// The shared-limit runs take one at a time: each keeps 8 clients busy.
static ONE_RUN_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_run_at_a_time() -> MutexGuard<'static, ()> {
    ONE_RUN_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The host's Unix time, ns: the clients' shared clock.
fn unix_now() -> u64 {
    UnixClock.now()
}

/// The host's clock, `ahead` ns ahead of it: a client whose clock is off.
#[derive(Clone, Copy, Debug)]
struct Ahead(u64);

impl Clock for Ahead {
    fn now(&self) -> u64 {
        UnixClock.now() + self.0
    }
}

fn shared_limiter<C: Clock + Clone + 'static>(addr: &str, clock: C) -> MemcachedLimiter<C> {
    MemcachedLimiter::builder(addr, Rate::per_second(1000))
        .slack(SLACK)
        .clock(clock)
        .build()
        .unwrap()
}

/// Takes permits of `key` until one goes at or after `stop` (shared Unix
/// ns); returns when each went on the shared clock (the limiter reports
/// its own clock's time, `ahead` ns ahead of it).
fn pace_until<C: Clock + Clone + 'static>(
    limiter: &MemcachedLimiter<C>,
    key: &str,
    stop: u64,
    ahead: u64,
) -> Vec<u64> {
    let mut times = Vec::new();
    loop {
        let at = limiter.take(key).expect("take").at().as_nanos() as u64 - ahead;
        times.push(at);
        if at >= stop {
            return times;
        }
    }
}

/// Checks permit times from every client against the limit: over any window
/// of length `w`, at most `slack + 1 + (w + allowance) / T`; and within 3 %
/// of the rate over `[from, from + MEASURE)`. Returns the largest excess
/// over `1 + w / T` in permits.
fn check_shared_limit(mut times: Vec<u64>, from: u64, allowance: u64) -> f64 {
    times.sort_unstable();
    // For sorted times g, the window [g_p, g_q] holds q - p + 1 permits:
    // (q - p) * T <= slack * T + allowance + g_q - g_p, i.e.
    // h_q - h_p <= tau + allowance with h_k = k * T - g_k.
    let bound = i128::from(SLACK * T_NS + allowance);
    let (mut min_h, mut worst) = (i128::MAX, 0);
    for (k, &g) in times.iter().enumerate() {
        let h = k as i128 * i128::from(T_NS) - i128::from(g);
        min_h = min_h.min(h);
        worst = worst.max(h - min_h);
        assert!(
            h - min_h <= bound,
            "more than slack + 1 + (w + {allowance} ns) / T permits in a window ending at \
             permit {k}: {:.1} over 1 + w / T",
            (h - min_h) as f64 / T_NS as f64
        );
    }
    let to = from + MEASURE.as_nanos() as u64;
    let count = times.iter().filter(|&&g| g >= from && g < to).count();
    let rate = count as f64 / MEASURE.as_secs_f64();
    assert!(
        (rate - 1000.0).abs() <= 30.0,
        "achieved {rate}/s over {MEASURE:?}, not within 3 % of 1000/s"
    );
    let worst = worst as f64 / T_NS as f64;
    println!("{rate:.1}/s; largest excess over 1 + w / T: {worst:.1} permits (slack {SLACK})");
    worst
}

/// Set in the children of the test below: "addr;stop".
const CHILD_ENV: &str = "PACELINE_MEMCACHED_CHILD";

#[test]
fn eight_clients_in_four_processes_share_one_limit_of_1000_per_second() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        // The child's half: two clients, each its own limiter (and
        // connections); every permit's time and the races lost, for the
        // parent.
        let (addr, stop) = spec.split_once(';').unwrap();
        let stop: u64 = stop.parse().unwrap();
        let clients: Vec<_> = (0..2)
            .map(|_| {
                let addr = addr.to_owned();
                thread::spawn(move || {
                    let limiter = shared_limiter(&addr, UnixClock);
                    let times = pace_until(&limiter, "processes", stop, 0);
                    (times, limiter.cas_conflicts())
                })
            })
            .collect();
        for c in clients {
            let (times, conflicts) = c.join().unwrap();
            for t in times {
                println!("PERMIT {t}");
            }
            println!("CONFLICTS {conflicts}");
        }
        return;
    }
    let _one = one_run_at_a_time();
    let server = MemcachedServer::start();
    // Processes take longer to start than threads: skip the first second.
    let from = unix_now() + 1_000_000_000;
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
                .env(CHILD_ENV, format!("{};{stop}", server.addr()))
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a child process")
        })
        .collect();
    let (mut times, mut conflicts) = (Vec::new(), 0);
    for mut child in children {
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut mine = Vec::new();
        for line in out.lines().map_while(Result::ok) {
            if let Some(t) = line.strip_prefix("PERMIT ") {
                mine.push(t.parse::<u64>().unwrap());
            } else if let Some(n) = line.strip_prefix("CONFLICTS ") {
                conflicts += n.parse::<u64>().unwrap();
            }
        }
        assert!(child.wait().unwrap().success(), "a child process failed");
        assert!(!mine.is_empty(), "a child process took nothing");
        assert!(
            mine.iter().min().unwrap() < &from,
            "a child process started after the measurement began"
        );
        times.extend(mine);
    }
    let grants = times.len() as u64;
    check_shared_limit(times, from, 0);
    println!("8 clients, 4 processes: {grants} grants, {conflicts} CAS races lost");
    // Paced takes rarely race: far fewer lost races than grants.
    assert!(
        conflicts < grants,
        "{conflicts} races lost for {grants} grants"
    );
}

#[test]
fn a_client_whose_clock_runs_ahead_admits_at_most_its_lead_over_t_early() {
    let _one = one_run_at_a_time();
    let server = MemcachedServer::start();
    // 50 ms ahead: up to 50 permits early, on top of the slack's 50.
    let lead = 50 * T_NS;
    let from = unix_now() + 300_000_000;
    let stop = from + MEASURE.as_nanos() as u64 + 50_000_000;
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let addr = server.addr();
            thread::spawn(move || {
                if i == 0 {
                    let limiter = shared_limiter(&addr, Ahead(lead));
                    pace_until(&limiter, "skewed", stop, lead)
                } else {
                    let limiter = shared_limiter(&addr, UnixClock);
                    pace_until(&limiter, "skewed", stop, 0)
                }
            })
        })
        .collect();
    let mut times = Vec::new();
    let mut ahead_times = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let mine = c.join().unwrap();
        if i == 0 {
            ahead_times = mine.clone();
        }
        times.extend(mine);
    }
    assert!(!ahead_times.is_empty(), "the skewed client took nothing");
    let worst = check_shared_limit(times, from, lead);
    println!(
        "one clock 50 ms ahead: largest excess {worst:.1} permits, bound {}",
        SLACK + 50
    );
}

/// A manual clock, `ahead` ns ahead of another.
#[derive(Clone, Debug)]
struct ManualAhead(paceline::clock::ManualClock, u64);

impl Clock for ManualAhead {
    fn now(&self) -> u64 {
        self.0.now() + self.1
    }
}

#[test]
fn a_clock_d_ahead_admits_exactly_d_over_t_early_and_no_more() {
    let server = MemcachedServer::start();
    let clock = paceline::clock::ManualClock::new();
    clock.set(Duration::from_secs(1_800_000_000));
    let limiter = |ahead: u64| {
        MemcachedLimiter::builder(server.addr(), Rate::per_second(100))
            .slack(4)
            .clock(ManualAhead(clock.clone(), ahead))
            .build()
            .unwrap()
    };
    let (on_time, ahead) = (limiter(0), limiter(50_000_000));
    // On the shared clock the burst is 5, and no more at this instant.
    on_time.try_take_n("k", 5).unwrap();
    assert!(on_time.try_take("k").unwrap_err().is_refusal());
    // 50 ms ahead, at the same instant: 50 ms of permits (T = 10 ms) look
    // due already. Exactly those, then refusals.
    let mut early = 0;
    while ahead.try_take("k").is_ok() {
        early += 1;
        assert!(early <= 5, "more than d / T early");
    }
    assert_eq!(early, 5, "d / T = 5 permits early");
    // The key's schedule is now 50 ms ahead of the shared clock: the
    // others wait that out.
    match on_time.try_take("k") {
        Err(Error::RetryAfter(d)) => {
            assert_eq!(d.duration(), Duration::from_millis(60), "{d:?}")
        }
        other => panic!("{other:?}"),
    }
    clock.advance(Duration::from_millis(60));
    on_time.try_take("k").unwrap();
    assert!(on_time.try_take("k").unwrap_err().is_refusal());
    // The lead does not add up: 60 ms on, the client ahead finds again
    // what its 50 ms show it, no more. Over the window of 60 ms, the key
    // granted S + 1 + (w + d) / T = 5 + 11 = 16, where clocks that agree
    // grant S + 1 + w / T = 11.
    let mut again = 0;
    while ahead.try_take("k").is_ok() {
        again += 1;
        assert!(again <= 5, "the lead added up");
    }
    assert_eq!(5 + early + 1 + again, 16);
}

#[test]
fn under_contention_cas_retries_stay_bounded_and_no_call_fails() {
    let _one = one_run_at_a_time();
    let server = MemcachedServer::start();
    // So fast that nearly every try is granted: every call writes, and
    // eight clients race for the one key as hard as they can.
    let limiters: Vec<_> = (0..8)
        .map(|_| {
            MemcachedLimiter::builder(server.addr(), Rate::per_second(10_000_000))
                .slack(1_000_000)
                .build()
                .unwrap()
        })
        .collect();
    let run_for = Duration::from_millis(600);
    let results: Vec<_> = thread::scope(|s| {
        let handles: Vec<_> = limiters
            .iter()
            .map(|limiter| {
                s.spawn(move || {
                    let start = Instant::now();
                    let (mut granted, mut refused) = (0u64, 0u64);
                    while start.elapsed() < run_for {
                        match limiter.try_take("hot") {
                            Ok(_) => granted += 1,
                            Err(e) if e.is_refusal() => refused += 1,
                            Err(e) => panic!("a call failed under contention: {e}"),
                        }
                    }
                    (granted, refused, limiter.cas_conflicts())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let granted: u64 = results.iter().map(|r| r.0).sum();
    let conflicts: u64 = results.iter().map(|r| r.2).sum();
    println!(
        "8 clients racing on one key: {granted} grants, {conflicts} CAS races lost ({:.2} a grant)",
        conflicts as f64 / granted as f64
    );
    assert!(granted > 100, "only {granted} grants");
    // Each lost race is another client's won write: with 8 clients a call
    // loses a handful at most, on average far fewer.
    assert!(
        conflicts <= 7 * granted,
        "{conflicts} races lost for {granted} grants"
    );
    // Every grant is in the key: the stored schedule moved by one interval
    // per permit (10 M/s: 100 ns), none lost to a race.
    let other = &limiters[0];
    let next_free = other.next_free("hot").unwrap();
    assert_eq!(next_free, Duration::ZERO, "the burst was not spent");
}

/// A clock that, each time a call reads it (between the call's read of the
/// key and its store), writes the key itself: every store the limiter tries
/// loses its race.
#[derive(Clone, Debug)]
struct Meddler(std::path::PathBuf);

impl Clock for Meddler {
    fn now(&self) -> u64 {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&self.0).unwrap();
        s.write_all(b"ms paceline:k 1 T0\r\n1\r\n").unwrap();
        let mut reply = [0u8; 4];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"HD\r\n");
        UnixClock.now()
    }
}

#[test]
fn a_call_that_keeps_losing_races_fails_and_no_policy_admits_it() {
    let server = MemcachedServer::start();
    let socket = server.addr().strip_prefix("unix:").unwrap().into();
    let limiter = MemcachedLimiter::builder(server.addr(), Rate::per_second(10))
        .on_error(FailPolicy::Open)
        .clock(Meddler(socket))
        .stats(true)
        .build()
        .unwrap();
    let start = Instant::now();
    match limiter.try_take("k") {
        Err(Error::Script(e)) => assert!(e.to_string().contains("CAS races lost"), "{e}"),
        other => panic!("expected the contention's error, got {other:?}"),
    }
    // Within the call's budget (connect plus response timeout, 2 s).
    assert!(start.elapsed() < Duration::from_secs(2) + MARGIN);
    assert!(limiter.cas_conflicts() > 0);
    let stats = limiter.stats().unwrap();
    assert_eq!((stats.admitted, stats.refused, stats.failed), (0, 1, 1));
}

const TIMEOUT: Duration = Duration::from_millis(300);
/// Scheduling noise on a loaded machine, on top of a timeout.
const MARGIN: Duration = Duration::from_millis(300);

fn faulty_limiter(server: &MemcachedServer, policy: FailPolicy) -> MemcachedLimiter {
    // Slow enough that a refusal never depends on how fast calls come.
    MemcachedLimiter::builder(server.addr(), Rate::per_minute(1))
        .on_error(policy)
        .connect_timeout(TIMEOUT)
        .response_timeout(TIMEOUT)
        .stats(true)
        .build()
        .unwrap()
}

/// Retries `try_take` until memcached answers again; how long that took.
fn recovery_time(limiter: &MemcachedLimiter) -> Duration {
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
fn server_killed_fails_closed_at_once_and_the_limiter_recovers_after_restart() {
    for port in [None, Some(0)] {
        let mut server = MemcachedServer::start_with(port, 64);
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
            assert!(matches!(limiter.reset("k"), Err(Error::Unavailable(_))));
            assert!(start.elapsed() < TIMEOUT + MARGIN, "{:?}", start.elapsed());
        }

        server.restart();
        let took = recovery_time(&limiter);
        println!("{port:?}: recovered {took:?} after the restart");
        assert!(took < Duration::from_secs(2), "{took:?}");
        // A restart forgot the key: its burst (slack 10) again, then paced.
        for _ in 0..10 {
            limiter.try_take("k").unwrap();
        }
        assert!(limiter.try_take("k").unwrap_err().is_refusal());
    }
}

#[test]
fn server_killed_fails_open_when_asked_and_limits_again_after() {
    let mut server = MemcachedServer::start();
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
    // Refusals of the limit itself are not failures.
    assert!(matches!(
        limiter.try_take_n("k", u64::MAX),
        Err(Error::CostTooLarge { .. })
    ));

    server.restart();
    recovery_time(&limiter);
    let failed_before = limiter.stats().unwrap().failed;
    let mut admitted = 0u64;
    let start = Instant::now();
    loop {
        match limiter.try_take("again") {
            Ok(_) => admitted += 1,
            Err(Error::RetryAfter(_)) => break,
            Err(e) => panic!("{e}"),
        }
        let failed = limiter.stats().unwrap().failed - failed_before;
        assert!(admitted - failed <= 30, "never refused again");
        assert!(start.elapsed() < Duration::from_secs(10), "no recovery");
    }
    let failed = limiter.stats().unwrap().failed - failed_before;
    assert_eq!(admitted - failed, 11, "{admitted} admitted, {failed} open");
}

#[test]
fn a_stopped_server_times_out_within_the_timeouts_and_the_limiter_recovers() {
    for policy in [FailPolicy::Closed, FailPolicy::Open] {
        let server = MemcachedServer::start();
        let limiter = faulty_limiter(&server, policy);
        limiter.try_take("k").unwrap();

        server.pause();
        for _ in 0..2 {
            let start = Instant::now();
            let result = limiter.try_take("k");
            let took = start.elapsed();
            match policy {
                FailPolicy::Closed => assert!(matches!(result, Err(Error::Timeout)), "{result:?}"),
                FailPolicy::Open => assert!(result.is_ok(), "{result:?}"),
            }
            // Within the connect plus the response timeout.
            assert!(took < 2 * TIMEOUT + MARGIN, "{took:?}");
        }
        server.resume();
        let took = recovery_time(&limiter);
        println!("{policy:?}: recovered {took:?} after the resume");
        // Limiting again: the rest of the burst of 11, then refusals.
        let mut admitted = 0;
        while limiter.try_take("k").is_ok() {
            admitted += 1;
            assert!(admitted <= 11, "never refused again");
        }
    }
}

#[test]
fn an_eviction_under_a_small_memory_forgets_a_key_as_the_docs_warn() {
    // 2 MB: a few tens of thousands of small items.
    let server = MemcachedServer::start_with(None, 2);
    let limiter = MemcachedLimiter::builder(server.addr(), Rate::per_minute(1))
        .slack(4)
        .build()
        .unwrap();
    limiter.try_take_n("victim", 5).unwrap();
    assert!(limiter.try_take("victim").unwrap_err().is_refusal());
    // Fill memory with items the size of a state, which never expire.
    server.fill(200_000, 19);
    let evictions: u64 = server.stats("")["evictions"].parse().unwrap();
    assert!(evictions > 0, "no eviction under 2 MB");
    assert_eq!(server.meta("mg paceline:victim v"), "EN\r\n", "not evicted");
    // The key decides as one at rest: a whole burst again, within the
    // minute its limit allows one permit.
    limiter.try_take_n("victim", 5).unwrap();
    assert!(limiter.try_take("victim").unwrap_err().is_refusal());
}

/// Keys a client could send: long, with spaces and control bytes, not
/// UTF-8 letters only, shaped like a digest.
fn hostile_keys() -> Vec<String> {
    vec![
        String::new(),
        "user 42".into(),
        "a\r\nmg x v".into(),
        "\0\u{1}\u{7f}".into(),
        "ключ".into(),
        "%41".into(),
        "A".into(),
        "k".repeat(241),
        "k".repeat(242),
        "é".repeat(200),
        "x".repeat(1_000_000),
        "~sha256:0000".into(),
    ]
}

#[test]
fn every_key_is_limited_and_keys_are_stored_one_to_one_or_by_digest() {
    let server = MemcachedServer::start();
    let limiter = MemcachedLimiter::builder(server.addr(), Rate::per_minute(1))
        .slack(0)
        .build()
        .unwrap();
    for key in hostile_keys() {
        let shown = &key[..key.len().min(20)];
        limiter
            .try_take(&key)
            .unwrap_or_else(|e| panic!("{shown:?}: {e}"));
        assert!(
            limiter.try_take(&key).unwrap_err().is_refusal(),
            "{shown:?} not limited"
        );
    }
    // Each its own key: "%41" and "A" did not share one.
    let items: u64 = server.stats("")["curr_items"].parse().unwrap();
    assert_eq!(items, hostile_keys().len() as u64);
    // Readable keys are stored escaped, as the docs say.
    assert_ne!(server.meta("mg paceline:user%2042 v"), "EN\r\n");
    assert_ne!(server.meta("mg paceline:%2541 v"), "EN\r\n");
    // A reset finds the same key.
    for key in hostile_keys() {
        assert!(limiter.reset(&key).unwrap());
        limiter.try_take(&key).unwrap();
    }
}

#[test]
fn a_bad_configuration_is_refused_naming_the_value() {
    for (addr, prefix, want) in [
        ("", "p:", "address"),
        ("host:port", "p:", "bad port"),
        ("127.0.0.1:11211", "a prefix", "prefix"),
        ("127.0.0.1:11211", &"p".repeat(179), "at most 178"),
    ] {
        let e = MemcachedLimiter::builder(addr, Rate::per_second(1))
            .prefix(prefix)
            .build()
            .unwrap_err();
        assert!(matches!(&e, Error::Config(_)), "{e:?}");
        assert!(e.to_string().contains(want), "{addr:?} {prefix:?}: {e}");
    }
}

#[test]
fn stats_count_decisions_and_the_server_failures() {
    let mut server = MemcachedServer::start();
    let limiter = faulty_limiter(&server, FailPolicy::Closed)
        .with_limit(Rate::per_minute(1), 0)
        .unwrap();
    limiter.try_take("k").unwrap();
    assert!(limiter.try_take("k").is_err());
    server.stop();
    assert!(limiter.try_take("k").is_err());
    let stats = limiter.stats().unwrap();
    assert_eq!(
        (stats.admitted, stats.refused, stats.failed),
        (1, 2, 1),
        "{stats:?}"
    );
}

#[cfg(feature = "tokio")]
mod asynchronous {
    use super::*;
    use paceline::memcached::AsyncMemcachedLimiter;
    use paceline::AsyncTake;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // The guard keeps the other shared-limit runs (threads of other tests)
    // out for the whole run; no task of this runtime takes it.
    #[allow(clippy::await_holding_lock)]
    async fn eight_tasks_on_one_async_limiter_share_its_limit() {
        let _one = one_run_at_a_time();
        let server = MemcachedServer::start();
        let limiter = AsyncMemcachedLimiter::from(shared_limiter(&server.addr(), UnixClock));
        let from = unix_now() + 200_000_000;
        let stop = from + MEASURE.as_nanos() as u64 + 50_000_000;
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let mut times = Vec::new();
                    loop {
                        let at = limiter.take("tasks").await.unwrap().at().as_nanos() as u64;
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
        check_shared_limit(times, from, 0);
    }

    #[tokio::test]
    async fn a_take_cancelled_before_its_slot_gives_the_slot_back() {
        let server = MemcachedServer::start();
        let limiter = AsyncMemcachedLimiter::from(
            MemcachedLimiter::builder(server.addr(), Rate::per_second(10))
                .slack(0)
                .build()
                .unwrap(),
        );
        limiter.take("k").await.unwrap();
        let before = limiter.next_free("k").await.unwrap();
        // Books the slot 100 ms ahead, then is dropped before it.
        let cancelled = tokio::time::timeout(
            Duration::from_millis(20),
            limiter.take_timeout("k", Duration::from_secs(1)),
        )
        .await;
        assert!(cancelled.is_err(), "not cancelled");
        // The give-back runs as a task of its own: wait for it, bounded.
        let start = Instant::now();
        loop {
            let now = limiter.next_free("k").await.unwrap();
            if now <= before {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(2), "not given back");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn async_server_down_fails_closed_or_open_then_recovers() {
        let mut server = MemcachedServer::start();
        let closed = AsyncMemcachedLimiter::from(faulty_limiter(&server, FailPolicy::Closed));
        let open = AsyncMemcachedLimiter::from(faulty_limiter(&server, FailPolicy::Open));
        closed.try_take("k").await.unwrap();
        server.stop();
        let start = Instant::now();
        assert!(matches!(
            closed.try_take("k").await,
            Err(Error::Unavailable(_))
        ));
        open.try_take("k").await.unwrap();
        assert!(start.elapsed() < TIMEOUT + MARGIN);
        server.restart();
        let start = Instant::now();
        while closed.try_take("k").await.is_err() {
            assert!(start.elapsed() < Duration::from_secs(5), "no recovery");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        closed.ping().await.unwrap();
    }

    #[tokio::test]
    async fn async_stopped_server_times_out_within_the_timeouts() {
        let server = MemcachedServer::start();
        let limiter = AsyncMemcachedLimiter::from(faulty_limiter(&server, FailPolicy::Closed));
        limiter.try_take("k").await.unwrap();
        server.pause();
        let start = Instant::now();
        let result = limiter.try_take("k").await;
        assert!(matches!(result, Err(Error::Timeout)), "{result:?}");
        assert!(
            start.elapsed() < 2 * TIMEOUT + MARGIN,
            "{:?}",
            start.elapsed()
        );
        server.resume();
        let start = Instant::now();
        loop {
            match limiter.try_take("k").await {
                Err(e) if e.is_refusal() => break,
                _ => assert!(start.elapsed() < Duration::from_secs(5), "no recovery"),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn async_calls_limit_every_key() {
        let server = MemcachedServer::start();
        let limiter = AsyncMemcachedLimiter::from(
            MemcachedLimiter::builder(server.addr(), Rate::per_minute(1))
                .slack(0)
                .build()
                .unwrap(),
        );
        for key in hostile_keys() {
            limiter.try_take(&key).await.unwrap();
            assert!(limiter.try_take(&key).await.unwrap_err().is_refusal());
        }
    }
}
