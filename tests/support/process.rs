//! Signals to a test server's process, by pid: shared by the server
//! harnesses of `tests/support/` (each includes this file as a module).

use std::process::Command;
use std::time::{Duration, Instant};

/// Sends `sig` (`"-STOP"`, `"-CONT"`, ...) to `pid`.
pub fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid} failed");
}

/// Freezes `pid` (SIGSTOP) and returns once every thread of it is stopped:
/// a signal is delivered after `kill` returns, and a server thread still
/// running meanwhile could answer one more request.
pub fn stop(pid: u32) {
    signal(pid, "-STOP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !stopped(pid) {
        assert!(
            Instant::now() < deadline,
            "{pid} not stopped 5 s after SIGSTOP"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether every thread of `pid` is stopped (`T` in `/proc/pid/task/*/stat`).
fn stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command name, which is in parentheses
            // and may hold anything.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state == "T" || state == "t")
        })
    })
}
