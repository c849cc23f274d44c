//! Per-key limits from a TOML file, reloaded while the limiter is in use.
//! The program writes the file, takes from the limiter on two threads, then
//! edits the file the way an operator would: a new rate for a tenant (in
//! force within a second), a broken edit (reported, and ignored), a fix.
//!
//! ```text
//! cargo run -p paceline-examples --features serde --example config_reload
//! ```

use paceline::Take;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use paceline::config::watch::Watch;
use paceline::{KeyedLimiter, Limits, Rate};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("paceline-config-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("limits.toml");
    save(
        &path,
        r#"
[default]
rate = "100/s"
[overrides]
"tenant:acme" = { rate = "1000/s", burst = 50 }
"tenant:free" = "2/s"
"#,
    )?;

    // The whole job: a limiter, and a watcher that applies the file to it.
    let limiter = Arc::new(KeyedLimiter::<String>::new(Rate::per_second(1)));
    let target = Arc::clone(&limiter);
    let watch = Watch::new(&path)
        .every(Duration::from_millis(100))
        // `save` renames a whole file over the old one: never half-written
        // at the path, so a version may go in force as soon as it is seen.
        .settle(Duration::ZERO)
        .on_error(|e| println!("  reported: {e}"))
        .start(move |text| Ok(target.apply(&toml::from_str::<Limits>(text)?)?))?;

    println!(
        "loaded {}: tenant:free at {:?}",
        path.display(),
        limiter.rate_for("tenant:free").0
    );
    let stop = Arc::new(AtomicBool::new(false));
    let takers: Vec<_> = ["tenant:acme", "tenant:free"]
        .into_iter()
        .map(|key| {
            let (limiter, stop) = (Arc::clone(&limiter), Arc::clone(&stop));
            thread::spawn(move || {
                let mut admitted = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if limiter.try_take(key).is_ok() {
                        admitted += 1;
                    }
                    thread::sleep(Duration::from_micros(200));
                }
                (key, admitted)
            })
        })
        .collect();

    thread::sleep(Duration::from_millis(300));
    println!("edit: tenant:free to 50/s");
    let edited = Instant::now();
    save(
        &path,
        r#"
[default]
rate = "100/s"
[overrides]
"tenant:acme" = { rate = "1000/s", burst = 50 }
"tenant:free" = "50/s"
"#,
    )?;
    while limiter.rate_for("tenant:free").0 != Rate::per_second(50) {
        if edited.elapsed() > Duration::from_secs(5) {
            return Err("the edit was not applied within 5 s".into());
        }
        thread::sleep(Duration::from_millis(5));
    }
    println!("  in force after {:?}", edited.elapsed());

    println!("edit: a broken rate (\"10/1.5s\")");
    save(&path, "[default]\nrate = \"10/1.5s\"\n")?;
    thread::sleep(Duration::from_millis(400));
    println!(
        "  still in force: default {:?}, tenant:free {:?}",
        limiter.rate(),
        limiter.rate_for("tenant:free").0
    );

    stop.store(true, Ordering::Relaxed);
    for taker in takers {
        let (key, admitted) = taker.join().map_err(|_| "a taker panicked")?;
        println!("{key}: {admitted} admitted");
    }
    drop(watch);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Saves `text` whole, as editors do: beside the file, then renamed over it.
fn save(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}
