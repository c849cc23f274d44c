//! `ShouldRateLimit` under load: the `paceline-server` binary (built first:
//! `cargo build --release -p paceline-server`) started here on loopback,
//! in process or on a `redis-server` started here too, and called by tonic's
//! RLS client from envoy-types over one HTTP/2 connection per 16 streams,
//! each stream a task sending one request after another. For 1, 16 and 256
//! streams: requests per second and the latency's p50 / p99 / p99.9 as
//! each task measures it (from the send to the answer). The client and the
//! server share the machine's cores: on 2 cores the figures are the pair's.
//! Each runs one tokio worker thread (the server through
//! `TOKIO_WORKER_THREADS=1`), so that on 2 cores each has one.
//!
//! ```text
//! cargo run --release -p paceline-benches --features rls --example rls_load [-- --secs 3 --redis]
//! ```
//!
//! Each request carries one descriptor, `(user, u<n>)` with n over 10 000
//! users, under a limit of 10^9 a second: every request is counted and
//! admitted (a refusal would cost the same).
//!
//! With `--redis`, a second table: every request on one hot descriptor,
//! counted one `INCRBY` a request, then in leased batches (`leased: true`),
//! with the `INCRBY`s per 1000 requests and the Redis server's CPU per
//! request (its `used_cpu_user` + `used_cpu_sys`), and what that CPU makes
//! of one Redis core: the requests per second one core would carry for
//! that descriptor.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::transport::Channel;

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;

const CONFIG: &str = "\
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
  - key: hot
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
  - key: leased
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
      leased: true
";

/// A server started here, killed when dropped.
struct Server {
    child: Child,
    dir: PathBuf,
    grpc: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("PACELINE_SERVER") {
        return p.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    target.join("release/paceline-server")
}

fn start(env: &[(&str, String)]) -> Server {
    use std::io::BufRead;
    let dir = std::env::temp_dir().join(format!("rls-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bench.yaml"), CONFIG).unwrap();
    let bin = binary();
    let mut cmd = Command::new(&bin);
    cmd.arg("--config")
        .arg(&dir)
        .env_clear()
        .env("HOST", "127.0.0.1")
        .env("PORT", "0")
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", "0")
        .env("DEBUG_HOST", "127.0.0.1")
        .env("DEBUG_PORT", "0")
        // One worker thread, as the client has: on two cores the pair
        // then each have one, where four threads took turns on two.
        .env("TOKIO_WORKER_THREADS", "1")
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| {
        panic!(
            "cannot start {} ({e}): cargo build --release -p paceline-server first",
            bin.display()
        )
    });
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufReader::new(stderr).lines();
    let grpc = loop {
        let line = lines.next().expect("the server's ports").unwrap();
        if line.starts_with("paceline-server: GRPC_HOST") {
            break line.rsplit(" on ").next().unwrap().to_owned();
        }
    };
    // Keep reading its stderr so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Server { child, dir, grpc }
}

