//! What the interleaved measurements (`examples/fast_path.rs`,
//! `examples/window_path.rs`) share: a batch of calls timed in the
//! thread's CPU time, the median of a round's figures, and the ratios
//! printed as median (min, max).

use cpu_time::ThreadTime;

/// Calls per batch: a few milliseconds each.
pub const BATCH: u64 = 200_000;

/// Nanoseconds of this thread's CPU time per call of `f`, over one batch
/// (out of line: one copy per call timed, to read in a profile).
#[inline(never)]
pub fn time(mut f: impl FnMut()) -> f64 {
    let start = ThreadTime::now();
    for _ in 0..BATCH {
        f();
    }
    start.elapsed().as_nanos() as f64 / BATCH as f64
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Prints each call's median time and each ratio's median (min, max).
pub fn report(
    rounds: usize,
    names: &[&str],
    ns: &mut [Vec<f64>],
    labels: &[&str],
    ratios: &mut [Vec<f64>],
) {
    println!("ns per call, median of {rounds} interleaved rounds of {BATCH} calls:");
    for (name, all) in names.iter().zip(ns.iter_mut()) {
        println!("  {name:12} {:6.2}", median(all));
    }
    println!("ratios within each round: median (min, max):");
    let width = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    for (label, all) in labels.iter().zip(ratios.iter_mut()) {
        let m = median(all);
        println!(
            "  {label:width$} {m:.3} ({:.3}, {:.3})",
            all[0],
            all[all.len() - 1]
        );
    }
}
