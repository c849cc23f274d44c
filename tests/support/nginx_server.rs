//! A throwaway nginx for tests and benchmarks: its own temporary directory
//! (configuration, pid file, error log, the one file it serves), one
//! process (`master_process off`) on a free loopback port, started with
//! `-p` and its own configuration, stopped by its pid when dropped.
//! Shared by `tests/adaptive.rs` and `benches/examples/adaptive.rs`
//! through `#[path]`.
//!
//! Its one location, `/ok`, is limited by `limit_req` at the rate asked
//! for with a burst of 2 (`nodelay`), refusing with 429 past it: a far
//! side that keeps its limit to itself.
//!
//! A missing `nginx` is a loud failure, never a skip: the adaptive rate's
//! tests exist to run against the real thing.

#![allow(dead_code)] // each user needs a different part

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long nginx may take to answer after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Where Debian installs it, for a `PATH` without `/usr/sbin`.
const DEBIAN_NGINX: &str = "/usr/sbin/nginx";

pub struct Nginx {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
}

impl Nginx {
    /// nginx limiting `/ok` to `per_second` requests a second, burst 2,
    /// refusals 429.
    pub fn start(per_second: u32) -> Nginx {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "paceline-nginx-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("www")).expect("create a temporary directory for nginx");
        std::fs::write(dir.join("www/ok"), "ok\n").unwrap();
        let port = free_port();
        let d = dir.display();
        // `limit_req` runs in the preaccess phase, after `return` (rewrite):
        // the location serves a file so that the limit applies.
        let conf = format!(
            "daemon off;\n\
             master_process off;\n\
             worker_processes 1;\n\
             pid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n\
             \x20   access_log off;\n\
             \x20   client_body_temp_path {d}/body;\n\
             \x20   proxy_temp_path {d}/proxy;\n\
             \x20   fastcgi_temp_path {d}/fastcgi;\n\
             \x20   uwsgi_temp_path {d}/uwsgi;\n\
             \x20   scgi_temp_path {d}/scgi;\n\
             \x20   limit_req_zone $binary_remote_addr zone=z:1m rate={per_second}r/s;\n\
             \x20   server {{\n\
             \x20       listen 127.0.0.1:{port};\n\
             \x20       root {d}/www;\n\
             \x20       location = /ok {{\n\
             \x20           limit_req zone=z burst=2 nodelay;\n\
             \x20           limit_req_status 429;\n\
             \x20       }}\n\
             \x20   }}\n\
             }}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let program = if std::path::Path::new(DEBIAN_NGINX).exists() {
            DEBIAN_NGINX
        } else {
            "nginx"
        };
        let child = Command::new(program)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `nginx` ({e}): the adaptive rate's tests need it \
                     (Debian/Ubuntu: apt-get install nginx; scripts/test.sh installs it)"
                )
            });
        let mut nginx = Nginx {
            child: Some(child),
            dir,
            port,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if nginx.get_status("/ok").is_some() {
                break;
            }
            if let Some(status) = nginx
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let log = std::fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default();
                panic!("nginx exited at start: {status}\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not answer within {START_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // Let the readiness request's share of the limit drain.
        std::thread::sleep(Duration::from_millis(200));
        nginx
    }

    /// `http://127.0.0.1:port/ok`, the limited location.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/ok", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("nginx is running").id()
    }

    /// One GET over a fresh connection, its status; `None` if nothing
    /// answers.
    fn get_status(&self, path: &str) -> Option<u16> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        reply.split_whitespace().nth(1)?.parse().ok()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("find a free loopback port")
}