/// One run: `streams` tasks for `secs`; requests per second and the
/// latencies' p50, p99, p99.9 in µs.
async fn run(grpc: &str, streams: usize, secs: f64, hot: Option<&'static str>) -> (f64, [f64; 3]) {
    let per_connection = 16;
    let mut channels = Vec::new();
    for _ in 0..streams.div_ceil(per_connection) {
        let ch = Channel::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        channels.push(ch);
    }
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for s in 0..streams {
        let mut client = RateLimitServiceClient::new(channels[s / per_connection].clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut n = s as u64;
            while Instant::now() < until {
                n = (n * 7_919 + 1) % 10_000;
                let (key, value) = match hot {
                    Some(key) => (key.to_owned(), "one".to_owned()),
                    None => ("user".to_owned(), format!("u{n}")),
                };
                let request = RateLimitRequest {
                    domain: "bench".into(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry { key, value }],
                        ..Default::default()
                    }],
                    hits_addend: 0,
                };
                let sent = Instant::now();
                client.should_rate_limit(request).await.expect("an answer");
                lat.push(sent.elapsed().as_nanos() as u64);
            }
            lat
        }));
    }
    let started = Instant::now();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64().max(secs);
    all.sort_unstable();
    let q = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)] as f64 / 1e3;
    (all.len() as f64 / elapsed, [q(0.50), q(0.99), q(0.999)])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = args
        .iter()
        .position(|a| a == "--secs")
        .and_then(|i| args.get(i + 1))
        .map_or(3.0, |s| s.parse().expect("--secs: a number"));
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .map_or(3, |s| s.parse().expect("--runs: a whole number"));
    let with_redis = args.iter().any(|a| a == "--redis");
    let mut stores = vec![("in process", None)];
    let redis = with_redis.then(redis_server::RedisServer::start);
    if let Some(r) = &redis {
        stores.push((
            "redis",
            Some(r.url().trim_start_matches("unix://").to_owned()),
        ));
    }
    println!(
        "ShouldRateLimit, one descriptor, every request admitted; {runs} runs of {secs} s per row, median (min-max)"
    );
    println!("| store | streams | requests/s | p50 µs | p99 µs | p99.9 µs |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, socket) in stores {
        let env: Vec<(&str, String)> = match &socket {
            Some(path) => vec![
                ("BACKEND_TYPE", "redis".into()),
                ("REDIS_SOCKET_TYPE", "unix".into()),
                ("REDIS_URL", path.clone()),
            ],
            None => Vec::new(),
        };
        let server = start(&env);
        // A warm-up, not reported.
        run(&server.grpc, 16, secs.min(1.0), None).await;
        for streams in [1, 16, 256] {
            let mut cells: [Vec<f64>; 4] = Default::default();
            for _ in 0..runs.max(1) {
                let (rps, q) = run(&server.grpc, streams, secs, None).await;
                for (cell, v) in cells.iter_mut().zip([rps, q[0], q[1], q[2]]) {
                    cell.push(v);
                }
            }
            let shown: Vec<String> = cells
                .iter_mut()
                .map(|c| {
                    c.sort_by(f64::total_cmp);
                    format!("{:.0} ({:.0}-{:.0})", c[c.len() / 2], c[0], c[c.len() - 1])
                })
                .collect();
            println!("| {name} | {streams} | {} |", shown.join(" | "));
        }
    }
    if let Some(redis) = &redis {
        hot(redis, secs, runs).await;
    }
}

/// A number in `INFO`'s text (`name:value`).
fn info(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The INCRBY calls and the CPU seconds Redis has counted so far.
fn redis_counters(redis: &redis_server::RedisServer) -> (f64, f64) {
    let stats = redis.raw("INFO commandstats");
    let incrby = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_incrby:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0);
    let cpu = redis.raw("INFO cpu");
    (
        incrby,
        info(&cpu, "used_cpu_user") + info(&cpu, "used_cpu_sys"),
    )
}

/// One hot descriptor on Redis, unleased then leased.
async fn hot(redis: &redis_server::RedisServer, secs: f64, runs: usize) {
    let path = redis.url().trim_start_matches("unix://").to_owned();
    let env = vec![
        ("BACKEND_TYPE", "redis".to_owned()),
        ("REDIS_SOCKET_TYPE", "unix".to_owned()),
        ("REDIS_URL", path),
    ];
    let server = start(&env);
    println!();
    println!(
        "One hot descriptor on Redis; {runs} runs of {secs} s per row, median (min-max); one Redis core = 10^6 / (Redis CPU µs per request)"
    );
    println!("| counted | streams | requests/s | p50 µs | p99 µs | INCRBY per 1000 requests | Redis CPU µs per request | one Redis core, requests/s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (label, key) in [
        ("one INCRBY a request", "hot"),
        ("leased batches", "leased"),
    ] {
        run(&server.grpc, 16, secs.min(1.0), Some(key)).await;
        for streams in [16, 256] {
            let mut cells: [Vec<f64>; 6] = Default::default();
            for _ in 0..runs.max(1) {
                let (calls0, cpu0) = redis_counters(redis);
                let (rps, q) = run(&server.grpc, streams, secs, Some(key)).await;
                let (calls1, cpu1) = redis_counters(redis);
                let requests = rps * secs;
                let cpu_us = (cpu1 - cpu0) * 1e6 / requests;
                let values = [
                    rps,
                    q[0],
                    q[1],
                    (calls1 - calls0) * 1000.0 / requests,
                    cpu_us,
                    1e6 / cpu_us.max(1e-3),
                ];
                for (cell, v) in cells.iter_mut().zip(values) {
                    cell.push(v);
                }
            }
            let shown: Vec<String> = cells
                .iter_mut()
                .enumerate()
                .map(|(i, c)| {
                    c.sort_by(f64::total_cmp);
                    let (m, lo, hi) = (c[c.len() / 2], c[0], c[c.len() - 1]);
                    if i == 3 || i == 4 {
                        format!("{m:.2} ({lo:.2}-{hi:.2})")
                    } else {
                        format!("{m:.0} ({lo:.0}-{hi:.0})")
                    }
                })
                .collect();
            println!("| {label} | {streams} | {} |", shown.join(" | "));
        }
    }
}
