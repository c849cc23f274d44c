//! Lines mode and bytes mode: stdin to stdout, paced.
//!
//! **Lines.** Each line is one permit, written whole (its newline with it;
//! a last line without one is written as it came). A line is held for its
//! newline only while it is short: once [`LONG_LINE`] of it is in hand, it
//! is paid for (or dropped) and the rest streams through as it comes, so a
//! line of any length costs one permit and bounded memory. The lines the
//! limit has room for go in one write; when it has none, the lines in hand
//! due within [`BATCH`](crate::pace::BATCH) wait together for the last
//! one's slot (one request of that cost: none goes before its own slot),
//! a wake-up and a write for them all. Flush policy: stdout is
//! flushed before every wait for a permit and before every wait for input,
//! so a line never sits in paceline's buffer while paceline idles, yet an
//! unthrottled stream is written in 64 KiB blocks rather than a `write(2)`
//! per line (which would cap the unpaced ceiling several times lower).
//!
//! **Bytes.** Through `paceline::io::PacedWriter` straight onto stdout's
//! file descriptor (no line buffering, so nothing is split at newlines):
//! each write pays for at most one burst of bytes and a larger chunk goes
//! in several, one burst each.

use std::fs::File;
use std::io::{self, BufWriter, Write};

use memchr::{memchr, memchr_iter};
use paceline::io::PacedWriter;

use crate::input::{Input, Next};
use crate::pace::{Admit, Failure, Pace, PayStop};
use crate::report::Stats;
use crate::signals::Flags;

/// How a run ended.
#[derive(Debug)]
pub enum End {
    /// Input exhausted, everything passed on.
    Done,
    /// A stop signal.
    Stopped,
    /// stdout was closed downstream: a normal, quiet end.
    BrokenPipe,
    /// Something failed (stdin, stdout, the limiter): status 1.
    Failed(String),
}

/// stdout's buffer in lines mode.
const OUT_BUF: usize = 64 * 1024;

/// The most of a line held for its newline: past this the line is paid for
/// and streamed. Far longer than lines a pipeline paces, and small beside
/// what stdin reads ahead.
const LONG_LINE: usize = 256 * 1024;

fn write_failed(e: &io::Error) -> End {
    if e.kind() == io::ErrorKind::BrokenPipe {
        End::BrokenPipe
    } else {
        End::Failed(format!("stdout: {e}"))
    }
}

/// `lines` lines (one, or a batch that waits together), paid for first
/// (waiting, after a flush) or dropped: `Ok(true)` passed, `Ok(false)`
/// dropped.
fn one(
    lines: &[u8],
    cost: u64,
    pace: &Pace,
    drop: bool,
    out: &mut BufWriter<File>,
    flush_error: &mut Option<io::Error>,
) -> Result<bool, End> {
    let admitted = pace.admit(cost, drop, &mut || {
        if let Err(e) = out.flush() {
            flush_error.get_or_insert(e);
        }
    });
    if let Some(e) = flush_error.take() {
        return Err(write_failed(&e));
    }
    match admitted {
        Ok(Admit::Go) => match out.write_all(lines) {
            Ok(()) => Ok(true),
            Err(e) => Err(write_failed(&e)),
        },
        Ok(Admit::Dropped) => Ok(false),
        Ok(Admit::Stopped) => Err(End::Stopped),
        Err(Failure(e)) => Err(End::Failed(e)),
    }
}

