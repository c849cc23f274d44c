//! What the user sees on stderr: live progress while stderr is a terminal
//! (count, achieved rate, ETA when the total is known; at most 5 redraws a
//! second, from a thread of its own so the work loops only bump counters),
//! and the one-line summary at the end.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::units::human_bytes;

/// How often progress is redrawn.
const REDRAW: Duration = Duration::from_millis(200);

/// What passed before the limit first held a request back is called a
/// burst when the limit did so within this time of the start (the
/// summary's hundredth of a second): it went at once.
const AT_ONCE: Duration = Duration::from_millis(10);

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Noun {
    /// Lines passed to stdout.
    Lines,
    /// Bytes passed to stdout.
    Bytes,
    /// Commands started.
    Commands,
}

/// The counters the work loop publishes (relaxed: each is read alone, for
/// display).
#[derive(Debug)]
pub struct Stats {
    /// Lines or bytes passed, or commands started.
    pub done: AtomicU64,
    /// Lines refused by `--drop`.
    pub dropped: AtomicU64,
    /// When the run started.
    pub start: Instant,
    /// When `done` was last published, in nanoseconds from `start`.
    last: AtomicU64,
    /// When the limit first held a request back, when the steady schedule
    /// after it began, and what had passed by then: the summary tells that
    /// first burst from the rate after it.
    held: OnceLock<(Duration, Duration, u64)>,
}

impl Stats {
    /// Zeroed counters, starting now.
    pub fn new() -> Stats {
        Stats {
            done: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            start: Instant::now(),
            last: AtomicU64::new(0),
            held: OnceLock::new(),
        }
    }

    /// Publishes the counts; a new `done` is stamped with the time.
    pub fn publish(&self, done: u64, dropped: u64) {
        self.dropped.store(dropped, Ordering::Relaxed);
        if self.done.swap(done, Ordering::Relaxed) != done {
            let now = self.start.elapsed().as_nanos();
            self.last
                .store(u64::try_from(now).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
    }

    /// Notes that the limit holds a request back (the first time counts):
    /// its last slot `due` from now, its first `paced - T` before that.
    pub fn held_back(&self, due: Duration, paced: Duration) {
        self.held.get_or_init(|| {
            let now = self.start.elapsed();
            let from = (now + due).saturating_sub(paced);
            (now, from, self.done.load(Ordering::Relaxed))
        });
    }
}

/// `1.5 MiB/s` or `12.34/s`.
fn rate(noun: Noun, per_second: f64) -> String {
    match noun {
        Noun::Bytes => format!("{}/s", human_bytes(per_second)),
        _ => format!("{per_second:.2}/s"),
    }
}

fn count(noun: Noun, n: u64) -> String {
    match noun {
        Noun::Lines => format!("{n} lines"),
        Noun::Bytes => format!("{n} bytes ({})", human_bytes(n as f64)),
        Noun::Commands => format!("{n} commands"),
    }
}

/// How fast it went: one rate, or, once the limit held a request back, the
/// burst before and the rate from then on (`a burst of 11, then 100.00/s`),
/// since the two as one figure read as if the limit were exceeded.
fn pace(stats: &Stats, noun: Noun, done: u64, secs: f64) -> String {
    let after = stats.held.get().filter(|(.., before)| done > *before);
    let Some(&(at, from, before)) = after else {
        return rate(noun, done as f64 / secs.max(1e-9));
    };
    let last = Duration::from_nanos(stats.last.load(Ordering::Relaxed));
    let span = last.saturating_sub(from).as_secs_f64().max(1e-9);
    let then = rate(noun, (done - before) as f64 / span);
    let first = match noun {
        Noun::Bytes => human_bytes(before as f64),
        _ => before.to_string(),
    };
    match before {
        0 => then,
        _ if at < AT_ONCE => format!("a burst of {first}, then {then}"),
        _ => format!("{first} in {:.2} s, then {then}", at.as_secs_f64()),
    }
}

/// `h:mm:ss` or `m:ss`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// The progress line for now.
fn progress_line(stats: &Stats, noun: Noun, total: Option<u64>, limit: Option<f64>) -> String {
    let done = stats.done.load(Ordering::Relaxed);
    let dropped = stats.dropped.load(Ordering::Relaxed);
    let secs = stats.start.elapsed().as_secs_f64().max(1e-9);
    let achieved = done as f64 / secs;
    let mut line = format!("{}, {}", count(noun, done), rate(noun, achieved));
    if dropped > 0 {
        line += &format!(", {dropped} dropped");
    }
    if let Some(total) = total {
        // The burst inflates the early achieved rate: never promise more
        // than the limit.
        let speed = limit.map_or(achieved, |l| achieved.min(l));
        let left = total.saturating_sub(done) as f64;
        if speed > 0.0 && left.is_finite() {
            let pct = 100.0 * done as f64 / total.max(1) as f64;
            line += &format!(
                ", {pct:.0}%, ETA {}",
                clock(Duration::from_secs_f64((left / speed).min(1e9)))
            );
        }
    }
    line
}

/// The live progress display, if stderr is a terminal and not `-q`.
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts redrawing (a no-op unless stderr is a terminal and `show`).
    pub fn start(
        show: bool,
        stats: Arc<Stats>,
        noun: Noun,
        total: Option<u64>,
        limit: Option<f64>,
    ) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = (show && std::io::stderr().is_terminal()).then(|| {
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let line = progress_line(&stats, noun, total, limit);
                    // "\r" then clear to the end of the line.
                    let _ = write!(std::io::stderr().lock(), "\rpaceline: {line}\x1b[K");
                    thread::sleep(REDRAW);
                }
                let _ = write!(std::io::stderr().lock(), "\r\x1b[K");
            })
        });
        Progress { stop, thread }
    }

    /// Stops redrawing and clears the line.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The summary line (without `paceline: ` and the newline).
