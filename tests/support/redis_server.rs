//! A throwaway `redis-server` for tests and benchmarks: its own temporary
//! directory, listening on a unix socket there (and, if asked, on a loopback
//! port), no persistence, killed when dropped. Shared by `tests/redis.rs`,
//! the unit tests in `src/remote/redis/` and `benches/redis.rs` through `#[path]`.
//!
//! A missing `redis-server` is a loud failure, never a skip: the `redis`
//! feature's tests exist to run against a real server.

#![allow(dead_code)] // each user needs a different part

// Each harness is included on its own by many crates, some of them both
// (so this file is loaded twice there, as two modules).
#[allow(clippy::duplicate_mod)]
#[path = "process.rs"]
mod process;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(10);

pub struct RedisServer {
    child: Option<Child>,
    dir: PathBuf,
    socket: PathBuf,
    port: Option<u16>,
    extra: Vec<String>,
}

impl RedisServer {
    /// A server on a unix socket in a fresh temporary directory.
    pub fn start() -> RedisServer {
        Self::start_with(None, &[])
    }

    /// A server that also listens on 127.0.0.1:`port` (0: a free one), with
    /// extra command-line arguments.
    pub fn start_with(port: Option<u16>, extra: &[&str]) -> RedisServer {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "paceline-redis-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temporary directory for redis-server");
        let port = port.map(|p| if p == 0 { free_port() } else { p });
        let mut server = RedisServer {
            child: None,
            socket: dir.join("redis.sock"),
            dir,
            port,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        server.restart();
        server
    }

    /// `unix:///…/redis.sock`
    pub fn url(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// `redis://127.0.0.1:port/` (only for a server started with a port).
    pub fn tcp_url(&self) -> String {
        format!(
            "redis://127.0.0.1:{}/",
            self.port.expect("server has a port")
        )
    }

    pub fn port(&self) -> Option<u16> {
        self.port
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    /// Starts the server (again, on the same socket and port) and waits until
    /// it answers.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "server already running");
        let _ = std::fs::remove_file(&self.socket);
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port")
            .arg(self.port.unwrap_or(0).to_string())
            .args(["--bind", "127.0.0.1"])
            .arg("--unixsocket")
            .arg(&self.socket)
            .args([
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--daemonize", "no", "--loglevel", "warning"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => panic!(
                "cannot start `redis-server` ({e}): the `redis` feature's tests need it on \
                 PATH (Debian/Ubuntu: apt-get install redis-server)"
            ),
        };
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if self.ping() {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("redis-server exited at start: {status}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("redis-server did not answer within {START_TIMEOUT:?}");
    }

    /// Kills the server (SIGKILL: no goodbye to clients) and reaps it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, replies stop.
    pub fn pause(&self) {
        process::stop(self.pid());
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        process::signal(self.pid(), "-CONT");
    }

    /// Sends one raw command over the socket and returns the raw reply.
    pub fn raw(&self, command: &str) -> String {
        let mut s = UnixStream::connect(&self.socket).expect("connect to redis-server");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(format!("{command}\r\n").as_bytes()).unwrap();
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    fn ping(&self) -> bool {
        let Ok(mut s) = UnixStream::connect(&self.socket) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        if s.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 16];
        matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A paused server does not die of SIGKILL before it is resumed on
            // every kernel; resume first to be sure.
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(child.id().to_string())
                .status();
        }
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("find a free loopback port")
}

/// A Redis Cluster of three primaries (no replicas) on free loopback ports,
/// made with `redis-cli --cluster create`; its nodes die with it.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_with(
                    Some(0),
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "2000",
                    ],
                )
            })
            .collect();
        let mut cmd = Command::new("redis-cli");
        cmd.args(["--cluster", "create"]);
        for n in &nodes {
            cmd.arg(format!("127.0.0.1:{}", n.port().unwrap()));
        }
        let out = cmd
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run `redis-cli` ({e}): it comes with redis-server (apt-get install redis-server)")
            });
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = Instant::now() + START_TIMEOUT;
        while !nodes
            .iter()
            .all(|n| n.raw("CLUSTER INFO").contains("cluster_state:ok"))
        {
            assert!(
                Instant::now() < deadline,
                "cluster not ok within {START_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        RedisCluster { nodes }
    }

    /// `redis://127.0.0.1:port/` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::tcp_url).collect()
    }
}
