//! The real `paceline` binary, run as a shell pipeline runs it: bytes into
//! its stdin, its stdout read line by line as lines arrive (each stamped
//! with the time it came), its stderr and exit status checked.
//!
//! Timing: a line is never *early*, so lower bounds on arrival times are
//! asserted strictly (a line's permit is granted after the test's start
//! mark, and it cannot arrive before it is granted). A loaded machine only
//! makes lines late, so upper bounds are loose (2x and more), and no test
//! measures speed.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// A test that waits longer than this for the binary has found a hang.
const HANG: Duration = Duration::from_secs(60);
/// How far the binary's clock (TSC) and the test's (`Instant`) may disagree
/// on an interval, and a write's own latency: generous for a tolerance on
/// a lower bound of hundreds of milliseconds.
const CLOCKS: Duration = Duration::from_millis(2);

fn paceline() -> Command {
    Command::new(env!("CARGO_BIN_EXE_paceline"))
}

/// Lines `1..=n`, newline-terminated, as `seq` writes them.
fn seq(n: usize) -> Vec<u8> {
    (1..=n)
        .map(|i| format!("{i}\n"))
        .collect::<String>()
        .into_bytes()
}

/// A line of stdout and when the test read it.
type Arrival = (Instant, Vec<u8>);

/// A running `paceline`: its stdout read line by line with arrival times.
struct Run {
    child: Child,
    start: Instant,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<Arrival>>>,
    reader: JoinHandle<()>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_reader: JoinHandle<()>,
}

/// What a finished run left.
struct Done {
    status: ExitStatus,
    start: Instant,
    lines: Vec<Arrival>,
    stderr: String,
}

impl Done {
    fn stdout(&self) -> Vec<u8> {
        self.lines.iter().flat_map(|(_, l)| l.clone()).collect()
    }
    fn texts(&self) -> Vec<String> {
        self.lines
            .iter()
            .map(|(_, l)| String::from_utf8_lossy(l).trim_end().to_owned())
            .collect()
    }
    fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

impl Run {
    /// Starts `paceline args…`, the start mark taken before the spawn.
    fn start(args: &[&str]) -> Run {
        let start = Instant::now();
        let mut child = paceline()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the paceline binary");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&lines);
        let reader = thread::spawn(move || loop {
            let mut line = Vec::new();
            match out.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => seen.lock().unwrap().push((Instant::now(), line)),
            }
        });
        let mut err = child.stderr.take().unwrap();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let seen_err = Arc::clone(&stderr);
        let stderr_reader = thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                seen_err.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Run {
            stdin: child.stdin.take(),
            child,
            start,
            lines,
            reader,
            stderr,
            stderr_reader,
        }
    }

    /// Waits until `cond` holds (failing the test after [`HANG`]).
    fn wait_for(&self, what: &str, cond: impl Fn(&Run) -> bool) {
        let deadline = Instant::now() + HANG;
        while !cond(self) {
            assert!(Instant::now() < deadline, "waited {HANG:?} for {what}");
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// What stderr said so far.
    fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// How many lines have arrived so far.
    fn seen(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// Writes `data` to stdin (on a thread: the binary may read slowly) and
    /// closes it.
    fn feed(mut self, data: Vec<u8>) -> Self {
        let mut stdin = self.stdin.take().unwrap();
        thread::spawn(move || {
            // The binary may end first (a closed stdout, a signal).
            let _ = stdin.write_all(&data);
        });
        self
    }

    /// Sends `sig` (`-INT`, `-HUP`) to the binary.
    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(sig)
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill {sig} failed");
    }

    /// Waits for the end (failing the test after [`HANG`]).
    fn finish(mut self) -> Done {
        drop(self.stdin.take());
        let deadline = Instant::now() + HANG;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("paceline did not end within {HANG:?}");
            }
            thread::sleep(Duration::from_millis(5));
        };
        Done {
            status,
            start: self.start,
            lines: {
                self.reader.join().unwrap();
                std::mem::take(&mut *self.lines.lock().unwrap())
            },
            stderr: {
                self.stderr_reader.join().unwrap();
                String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
            },
        }
    }
}