/// Lines of `input` to `out`, each paid for (or dropped) first.
pub fn lines(
    input: &Input,
    out: File,
    pace: &Pace,
    drop: bool,
    flags: &Flags,
    stats: &Stats,
) -> End {
    let mut out = BufWriter::with_capacity(OUT_BUF, out);
    // The start of a line whose newline has not come yet (under LONG_LINE).
    let mut pending: Vec<u8> = Vec::new();
    // A long line whose start went through (`Some(true)`: so does the rest)
    // or was dropped (`Some(false)`: so is the rest).
    let mut open: Option<bool> = None;
    let mut passed = 0u64;
    let mut dropped = 0u64;
    // A flush that failed inside a wait's callback, reported after it.
    let mut flush_error: Option<io::Error> = None;

    let end = 'run: loop {
        let chunk = match input.next(flags, pace, &mut || {
            if let Err(e) = out.flush() {
                flush_error.get_or_insert(e);
            }
        }) {
            Next::Data(d) => d,
            Next::Eof => break 'run End::Done,
            Next::Stopped => break 'run End::Stopped,
            Next::Failed(e) => break 'run End::Failed(format!("stdin: {e}")),
        };
        if let Some(e) = flush_error.take() {
            break 'run write_failed(&e);
        }
        let mut rest = &chunk[..];
        // The rest of a long line, paid for (or dropped) already.
        if let Some(pass) = open {
            let newline = memchr(b'\n', rest);
            let (part, tail) = rest.split_at(newline.map_or(rest.len(), |i| i + 1));
            if pass {
                if let Err(e) = out.write_all(part) {
                    break 'run write_failed(&e);
                }
            }
            if newline.is_none() {
                continue;
            }
            open = None;
            rest = tail;
        }
        // A line begun in an earlier chunk: complete it, and pass it alone.
        if !pending.is_empty() {
            let Some(i) = memchr(b'\n', rest) else {
                pending.extend_from_slice(rest);
                if pending.len() >= LONG_LINE {
                    // Too long to hold: its start is paid for (or dropped)
                    // now, and the rest follows it as it comes.
                    if flags.stopping() {
                        break 'run End::Stopped;
                    }
                    match one(&pending, 1, pace, drop, &mut out, &mut flush_error) {
                        Ok(pass) => {
                            open = Some(pass);
                            if pass {
                                passed += 1;
                            } else {
                                dropped += 1;
                            }
                        }
                        Err(end) => break 'run end,
                    }
                    pending.clear();
                    stats.publish(passed, dropped);
                }
                continue;
            };
            pending.extend_from_slice(&rest[..=i]);
            rest = &rest[i + 1..];
            if flags.stopping() {
                break 'run End::Stopped;
            }
            match one(&pending, 1, pace, drop, &mut out, &mut flush_error) {
                Ok(true) => passed += 1,
                Ok(false) => dropped += 1,
                Err(end) => break 'run end,
            }
            pending.clear();
            stats.publish(passed, dropped);
        }
        // The complete lines of this chunk, passed in runs: as many as
        // the limit has room for now go in one write; when it has none, a
        // batch waits for the last one's slot and goes with it (one line
        // with --drop, dropped or not).
        let mut lines = memchr_iter(b'\n', rest).count() as u64;
        while lines > 0 {
            if flags.stopping() {
                break 'run End::Stopped;
            }
            let n = match pace.grab(lines) {
                Ok(n) => n,
                Err(Failure(e)) => break 'run End::Failed(e),
            };
            let k = match (n, drop) {
                (0, false) => pace.batch(lines),
                (0, true) => 1,
                (n, _) => n,
            };
            // The end of the k-th line.
            let end = memchr_iter(b'\n', rest)
                .nth(k as usize - 1)
                .map_or(rest.len(), |i| i + 1);
            let (run, tail) = rest.split_at(end);
            rest = tail;
            lines -= k;
            if n > 0 {
                if let Err(e) = out.write_all(run) {
                    break 'run write_failed(&e);
                }
                passed += n;
            } else {
                match one(run, k, pace, drop, &mut out, &mut flush_error) {
                    Ok(true) => passed += k,
                    Ok(false) => dropped += 1,
                    Err(end) => break 'run end,
                }
            }
            // Published per run, for the display and the summary.
            stats.publish(passed, dropped);
        }
        // The start of the next line, held for its newline (a chunk is far
        // shorter than LONG_LINE: the check comes with the next chunk).
        pending.extend_from_slice(rest);
    };
    // A last line without a newline (one that streamed is counted already).
    let end = match end {
        End::Done if !pending.is_empty() && !flags.stopping() => {
            match one(&pending, 1, pace, drop, &mut out, &mut flush_error) {
                Ok(true) => {
                    passed += 1;
                    End::Done
                }
                Ok(false) => {
                    dropped += 1;
                    End::Done
                }
                Err(end) => end,
            }
        }
        End::Done if flags.stopping() => End::Stopped,
        other => other,
    };
    stats.publish(passed, dropped);
    match (end, out.flush()) {
        (End::Done | End::Stopped, Err(e)) => write_failed(&e),
        (end, _) => end,
    }
}

/// The bytes of `input` to `out`, paid for in chunks of one burst.
pub fn bytes(input: &Input, out: File, pace: &Pace, flags: &Flags, stats: &Stats) -> End {
    let mut out = PacedWriter::new(out, pace);
    let mut passed = 0u64;
    loop {
        let chunk = match input.next(flags, pace, &mut || {}) {
            Next::Data(d) => d,
            Next::Eof => return End::Done,
            Next::Stopped => return End::Stopped,
            Next::Failed(e) => return End::Failed(format!("stdin: {e}")),
        };
        let mut rest = &chunk[..];
        while !rest.is_empty() {
            if flags.stopping() {
                return End::Stopped;
            }
            match out.write(rest) {
                Ok(0) => return End::Failed("stdout: wrote no bytes".into()),
                Ok(n) => {
                    rest = &rest[n..];
                    passed += n as u64;
                    stats.publish(passed, 0);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return match e.get_ref().and_then(|e| e.downcast_ref::<PayStop>()) {
                        Some(PayStop::Stopped) => End::Stopped,
                        Some(PayStop::Failed(why)) => End::Failed(why.clone()),
                        None => write_failed(&e),
                    }
                }
            }
        }
    }
}
