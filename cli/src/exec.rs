//! `--exec`: a command per line, start times paced, at most `-j N` at once,
//! exit statuses tallied as xargs reports them.
//!
//! For each line: wait for a free job slot, then for a permit (or, with
//! `--drop`, refuse the line), then start the command. Children get
//! `/dev/null` as stdin (the lines are paceline's), and share stdout and
//! stderr. No shell is involved: `{}` in any argument is replaced by the
//! line (without its newline), or the line is appended as the last
//! argument when no argument holds `{}`. Every line runs, empty ones too.
//!
//! A line that cannot become an argument (it holds a NUL byte, it is longer
//! than [`MAX_LINE`], or the system refuses it) is not the command's fault: it is
//! reported on stderr with its number, counted as skipped, and the run goes
//! on with the next line; a run that skipped lines exits 123, as one whose
//! commands failed.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::Duration;

use crate::input::{Input, Next};
use crate::pace::{Admit, Failure, Pace};
use crate::report::Stats;
use crate::signals::Flags;
use crate::stream::End;

/// How often a full set of jobs is polled for one that ended.
const REAP_POLL: Duration = Duration::from_millis(1);

/// The longest line that may become an argument: Linux takes at most
/// 128 KiB in one argument (`MAX_ARG_STRLEN`, its NUL included). A longer
/// line is skipped, and only this much of it is ever held.
const MAX_LINE: usize = 128 * 1024 - 1;

/// How the commands ended.
#[derive(Debug, Default)]
pub struct Tally {
    ok: u64,
    /// Non-zero exit codes and how often each came.
    failed: BTreeMap<i32, u64>,
    /// Commands killed by a signal.
    killed: u64,
    /// Lines that could not become an argument.
    skipped: u64,
    /// The command could not be started: xargs's status (said at once,
    /// before the summary).
    cannot_run: Option<i32>,
}

impl Tally {
    fn record(&mut self, status: ExitStatus) {
        match status.code() {
            Some(0) => self.ok += 1,
            Some(code) => *self.failed.entry(code).or_default() += 1,
            None if status.signal().is_some() => self.killed += 1,
            None => *self.failed.entry(-1).or_default() += 1,
        }
    }

    /// xargs's exit status for this tally.
    pub fn status(&self) -> i32 {
        if let Some(code) = self.cannot_run {
            code
        } else if self.killed > 0 {
            125
        } else if self.failed.contains_key(&255) {
            124
        } else if !self.failed.is_empty() || self.skipped > 0 {
            123
        } else {
            0
        }
    }

    /// `: 3 ok, 2 failed (exit 1: 2), 1 killed by a signal`.
    pub fn describe(&self) -> String {
        let failed: u64 = self.failed.values().sum();
        let mut s = format!(": {} ok, {failed} failed", self.ok);
        if failed > 0 {
            let codes: Vec<String> = self
                .failed
                .iter()
                .map(|(code, n)| format!("exit {code}: {n}"))
                .collect();
            s += &format!(" ({})", codes.join(", "));
        }
        if self.killed > 0 {
            s += &format!(", {} killed by a signal", self.killed);
        }
        if self.skipped > 0 {
            s += &format!(", {} skipped (not an argument)", self.skipped);
        }
        s
    }
}

/// `command` for `line`: every `{}` replaced, or the line appended.
fn argv(command: &[OsString], line: &[u8]) -> Vec<OsString> {
    let has_slot = command.iter().any(|a| find(a.as_bytes(), b"{}").is_some());
    let mut out: Vec<OsString> = command
        .iter()
        .map(|a| OsString::from_vec(replace(a.as_bytes(), b"{}", line)))
        .collect();
    if !has_slot {
        out.push(OsStr::from_bytes(line).to_owned());
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn replace(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut rest = hay;
    while let Some(i) = find(rest, needle) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(with);
        rest = &rest[i + needle.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// Why a line cannot become an argument, if it cannot (`overlong`: it ran
/// past [`MAX_LINE`], and was not kept): checked before it waits for a job
/// slot or a permit, so a skipped line costs neither.
fn unusable(line: &[u8], overlong: bool) -> Option<&'static str> {
    if overlong {
        Some("longer than 128 KiB, the most one argument can hold")
    } else {
        line.contains(&0)
            .then_some("it holds a NUL byte, which no argument can")
    }
}

/// Adds `part` to the line in hand, unless that makes it longer than
/// [`MAX_LINE`]: then the line is `overlong` and no more of it is kept.
fn keep(pending: &mut Vec<u8>, part: &[u8], overlong: &mut bool) {
    if !*overlong && pending.len() + part.len() > MAX_LINE {
        *overlong = true;
        *pending = Vec::new();
    }
    if !*overlong {
        pending.extend_from_slice(part);
    }
}

/// Why a command did not start.
enum NotStarted {
    /// This line's fault: skip it and go on.
    Line(String),
    /// The command's: stop, with xargs's status (127 / 126) and why.
    Command(i32, String),
}

/// Starts `argv`, or says why it cannot.
fn start(argv: &[OsString]) -> Result<Child, NotStarted> {
    let name = argv[0].to_string_lossy();
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                NotStarted::Command(127, format!("cannot run {name:?}: not found"))
            }
            // The line made the arguments too long for the system (E2BIG),
            // or into something no argument can hold.
            io::ErrorKind::ArgumentListTooLong | io::ErrorKind::InvalidInput => {
                NotStarted::Line(format!("the system refused it as an argument: {e}"))
            }
            _ => NotStarted::Command(126, format!("cannot run {name:?}: {e}")),
        })
}

