//! A throwaway `memcached` for tests and benchmarks: its own temporary
//! directory, listening on a unix socket there, or on a loopback port if
//! asked, with the memory (`-m`, in MB) asked for, killed by its pid when
//! dropped. Shared by the `memcached` tests, the unit tests in
//! `src/remote/memcached/` and `benches/memcached.rs` through `#[path]`.
//!
//! A missing `memcached` is a loud failure, never a skip: the `memcached`
//! feature's tests exist to run against a real server.

#![allow(dead_code)] // each user needs a different part

// Each harness is included on its own by many crates, some of them both
// (so this file is loaded twice there, as two modules).
#[allow(clippy::duplicate_mod)]
#[path = "process.rs"]
mod process;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(10);

pub struct MemcachedServer {
    child: Option<Child>,
    dir: PathBuf,
    socket: PathBuf,
    port: Option<u16>,
    memory_mb: u32,
}

impl MemcachedServer {
    /// A server on a unix socket in a fresh temporary directory, 64 MB.
    pub fn start() -> MemcachedServer {
        Self::start_with(None, 64)
    }

    /// A server on 127.0.0.1:`port` (0: a free one) instead of a unix
    /// socket, or on a unix socket (`None`), with `memory_mb` of memory.
    pub fn start_with(port: Option<u16>, memory_mb: u32) -> MemcachedServer {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "paceline-memcached-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temporary directory for memcached");
        let port = port.map(|p| if p == 0 { free_port() } else { p });
        let mut server = MemcachedServer {
            child: None,
            socket: dir.join("memcached.sock"),
            dir,
            port,
            memory_mb,
        };
        server.restart();
        server
    }

    /// The address a limiter is built with: `unix:/…/memcached.sock`, or
    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        match self.port {
            Some(port) => format!("127.0.0.1:{port}"),
            None => format!("unix:{}", self.socket.display()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    /// Starts the server (again, on the same socket or port, empty) and
    /// waits until it answers.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "server already running");
        let _ = std::fs::remove_file(&self.socket);
        let mut cmd = Command::new("memcached");
        // `-u` only matters as root, which memcached refuses to run as
        // without it.
        cmd.args(["-u", "root", "-U", "0", "-t", "2", "-c", "256"])
            .arg("-m")
            .arg(self.memory_mb.to_string());
        match self.port {
            Some(port) => cmd.args(["-l", "127.0.0.1", "-p", &port.to_string()]),
            None => cmd.arg("-s").arg(&self.socket).args(["-a", "0700"]),
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => panic!(
                "cannot start `memcached` ({e}): the `memcached` feature's tests need it on \
                 PATH (Debian/Ubuntu: apt-get install memcached)"
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
                panic!("memcached exited at start: {status}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("memcached did not answer within {START_TIMEOUT:?}");
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

    fn connect(&self) -> Box<dyn ReadWrite> {
        match self.port {
            Some(port) => {
                let s = std::net::TcpStream::connect(("127.0.0.1", port))
                    .expect("connect to memcached");
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                Box::new(s)
            }
            None => {
                let s = UnixStream::connect(&self.socket).expect("connect to memcached");
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                Box::new(s)
            }
        }
    }

    /// Sends raw protocol text (commands, each ending in `\r\n`) and reads
    /// until the reply ends with `until`.
    pub fn raw_until(&self, commands: &str, until: &str) -> String {
        let mut s = self.connect();
        s.write_all(commands.as_bytes()).unwrap();
        read_until(&mut s, until.as_bytes())
    }

    /// One meta command (`mg …`, `ms …\r\nvalue`, `md …`) and its reply: a
    /// no-op (`mn`) after it marks the end.
    pub fn meta(&self, command: &str) -> String {
        let reply = self.raw_until(&format!("{command}\r\nmn\r\n"), "MN\r\n");
        reply.strip_suffix("MN\r\n").unwrap().to_owned()
    }

    /// `stats` (or `stats <group>`), as a map.
    pub fn stats(&self, group: &str) -> HashMap<String, String> {
        let cmd = if group.is_empty() {
            "stats\r\n".to_owned()
        } else {
            format!("stats {group}\r\n")
        };
        self.raw_until(&cmd, "END\r\n")
            .lines()
            .filter_map(|l| l.strip_prefix("STAT "))
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// Stores `n` items of `size` bytes that never expire (`fill:<i>`),
    /// pipelined without replies: memory pressure.
    ///
    /// Sent in batches of about 64 KB, each ended by a no-op whose echo is
    /// read before the next: a store that fails answers even in quiet
    /// mode, and a flood of such answers left unread fills the socket, so
    /// that memcached stops reading and a filler that only writes waits
    /// for ever.
    pub fn fill(&self, n: usize, size: usize) {
        let mut s = self.connect();
        let value = "x".repeat(size);
        let mut batch = String::new();
        for i in 0..n {
            batch.push_str(&format!("ms fill:{i} {size} T0 q\r\n{value}\r\n"));
            if batch.len() > 64 * 1024 || i + 1 == n {
                batch.push_str("mn\r\n");
                s.write_all(batch.as_bytes()).unwrap();
                batch.clear();
                let reply = read_until(&mut s, b"MN\r\n");
                // Under a tiny `-m`, memcached answers a store it cannot
                // make room for at once (its LRU tail busy under a
                // pipelined flood) with this, and the next stores evict as
                // usual: the callers check the evictions themselves. Any
                // other answer is a broken filler.
                let failed: Vec<&str> = reply
                    .lines()
                    .filter(|l| *l != "MN" && *l != "SERVER_ERROR out of memory storing object")
                    .collect();
                assert!(failed.is_empty(), "a filler store failed: {failed:?}");
            }
        }
    }

    fn ping(&self) -> bool {
        let s: Option<Box<dyn ReadWrite>> = match self.port {
            Some(port) => std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(|s| Box::new(s) as Box<dyn ReadWrite>),
            None => UnixStream::connect(&self.socket)
                .ok()
                .map(|s| Box::new(s) as Box<dyn ReadWrite>),
        };
        let Some(mut s) = s else {
            return false;
        };
        if s.write_all(b"mn\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 8];
        matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"MN"))
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn read_until(s: &mut Box<dyn ReadWrite>, until: &[u8]) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    while !out.ends_with(until) {
        let n = s.read(&mut buf).expect("read from memcached");
        assert!(n > 0, "memcached closed: {}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Drop for MemcachedServer {
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
