//! A keyed limiter's state saved to a file and loaded back (feature
//! `persist`): the time of a save and of a load, and the file's size, at
//! 10 000, 100 000 and 1 000 000 busy keys.
//!
//! ```text
//! cargo run --release -p paceline-benches --features persist --example persist
//! cargo run --release -p paceline-benches --features persist --example persist -- --runs 3 --dir /tmp
//! ```
//!
//! Each key is a `u64` that took one permit of its burst of 10 at one an
//! hour, so every key is busy (for an hour) and saved. A save reads every shard and
//! writes, fsyncs and renames the file; a load reads it, checks it whole
//! and puts each key into a fresh limiter of the same limits. Each figure
//! is the median of `--runs` (default 5) runs, in wall time; the fsyncs
//! are the disk's (`--dir`, default the system's temporary directory), so
//! figures from another disk differ by its flush time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use paceline::{KeyedLimiter, Rate, Take};

fn limiter(keys: usize) -> KeyedLimiter<u64> {
    KeyedLimiter::<u64>::builder(Rate::per_hour(1))
        .slack(9)
        .max_keys(keys)
        .build()
        .expect("a valid limiter")
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let runs: usize = arg("--runs").map_or(5, |r| r.parse().expect("--runs N"));
    let dir = arg("--dir").map_or_else(std::env::temp_dir, PathBuf::from);
    let path = dir.join(format!(
        "paceline-persist-bench-{}.state",
        std::process::id()
    ));
    println!("| keys | save | per key | load | per key | file | per key |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for keys in [10_000usize, 100_000, 1_000_000] {
        let source = limiter(keys);
        for key in 0..keys as u64 {
            source.try_take(&key).expect("a key's first permit");
        }
        let (mut saves, mut loads) = (Vec::new(), Vec::new());
        for _ in 0..runs.max(1) {
            let start = Instant::now();
            let saved = source.save(&path).expect("a save");
            saves.push(start.elapsed());
            assert_eq!(saved, keys, "every busy key saved");
            let target = limiter(keys);
            let start = Instant::now();
            let loaded = target.load(&path).expect("a load");
            loads.push(start.elapsed());
            assert_eq!(loaded.restored, keys, "every key restored");
        }
        let bytes = std::fs::metadata(&path).expect("the file").len();
        let (save, load) = (median(saves), median(loads));
        let per = |d: Duration| d.as_nanos() as f64 / keys as f64;
        println!(
            "| {keys} | {:.1} ms | {:.0} ns | {:.1} ms | {:.0} ns | {:.1} MB | {:.1} B |",
            save.as_secs_f64() * 1e3,
            per(save),
            load.as_secs_f64() * 1e3,
            per(load),
            bytes as f64 / 1e6,
            bytes as f64 / keys as f64,
        );
    }
    let _ = std::fs::remove_file(&path);
}
