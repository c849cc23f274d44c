//! The real `paceline-server` binary, started by a test in a temporary
//! directory of its own on loopback ports the system picks, called by
//! tonic's RLS client from envoy-types (generated, not written here) and
//! by plain HTTP/1.1, and stopped by its pid (SIGTERM, then a kill if it
//! lingers).

#![allow(dead_code)] // each test binary uses its own part

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{rate_limit::Unit, Code};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

/// A running server.
pub struct Server {
    child: Option<Child>,
    /// Its configuration directory.
    pub dir: PathBuf,
    /// Where it listens.
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub debug: SocketAddr,
    pub prometheus: Option<SocketAddr>,
    /// Its stderr's lines after the ports, as they come.
    pub log: mpsc::Receiver<String>,
    /// Its stderr's lines before the last port opened.
    pub early: Vec<String>,
}

/// A fresh temporary directory.
pub fn temp_dir(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "paceline-server-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Server {
    /// Starts the server on `files` (name, YAML) with the environment
    /// `env`, and waits until its ports are open (at most 20 s).
    pub fn start(files: &[(&str, &str)], env: &[(&str, &str)]) -> Server {
        let dir = temp_dir("config");
        for (name, yaml) in files {
            std::fs::write(dir.join(name), yaml).unwrap();
        }
        Server::start_in(dir, env)
    }

    /// Starts the server on the directory `dir`.
    pub fn start_in(dir: PathBuf, env: &[(&str, &str)]) -> Server {
        Server::start_in_after(dir, env, Duration::ZERO, || {}).0
    }

    /// Starts the server on the directory `dir`, gathers its stderr's lines
    /// for `quiet`, then calls `then` and waits for its ports: the server
    /// and the lines gathered.
    pub fn start_in_after(
        dir: PathBuf,
        env: &[(&str, &str)],
        quiet: Duration,
        then: impl FnOnce(),
    ) -> (Server, Vec<String>) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_paceline-server"));
        cmd.arg("--config")
            .arg(&dir)
            .env_clear()
            .env("HOST", "127.0.0.1")
            .env("PORT", "0")
            .env("GRPC_HOST", "127.0.0.1")
            .env("GRPC_PORT", "0")
            .env("DEBUG_HOST", "127.0.0.1")
            .env("DEBUG_PORT", "0")
            .env("PACELINE_RELOAD_MS", "50")
            .env("LOG_LEVEL", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start paceline-server");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let wants_prometheus = env
            .iter()
            .any(|(k, v)| *k == "USE_PROMETHEUS" && *v == "true");
        let mut gathered = Vec::new();
        let quiet_until = Instant::now() + quiet;
        while let Some(left) = quiet_until.checked_duration_since(Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(line) => gathered.push(line),
                Err(_) => break,
            }
        }
        then();
        let mut pending = gathered.clone().into_iter();
        let deadline = Instant::now() + Duration::from_secs(20);
        let (mut grpc, mut http, mut debug, mut prometheus) = (None, None, None, None);
        let mut early = Vec::new();
        while grpc.is_none()
            || http.is_none()
            || debug.is_none()
            || (wants_prometheus && prometheus.is_none())
        {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match pending.next().map_or_else(|| rx.recv_timeout(left), Ok) {
                Ok(line) => line,
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("paceline-server did not open its ports within 20 s");
                }
            };
            let addr = || -> SocketAddr { line.rsplit(" on ").next().unwrap().parse().unwrap() };
            if line.starts_with("paceline-server: GRPC_HOST") {
                grpc = Some(addr());
            } else if line.starts_with("paceline-server: HOST") {
                http = Some(addr());
            } else if line.starts_with("paceline-server: DEBUG_HOST") {
                debug = Some(addr());
            } else if line.starts_with("paceline-server: PROMETHEUS_ADDR") {
                prometheus = Some(addr());
            }
            early.push(line);
        }
        let server = Server {
            child: Some(child),
            dir,
            grpc: grpc.unwrap(),
            http: http.unwrap(),
            debug: debug.unwrap(),
            prometheus,
            log: rx,
            early,
        };
        (server, gathered)
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Sends SIGTERM and waits (at most 10 s) for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("paceline-server did not stop within 10 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A client of its RLS.
    pub async fn client(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .expect("connect to the RLS")
    }

    /// `ShouldRateLimit`.
    pub async fn ask(&self, request: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.client()
            .await
            .should_rate_limit(request)
            .await
            .map(tonic::Response::into_inner)
    }

    /// Waits (at most 10 s) for a log line containing `text`.
    pub fn wait_for_log(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) if line.contains(text) => return line,
                Ok(_) => {}
                Err(_) => panic!("no log line with {text:?} within 10 s"),
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One HTTP/1.1 request; the status and the body.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

/// A descriptor of `(key, value)` entries.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A request on `domain` of `descriptors`.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

/// Writes `yaml` to `dir/name` atomically (a temporary file, a rename).
pub fn write_config(dir: &Path, name: &str, yaml: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, yaml).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// 5 a day for each user of domain `mig`: the store tests' limit.
pub const PER_DAY: &str = "\
domain: mig
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 5
";

/// Today's window start, as envoyproxy/ratelimit puts it in a day's key.
pub fn today() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    now / 86_400 * 86_400
}

