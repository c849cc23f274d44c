//! How exactly does a limiter pace? A reproducible report: paceline's two
//! wait strategies beside governor driven as its users drive it (`check()`,
//! then sleep the wait it advises), at 1k, 10k, 100k and 1M permits/s, from
//! 1 thread and from 8 threads sharing one limiter.
//!
//! ```text
//! cargo run --release -p paceline-benches --example accuracy    # ~1 minute
//! cargo run --release -p paceline-benches --example accuracy -- --secs 5 --plots docs
//! ```
//!
//! Options: `--secs S` (each run's length, default 1.5), `--rates 1000,10000`,
//! `--threads 1,8`, `--slack N` (paceline's, in permits; `--slack 10ms`: as
//! many permits as the rate gives in 10 ms; default the library's,
//! `Slack::DEFAULT`: 10 permits or 10 ms, whichever is more), `--plots DIR` (write
//! `accuracy-lateness.svg` and `accuracy-profile.svg` there), `--repeat N`
//! (run every configuration N times, interleaved, and report the run with the
//! median achieved rate: on a machine shared with other work, one burst of
//! load then spoils no row).
//!
//! Each run primes the limiter (takes its first permit, or drains governor's
//! initial burst) at `t0`, then its threads loop "acquire, note the time"
//! until `t0 + S`. Times come from `std::time::Instant` (the OS's monotonic
//! clock, not the limiter's own), so a limiter whose clock runs fast or slow
//! shows it. From the sorted times `t_1 <= t_2 <= ...`:
//!
//! - achieved rate: `n / (t_n - t0)` (the priming permit went at `t0`), and
//!   its error against the target (it counts the last permit's own
//!   lateness: 1 ms late at the end of a 1 s run reads -0.1 %);
//! - long-run error: the rate between the first tenth of the permits and
//!   the last tenth, each placed by its median lateness, against the
//!   target. Rate lost for good (a stall longer than the slack) shows here
//!   as in the achieved rate; one late wake-up at either end does not;
//! - lateness of permit `k`: `t_k - (t0 + k T)`, its ideal slot on a steady
//!   schedule at the target interval `T` (a limiter that loses rate falls ever
//!   further behind, and its lateness grows with the run);
//! - gap: `t_{k+1} - t_k` (the target is `T`; bursts show as gaps near 0);
//! - CPU: the threads' run time (from `/proc/thread-self/schedstat`) over the
//!   run's wall time, in % of one core.

use std::fmt::Write as _;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use governor::clock::Clock as _;
use paceline::{AtomicLimiter, Rate, Slack, Wait};

/// What is measured.
#[derive(Clone, Copy, PartialEq)]
enum Subject {
    /// paceline's `AtomicLimiter` (default slack unless `--slack`), waiting this way.
    Paceline(Wait),
    /// governor's direct limiter with this burst, driven by check-then-sleep.
    Governor(u32),
}

impl Subject {
    const ALL: [Subject; 4] = [
        Subject::Paceline(Wait::Sleep),
        Subject::Paceline(Wait::PRECISE),
        Subject::Governor(1),
        Subject::Governor(10),
    ];

    fn name(self) -> &'static str {
        match self {
            Subject::Paceline(Wait::Sleep) => "paceline Sleep",
            Subject::Paceline(_) => "paceline Precise",
            Subject::Governor(1) => "governor burst 1",
            Subject::Governor(_) => "governor burst 10",
        }
    }

    fn color(self) -> &'static str {
        match self {
            Subject::Paceline(Wait::Sleep) => "#1f77b4",
            Subject::Paceline(_) => "#2ca02c",
            Subject::Governor(1) => "#d62728",
            Subject::Governor(_) => "#ff7f0e",
        }
    }

    /// A limiter at `rate`/s, ready to be primed.
    fn limiter(self, rate: u64, slack: Slack) -> Box<dyn Acquire> {
        match self {
            Subject::Paceline(wait) => Box::new(
                AtomicLimiter::builder(Rate::per_second(rate))
                    .wait(wait)
                    .slack(slack)
                    .build()
                    .expect("a valid limiter"),
            ),
            Subject::Governor(burst) => {
                let period = Duration::from_nanos(1_000_000_000 / rate);
                let quota = governor::Quota::with_period(period)
                    .expect("a non-zero period")
                    .allow_burst(NonZeroU32::new(burst).expect("a non-zero burst"));
                Box::new(governor::RateLimiter::direct(quota))
            }
        }
    }
}

