//! A throwaway PostgreSQL server for tests and benchmarks: `initdb` in a
//! fresh temporary directory, `postgres` listening on a unix socket there
//! (and, if asked, on a free loopback port), no durability (`fsync=off`), stopped by its pid when dropped.
//! Shared by `tests/postgres*.rs`, the unit tests in
//! `src/remote/postgres/` and `benches/postgres.rs` through `#[path]`.
//!
//! PostgreSQL refuses to run as root; as root (CI), the server runs as the
//! `postgres` system user the Debian package creates (or `nobody`), by
//! `Command::uid`/`gid`. A missing server is a loud failure, never a skip:
//! `scripts/test.sh` installs the `postgresql` package when it is missing.

#![allow(dead_code)] // each user needs a different part

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The port in the socket's name (`.s.PGSQL.<port>`): the socket lives in
/// the server's own directory, so every server can use the same one.
const PORT: u16 = 5499;

pub struct PgServer {
    child: Option<Child>,
    dir: PathBuf,
    bin: PathBuf,
    /// The user the server runs as, when the tests run as root.
    user: Option<(u32, u32)>,
    extra: Vec<String>,
    /// The port: [`PORT`] on the unix socket only, or a free loopback port
    /// the server listens on too.
    port: u16,
    tcp: bool,
}

/// The newest installed server's `bin` directory (Debian puts it in
/// `/usr/lib/postgresql/<major>/bin`, off PATH); else wherever `initdb` is on
/// PATH.
fn bin_dir() -> PathBuf {
    let mut best: Option<(u32, PathBuf)> = None;
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        for e in entries.flatten() {
            let bin = e.path().join("bin");
            let major = e.file_name().to_string_lossy().parse::<u32>().ok();
            if let (Some(major), true) = (major, bin.join("postgres").exists()) {
                if best.as_ref().is_none_or(|(m, _)| major > *m) {
                    best = Some((major, bin));
                }
            }
        }
    }
    if let Some((_, bin)) = best {
        return bin;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        if dir.join("initdb").exists() && dir.join("postgres").exists() {
            return dir;
        }
    }
    panic!(
        "no PostgreSQL server found (/usr/lib/postgresql/<N>/bin or initdb on PATH): the \
         `postgres` feature's tests need one (Debian/Ubuntu: apt-get install postgresql; \
         scripts/test.sh does it as root)"
    );
}

/// `(uid, gid)` of the first of `names` in /etc/passwd.
fn system_user(names: &[&str]) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    for name in names {
        for line in passwd.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() > 3 && f[0] == *name {
                return Some((f[2].parse().ok()?, f[3].parse().ok()?));
            }
        }
    }
    None
}

fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output();
    matches!(out, Ok(o) if String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl PgServer {
    /// A fresh cluster on a unix socket in a new temporary directory.
    pub fn start() -> PgServer {
        Self::start_with(&[])
    }

    /// As [`start`](Self::start), with extra `-c name=value` settings.
    pub fn start_with(extra: &[&str]) -> PgServer {
        Self::start_on(false, extra)
    }

    /// A server that also listens on 127.0.0.1 at a free port
    /// ([`tcp_addr`](Self::tcp_addr)): for a proxy in front of it.
    pub fn start_tcp() -> PgServer {
        Self::start_on(true, &[])
    }

    fn start_on(tcp: bool, extra: &[&str]) -> PgServer {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        // Short: a socket path holds ~107 bytes.
        let dir = PathBuf::from(format!(
            "/tmp/plpg-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temporary directory for postgres");
        let user = if is_root() {
            Some(
                system_user(&["postgres", "nobody"])
                    .expect("running as root, and no `postgres` or `nobody` user to run as"),
            )
        } else {
            None
        };
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown the server's dir");
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let server = PgServer {
            child: None,
            bin: bin_dir(),
            dir,
            user,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            port: if tcp { free_port() } else { PORT },
            tcp,
        };
        let out = server
            .command("initdb")
            .args(["-D"])
            .arg(server.data())
            .args([
                "-U",
                "paceline",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut server = server;
        server.restart();
        server
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        cmd.env("LC_ALL", "C");
        cmd
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A libpq-style connection string for user `paceline`, database
    /// `postgres`.
    pub fn conn(&self) -> String {
        format!(
            "host={} port={} user=paceline dbname=postgres",
            self.dir.display(),
            self.port
        )
    }

    /// The loopback address it listens on (a server from
    /// [`start_tcp`](Self::start_tcp) only).
    pub fn tcp_addr(&self) -> std::net::SocketAddr {
        assert!(self.tcp, "server listens on its unix socket only");
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    /// Starts the server (again, on the same directory) and waits until it
    /// accepts connections.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "server already running");
        let log = std::fs::File::create(self.dir.join("server.log")).unwrap();
        let mut cmd = self.command("postgres");
        cmd.arg("-D")
            .arg(self.data())
            .arg("-k")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string()])
            .args([
                "-c",
                if self.tcp {
                    "listen_addresses=127.0.0.1"
                } else {
                    "listen_addresses="
                },
            ])
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .args(["-c", "synchronous_commit=off", "-c", "max_connections=300"])
            .args(self.extra.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start postgres from {}: {e}", self.bin.display()));
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if self.ready() {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                panic!("postgres exited at start: {status}\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("postgres did not accept connections within {START_TIMEOUT:?}");
    }

    fn ready(&self) -> bool {
        Command::new(self.bin.join("pg_isready"))
            .arg("-h")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-U", "paceline", "-q"])
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Stops the server ("fast" shutdown, SIGINT: clients are told, open
    /// transactions roll back) and reaps it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            for c in children(child.id()) {
                self.signal_pid(c, "-CONT", false);
            }
            self.signal_pid(child.id(), "-CONT", false);
            self.signal_pid(child.id(), "-INT", false);
            let _ = child.wait();
        }
    }

    /// Freezes the whole server (SIGSTOP to the postmaster, then to each of
    /// its children: each backend is a process group of its own):
    /// connections stay open, replies stop.
    pub fn pause(&self) {
        let pid = self.pid();
        self.signal_pid(pid, "-STOP", false);
        for child in children(pid) {
            self.signal_pid(child, "-STOP", false);
        }
    }

    /// Thaws a paused server (SIGCONT to it and its children).
    pub fn resume(&self) {
        let pid = self.pid();
        for child in children(pid) {
            self.signal_pid(child, "-CONT", false);
        }
        self.signal_pid(pid, "-CONT", false);
    }

    fn signal_pid(&self, pid: u32, signal: &str, group: bool) {
        let target = if group {
            format!("-{pid}")
        } else {
            pid.to_string()
        };
        let _ = Command::new("kill")
            .args([signal, "--", &target])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Runs `sql` with psql; its output, unaligned, tuples only.
    pub fn psql(&self, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .arg("-h")
            .arg(&self.dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "paceline",
                "-d",
                "postgres",
            ])
            .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .stdin(Stdio::null())
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("find a free loopback port")
}

/// The pids whose parent is `pid` (from /proc).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(child) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces; split after ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