/// Runs `paceline args…` over `input` to its end.
fn run(args: &[&str], input: Vec<u8>) -> Done {
    Run::start(args).feed(input).finish()
}

/// A fresh temporary directory.
fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "paceline-cli-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn lines_pass_in_order_byte_for_byte() {
    // Fast enough not to wait long; odd bytes, CRLF and a last line without
    // a newline pass as they came.
    let mut input = seq(3000);
    input.extend_from_slice(b"\xff\xfe not utf-8\r\n\n   \nlast, no newline");
    let done = run(&["100000/s", "-q"], input.clone());
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert_eq!(done.stdout(), input);
    assert_eq!(done.stderr, "", "-q says nothing");

    // Many 64 KiB reads, lines cut at their edges, passed in runs: by a
    // limiter that never binds, and by none.
    let mut input = seq(300_000);
    input.extend_from_slice(b"\xff\xfe\r\nlast");
    for args in [&["1000000000/s"][..], &["--unlimited"][..]] {
        let done = run(args, input.clone());
        assert_eq!(done.code(), Some(0), "{args:?}: {}", done.stderr);
        assert!(done.stdout() == input, "{args:?}: the output differs");
        assert!(
            done.stderr.starts_with("paceline: 300002 lines in "),
            "{}",
            done.stderr
        );
    }
}

#[test]
fn lines_are_never_early_and_come_one_by_one() {
    // 20/s with a burst of 1: line k (from 0) is granted at least k * 50 ms
    // after the start mark, and arrives later still.
    const N: usize = 30;
    let t = Duration::from_millis(50);
    let done = run(&["20/s", "--burst", "1"], seq(N));
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    let texts = done.texts();
    assert_eq!(texts, (1..=N).map(|i| i.to_string()).collect::<Vec<_>>());
    for (k, (at, _)) in done.lines.iter().enumerate() {
        let earliest = t * k as u32;
        assert!(
            *at + CLOCKS >= done.start + earliest,
            "line {k} arrived {:?} after the start, before its slot at {earliest:?}",
            at.duration_since(done.start)
        );
    }
    // Each line is flushed as it goes: line 5 is out long before line 29 is
    // even granted (29 * 50 ms = 1.45 s after the start).
    assert!(done.lines[5].0 < done.start + t * 29);
    // The rate, loosely: 29 intervals take at least 1.45 s, and not 3x that.
    let spent = done.lines[N - 1].0.duration_since(done.lines[0].0);
    assert!(spent < t * 29 * 3, "{spent:?} for 29 intervals of {t:?}");
    assert!(
        done.stderr.starts_with(&format!("paceline: {N} lines in "))
            && done.stderr.ends_with(", 0 dropped\n"),
        "{}",
        done.stderr
    );
}

#[test]
fn a_first_burst_goes_at_once_then_the_rate() {
    // 10/s with --burst 5: five at once, then one per 100 ms.
    let done = run(&["10/s", "-b", "5", "-q"], seq(8));
    assert_eq!(done.code(), Some(0));
    assert_eq!(done.lines.len(), 8);
    for k in 5..8 {
        let earliest = Duration::from_millis(100) * (k as u32 - 4);
        assert!(
            done.lines[k].0 + CLOCKS >= done.start + earliest,
            "line {k}"
        );
    }
}

