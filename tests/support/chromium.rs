//! Debian's headless `chromium`, run by a test against a page on loopback:
//! a fresh profile in its own temporary directory, no network but the page
//! (the background-networking flags, else it floods refused connections on
//! a closed network), killed by its pid if it outlives its time.
//!
//! A missing `chromium` is a loud failure, never a skip: these tests exist
//! to run the page's script in a real browser. `scripts/test.sh` installs it.

#![allow(dead_code)] // each user needs a different part

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one browser run may take: a cold start on a loaded 2-core
/// machine takes a few seconds; far more is a hang.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// One browser at a time per test binary: each is heavy for a 2-core box.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The browser's binary.
const BINARY: &str = "chromium";

/// A temporary directory, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "paceline-{what}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temporary directory");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs headless chromium with `args` then `url`, and returns its stdout.
/// Panics (naming the cure) if chromium is missing, fails, or hangs.
pub fn run(args: &[&str], url: &str) -> String {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let profile = TempDir::new("chromium");
    let mut child = match Command::new(BINARY)
        .args([
            "--headless",
            "--no-sandbox", // as root (CI), chromium refuses to start without it
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--mute-audio",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .current_dir(profile.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => panic!(
            "cannot start `{BINARY}` ({e}): the page's tests need Debian's chromium on PATH. \
             Run `bash scripts/test.sh` (it installs chromium, as root, when missing) or \
             `apt-get install chromium`."
        ),
    };
    // Read both pipes on threads, so a chatty browser never blocks on a full pipe.
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            break status;
        }
        if Instant::now() > deadline {
            // Kill the browser we started, by its pid, and its children
            // with it when they share the group (they die with their parent
            // once it is gone in any case: chromium's zygote watches it).
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {RUN_TIMEOUT:?} on {url}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    assert!(
        status.success(),
        "chromium failed ({status}) on {url}; its stderr:\n{err}"
    );
    out
}

/// The DOM of `url` after its scripts ran (`--dump-dom`).
pub fn dump_dom(url: &str) -> String {
    run(&["--dump-dom"], url)
}

/// A screenshot of `url` at `width` x `height`, as PNG bytes.
pub fn screenshot(url: &str, width: u32, height: u32) -> Vec<u8> {
    let dir = TempDir::new("screenshot");
    let file = dir.path().join("page.png");
    run(
        &[
            &format!("--screenshot={}", file.display()),
            &format!("--window-size={width},{height}"),
            "--hide-scrollbars",
        ],
        url,
    );
    std::fs::read(&file).unwrap_or_else(|e| panic!("chromium wrote no screenshot ({e})"))
}

/// A PNG's width and height, from its header; panics if it is no PNG.
pub fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(
        png.len() > 24 && png.starts_with(b"\x89PNG\r\n\x1a\n") && &png[12..16] == b"IHDR",
        "not a PNG"
    );
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&png[16..20]), be(&png[20..24]))
}
