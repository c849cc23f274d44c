//! A child process's output as a channel of its lines, read by a thread of
//! its own, so that a test can wait for a line with a timeout: shared by
//! `tests/fleet.rs` and `cli/tests/limits.rs`.

use std::io::{BufRead, BufReader, Read};
use std::sync::mpsc::{self, Receiver};
use std::thread;

/// The lines of `out` as they come; the channel closes at its end (or at
/// the first line that is not UTF-8).
pub fn lines(out: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