/// The summary tells the first burst from the steady rate: 60 lines at
/// 100/s with the default burst of 11 take about 0.49 s, which as one
/// figure (about 122/s) reads as if the limit were exceeded.
#[test]
fn the_summary_says_the_burst_and_the_rate_apart() {
    let done = run(&["100/s"], seq(60));
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    let said = done.stderr.trim_end();
    let rate: f64 = said
        .strip_prefix("paceline: 60 lines in ")
        .and_then(|s| s.split_once(" s (a burst of 11, then "))
        .and_then(|(_, s)| s.strip_suffix("/s), 0 dropped"))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    // The 49 lines after the burst are never early, counted from the slot
    // before the first of them: at most the rate (a rounding aside), and
    // loosely not far under it.
    assert!((50.0..=100.1).contains(&rate), "{said}");

    // A run the limit never held back has one rate to say.
    let done = run(&["1000000/s"], seq(5));
    assert!(
        done.stderr.starts_with("paceline: 5 lines in ")
            && !done.stderr.contains("burst")
            && done.stderr.ends_with("/s), 0 dropped\n"),
        "{}",
        done.stderr
    );
}

/// At a high rate the lines due within a few milliseconds go together, a
/// wake-up and a write for many (as many as the burst allows), yet none
/// early: the k-th line arrives no sooner than `(k - burst) * T` after the
/// start, the window bound `S + 1 + w / T` from a start at rest, and the
/// rate holds.
#[test]
fn batches_at_a_high_rate_keep_the_window_bound() {
    const RATE: u32 = 20_000; // T = 50 us
    const BURST: usize = 200; // 10 ms of the rate
    const N: usize = 10_000; // half a second
    let t = Duration::from_secs(1) / RATE;
    let done = run(
        &[&format!("{RATE}/s"), "-b", &BURST.to_string(), "-q"],
        seq(N),
    );
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert!(done.stdout() == seq(N), "the lines differ");
    for (i, (at, _)) in done.lines.iter().enumerate() {
        let earliest = t * (i + 1).saturating_sub(BURST) as u32;
        assert!(
            *at + CLOCKS >= done.start + earliest,
            "line {} arrived {:?} after the start, before {earliest:?}: over the bound",
            i + 1,
            at.duration_since(done.start)
        );
    }
    // The rate, loosely: the 9800 intervals take 0.49 s, and not 3x that.
    let spent = done.lines[N - 1].0.duration_since(done.start);
    assert!(spent < t * N as u32 * 3, "{spent:?}");
}

/// A command that cannot be started stops the run, and is the first thing
/// said, on a line of its own, before the summary's tally.
#[test]
fn a_command_that_does_not_exist_is_said_first() {
    let done = run(
        &["1000/s", "-e", "no-such-command-paceline"],
        b"1\n2\n".to_vec(),
    );
    assert_eq!(done.code(), Some(127), "{}", done.stderr);
    let said: Vec<&str> = done.stderr.lines().collect();
    assert_eq!(
        said[0], "paceline: cannot run \"no-such-command-paceline\": not found",
        "{}",
        done.stderr
    );
    assert!(
        said.len() == 2
            && said[1].starts_with("paceline: 0 commands in ")
            && !said[1].contains("cannot run"),
        "{}",
        done.stderr
    );
}

#[test]
fn exec_runs_a_command_per_line_and_sums_up_the_statuses() {
    let done = run(
        &["1000/s", "--exec", "sh", "-c", "echo ran {}; exit {}"],
        b"0\n1\n0\n3\n".to_vec(),
    );
    assert_eq!(
        done.code(),
        Some(123),
        "a command exited 1-254: {}",
        done.stderr
    );
    assert_eq!(done.texts(), ["ran 0", "ran 1", "ran 0", "ran 3"]);
    assert!(
        done.stderr.contains("4 commands in ")
            && done
                .stderr
                .contains(": 2 ok, 2 failed (exit 1: 1, exit 3: 1), 0 dropped"),
        "{}",
        done.stderr
    );

    // No {}: the line is the last argument.
    let done = run(
        &["1000/s", "-q", "-e", "echo", "line:"],
        b"a b\nc\n".to_vec(),
    );
    assert_eq!(
        (done.code(), done.texts()),
        (Some(0), vec!["line: a b".to_owned(), "line: c".to_owned()])
    );

    let done = run(
        &["1000/s", "-q", "-e", "sh", "-c", "exit {}"],
        b"0\n255\n".to_vec(),
    );
    assert_eq!(done.code(), Some(124), "a command exited 255");
    let done = run(
        &["1000/s", "-q", "-e", "sh", "-c", "kill -9 $$"],
        b"x\n".to_vec(),
    );
    assert_eq!(done.code(), Some(125), "a command was killed");

    let done = run(
        &["1000/s", "-e", "no-such-command-paceline"],
        b"1\n2\n".to_vec(),
    );
    assert_eq!(done.code(), Some(127));
    assert!(
        done.stderr.contains("0 commands")
            && done
                .stderr
                .contains("cannot run \"no-such-command-paceline\": not found"),
        "{}",
        done.stderr
    );
}

