//! `Watch`: a real TOML file, edited while threads take from the limiter it
//! configures. A good edit is in force within a second; a broken one is
//! reported (naming the bad value) and changes nothing; the next good one
//! loads; a dropped watcher loads nothing more.
#![cfg(all(feature = "serde", feature = "keyed"))]

use paceline::Take;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use paceline::config::watch::Watch;
use paceline::{BuildError, KeyedLimiter, Limits, Rate};

/// A fresh directory of this test's own, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("paceline-watch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `text` to `path` whole: to a file beside it, then renamed over
/// it, as editors and deploy tools save (a reader sees the old file or the
/// new, never half of one; a half-written file would be reported as broken).
fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Waits up to 2 s for `cond`; how long it took, or `None`.
fn within(cond: impl Fn() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        if cond() {
            return Some(start.elapsed());
        }
        thread::sleep(Duration::from_millis(5));
    }
    None
}

const V1: &str = r#"
[default]
rate = "100/s"
[overrides]
"tenant:a" = { rate = "10/s", burst = 2 }
"#;

const V2: &str = r#"
[default]
rate = "200/s"
[overrides]
"tenant:a" = { rate = "20/s", burst = 4 }
"tenant:b" = "5/s"
"#;

const BROKEN: &str = r#"
[default]
rate = "10/1.5s"
"#;

#[test]
fn edits_are_applied_while_takes_run_and_a_broken_edit_changes_nothing() {
    let dir = TempDir::new("edits");
    let path = dir.0.join("limits.toml");
    write(&path, V1);
    let limiter = Arc::new(KeyedLimiter::<String>::new(Rate::per_second(1)));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let reloads = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (target, errors, reloads) = (
            Arc::clone(&limiter),
            Arc::clone(&errors),
            Arc::clone(&reloads),
        );
        Watch::new(&path)
            .every(Duration::from_millis(20))
            // `write` saves by rename: a version is whole when first seen.
            .settle(Duration::from_millis(50))
            .on_error(move |e| errors.lock().unwrap().push(e.to_string()))
            .start(move |text| {
                let limits: Limits = toml::from_str(text)?;
                target.apply(&limits)?;
                reloads.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap()
    };
    // The first load happened before `start` returned.
    assert_eq!(limiter.rate(), Rate::per_second(100));
    assert_eq!(limiter.rate_for("tenant:a"), (Rate::per_second(10), 1));

    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        for t in 0..2 {
            let (limiter, stop) = (&limiter, &stop);
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _ =
                        limiter.try_take(&format!("tenant:{}", ["a", "b", "c"][(i % 3) as usize]));
                    i += 1 + t;
                }
            });
        }
        write(&path, V2);
        let took = within(|| limiter.rate() == Rate::per_second(200));
        assert!(
            took.is_some_and(|t| t < Duration::from_secs(1)),
            "V2 in force after {took:?}"
        );
        assert_eq!(limiter.rate_for("tenant:b").0, Rate::per_second(5));

        write(&path, BROKEN);
        assert!(
            within(|| !errors.lock().unwrap().is_empty()).is_some(),
            "the broken edit was not reported"
        );
        let reported = errors.lock().unwrap()[0].clone();
        assert!(
            reported.contains("10/1.5s") && reported.contains("decimals"),
            "{reported}"
        );
        assert!(reported.contains("unchanged"), "{reported}");
        assert_eq!(
            limiter.limits(),
            toml::from_str::<Limits>(V2).unwrap(),
            "untouched"
        );

        write(&path, V1);
        assert!(
            within(|| limiter.rate() == Rate::per_second(100)).is_some(),
            "V1 again"
        );
        stop.store(true, Ordering::Relaxed);
    });
    // Reported once, not at every poll.
    assert_eq!(
        errors.lock().unwrap().len(),
        1,
        "{:?}",
        errors.lock().unwrap()
    );
    // (The count follows the apply: wait for it rather than race it.)
    assert!(
        within(|| reloads.load(Ordering::SeqCst) == 3).is_some(),
        "V1, V2, V1"
    );
    thread::sleep(Duration::from_millis(50));
    assert_eq!(reloads.load(Ordering::SeqCst), 3, "V1, V2, V1 and no more");

    drop(watcher);
    write(&path, V2);
    thread::sleep(Duration::from_millis(200));
    assert_eq!(
        limiter.rate(),
        Rate::per_second(100),
        "a dropped watcher loads nothing"
    );
}