/// A limiter as the harness drives it.
trait Acquire: Send + Sync {
    /// Brings a new limiter to "one permit just went, nothing banked".
    fn prime(&self);
    /// The call a thread makes before each unit of work; returns when the
    /// unit may go.
    fn acquire(&self);
}

impl Acquire for AtomicLimiter {
    fn prime(&self) {
        self.take(); // a fresh limiter's first permit goes at once
    }
    fn acquire(&self) {
        self.take();
    }
}

impl Acquire for governor::DefaultDirectRateLimiter {
    fn prime(&self) {
        // It starts with its burst banked: spend it.
        while self.check().is_ok() {}
    }
    fn acquire(&self) {
        // governor's synchronous use: check, and on a refusal sleep the wait
        // it reports, then check again.
        while let Err(not_until) = self.check() {
            std::thread::sleep(not_until.wait_time_from(self.clock().now()));
        }
    }
}

/// One run's raw data.
struct Run {
    /// Permit times, ns after `t0`, sorted.
    times: Vec<u64>,
    /// CPU time of all the run's threads, ns.
    cpu: u64,
    /// Wall time of the run, ns.
    wall: u64,
}

/// This thread's CPU time so far, ns: `/proc/thread-self/schedstat`'s first
/// field (0 where it is missing: then the report's CPU column reads 0).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn run(subject: Subject, rate: u64, slack: Slack, threads: usize, secs: f64) -> Run {
    let limiter = subject.limiter(rate, slack);
    let limiter = &*limiter;
    let len = Duration::from_secs_f64(secs);
    let expected = (rate as f64 * secs * 1.1) as usize / threads + 16;
    let ready = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    let t0 = OnceLock::new();
    let per_thread: Vec<(Vec<u64>, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (ready, go, t0) = (&ready, &go, &t0);
                s.spawn(move || {
                    let mut times = Vec::with_capacity(expected);
                    ready.fetch_add(1, Ordering::SeqCst);
                    while !go.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    let t0: &Instant = t0.get().expect("set before go");
                    let cpu = thread_cpu_ns();
                    loop {
                        limiter.acquire();
                        let t = t0.elapsed();
                        if t >= len {
                            break;
                        }
                        times.push(t.as_nanos() as u64);
                    }
                    (times, thread_cpu_ns() - cpu)
                })
            })
            .collect();
        // Prime only once every thread is up, so that spawning them is not
        // counted as lateness (at 1M/s it outlasts the banked window).
        while ready.load(Ordering::SeqCst) < threads {
            std::thread::yield_now();
        }
        // t0 just before the priming permit: the limiter's schedule starts at
        // or after it, so a permit exactly on its slot reads as (slightly)
        // late, never early.
        let _ = t0.set(Instant::now());
        limiter.prime();
        go.store(true, Ordering::Release);
        handles
            .into_iter()
            .map(|h| h.join().expect("a run thread panicked"))
            .collect()
    });
    let wall = t0.get().map_or(0, |t0| t0.elapsed().as_nanos() as u64);
    let cpu = per_thread.iter().map(|(_, c)| c).sum();
    let mut times: Vec<u64> = per_thread.into_iter().flat_map(|(t, _)| t).collect();
    times.sort_unstable();
    Run { times, cpu, wall }
}

/// One table row.
fn row(subject: Subject, rate: u64, threads: usize, s: &Stats) -> String {
    if s.permits < 1 {
        return format!(
            "| {} | {} | {threads} | (no permit) |",
            subject.name(),
            rate_label(rate)
        );
    }
    format!(
        "| {} | {} | {} | {:.0} | {:+.4} % | {:+.4} % | {} | {} | {} | {} | {} | {:.1} % |",
        subject.name(),
        rate_label(rate),
        threads,
        s.achieved,
        s.error_pct,
        s.long_run_error_pct,
        human(quantile(&s.lateness, 0.5) as f64),
        human(quantile(&s.lateness, 0.99) as f64),
        human(*s.lateness.last().unwrap_or(&0) as f64),
        human(s.gap_p50 as f64),
        human(s.gap_p99 as f64),
        s.cpu_pct,
    )
}

/// How late `thread::sleep(50 µs)` wakes, ns: p50, p99, max of 2000.
fn sleep_overshoot() -> (f64, f64, f64) {
    let want = Duration::from_micros(50);
    let mut late: Vec<u64> = (0..2000)
        .map(|_| {
            let t = Instant::now();
            std::thread::sleep(want);
            t.elapsed().saturating_sub(want).as_nanos() as u64
        })
        .collect();
    late.sort_unstable();
    let q = |q| quantile(&late, q) as f64;
    (q(0.5), q(0.99), q(1.0))
}