/// A line that cannot become an argument (it holds a NUL byte) is reported
/// with its number and skipped, counted in the summary, and the run goes
/// on: the command is not blamed (status 126) and the later lines run. The
/// status is 123, as for a command that failed: some lines' work was not
/// done.
#[test]
fn a_line_that_cannot_be_an_argument_is_skipped_and_the_run_goes_on() {
    let done = run(
        &["1000/s", "--exec", "echo", "ran"],
        b"a\nb\0c\nd\n\0\ne".to_vec(),
    );
    assert_eq!(done.texts(), ["ran a", "ran d", "ran e"], "{}", done.stderr);
    assert_eq!(done.code(), Some(123), "{}", done.stderr);
    for line in [2, 4] {
        assert!(
            done.stderr.contains(&format!("line {line} skipped")) && done.stderr.contains("NUL"),
            "{}",
            done.stderr
        );
    }
    assert!(!done.stderr.contains("cannot run"), "{}", done.stderr);
    assert!(
        done.stderr.contains("3 commands in ") && done.stderr.contains("2 skipped"),
        "{}",
        done.stderr
    );
}

/// The peak resident memory of `paceline args…` fed one 200 MB line without
/// a newline, in MiB: `VmHWM` read from `/proc` once all of it is written
/// (and before stdin closes, so the process is still there to be read).
fn peak_mib_for_a_200_mb_line(args: &[&str]) -> (u64, Option<i32>, String) {
    let mut child = paceline()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let block = vec![b'x'; 1 << 20];
    for _ in 0..200 {
        stdin.write_all(&block).unwrap();
    }
    // Whatever was read ahead is taken in by now.
    thread::sleep(Duration::from_millis(300));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    drop(stdin);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let code = child.wait().unwrap().code();
    (kib / 1024, code, stderr)
}

/// A line is one permit whatever its length, and is streamed through, not
/// held: a 200 MB line without a newline keeps paceline under 64 MiB in
/// every mode. With `--exec` a line is an argument, which the system bounds
/// (128 KiB on Linux): a longer one is skipped and named, not held.
#[test]
fn a_long_line_is_streamed_through_in_bounded_memory() {
    for args in [
        &["1000/s"][..],
        &["1000/s", "--drop"][..],
        &["--unlimited"][..],
        &["--bytes", "10GiB/s"][..],
        &["1000/s", "--exec", "true"][..],
    ] {
        let (peak, code, stderr) = peak_mib_for_a_200_mb_line(args);
        assert!(peak < 64, "{args:?}: peak RSS {peak} MiB; {stderr}");
        if args.contains(&"--exec") {
            assert_eq!(code, Some(123), "{args:?}: {stderr}");
            assert!(
                stderr.contains("line 1 skipped") && stderr.contains("longer than"),
                "{args:?}: {stderr}"
            );
        } else {
            assert_eq!(code, Some(0), "{args:?}: {stderr}");
        }
    }
    // Passed whole, and counted as one line.
    let mut input = vec![b'y'; 3 << 20];
    input.extend_from_slice(b"\nshort\n");
    input.extend(vec![b'z'; 1 << 20]);
    for args in [&["-q", "1000/s"][..], &["-q", "--unlimited"][..]] {
        let done = run(args, input.clone());
        assert_eq!(done.stdout(), input, "{args:?}");
    }
    let done = run(&["1000/s"], input.clone());
    assert!(done.stderr.contains(": 3 lines in "), "{}", done.stderr);
}

