//! `promtool check metrics`, Debian's `prometheus` package's linter of
//! Prometheus text: shared by the look inside's tests and the rate limit
//! service's (`server/tests/metrics.rs`) through `#[path]`.

use std::io::Write;
use std::process::{Command, Stdio};

/// `promtool check metrics` (Debian's `prometheus`: a missing one fails
/// the test, `scripts/test.sh` installs it) finds nothing wrong in `text`.
pub fn check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start `promtool` ({e}): apt-get install prometheus, or bash scripts/test.sh")
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {}{}\nin\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