#[test]
fn a_first_load_that_fails_is_returned_and_nothing_is_watched() {
    let dir = TempDir::new("first");
    let path = dir.0.join("limits.toml");
    let missing = Watch::new(&path).start(|_| Ok(())).unwrap_err();
    assert!(missing.to_string().contains("cannot read"), "{missing}");
    write(&path, BROKEN);
    let limiter = KeyedLimiter::<String>::new(Rate::per_second(1));
    let err = Watch::new(&path)
        .start(move |text| {
            let limits: Limits = toml::from_str(text)?;
            limiter.apply(&limits)?;
            Ok(())
        })
        .unwrap_err();
    assert!(err.to_string().contains("10/1.5s"), "{err}");
    let BuildError::FileNotLoaded { path: at, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(at, &path);
}

#[test]
fn a_file_that_disappears_is_reported_once_and_loaded_when_back() {
    let dir = TempDir::new("gone");
    let path = dir.0.join("limits.toml");
    write(&path, V1);
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let loads = Arc::new(AtomicU64::new(0));
    let _watcher = {
        let (errors, loads) = (Arc::clone(&errors), Arc::clone(&loads));
        Watch::new(&path)
            .every(Duration::from_millis(10))
            .settle(Duration::from_millis(50))
            .on_error(move |e| errors.lock().unwrap().push(e.to_string()))
            .start(move |_| {
                loads.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap()
    };
    std::fs::remove_file(&path).unwrap();
    assert!(within(|| !errors.lock().unwrap().is_empty()).is_some());
    thread::sleep(Duration::from_millis(100));
    assert_eq!(errors.lock().unwrap().len(), 1, "once, not at every poll");
    write(&path, V2);
    assert!(
        within(|| loads.load(Ordering::SeqCst) == 2).is_some(),
        "loaded when back"
    );
}

/// A file saved in place, in two writes with a pause between them shorter
/// than the settle time: its first half parses on its own (a valid limits
/// document), yet is never applied; the whole file is, within the settle
/// time plus a poll (under 2 s at the defaults).
#[test]
fn a_half_written_file_is_never_applied() {
    const FIRST: &str = "[default]\nrate = \"200/s\"\n";
    const REST: &str = "[overrides]\n\"tenant:a\" = { rate = \"20/s\", burst = 4 }\n";
    let dir = TempDir::new("half");
    let path = dir.0.join("limits.toml");
    write(&path, V1);
    let applied = Arc::new(Mutex::new(Vec::<String>::new()));
    let _watcher = {
        let applied = Arc::clone(&applied);
        Watch::new(&path)
            .start(move |text| {
                toml::from_str::<Limits>(text)?;
                applied.lock().unwrap().push(text.to_owned());
                Ok(())
            })
            .unwrap()
    };
    assert!(toml::from_str::<Limits>(FIRST).is_ok(), "the half parses");
    // Saved in place, as `cat > limits.toml` or a slow writer does: the
    // file truncated, half of it written, a pause, the rest.
    let mut file = std::fs::File::create(&path).unwrap();
    std::io::Write::write_all(&mut file, FIRST.as_bytes()).unwrap();
    thread::sleep(Duration::from_millis(400));
    std::io::Write::write_all(&mut file, REST.as_bytes()).unwrap();
    drop(file);
    let whole = format!("{FIRST}{REST}");
    let took = within(|| applied.lock().unwrap().last() == Some(&whole));
    let applied = applied.lock().unwrap().clone();
    assert!(
        !applied.iter().any(|t| t == FIRST || t.is_empty()),
        "a part of the file was applied: {applied:?}"
    );
    assert!(took.is_some(), "the whole file in force: {applied:?}");
}

/// Runs `f` on a thread of its own; its result, or `None` if it has not
/// returned within 3 s (then `unstick` runs, to release it).
#[cfg(unix)]
fn bounded<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
    unstick: impl FnOnce(),
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(3)) {
        Ok(v) => Some(v),
        Err(_) => {
            unstick();
            None
        }
    }
}

/// Makes a FIFO at `path`, with the system's `mkfifo`.
#[cfg(unix)]
fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo")
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

/// Opens `path`'s write end without waiting, which releases a reader
/// blocked opening the FIFO (and makes it read an end of file).
#[cfg(unix)]
fn release(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
}

/// A FIFO at the watched path is reported as not a regular file, never
/// opened for a read that would wait for a writer: the first load fails at
/// once, a watcher whose file becomes a FIFO reports it and goes on, and
/// dropping that watcher returns at once.
#[test]
#[cfg(unix)]
fn a_fifo_at_the_watched_path_never_blocks_the_watcher_or_its_drop() {
    let dir = TempDir::new("fifo");
    let path = dir.0.join("limits.toml");
    mkfifo(&path);
    let first = {
        let watched = path.clone();
        bounded(
            move || Watch::new(watched).start(|_| Ok(())).map(drop),
            || release(&path),
        )
    };
    let err = first
        .expect("start() on a FIFO returned within 3 s")
        .unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");

    std::fs::remove_file(&path).unwrap();
    write(&path, V1);
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let watcher = {
        let errors = Arc::clone(&errors);
        Watch::new(&path)
            .every(Duration::from_millis(10))
            .on_error(move |e| errors.lock().unwrap().push(e.to_string()))
            .start(|_| Ok(()))
            .unwrap()
    };
    std::fs::remove_file(&path).unwrap();
    mkfifo(&path);
    let reported = within(|| {
        errors
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.contains("not a regular file"))
    });
    let dropped = {
        let path = path.clone();
        bounded(
            move || drop(watcher),
            move || {
                // Release the watcher's thread, as often as it opens again.
                for _ in 0..100 {
                    release(&path);
                    thread::sleep(Duration::from_millis(10));
                }
            },
        )
    };
    assert!(
        dropped.is_some(),
        "dropping the watcher returned within 3 s"
    );
    assert!(reported.is_some(), "{:?}", errors.lock().unwrap());
}