#[test]
fn exec_runs_at_most_j_commands_at_once() {
    // Each command marks itself running in a directory, records how many
    // are running, and stays 300 ms: with -j 3 no record exceeds 3, and
    // (six started 1 ms apart) some overlap.
    let dir = temp_dir("jobs");
    let script = format!(
        "touch {d}/$0.run; ls {d} | grep -c run >> {d}/counts; sleep 0.3; rm {d}/$0.run",
        d = dir.display()
    );
    let done = run(
        &["1000/s", "-q", "-j", "3", "-e", "sh", "-c", &script, "{}"],
        seq(6),
    );
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    let counts: Vec<usize> = std::fs::read_to_string(dir.join("counts"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 6, "every line ran once");
    assert!(
        counts.iter().all(|&c| c <= 3),
        "more than -j 3 at once: {counts:?}"
    );
    assert!(
        counts.iter().any(|&c| c >= 2),
        "never concurrent: {counts:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn drop_refuses_lines_over_the_limit_and_counts_them() {
    // 1/min with the default burst of 11: the first 11 pass, the rest are
    // dropped at once (no waiting: the run ends in far less than a minute).
    let done = run(&["1/min", "--drop"], seq(100));
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert_eq!(
        done.texts(),
        (1..=11).map(|i| i.to_string()).collect::<Vec<_>>()
    );
    assert!(
        done.stderr.starts_with("paceline: 11 lines in ")
            && done.stderr.ends_with(", 89 dropped\n"),
        "{}",
        done.stderr
    );

    // With --exec, a dropped line runs nothing.
    let done = run(&["1/min", "--drop", "-b", "2", "-e", "echo"], seq(5));
    assert_eq!(done.texts(), ["1", "2"]);
    assert!(
        done.stderr.contains("2 commands in ") && done.stderr.contains("3 dropped"),
        "{}",
        done.stderr
    );
}

#[test]
fn bytes_pass_whole_and_never_early() {
    // 200 KiB of bytes (newlines among them) at 400 KiB/s, burst 16 KiB:
    // the input's 64 KiB reads go in 16 KiB chunks, and the last byte
    // cannot leave before (200 - 16) KiB / 400 KiB/s = 460 ms.
    let input: Vec<u8> = (0..200 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
    let done = run(&["--bytes", "400KiB/s", "--burst", "16KiB"], input.clone());
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert_eq!(done.stdout(), input);
    let last = done.lines.last().unwrap().0;
    assert!(last + CLOCKS >= done.start + Duration::from_millis(460));
    assert!(
        last < done.start + Duration::from_millis(460 * 4 + 2000),
        "far too slow"
    );
    assert!(
        done.stderr
            .starts_with("paceline: 204800 bytes (200.00 KiB) in "),
        "{}",
        done.stderr
    );
}

#[test]
fn bad_input_exits_2_naming_the_bad_value() {
    for (args, needle) in [
        (&["5/x"][..], "bad rate \"5/x\""),
        (&["five/s"][..], "\"five/s\""),
        (&["0/s"][..], "\"0/s\""),
        (&["--bytes", "1XB/s"][..], "\"1XB/s\""),
        (&["--bytes", "1.5MiB/s"][..], "decimals"),
        (&["5/s", "--burst", "0"][..], "at least 1, got 0"),
        (&["5/s", "--burst", "lots"][..], "\"lots\""),
        (&["5/s", "-j", "x", "-e", "true"][..], "\"x\""),
        (&["5/s", "--nope"][..], "--nope"),
        (&["5/s", "--burst"][..], "--burst"),
        (&[][..], "missing RATE"),
        (
            &["--memcached", "127.0.0.1", "--key", "k"][..],
            "memcached holds no limits document",
        ),
        (
            &[
                "5/s",
                "--redis",
                "redis://x/",
                "--key",
                "k",
                "--limits",
                "l",
            ][..],
            "--limits",
        ),
        (
            &["--redis", "redis://x/", "--key", "k", "--burst", "3"][..],
            "--burst",
        ),
        (&["5/s", "--redis", "redis://127.0.0.1/"][..], "--key"),
        (
            &["5/s", "--postgres", "host=/tmp"][..],
            "--postgres needs --key",
        ),
        (
            &[
                "5/s",
                "--redis",
                "redis://x/",
                "--postgres",
                "host=/tmp",
                "--key",
                "k",
            ][..],
            "--redis and --postgres",
        ),
        (
            &["5/s", "--memcached", "127.0.0.1:11211"][..],
            "--memcached needs --key",
        ),
        (
            &[
                "5/s",
                "--postgres",
                "host=/tmp",
                "--memcached",
                "127.0.0.1",
                "--key",
                "k",
            ][..],
            "--postgres and --memcached",
        ),
        (
            &["--rate-file", "/nonexistent/paceline-rate"][..],
            "/nonexistent/paceline-rate",
        ),
    ] {
        let done = run(args, Vec::new());
        assert_eq!(done.code(), Some(2), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains(needle), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains("paceline --help"), "{args:?}");
        assert!(done.lines.is_empty(), "{args:?} wrote to stdout");
    }
    // --help and --version go to stdout and succeed.
    let done = run(&["--help"], Vec::new());
    assert_eq!(done.code(), Some(0));
    assert!(done.texts()[0].starts_with("paceline: pace lines"));
}

/// A number on the command line is input like any other: `--jobs` is
/// bounded (at most 1024 commands at once), and a count past its bound
/// exits 2 naming it rather than panicking or allocating for it; every other
/// numeric flag holds its extremes.
#[test]
fn numbers_on_the_command_line_are_bounded_and_a_bad_one_is_named() {
    for jobs in ["18446744073709551615", "1000000000000", "1025"] {
        let done = run(&["10/s", "-j", jobs, "--exec", "true"], seq(1));
        assert_eq!(done.code(), Some(2), "-j {jobs}: {}", done.stderr);
        assert!(
            done.stderr.contains(&format!("--jobs \"{jobs}\"")) && done.stderr.contains("1024"),
            "-j {jobs}: {}",
            done.stderr
        );
    }
    // The bound itself runs.
    let done = run(&["-q", "1000/s", "-j", "1024", "--exec", "true"], seq(3));
    assert_eq!(done.code(), Some(0), "-j 1024: {}", done.stderr);
    // Past what a u64 holds: named, status 2.
    for args in [
        &["10/s", "-s", "18446744073709551616"][..],
        &["10/s", "-b", "18446744073709551616"][..],
        &["--bytes", "1M/s", "-s", "99999999999T"][..],
        &["--bytes", "18446744073709551615/1ns"][..],
        &["18446744073709551616/s"][..],
    ] {
        let done = run(args, seq(1));
        assert_eq!(done.code(), Some(2), "{args:?}: {}", done.stderr);
        let value = args[args.len() - 1];
        assert!(
            done.stderr.contains(&format!("\"{value}\"")),
            "{args:?}: {}",
            done.stderr
        );
    }
    // The largest total is only a total.
    let done = run(&["-q", "10/s", "-s", "18446744073709551615"], seq(1));
    assert_eq!((done.code(), done.texts()), (Some(0), vec!["1".to_owned()]));
}

/// A burst too large for the limiter (more than 146 years of the rate) is
/// bad input like any other: status 2 naming the value, in the lines and
/// bytes modes and from a rate file, not a runtime failure (status 1).
#[test]
fn an_oversized_burst_exits_2_naming_it() {
    let dir = temp_dir("burst");
    let file = dir.join("rate");
    std::fs::write(&file, "10/s 99999999999999999\n").unwrap();
    let file = file.to_str().unwrap();
    for (args, needle) in [
        (
            &["10/s", "--burst", "99999999999999999"][..],
            "99999999999999999",
        ),
        (
            &["10/s", "-b", "18446744073709551615"][..],
            "18446744073709551615",
        ),
        (
            &["10/s", "-b", "99999999999999999", "-e", "true"][..],
            "99999999999999999",
        ),
        (&["--bytes", "1/s", "-b", "99999T"][..], "\"99999T\""),
        (&["--rate-file", file][..], "99999999999999999"),
    ] {
        let done = run(args, seq(3));
        assert_eq!(done.code(), Some(2), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains(needle), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains("burst"), "{args:?}: {}", done.stderr);
        assert!(done.lines.is_empty(), "{args:?} wrote to stdout");
    }
}

#[test]
fn an_unreachable_postgres_fails_with_status_1_naming_it() {
    let dir = temp_dir("nopostgres");
    let conn = format!("host={} port=1 connect_timeout=1", dir.display());
    let done = run(&["5/s", "--postgres", &conn, "--key", "k"], seq(3));
    assert_eq!(done.code(), Some(1), "{}", done.stderr);
    assert!(done.stderr.contains(&conn), "{}", done.stderr);
    assert!(done.lines.is_empty());
}

#[test]
fn an_unreachable_memcached_fails_with_status_1_naming_it() {
    let dir = temp_dir("nomemcached");
    let addr = format!("unix:{}/none.sock", dir.display());
    let done = run(&["5/s", "--memcached", &addr, "--key", "k"], seq(3));
    assert_eq!(done.code(), Some(1), "{}", done.stderr);
    assert!(done.stderr.contains(&addr), "{}", done.stderr);
    assert!(done.lines.is_empty());
}

#[test]
fn an_unreachable_redis_fails_with_status_1_naming_it() {
    let dir = temp_dir("noredis");
    let url = format!("unix://{}/none.sock", dir.display());
    let done = run(&["5/s", "--redis", &url, "--key", "k"], seq(3));
    assert_eq!(done.code(), Some(1), "{}", done.stderr);
    assert!(done.stderr.contains(&url), "{}", done.stderr);
    assert!(done.lines.is_empty());
}

#[test]
fn a_closed_stdout_downstream_ends_quietly() {
    // As `paceline 100000/s < big | head -1`: the reader goes away after
    // one line; paceline ends with status 0 and says nothing.
    let mut child = paceline()
        .arg("100000/s")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = thread::spawn(move || {
        let _ = stdin.write_all(&seq(1_000_000));
    });
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert_eq!(first, "1\n");
    drop(out);
    let mut err = child.stderr.take().unwrap();
    let deadline = Instant::now() + HANG;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "paceline did not end");
        thread::sleep(Duration::from_millis(5));
    };
    let mut stderr = String::new();
    err.read_to_string(&mut stderr).unwrap();
    feeder.join().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(stderr, "", "a broken pipe is a quiet end");
}

#[test]
fn sigint_ends_cleanly_with_the_summary() {
    // 5/s, burst 1: a line every 200 ms. Interrupted after three lines,
    // paceline prints the summary (agreeing with what it wrote) and exits
    // 130.
    let mut run = Run::start(&["5/s", "-b", "1"]);
    let mut stdin = run.stdin.take().unwrap();
    stdin.write_all(&seq(100)).unwrap();
    // Keep stdin open: paceline must not end by itself.
    run.wait_for("three lines", |r| r.seen() >= 3);
    run.signal("-INT");
    let done = run.finish();
    drop(stdin);
    assert_eq!(done.code(), Some(130), "{}", done.stderr);
    let n = done.lines.len();
    assert!((3..100).contains(&n), "{n} lines");
    assert_eq!(
        done.stderr
            .lines()
            .last()
            .unwrap()
            .split(" in ")
            .next()
            .unwrap(),
        format!("paceline: {n} lines"),
        "{}",
        done.stderr
    );
    assert!(
        done.stderr
            .trim_end()
            .ends_with("0 dropped; stopped by SIGINT"),
        "{}",
        done.stderr
    );
}

#[test]
fn sigint_while_waiting_for_input_ends_promptly() {
    // One line, then an open and silent stdin: paceline waits for input.
    // (Its handlers are in place once a line has come out: a signal sent
    // before would end it by the default action.)
    let mut run = Run::start(&["5/s"]);
    let mut stdin = run.stdin.take().unwrap();
    stdin.write_all(b"one\n").unwrap();
    run.wait_for("the line", |r| r.seen() == 1);
    thread::sleep(Duration::from_millis(100));
    run.signal("-INT");
    let done = run.finish();
    drop(stdin);
    assert_eq!(done.code(), Some(130), "{}", done.stderr);
    assert!(
        done.stderr.contains("paceline: 1 lines in "),
        "{}",
        done.stderr
    );
}

#[test]
fn sighup_rereads_the_rate_file_and_keeps_the_rate_on_a_bad_one() {
    let dir = temp_dir("ratefile");
    let file = dir.join("rate");
    std::fs::write(&file, "1/min 2\n").unwrap();
    let path = file.to_str().unwrap();
    let mut run = Run::start(&["--rate-file", path]);
    let mut stdin = run.stdin.take().unwrap();
    stdin.write_all(&seq(20)).unwrap();
    drop(stdin);
    // At 1/min with a burst of 2, two lines pass, and the third would wait
    // a minute. A bad file changes nothing; a good one speeds it up.
    run.wait_for("the first burst", |r| r.seen() == 2);
    std::fs::write(&file, "lots/s\n").unwrap();
    run.signal("-HUP");
    run.wait_for("the bad file's refusal", |r| {
        r.stderr_so_far().contains("keeping")
    });
    thread::sleep(Duration::from_millis(100));
    assert_eq!(run.seen(), 2, "a bad file changed the rate");
    std::fs::write(&file, "1000/s\n").unwrap();
    run.signal("-HUP");
    let done = run.finish();
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert_eq!(done.lines.len(), 20);
    assert!(
        done.stderr.contains("bad rate \"lots/s\"") && done.stderr.contains("keeping 1/min"),
        "{}",
        done.stderr
    );
    assert!(done.stderr.contains("rate now 1000/s"), "{}", done.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn progress_is_drawn_on_a_terminal_with_an_eta_and_never_into_a_pipe() {
    // `script` (util-linux; Debian's bsdutils, always installed) gives
    // paceline a terminal for stderr; stdin and stdout stay files.
    let dir = temp_dir("tty");
    let input = dir.join("in");
    std::fs::write(&input, seq(30)).unwrap();
    let command = format!(
        "{} 20/s -b 1 --size 30 < {} > {}",
        env!("CARGO_BIN_EXE_paceline"),
        input.display(),
        dir.join("out").display()
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("run script (util-linux)");
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{tty}");
    assert_eq!(std::fs::read(dir.join("out")).unwrap(), seq(30));
    // Redrawn in place ("\r", then clear to the end of the line), with the
    // share done and an ETA, then the summary.
    assert!(tty.contains("\rpaceline: "), "{tty:?}");
    assert!(tty.contains("%, ETA 0:0"), "{tty:?}");
    assert!(tty.contains("paceline: 30 lines in "), "{tty:?}");
    // Into a pipe (every other test): the summary line only.
    let done = run(&["1000/s", "--size", "3"], seq(3));
    assert!(
        !done.stderr.contains('\r') && !done.stderr.contains("ETA"),
        "{}",
        done.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}
