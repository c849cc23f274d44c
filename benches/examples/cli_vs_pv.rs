//! The `paceline` binary beside `pv -l -L` (Debian's pv), in one run: the
//! unpaced ceiling in lines per second, the rate error at 1k and 100k
//! lines per second, the largest burst, and the CPU each tool used.
//!
//! This program is the consumer: it spawns each tool with a file of `seq`
//! lines as stdin, reads the tool's stdout as it comes and stamps every
//! line with the time its chunk arrived. The tool's CPU time (user +
//! system) is read from `/proc/PID/schedstat` once its stdout closes, before it
//! is reaped. Runs alternate between the tools, and each ratio is taken
//! within one round (the two tools measured a moment apart), then the
//! median over rounds is reported with the spread.
//!
//! `bash benches/cli_vs_pv.sh` builds the release binary, installs pv if it
//! is missing, and runs this; or by hand:
//!
//! ```text
//! cargo run --release -p paceline-benches --example cli_vs_pv -- \
//!     --paceline target/release/paceline [--runs 3] [--secs 5]
//! ```

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Lines for the unpaced ceiling.
const CEILING_LINES: u64 = 5_000_000;
/// A rate far above any ceiling: the limiter decides every line, and never
/// makes one wait.
const NEVER_BINDING: u64 = 1_000_000_000;

/// One tool's run.
struct Measured {
    lines: u64,
    wall: Duration,
    /// Lines per second from the tenth of the lines on to the last: the
    /// steady rate, past the start-up and the first burst.
    steady: f64,
    /// The most lines that arrived within any 10 ms.
    max_10ms: u64,
    /// CPU seconds of the tool (on a CPU, user and system).
    cpu: f64,
}

/// CPU time of `pid` so far, in seconds: the first field of
/// `/proc/PID/schedstat`, nanoseconds on a CPU (exact, where `stat`'s
/// utime and stime count 10 ms ticks). The process may be a zombie.
fn cpu_of(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |ns| ns / 1e9)
}

