//! A throwaway far side that announces its budget: FastAPI with slowapi
//! (`X-RateLimit-Limit`, `-Remaining`, `-Reset` and `Retry-After` on every
//! answer), served by uvicorn on a free loopback port from its own
//! temporary directory, killed by pid when dropped. Shared by
//! `tests/far_side.rs` and `benches/examples/far_side.rs` through `#[path]`.
//!
//! Its Python comes from a venv under the target directory, made by
//! `scripts/far_side_venv.sh` (pinned fastapi, slowapi, limits, uvicorn
//! from PyPI) when it is missing. A venv that cannot be made is a loud
//! failure, never a skip.
//!
//! Routes: `/` limited to 100 a second (the budget tests), `/once` (GET)
//! and `/once-post` (POST) to 1 a second each (the retry tests), and
//! `/hits?key=GET%20/once` (unlimited): how many requests reached a route,
//! refused ones included.

#![allow(dead_code)] // each user needs a different part

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long uvicorn may take to answer after it is started (Python's
/// imports take a second or two on a loaded machine).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The limit `/` announces, per second.
pub const ANNOUNCED_PER_SECOND: u64 = 100;

const APP: &str = r#"
import collections

from fastapi import FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

limiter = Limiter(key_func=get_remote_address, headers_enabled=True)
app = FastAPI()
app.state.limiter = limiter
app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
hits = collections.Counter()


@app.middleware("http")
async def count(request: Request, call_next):
    hits[request.method + " " + request.url.path] += 1
    return await call_next(request)


@app.get("/")
@limiter.limit("100/second")
async def root(request: Request, response: Response):
    return {"ok": True}


@app.get("/once")
@limiter.limit("1/second")
async def once(request: Request, response: Response):
    return {"ok": True}


@app.post("/once-post")
@limiter.limit("1/second")
async def once_post(request: Request, response: Response):
    await request.body()
    return {"ok": True}


@app.get("/hits", response_class=PlainTextResponse)
async def get_hits(key: str):
    return str(hits[key])
"#;

pub struct SlowapiServer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl SlowapiServer {
    /// Starts uvicorn in a fresh temporary directory and waits until it
    /// answers.
    pub fn start() -> SlowapiServer {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let python = venv().join("bin/python");
        let dir = std::env::temp_dir().join(format!(
            "paceline-far-side-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temporary directory for the far side");
        std::fs::write(dir.join("far_side.py"), APP).expect("write the far side's app");
        let port = free_port();
        let child = Command::new(&python)
            .args(["-m", "uvicorn", "far_side:app", "--host", "127.0.0.1"])
            .args(["--port", &port.to_string()])
            .args(["--no-access-log", "--log-level", "warning"])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start uvicorn from {}: {e}", python.display()));
        let mut server = SlowapiServer { child, dir, port };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if server.get("/hits?key=none").is_some() {
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("uvicorn exited at start: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "uvicorn did not answer within {START_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `http://127.0.0.1:port{path}`
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// How many requests reached `method path`, refused ones included.
    pub fn hits(&self, method: &str, path: &str) -> u64 {
        let body = self
            .get(&format!("/hits?key={method}%20{path}"))
            .expect("the far side answers /hits");
        body.trim()
            .parse()
            .unwrap_or_else(|_| panic!("/hits answered {body:?}"))
    }

    /// The body of a 200 to `GET path` over a plain HTTP/1.0 socket, or
    /// `None` (not answering yet, or not 200). Bounded: 2 s.
    fn get(&self, path: &str) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        let (head, body) = answer.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
    }
}

impl Drop for SlowapiServer {
    fn drop(&mut self) {
        // By pid (SIGKILL), then reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The venv: `$PACELINE_FAR_SIDE_VENV`, else `far-side-venv` in the
/// target directory this program was built in; made (once per process)
/// by `scripts/far_side_venv.sh` if it does not import all it needs.
pub fn venv() -> PathBuf {
    static MADE: OnceLock<Mutex<Option<PathBuf>>> = OnceLock::new();
    let mut made = MADE.get_or_init(Mutex::default).lock().unwrap();
    if let Some(dir) = &*made {
        return dir.clone();
    }
    let dir = std::env::var_os("PACELINE_FAR_SIDE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("far-side-venv"));
    let script = repository().join("scripts/far_side_venv.sh");
    let status = Command::new("bash")
        .arg(&script)
        .arg(&dir)
        .stdin(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        status.success(),
        "{} {} failed ({status}): the far side's tests need python3 with venv and pip, \
         and PyPI (Debian: apt-get install python3-venv)",
        script.display(),
        dir.display()
    );
    *made = Some(dir.clone());
    dir
}

/// Whether the venv is there already (without making it).
pub fn venv_ready() -> bool {
    let dir = std::env::var_os("PACELINE_FAR_SIDE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("far-side-venv"));
    Command::new(dir.join("bin/python"))
        .args(["-c", "import fastapi, slowapi, uvicorn"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The target directory: this program is `<target>/<profile>/deps/…` (a
/// test) or `<target>/<profile>/examples/…` (an example).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("this program's path");
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .expect("a program under the target directory")
}

/// The repository's root: the first ancestor of the crate being built
/// that holds `scripts/far_side_venv.sh`.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("scripts/far_side_venv.sh").is_file())
        .map(Path::to_path_buf)
        .expect("scripts/far_side_venv.sh above this crate")
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("find a free loopback port")
}