pub fn summary(stats: &Stats, noun: Noun, extra: &str, stopped_by: Option<&str>) -> String {
    let done = stats.done.load(Ordering::Relaxed);
    let dropped = stats.dropped.load(Ordering::Relaxed);
    let secs = stats.start.elapsed().as_secs_f64();
    let mut line = format!(
        "{} in {secs:.2} s ({})",
        count(noun, done),
        pace(stats, noun, done, secs)
    );
    line += extra;
    if noun != Noun::Bytes {
        line += &format!(", {dropped} dropped");
    }
    if let Some(sig) = stopped_by {
        line += &format!("; stopped by {sig}");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_shows_an_eta_only_with_a_total() {
        let s = Stats::new();
        s.done.store(50, Ordering::Relaxed);
        let l = progress_line(&s, Noun::Lines, None, Some(10.0));
        assert!(l.starts_with("50 lines, ") && !l.contains("ETA"), "{l}");
        // 50 left at no more than 10/s: at least 5 s.
        let l = progress_line(&s, Noun::Lines, Some(100), Some(10.0));
        assert!(l.contains("50%, ETA 0:05"), "{l}");
    }

    #[test]
    fn the_summary_says_a_burst_apart_from_the_rate_after_it() {
        let s = Stats::new();
        s.publish(200, 0);
        assert!(!summary(&s, Noun::Lines, "", None).contains("burst"));
        // 11 went at once, 189 in the 1.89 s after.
        let at = Duration::from_micros(50);
        s.held.set((at, at, 11)).unwrap();
        s.last.store(1_890_050_000, Ordering::Relaxed);
        let said = summary(&s, Noun::Lines, "", None);
        assert!(
            said.ends_with(" s (a burst of 11, then 100.00/s), 0 dropped"),
            "{said}"
        );
    }

    #[test]
    fn clocks_read_as_minutes_or_hours() {
        assert_eq!(clock(Duration::from_secs(65)), "1:05");
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
    }
}
