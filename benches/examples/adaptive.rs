//! An adaptive rate (`paceline::adapt::Adaptive`, through
//! `paceline::reqwest::Pace::adapt`) finding the limit of a real nginx that
//! keeps it to itself: `limit_req` at 50 requests a second, burst 2
//! (`nodelay`), 429 past it, on a free loopback port, started by this
//! program in a temporary directory (`tests/support/nginx_server.rs`).
//!
//! ```text
//! cargo run --release -p paceline-benches --features adaptive --example adaptive
//! ```
//!
//! Options: `--secs N` (each run, default 10), `--runs N` (default 3).
//!
//! Each run: a reqwest client paced by an `AsyncLimiter` at 200/s (slack
//! 0, `PRECISE`), adapted between 1/s and 1000/s with the default increase
//! and backoff, sends from 4 tasks for the run's length. It has converged
//! at the first answer after which the controller's rate is within 10 %
//! of nginx's (the descent from 200/s over); *90 % served* is the first
//! request served such that the second before it held 90 % of nginx's
//! rate in served requests (so never before 1 s). One line per run:
//!
//! ```text
//! run <n>: converged in <s> s (90 % served at <s> s); after: <pct> % of nginx's rate served, <pct> % refused (<r> of <n>); ended at <rate>/s, <i> increases, <d> decreases
//! ```
//!
//! and, for comparison, one run of a client told nginx's rate (50/s,
//! slack 0). Progress goes to stderr; stdout has these lines only.

#[path = "../../tests/support/nginx_server.rs"]
mod nginx_server;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nginx_server::Nginx;
use paceline::adapt::Adaptive;
use paceline::reqwest::Pace;
use paceline::tokio::{AsyncLimiter, PRECISE};
use paceline::Rate;
use reqwest_middleware::ClientBuilder;

/// nginx's rate, per second.
const LIMIT: u32 = 50;

/// Tasks sending through one client.
const TASKS: usize = 4;

struct Args {
    secs: f64,
    runs: usize,
}

fn args() -> Args {
    let mut a = Args {
        secs: 10.0,
        runs: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--secs" => a.secs = value.parse().expect("--secs N"),
            "--runs" => a.runs = value.parse().expect("--runs N"),
            _ => panic!("unknown option {arg}"),
        }
    }
    a
}

/// Each answer: when it came (since the start), its status, and the
/// adaptive rate then (0 without one).
type Log = Vec<(Duration, u16, f64)>;

