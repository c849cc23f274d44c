//! Guava's warm-up on paceline: a greedy caller from cold, on a clock that
//! jumps to each slot, at 100/s with a warm-up of 2 s. Prints the rate
//! (one over the gap between consecutive permits) over time, and with
//! `--svg PATH` draws it (the plot in `docs/warm-up.svg`).
//!
//! ```text
//! cargo run -p paceline-examples --example warm_up
//! cargo run -p paceline-examples --example warm_up -- --svg docs/warm-up.svg
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use paceline::{clock::ManualClock, AtomicLimiter, BuildError, Rate, Slack, WarmUpLimiter};

const RATE: u64 = 100;
const WARM_UP: Duration = Duration::from_secs(2);

/// `(time of the permit, s; rate since the previous permit, /s)` for a
/// greedy caller over `secs`, idle for `idle_at.1` from `idle_at.0`.
fn ramp(slack: Slack, secs: f64, idle_at: (f64, Duration)) -> Result<Vec<(f64, f64)>, BuildError> {
    let clock = ManualClock::with_auto_advance();
    let limiter: WarmUpLimiter<ManualClock> = AtomicLimiter::builder(Rate::per_second(RATE))
        .slack(slack)
        .warm_up(WARM_UP)
        .clock(clock.clone())
        .build()?;
    let mut points = vec![];
    let mut last: Option<f64> = None;
    let mut idled = false;
    loop {
        let t = limiter.take().at().as_secs_f64();
        if t > secs {
            return Ok(points);
        }
        if let Some(prev) = last {
            // Permits that go together (a burst) share one instant: count
            // them at the rate the gap before them allows.
            points.push((t, if t > prev { 1.0 / (t - prev) } else { f64::NAN }));
        }
        last = Some(t);
        if !idled && t >= idle_at.0 {
            idled = true;
            clock.advance(idle_at.1);
            last = None;
            points.push((t, f64::NAN)); // no line across the idle time
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let svg = std::env::args().skip_while(|a| a != "--svg").nth(1);
    let secs = 10.0;
    let idle = (4.0, Duration::from_secs(2));
    let series = [
        (
            "slack 0 (Guava's decisions)",
            "#1f77b4",
            ramp(Slack::NONE, secs, idle)?,
        ),
        (
            "default slack (10 permits)",
            "#ff7f0e",
            ramp(Slack::DEFAULT, secs, idle)?,
        ),
    ];
    println!(
        "{RATE}/s, warm-up {WARM_UP:?}, greedy caller from cold; idle {:?} at {} s",
        idle.1, idle.0
    );
    println!("{:>6}  {:>28}  {:>28}", "t (s)", series[0].0, series[1].0);
    for tick in 0..=(secs * 2.0) as usize {
        let t = tick as f64 / 2.0;
        let at = |s: &[(f64, f64)]| {
            s.iter()
                .find(|p| p.0 >= t && p.0 < t + 0.5 && p.1.is_finite())
                .map_or("-".to_string(), |p| format!("{:.1}/s", p.1))
        };
        println!(
            "{t:>6.1}  {:>28}  {:>28}",
            at(&series[0].2),
            at(&series[1].2)
        );
    }
    if let Some(path) = svg {
        std::fs::write(&path, plot(&series, secs))?;
        println!("wrote {path}");
    }
    Ok(())
}

/// A line's name, colour and points `(s, permits/s)`.
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// A line chart of rate over time, plain SVG.
fn plot(series: &[Series<'_>], secs: f64) -> String {
    let (w, h, left, top, bottom) = (720.0, 360.0, 60.0, 30.0, 40.0);
    let ymax = 120.0;
    let x = |t: f64| left + t / secs * (w - left - 20.0);
    let y = |r: f64| top + (1.0 - r.min(ymax) / ymax) * (h - top - bottom);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    for r in [0.0, 100.0 / 3.0, 50.0, 100.0] {
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{y}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{r:.0}/s</text>"##,
            w - 20.0,
            left - 6.0,
            y(r) + 4.0,
            y = y(r)
        );
    }
    for t in 0..=secs as usize {
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{t} s</text>"#,
            x(t as f64),
            h - bottom + 16.0
        );
    }
    for (i, (name, color, points)) in series.iter().enumerate() {
        let mut d = String::new();
        let mut pen_up = true;
        for &(t, r) in points {
            if !r.is_finite() {
                pen_up = true;
                continue;
            }
            let _ = write!(
                d,
                "{}{:.1},{:.1} ",
                if pen_up { "M" } else { "L" },
                x(t),
                y(r)
            );
            pen_up = false;
        }
        let _ = write!(
            s,
            r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="2"/><text x="{}" y="{}" fill="{color}">{name}</text>"#,
            left + 10.0,
            top + 14.0 + 16.0 * i as f64
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">{RATE}/s, warm-up {WARM_UP:?}: permits/s over time from cold (2 s idle at 4 s)</text></svg>"#,
        w - 20.0,
        top - 10.0
    );
    s.push('\n');
    s
}