/// Runs `program args` with `input` on stdin and measures its stdout.
fn measure(program: &str, args: &[String], input: &Path) -> Measured {
    let start = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .stdin(File::open(input).expect("open the input"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut stamps: Vec<(Instant, u64)> = Vec::new(); // (arrival, lines so far)
    let mut lines = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => panic!("reading {program}: {e}"),
        };
        let now = Instant::now();
        let in_chunk = buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        if in_chunk > 0 {
            lines += in_chunk;
            stamps.push((now, lines));
        }
    }
    let wall = start.elapsed();
    let cpu = cpu_of(child.id());
    let status = child.wait().unwrap();
    assert!(status.success(), "{program} {args:?}: {status}");

    let steady = {
        let tenth = lines / 10;
        let first = stamps.iter().find(|(_, n)| *n >= tenth.max(1));
        match (first, stamps.last()) {
            (Some(&(t0, n0)), Some(&(t1, n1))) if t1 > t0 => {
                (n1 - n0) as f64 / t1.duration_since(t0).as_secs_f64()
            }
            _ => f64::NAN,
        }
    };
    // Sliding 10 ms window over the arrival stamps.
    let mut max_10ms = 0;
    let mut j = 0;
    for i in 0..stamps.len() {
        while stamps[i].0.duration_since(stamps[j].0) > Duration::from_millis(10) {
            j += 1;
        }
        let before = if j == 0 { 0 } else { stamps[j - 1].1 };
        max_10ms = max_10ms.max(stamps[i].1 - before);
    }
    Measured {
        lines,
        wall,
        steady,
        max_10ms,
        cpu,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn spread(v: &[f64]) -> (f64, f64) {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

/// `median (min–max)`.
fn show(mut v: Vec<f64>, fmt: impl Fn(f64) -> String) -> String {
    let (lo, hi) = spread(&v);
    let m = median(&mut v);
    format!("{} ({}–{})", fmt(m), fmt(lo), fmt(hi))
}

fn seq_file(dir: &Path, n: u64) -> PathBuf {
    let path = dir.join(format!("seq-{n}"));
    if !path.exists() {
        let mut w = BufWriter::new(File::create(&path).unwrap());
        for i in 1..=n {
            writeln!(w, "{i}").unwrap();
        }
        w.flush().unwrap();
    }
    path
}

fn main() {
    let mut paceline = None;
    let mut runs = 3usize;
    let mut secs = 5u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--paceline" => paceline = args.next(),
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).expect("--runs N"),
            "--secs" => secs = args.next().and_then(|v| v.parse().ok()).expect("--secs S"),
            other => panic!("unknown argument {other:?}"),
        }
    }
    let paceline = paceline.expect("--paceline PATH (the release binary)");
    let dir = std::env::temp_dir().join("paceline-cli-vs-pv");
    std::fs::create_dir_all(&dir).unwrap();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();

    println!("# paceline (CLI) beside pv -l -L, {runs} rounds\n");
    println!("Each figure: median over rounds (min–max). Ratios are taken within a round.\n");

    // The ceiling.
    let input = seq_file(&dir, CEILING_LINES);
    let ceiling_tools: Vec<(&str, &str, Vec<String>)> = vec![
        ("cat (the pipe's floor)", "cat", vec![]),
        ("pv -q -l", "pv", s(&["-q", "-l"])),
        (
            "paceline -q --unlimited",
            &paceline,
            s(&["-q", "--unlimited"]),
        ),
        (
            "pv -q -l -L 1G (limit never binding)",
            "pv",
            s(&["-q", "-l", "-L", &NEVER_BINDING.to_string()]),
        ),
        (
            "paceline -q 1000000000/s (limiter on, never binding)",
            &paceline,
            s(&["-q", &format!("{NEVER_BINDING}/s")]),
        ),
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); ceiling_tools.len()];
    let mut cpus: Vec<Vec<f64>> = vec![Vec::new(); ceiling_tools.len()];
    for _ in 0..runs {
        for (i, (_, prog, a)) in ceiling_tools.iter().enumerate() {
            let m = measure(prog, a, &input);
            assert_eq!(m.lines, CEILING_LINES, "{prog} lost lines");
            rates[i].push(m.lines as f64 / m.wall.as_secs_f64());
            cpus[i].push(m.cpu / (m.lines as f64 / 1e6));
        }
    }
    println!("## Unpaced ceiling ({CEILING_LINES} lines from a file to a pipe)\n");
    println!("| tool | lines/s | CPU s per million lines | / pv (same round) |");
    println!("|---|---|---|---|");
    for (i, (name, _, _)) in ceiling_tools.iter().enumerate() {
        let pv_index = if i == 2 {
            Some(1)
        } else if i == 4 {
            Some(3)
        } else {
            None
        };
        let ratio = pv_index.map_or("".to_owned(), |p| {
            show(
                rates[i].iter().zip(&rates[p]).map(|(a, b)| a / b).collect(),
                |x| format!("{x:.2}×"),
            )
        });
        println!(
            "| {name} | {} | {} | {ratio} |",
            show(rates[i].clone(), |x| format!("{:.2}M", x / 1e6)),
            show(cpus[i].clone(), |x| format!("{x:.3}")),
        );
    }

    // Paced.
    for rate in [1_000u64, 100_000] {
        let n = rate * secs;
        let input = seq_file(&dir, n);
        let tools: Vec<(&str, &str, Vec<String>)> = vec![
            (
                "pv -q -l -L",
                "pv",
                s(&["-q", "-l", "-L", &rate.to_string()]),
            ),
            ("paceline -q", &paceline, s(&["-q", &format!("{rate}/s")])),
        ];
        let mut err: Vec<Vec<f64>> = vec![Vec::new(); 2];
        let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); 2];
        let mut burst: Vec<Vec<f64>> = vec![Vec::new(); 2];
        let mut cpu_ratio = Vec::new();
        for _ in 0..runs {
            let mut round_cpu = [0.0; 2];
            for (i, (_, prog, a)) in tools.iter().enumerate() {
                let m = measure(prog, a, &input);
                assert_eq!(m.lines, n, "{prog} lost lines");
                err[i].push(100.0 * (m.steady / rate as f64 - 1.0));
                // CPU as a share of one core over the run.
                let share = 100.0 * m.cpu / m.wall.as_secs_f64();
                cpu[i].push(share);
                round_cpu[i] = m.cpu;
                burst[i].push(m.max_10ms as f64);
            }
            cpu_ratio.push(round_cpu[1] / round_cpu[0]);
        }
        println!("\n## {rate} lines/s ({n} lines, about {secs} s a run)\n");
        println!(
            "| tool | steady-rate error | most lines in any 10 ms (the rate gives {}) | CPU, % of a core |",
            rate / 100
        );
        println!("|---|---|---|---|");
        for (i, (name, _, _)) in tools.iter().enumerate() {
            println!(
                "| {name} | {} | {} | {} |",
                show(err[i].clone(), |x| format!("{x:+.3} %")),
                show(burst[i].clone(), |x| format!("{x:.0}")),
                show(cpu[i].clone(), |x| format!("{x:.2}")),
            );
        }
        println!(
            "\nCPU, paceline / pv (same round): {}",
            show(cpu_ratio, |x| format!("{x:.2}×"))
        );
    }
}