/// Sends through `pace` to `url` from [`TASKS`] tasks for `run`: every
/// answer, sorted.
async fn send(
    pace: Pace<AsyncLimiter>,
    adaptive: Option<Adaptive<AsyncLimiter>>,
    url: String,
    run: Duration,
) -> Log {
    let client = ClientBuilder::new(
        reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap(),
    )
    .with(pace)
    .build();
    let log: Arc<Mutex<Log>> = Arc::default();
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (client, url, log) = (client.clone(), url.clone(), Arc::clone(&log));
            let adaptive = adaptive.clone();
            tokio::spawn(async move {
                while start.elapsed() < run {
                    let left = run.saturating_sub(start.elapsed());
                    let Ok(answer) = tokio::time::timeout(left, client.get(&url).send()).await
                    else {
                        break;
                    };
                    let status = answer.expect("nginx answers").status().as_u16();
                    let rate = adaptive.as_ref().map_or(0.0, |a| a.stats().rate);
                    log.lock().unwrap().push((start.elapsed(), status, rate));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let mut log = log.lock().unwrap().clone();
    log.sort_by_key(|&(t, _, _)| t);
    log
}

/// The first request served such that the second before it held `share`
/// of nginx's rate in served requests.
fn served_share(log: &Log, share: f64) -> Option<Duration> {
    let served: Vec<Duration> = log
        .iter()
        .filter(|(_, s, _)| *s == 200)
        .map(|(t, _, _)| *t)
        .collect();
    let need = (share * f64::from(LIMIT)).ceil() as usize;
    served.iter().enumerate().find_map(|(i, &t)| {
        let from = t.checked_sub(Duration::from_secs(1))?;
        let in_second = served[..=i].iter().filter(|&&u| u > from).count();
        (in_second >= need).then_some(t)
    })
}

/// The first answer after which the adaptive rate stays within 10 % of
/// nginx's.
fn converged(log: &Log) -> Option<Duration> {
    let near = |rate: f64| (rate - f64::from(LIMIT)).abs() <= 0.1 * f64::from(LIMIT);
    let last_far = log.iter().rposition(|&(_, _, rate)| !near(rate));
    match last_far {
        None => log.first().map(|&(t, _, _)| t),
        Some(i) => log.get(i + 1).map(|&(t, _, _)| t),
    }
}

/// Served and refused after `at`, and the served rate as a share of
/// nginx's over the rest of the run.
fn after(log: &Log, at: Duration, run: Duration) -> (usize, usize, f64) {
    let rest: Vec<_> = log.iter().filter(|(t, _, _)| *t > at).collect();
    let refused = rest.iter().filter(|(_, s, _)| *s == 429).count();
    let served = rest.len() - refused;
    let secs = run.saturating_sub(at).as_secs_f64().max(1e-9);
    (served, refused, served as f64 / secs / f64::from(LIMIT))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let run = Duration::from_secs_f64(a.secs);
    println!(
        "adaptive: nginx limit_req {LIMIT}r/s burst 2 nodelay; client from 200/s, floor 1/s, ceiling 1000/s, \
         increase 1/s per second, backoff 0.9; {TASKS} tasks; {:.0} s a run",
        a.secs
    );
    for n in 1..=a.runs {
        eprintln!("run {n} ...");
        let nginx = Nginx::start(LIMIT);
        let limiter = AsyncLimiter::builder(Rate::per_second(200))
            .slack(0)
            .wait(PRECISE)
            .build()
            .unwrap();
        let adaptive =
            Adaptive::new(limiter.clone(), Rate::per_second(1), Rate::per_second(1000)).unwrap();
        let pace = Pace::new(limiter).adapt(adaptive.clone());
        let log = send(pace, Some(adaptive.clone()), nginx.url(), run).await;
        let stats = adaptive.stats();
        let end = format!(
            "ended at {:.1}/s, {} increases, {} decreases",
            stats.rate, stats.increases, stats.decreases
        );
        let ninety = served_share(&log, 0.9)
            .map_or("never".to_string(), |t| format!("{:.2} s", t.as_secs_f64()));
        match converged(&log) {
            Some(at) => {
                let (served, refused, share) = after(&log, at, run);
                println!(
                    "run {n}: converged in {:.2} s (90 % served at {ninety}); after: {:.1} % of nginx's rate served, {:.2} % refused ({refused} of {}); {end}",
                    at.as_secs_f64(),
                    share * 100.0,
                    refused as f64 * 100.0 / (served + refused).max(1) as f64,
                    served + refused,
                );
            }
            None => println!("run {n}: never within 10 % of nginx's rate; {end}"),
        }
    }
    eprintln!("told the rate ...");
    let nginx = Nginx::start(LIMIT);
    let limiter = AsyncLimiter::builder(Rate::per_second(u64::from(LIMIT)))
        .slack(0)
        .wait(PRECISE)
        .build()
        .unwrap();
    let log = send(Pace::new(limiter), None, nginx.url(), run).await;
    let refused = log.iter().filter(|(_, s, _)| *s == 429).count();
    println!(
        "told {LIMIT}/s: {:.1} % of nginx's rate served, {refused} refused of {}",
        (log.len() - refused) as f64 / run.as_secs_f64() / f64::from(LIMIT) * 100.0,
        log.len()
    );
}