/// Reaps every child that ended.
fn reap(running: &mut Vec<Child>, tally: &mut Tally) {
    running.retain_mut(|child| match child.try_wait() {
        Ok(None) => true,
        Ok(Some(status)) => {
            tally.record(status);
            false
        }
        Err(_) => {
            tally.killed += 1;
            false
        }
    });
}

/// Runs `command` per line of `input`.
pub fn run(
    input: &Input,
    command: &[OsString],
    jobs: usize,
    pace: &Pace,
    drop: bool,
    flags: &Flags,
    stats: &Stats,
) -> (End, Tally) {
    let mut tally = Tally::default();
    let mut running: Vec<Child> = Vec::with_capacity(jobs);
    let mut pending: Vec<u8> = Vec::new();
    let (mut started, mut dropped) = (0u64, 0u64);
    // The number of the line in hand, from 1, for what is said about it.
    let mut number = 0u64;
    let skip = |number: u64, why: &str, tally: &mut Tally| {
        eprintln!("paceline: line {number} skipped: {why}");
        tally.skipped += 1;
    };

    // One line: a job slot, a permit, a start. `false`: stop the run.
    let mut one = |line: &[u8],
                   overlong: bool,
                   running: &mut Vec<Child>,
                   tally: &mut Tally|
     -> Result<bool, End> {
        number += 1;
        if let Some(why) = unusable(line, overlong) {
            skip(number, why, tally);
            return Ok(true);
        }
        loop {
            reap(running, tally);
            if running.len() < jobs {
                break;
            }
            if flags.stopping() {
                return Ok(false);
            }
            thread::sleep(REAP_POLL);
        }
        match pace.admit(1, drop, &mut || {}) {
            Ok(Admit::Go) => match start(&argv(command, line)) {
                Ok(child) => {
                    running.push(child);
                    started += 1;
                    stats.publish(started, dropped);
                    Ok(true)
                }
                Err(NotStarted::Line(why)) => {
                    skip(number, &why, tally);
                    Ok(true)
                }
                Err(NotStarted::Command(code, why)) => {
                    // The run's end: said first, not after the tally.
                    eprintln!("paceline: {why}");
                    tally.cannot_run = Some(code);
                    Ok(false)
                }
            },
            Ok(Admit::Dropped) => {
                dropped += 1;
                stats.publish(started, dropped);
                Ok(true)
            }
            Ok(Admit::Stopped) => Ok(false),
            Err(Failure(e)) => Err(End::Failed(e)),
        }
    };

    // The line in hand ran past MAX_LINE: the rest of it is not kept.
    let mut overlong = false;

    let end = 'run: loop {
        let chunk = match input.next(flags, pace, &mut || {}) {
            Next::Data(d) => d,
            Next::Eof => {
                if !pending.is_empty() || overlong {
                    let line = std::mem::take(&mut pending);
                    if let Err(end) = one(&line, overlong, &mut running, &mut tally) {
                        break 'run end;
                    }
                }
                break 'run End::Done;
            }
            Next::Stopped => break 'run End::Stopped,
            Next::Failed(e) => break 'run End::Failed(format!("stdin: {e}")),
        };
        let mut rest = &chunk[..];
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            keep(&mut pending, &rest[..i], &mut overlong);
            rest = &rest[i + 1..];
            if flags.stopping() {
                break 'run End::Stopped;
            }
            match one(&pending, overlong, &mut running, &mut tally) {
                Ok(true) => {
                    pending.clear();
                    overlong = false;
                }
                Ok(false) => break 'run End::Done,
                Err(end) => break 'run end,
            }
        }
        keep(&mut pending, rest, &mut overlong);
    };
    // Whatever stopped the loop, the commands started are waited for.
    for mut child in running {
        match child.wait() {
            Ok(status) => tally.record(status),
            Err(_) => tally.killed += 1,
        }
    }
    let end = match end {
        End::Done if flags.stopping() => End::Stopped,
        other => other,
    };
    (end, tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn braces_are_replaced_everywhere_or_the_line_is_appended() {
        assert_eq!(
            argv(&os(&["curl", "-o", "{}.html", "https://x/{}"]), b"a b"),
            os(&["curl", "-o", "a b.html", "https://x/a b"])
        );
        assert_eq!(argv(&os(&["echo", "-n"]), b"7"), os(&["echo", "-n", "7"]));
        assert_eq!(argv(&os(&["echo", "{}{}"]), b"x"), os(&["echo", "xx"]));
    }

    #[test]
    fn statuses_map_as_xargs_does() {
        let exit = |code: i32| ExitStatus::from_raw(code << 8);
        let mut t = Tally::default();
        t.record(exit(0));
        assert_eq!(t.status(), 0);
        t.record(exit(3));
        assert_eq!(t.status(), 123);
        t.record(exit(255));
        assert_eq!(t.status(), 124);
        t.record(ExitStatus::from_raw(9)); // killed by SIGKILL
        assert_eq!(t.status(), 125);
        t.cannot_run = Some(127);
        assert_eq!(t.status(), 127);
        assert!(t
            .describe()
            .starts_with(": 1 ok, 2 failed (exit 3: 1, exit 255: 1), 1 killed"));
    }
}