/// One server on `files` for each fail policy in `policies`, each with
/// `env`, that policy and a store timeout of 300 ms: the policy and its
/// server.
pub fn one_per_policy<'p>(
    policies: &[&'p str],
    files: &[(&str, &str)],
    env: &[(&str, &str)],
) -> Vec<(&'p str, Server)> {
    policies
        .iter()
        .map(|policy| {
            let mut env = env.to_vec();
            env.push(("PACELINE_FAIL_POLICY", policy));
            env.push(("PACELINE_STORE_TIMEOUT_MS", "300"));
            (*policy, Server::start(files, &env))
        })
        .collect()
}

/// A client of the RLS, kept for many calls.
pub type Client = RateLimitServiceClient<tonic::transport::Channel>;

/// `ShouldRateLimit` on `client`, which must answer.
pub async fn call(client: &mut Client, request: RateLimitRequest) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit answers")
        .into_inner()
}

/// `Code::Ok`, as the messages carry it.
pub const OK: i32 = Code::Ok as i32;
/// `Code::OverLimit`, as the messages carry it.
pub const OVER: i32 = Code::OverLimit as i32;
/// The units' numbers, as the messages carry them.
pub const SECOND: i32 = Unit::Second as i32;
pub const MINUTE: i32 = Unit::Minute as i32;
pub const HOUR: i32 = Unit::Hour as i32;
pub const DAY: i32 = Unit::Day as i32;

/// One status in brief: its code, its current limit (requests per unit,
/// unit), its limit remaining.
pub type Brief = (i32, Option<(u32, i32)>, u32);

/// An answer in brief: the overall code and each status's [`Brief`].
pub fn brief(answer: &RateLimitResponse) -> (i32, Vec<Brief>) {
    let statuses = answer
        .statuses
        .iter()
        .map(|s| {
            (
                s.code,
                s.current_limit
                    .as_ref()
                    .map(|l| (l.requests_per_unit, l.unit)),
                s.limit_remaining,
            )
        })
        .collect();
    (answer.overall_code, statuses)
}

/// The Unix time, in seconds and a fraction.
fn unix_now() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
}

/// Runs `f` inside one fixed window of `seconds` (the server's windows
/// start at multiples of the unit from the Unix epoch, on the same clock),
/// so that counts the test expects are not cut by a window's end: a
/// one-second window is entered at its start, a longer one too when less
/// than 2 s of it are left. A run that still crossed an end is run again
/// at the start of the next window, at most 5 times; a window longer than
/// a minute is not waited for a second time.
pub async fn in_one_window<T, F, Fut>(seconds: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let window = Duration::from_secs(seconds);
    let index = || unix_now().as_secs() / seconds;
    for attempt in 0..5 {
        let now = unix_now();
        let into = Duration::from_nanos((now.as_nanos() % window.as_nanos()) as u64);
        let left = window - into;
        if seconds == 1 || left < Duration::from_secs(2) || attempt > 0 {
            assert!(
                attempt == 0 || seconds <= 60,
                "a run crossed the end of a {seconds} s window"
            );
            tokio::time::sleep(left + Duration::from_millis(5)).await;
        }
        let start = index();
        let out = f().await;
        if index() == start {
            return out;
        }
    }
    panic!("5 runs in a row crossed the end of a {seconds} s window");
}

/// The debug port's `/stats`: each statsd name and its value.
pub fn stats(server: &Server) -> std::collections::BTreeMap<String, u64> {
    let (status, text) = http(server.debug, "GET", "/stats", "");
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter_map(|l| l.rsplit_once(": "))
        .map(|(k, v)| (k.to_owned(), v.trim().parse().unwrap()))
        .collect()
}

/// `n` calls of `request()` on `client`, each answer in brief.
pub async fn repeat(
    client: &mut Client,
    n: usize,
    request: impl Fn() -> RateLimitRequest,
) -> Vec<(i32, Vec<Brief>)> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(brief(&call(client, request()).await));
    }
    out
}

/// The answers to a lone descriptor's first `n` hits in a fresh window of
/// `limit` per `unit`: OK, counting down from `limit - 1`.
pub fn counting_down(limit: u32, unit: i32, n: u32) -> Vec<(i32, Vec<Brief>)> {
    (1..=n)
        .map(|i| (OK, vec![(OK, Some((limit, unit)), limit - i)]))
        .collect()
}

/// The answer to a lone descriptor over `limit` per `unit`.
pub fn over(limit: u32, unit: i32) -> (i32, Vec<Brief>) {
    (OVER, vec![(OVER, Some((limit, unit)), 0)])
}