/// The figures of one run.
struct Stats {
    permits: usize,
    achieved: f64,
    error_pct: f64,
    /// See the module doc: the rate from the first tenth of the permits to
    /// the last, placed by their median lateness, against the target.
    long_run_error_pct: f64,
    /// Lateness vs the ideal slot, ns, signed; sorted.
    lateness: Vec<i64>,
    gap_p50: u64,
    gap_p99: u64,
    cpu_pct: f64,
}

fn quantile<T: Copy>(sorted: &[T], q: f64) -> T {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn stats(run: &Run, rate: u64) -> Stats {
    let t = &run.times;
    let interval = 1e9 / rate as f64;
    let n = t.len();
    // From the priming permit at (about) t0 to the last: a limiter that keeps
    // its schedule scores 0 but for the last permit's own lateness (80 µs in
    // 2 s reads -0.004 %). Counting from the first recorded permit instead
    // would credit the burst a late start banks (up to `slack` permits).
    let achieved = match t.last() {
        Some(&last) if last > 0 => n as f64 * 1e9 / last as f64,
        _ => 0.0,
    };
    let mut lateness: Vec<i64> = t
        .iter()
        .enumerate()
        .map(|(k, &tk)| tk as i64 - ((k + 1) as f64 * interval).round() as i64)
        .collect();
    let long_run_error_pct = {
        let tenth = (n / 10).max(1);
        let median = |w: &[i64]| {
            let mut w = w.to_vec();
            w.sort_unstable();
            w[w.len() / 2] as f64
        };
        if n >= 20 {
            // Permit k (from 1) is due at k * interval; a window's median
            // lateness places its middle permit.
            let (k1, k2) = (
                tenth as f64 / 2.0 + 1.0,
                (n - tenth) as f64 + tenth as f64 / 2.0 + 1.0,
            );
            let t1 = k1 * interval + median(&lateness[..tenth]);
            let t2 = k2 * interval + median(&lateness[n - tenth..]);
            ((k2 - k1) * 1e9 / (t2 - t1) / rate as f64 - 1.0) * 100.0
        } else {
            f64::NAN
        }
    };
    lateness.sort_unstable();
    let mut gaps: Vec<u64> = t.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    Stats {
        permits: n,
        achieved,
        error_pct: (achieved / rate as f64 - 1.0) * 100.0,
        long_run_error_pct,
        lateness,
        gap_p50: if gaps.is_empty() {
            0
        } else {
            quantile(&gaps, 0.5)
        },
        gap_p99: if gaps.is_empty() {
            0
        } else {
            quantile(&gaps, 0.99)
        },
        cpu_pct: run.cpu as f64 / run.wall as f64 * 100.0,
    }
}

/// A duration in ns, in the unit that reads best.
fn human(ns: f64) -> String {
    let a = ns.abs();
    if a < 1e3 {
        format!("{ns:.0} ns")
    } else if a < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if a < 1e9 {
        format!("{:.1} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

fn rate_label(rate: u64) -> String {
    match rate {
        r if r >= 1_000_000 && r % 1_000_000 == 0 => format!("{}M/s", r / 1_000_000),
        r if r >= 1_000 && r % 1_000 == 0 => format!("{}k/s", r / 1_000),
        r => format!("{r}/s"),
    }
}

struct Args {
    secs: f64,
    rates: Vec<u64>,
    threads: Vec<usize>,
    plots: Option<String>,
    slack: Slack,
    repeat: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        secs: 1.5,
        rates: vec![1_000, 10_000, 100_000, 1_000_000],
        threads: vec![1, 8],
        plots: None,
        slack: Slack::DEFAULT,
        repeat: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--secs" => {
                args.secs = value()?.parse().map_err(|e| format!("--secs: {e}"))?;
                if !(args.secs > 0.05 && args.secs < 3600.0) {
                    return Err("--secs must be between 0.05 and 3600".into());
                }
            }
            "--rates" => {
                args.rates = value()?
                    .split(',')
                    .map(|r| match r.parse::<u64>() {
                        Ok(r) if (1..=1_000_000_000).contains(&r) => Ok(r),
                        _ => Err(format!(
                            "--rates: {r:?} is not a rate in 1..=1e9 per second"
                        )),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--threads" => {
                args.threads = value()?
                    .split(',')
                    .map(|t| match t.parse::<usize>() {
                        Ok(t) if (1..=256).contains(&t) => Ok(t),
                        _ => Err(format!("--threads: {t:?} is not a count in 1..=256")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--plots" => args.plots = Some(value()?),
            "--repeat" => {
                args.repeat = match value()?.parse() {
                    Ok(n) if (1..=100).contains(&n) => n,
                    _ => return Err("--repeat needs a count in 1..=100".into()),
                }
            }
            "--slack" => {
                let v = value()?;
                args.slack = match v.strip_suffix("ms") {
                    Some(ms) => Slack::time(Duration::from_millis(
                        ms.parse().map_err(|e| format!("--slack {v:?}: {e}"))?,
                    )),
                    None => Slack::permits(v.parse().map_err(|e| format!("--slack {v:?}: {e}"))?),
                }
            }
            "-h" | "--help" => {
                return Err(
                    "usage: accuracy [--secs S] [--rates R,..] [--threads N,..] [--slack N] [--repeat N] [--plots DIR]"
                        .into(),
                )
            }
            other => return Err(format!("unknown option {other:?} (try --help)")),
        }
    }
    Ok(args)
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    // The limiters pace by quanta's TSC clock, the report measures by the
    // OS's: compare the two over the whole report.
    let (clock, start) = (paceline::clock::DefaultClock::new(), Instant::now());
    let clock_start = paceline::clock::Clock::now(&clock);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    let (p50, p99, max) = sleep_overshoot();
    println!(
        "Machine now: load average {load}; thread::sleep(50 µs) wakes late by {} p50, {} p99, {} max.\n",
        human(p50),
        human(p99),
        human(max)
    );
    println!(
        "Each run {} s; paceline's slack {}; lateness is against the ideal slot t0 + k/rate; CPU in % of one core.\n",
        args.secs, args.slack
    );
    if args.repeat > 1 {
        println!(
            "Each configuration ran {} times, interleaved with the others; each row is its run with the median achieved rate.\n",
            args.repeat
        );
    }
    println!("| limiter | rate | threads | achieved /s | error | long-run error | late p50 | late p99 | late max | gap p50 | gap p99 | CPU |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let configs: Vec<(usize, u64, Subject)> = args
        .threads
        .iter()
        .flat_map(|&t| {
            args.rates
                .iter()
                .flat_map(move |&r| Subject::ALL.map(|s| (t, r, s)))
        })
        .collect();
    // Per configuration: (achieved rate, table row, the run if 1-thread).
    type Outcome = (f64, String, Option<Run>);
    let mut outcomes: Vec<Vec<Outcome>> = configs.iter().map(|_| Vec::new()).collect();
    for _ in 0..args.repeat {
        for (i, &(threads, rate, subject)) in configs.iter().enumerate() {
            let run = run(subject, rate, args.slack, threads, args.secs);
            let s = stats(&run, rate);
            let row = row(subject, rate, threads, &s);
            outcomes[i].push((s.achieved, row, (threads == 1).then_some(run)));
        }
    }
    // 1-thread runs, kept for the plots.
    let mut kept: Vec<(Subject, u64, Run)> = Vec::new();
    for (&(_, rate, subject), mut runs) in configs.iter().zip(outcomes) {
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (_, row, run) = runs.swap_remove(runs.len() / 2);
        println!("{row}");
        if let Some(run) = run {
            kept.push((subject, rate, run));
        }
    }
    let os = start.elapsed().as_nanos() as f64;
    let tsc = (paceline::clock::Clock::now(&clock) - clock_start) as f64;
    println!(
        "\nThe limiters' clock (paceline's DefaultClock) vs the OS clock over the report: {:+.1} ppm.",
        (tsc / os - 1.0) * 1e6
    );
    if let Some(dir) = args.plots {
        if kept.is_empty() {
            eprintln!("no 1-thread runs: no plots");
            return;
        }
        let write = |name: &str, svg: String| {
            let path = std::path::Path::new(&dir).join(name);
            match std::fs::write(&path, svg) {
                Ok(()) => println!("\nwrote {}", path.display()),
                Err(e) => eprintln!("cannot write {}: {e}", path.display()),
            }
        };
        write("accuracy-lateness.svg", lateness_plot(&kept, args.secs));
        write("accuracy-profile.svg", profile_plot(&kept, args.secs));
    }
}

// ---------------------------------------------------------------------------
// Plots: plain SVG, written by hand (no plotting dependency).

const FONT: &str = "font-family=\"Helvetica, Arial, sans-serif\"";

/// A panel's frame: where the plot area is and how values map into it.
struct Frame {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

impl Frame {
    fn px(&self, fx: f64) -> f64 {
        self.x + fx.clamp(0.0, 1.0) * self.w
    }
    fn py(&self, fy: f64) -> f64 {
        self.y + self.h - fy.clamp(0.0, 1.0) * self.h
    }
}

fn svg_open(w: f64, h: f64, title: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" {FONT} font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{title}</text>\n",
        w / 2.0
    )
}

fn legend(svg: &mut String, x: f64, y: f64, subjects: &[Subject]) {
    for (i, s) in subjects.iter().enumerate() {
        let lx = x + i as f64 * 170.0;
        let _ = writeln!(
            svg,
            "<rect x=\"{lx}\" y=\"{}\" width=\"18\" height=\"4\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            y - 4.0,
            s.color(),
            lx + 24.0,
            y,
            s.name()
        );
    }
}

/// Share of permits later than x, x on a log scale from 100 ns to 1 s, one
/// panel per rate: where each curve crosses 1 % is its p99.
fn lateness_plot(runs: &[(Subject, u64, Run)], secs: f64) -> String {
    let mut rates: Vec<u64> = runs.iter().map(|r| r.1).collect();
    rates.dedup();
    let (pw, ph, cols) = (400.0, 260.0, 2usize);
    let rows = rates.len().div_ceil(cols);
    let (w, h) = (
        cols as f64 * (pw + 90.0) + 30.0,
        rows as f64 * (ph + 80.0) + 90.0,
    );
    let mut svg = svg_open(
        w,
        h,
        &format!("Lateness of each permit vs its ideal slot (1 thread, {secs} s runs)"),
    );
    legend(&mut svg, 40.0, 50.0, &Subject::ALL);
    let (x_lo, x_hi) = (1.0f64, 9.0f64); // log10 ns: 10 ns .. 1 s
    let (y_lo, y_hi) = (-4.0f64, 0.0f64); // log10 share: 0.01 % .. 100 %
    for (i, &rate) in rates.iter().enumerate() {
        let f = Frame {
            x: 80.0 + (i % cols) as f64 * (pw + 90.0),
            y: 80.0 + (i / cols) as f64 * (ph + 80.0),
            w: pw,
            h: ph,
        };
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-weight=\"bold\">{} (interval {})</text>",
            f.x + f.w / 2.0,
            f.y - 8.0,
            rate_label(rate),
            human(1e9 / rate as f64)
        );
        let _ = writeln!(
            svg,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>",
            f.x, f.y, f.w, f.h
        );
        for (e, label) in [
            (1, "≤10 ns"),
            (2, "100 ns"),
            (3, "1 µs"),
            (4, "10 µs"),
            (5, "100 µs"),
            (6, "1 ms"),
            (7, "10 ms"),
            (8, "100 ms"),
            (9, "1 s"),
        ] {
            let x = f.px((e as f64 - x_lo) / (x_hi - x_lo));
            let _ = writeln!(svg, "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{label}</text>", f.y, f.y + f.h, f.y + f.h + 16.0);
        }
        for (e, label) in [
            (0, "100 %"),
            (-1, "10 %"),
            (-2, "1 %"),
            (-3, "0.1 %"),
            (-4, "0.01 %"),
        ] {
            let y = f.py((e as f64 - y_lo) / (y_hi - y_lo));
            let color = if e == -2 { "#999" } else { "#ddd" };
            let _ = writeln!(svg, "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{color}\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{label}</text>", f.x, f.x + f.w, f.x - 6.0, y + 4.0);
        }
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">lateness (log)</text>",
            f.x + f.w / 2.0,
            f.y + f.h + 34.0
        );
        let _ = writeln!(svg, "<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\">permits later than this</text>", f.x - 58.0, f.y + f.h / 2.0);
        for (subject, r, run) in runs {
            if *r != rate {
                continue;
            }
            let s = stats(run, rate);
            let n = s.lateness.len() as f64;
            let mut points = String::new();
            // Walk the sorted lateness from the latest down; at each x the
            // share later than x is (n - i) / n. Thin out to ~400 points.
            let step = (s.lateness.len() / 400).max(1);
            let mut i = 0;
            while i < s.lateness.len() {
                let late = s.lateness[i].max(1) as f64;
                let share = (n - i as f64) / n;
                let fx = (late.log10() - x_lo) / (x_hi - x_lo);
                let fy = (share.log10() - y_lo) / (y_hi - y_lo);
                let _ = write!(points, "{:.1},{:.1} ", f.px(fx), f.py(fy));
                // Near the tail keep every point.
                i += if n - (i as f64) < 200.0 { 1 } else { step };
            }
            let _ = writeln!(
                svg,
                "<polyline points=\"{points}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>",
                subject.color()
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// Permits in each millisecond over 30 ms in the middle of a run, one small
/// panel per limiter and rate, with the target as a dashed line.
fn profile_plot(runs: &[(Subject, u64, Run)], secs: f64) -> String {
    let mut rates: Vec<u64> = runs.iter().map(|r| r.1).filter(|&r| r >= 10_000).collect();
    rates.dedup();
    if rates.is_empty() {
        rates = runs.iter().map(|r| r.1).collect();
        rates.dedup();
    }
    let window_ms = 30usize;
    let start_ns = ((secs * 1e9) as u64 / 2).saturating_sub(window_ms as u64 * 500_000);
    let (pw, ph) = (300.0, 110.0);
    let cols = rates.len();
    let rows = Subject::ALL.len();
    let (w, h) = (
        cols as f64 * (pw + 70.0) + 160.0,
        rows as f64 * (ph + 40.0) + 110.0,
    );
    let mut svg = svg_open(
        w,
        h,
        &format!("Permits per millisecond, {window_ms} ms from the middle of each run (1 thread)"),
    );
    let _ = writeln!(svg, "<text x=\"{}\" y=\"46\" text-anchor=\"middle\">bars: permits in each 1 ms; dashed: the target rate</text>", w / 2.0);
    for (c, &rate) in rates.iter().enumerate() {
        let target = rate as f64 / 1000.0;
        for (r, subject) in Subject::ALL.iter().enumerate() {
            let f = Frame {
                x: 200.0 + c as f64 * (pw + 70.0),
                y: 80.0 + r as f64 * (ph + 40.0),
                w: pw,
                h: ph,
            };
            if r == 0 {
                let _ = writeln!(
                    svg,
                    "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>",
                    f.x + f.w / 2.0,
                    f.y - 10.0,
                    rate_label(rate)
                );
            }
            if c == 0 {
                let _ = writeln!(svg, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"{}\" font-weight=\"bold\">{}</text>", f.x - 45.0, f.y + f.h / 2.0 + 4.0, subject.color(), subject.name());
            }
            let Some((_, _, run)) = runs.iter().find(|(s, r, _)| s == subject && *r == rate) else {
                continue;
            };
            let mut counts = vec![0u32; window_ms];
            for &t in &run.times {
                if t >= start_ns {
                    let ms = ((t - start_ns) / 1_000_000) as usize;
                    if ms < window_ms {
                        counts[ms] += 1;
                    }
                }
            }
            let max = counts.iter().copied().max().unwrap_or(0) as f64;
            let y_max = (target * 2.0).max(max).max(1.0);
            let _ = writeln!(svg, "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>", f.x, f.y, f.w, f.h);
            let bw = f.w / window_ms as f64;
            for (i, &n) in counts.iter().enumerate() {
                let top = f.py(n as f64 / y_max);
                let _ = writeln!(
                    svg,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/>",
                    f.x + i as f64 * bw + 0.5,
                    top,
                    bw - 1.0,
                    f.y + f.h - top,
                    subject.color()
                );
            }
            let ty = f.py(target / y_max);
            let _ = writeln!(svg, "<line x1=\"{}\" y1=\"{ty}\" x2=\"{}\" y2=\"{ty}\" stroke=\"black\" stroke-dasharray=\"5,3\"/>", f.x, f.x + f.w);
            let _ = writeln!(svg, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>", f.x - 5.0, f.y + 10.0, y_max, f.x - 5.0, f.y + f.h);
            let _ = writeln!(
                svg,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0}</text>",
                f.x - 5.0,
                ty + 4.0,
                target
            );
            if r + 1 == rows {
                let _ = writeln!(
                    svg,
                    "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{window_ms} ms</text>",
                    f.x + f.w / 2.0,
                    f.y + f.h + 16.0
                );
            }
        }
    }
    svg.push_str("</svg>\n");
    svg
}
