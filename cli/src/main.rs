//! `paceline`: pace lines, commands or bytes of a shell pipeline at a
//! steady rate with a bounded burst, alone or sharing one limit through
//! Redis. `paceline --help` for the options; `cli/README.md` for examples
//! (and the library's guide, `paceline::guide::cli`, for the short of it).
//!
//! - [`args`]: the command line, and every usage error (status 2).
//! - [`units`]: byte sizes and byte rates (`1MiB/s`).
//! - [`pace`]: the limiter (in-process, Redis, or none), interruptible
//!   waits, SIGHUP reloads, bytes paid in units.
//! - [`input`]: stdin on its own thread.
//! - [`stream`]: lines mode and bytes mode; [`exec`]: `--exec`.
//! - [`report`]: progress on a terminal and the summary line.
//! - [`signals`]: SIGINT / SIGTERM / SIGHUP as flags.
//! - [`limits`]: `paceline limits`, a fleet's limits document, and a run's
//!   limit read from it.

#![forbid(unsafe_code)]

mod args;
mod exec;
mod input;
mod limits;
mod pace;
mod report;
mod signals;
mod stream;
mod units;

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::process::ExitCode;

use args::{Args, Mode, Parsed};
use input::Input;
use pace::Pace;
use report::{Noun, Progress, Stats};
use stream::End;

fn main() -> ExitCode {
    let mut argv = std::env::args_os().skip(1).peekable();
    if argv.peek().is_some_and(|a| a == "limits") {
        return ExitCode::from(limits::main(argv.skip(1)));
    }
    let args = match args::parse(argv) {
        Ok(Parsed::Run(args)) => args,
        Ok(Parsed::Print(text)) => {
            // `paceline --help | head -1` must not fail either.
            let _ = io::stdout().lock().write_all(text.as_bytes());
            return ExitCode::SUCCESS;
        }
        Err(usage) => {
            eprintln!("paceline: {usage}\nTry 'paceline --help'.");
            return ExitCode::from(2);
        }
    };
    match run(*args) {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("paceline: {message}");
            ExitCode::from(1)
        }
    }
}

/// A standard stream as a plain `File` on a duplicate of its descriptor:
/// unbuffered (bytes mode must not be line-buffered) and ours to buffer.
fn raw(fd: std::os::fd::BorrowedFd<'_>) -> Result<File, String> {
    fd.try_clone_to_owned()
        .map(File::from)
        .map_err(|e| format!("cannot use a standard stream: {e}"))
}

fn run(args: Args) -> Result<u8, String> {
    let flags = signals::install().map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let bytes = args.mode == Mode::Bytes;
    let follow = match (&args.limits, &args.shared) {
        (Some(name), Some((server, key))) => {
            Some(limits::Follow::start(server, key, name, args.quiet)?)
        }
        _ => None,
    };
    let limit = follow.as_ref().map_or(args.limit, |f| Some(f.limit));
    let stats = std::sync::Arc::new(Stats::new());
    let pace = Pace::new(&args, follow, flags.clone(), stats.clone()).map_err(|f| f.0)?;
    let stdin = raw(io::stdin().as_fd())?;
    let stdout = raw(io::stdout().as_fd())?;
    // A regular file on stdin gives --bytes its total.
    let total = args.size.or_else(|| {
        bytes
            .then(|| stdin.metadata().ok())
            .flatten()
            .filter(|m| m.is_file())
            .map(|m| m.len())
    });
    let input = Input::spawn(stdin).map_err(|e| format!("cannot read stdin: {e}"))?;

    let noun = match args.mode {
        Mode::Lines => Noun::Lines,
        Mode::Bytes => Noun::Bytes,
        Mode::Exec { .. } => Noun::Commands,
    };
    let limit = limit.map(|l| l.given.per_second());
    let progress = Progress::start(!args.quiet, stats.clone(), noun, total, limit);

    let (end, tally) = match &args.mode {
        Mode::Lines => (
            stream::lines(&input, stdout, &pace, args.drop, &flags, &stats),
            None,
        ),
        Mode::Bytes => (stream::bytes(&input, stdout, &pace, &flags, &stats), None),
        Mode::Exec { command, jobs } => {
            drop(stdout);
            let (end, tally) = exec::run(&input, command, *jobs, &pace, args.drop, &flags, &stats);
            (end, Some(tally))
        }
    };
    progress.finish();

    let signal_name = flags.stop_signal().map(|s| match s {
        signal_hook::consts::SIGINT => "SIGINT",
        signal_hook::consts::SIGTERM => "SIGTERM",
        _ => "a signal",
    });
    let code: u8 = match &end {
        // Downstream closed its end: a normal end, said nothing about.
        End::BrokenPipe => return Ok(0),
        End::Failed(_) => 1,
        End::Stopped => match flags.stop_signal() {
            Some(sig) => u8::try_from(128 + sig).unwrap_or(130),
            None => 130,
        },
        End::Done => tally.as_ref().map_or(0, |t| t.status() as u8),
    };
    if let End::Failed(why) = &end {
        eprintln!("paceline: {why}");
    }
    if !args.quiet {
        let extra = tally.as_ref().map(|t| t.describe()).unwrap_or_default();
        let stopped = matches!(end, End::Stopped).then_some(signal_name.unwrap_or("a signal"));
        eprintln!(
            "paceline: {}",
            report::summary(&stats, noun, &extra, stopped)
        );
    }
    Ok(code)
}
