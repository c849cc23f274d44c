//! A keyed limiter's state saved to a file and loaded back (feature
//! `persist`): across a real process restart (this test binary run again
//! as a child that takes and saves, and again as one that loads), exactly
//! (a spent burst still spent, credit back for the time down, never more
//! than the burst), refusing whole a file of other limits, of another
//! version, truncated or with a byte flipped, and written atomically.
#![cfg(feature = "persist")]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use paceline::clock::ManualClock;
use paceline::keyed::Loaded;
use paceline::{BuildError, KeyedLimiter, Limit, Rate, Take};

/// The child's instructions, when this binary runs as one.
const CHILD_ENV: &str = "PACELINE_PERSIST_CHILD";

/// A Unix time to set the manual clocks to: 2026-11-18, in ns.
const T0: u64 = 1_795_000_000_000_000_000;

/// A fresh directory of this test's own, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("paceline-persist-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self) -> PathBuf {
        self.0.join("keys.state")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The limits every process of these tests runs: 1/s with a burst of 3,
/// and `vip` at 10/s with a burst of 6.
fn limiter<C: paceline::clock::Clock>(clock: C) -> KeyedLimiter<String, C> {
    let limiter = KeyedLimiter::<String>::builder(Rate::per_second(1))
        .slack(2)
        .clock(clock)
        .build()
        .unwrap();
    limiter
        .set_override("vip".to_string(), Rate::per_second(10), 5)
        .unwrap();
    limiter
}

/// A manual clock reading the Unix time `T0 + after`.
fn clock_at(after: Duration) -> ManualClock {
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(T0) + after);
    clock
}

/// Runs this test again as a child process told `what`; its stdout.
fn child(test: &str, what: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, what)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .expect("run a child process");
    assert!(out.status.success(), "the child ({what}) failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The number a child printed after `label` (the test harness prints the
/// test's name on the same line as the child's first).
fn printed(out: &str, label: &str) -> u64 {
    let words: Vec<&str> = out.split_whitespace().collect();
    words
        .windows(2)
        .find_map(|w| (w[0] == label).then(|| w[1].parse().ok()).flatten())
        .unwrap_or_else(|| panic!("no {label:?} in the child's output:\n{out}"))
}

/// The child's halves: `save;PATH;MS` takes alice's whole burst, one of
/// bob's and two of vip's at `T0 + MS` on a manual clock and saves;
/// `load;PATH;MS` loads at `T0 + MS` and prints what each key has.
fn run_child(spec: &str) {
    let parts: Vec<&str> = spec.split(';').collect();
    let (path, ms) = (Path::new(parts[1]), parts[2].parse().unwrap());
    let limiter = limiter(clock_at(Duration::from_millis(ms)));
    match parts[0] {
        "save" => {
            limiter.try_take_n("alice", 3).unwrap();
            limiter.try_take("bob").unwrap();
            limiter.try_take_n("vip", 2).unwrap();
            println!("SAVED {}", limiter.save(path).unwrap());
        }
        "load" => {
            let loaded = limiter.load(path).unwrap();
            println!("RESTORED {}", loaded.restored);
            println!("AT_REST {}", loaded.at_rest);
            println!("DOWN_MS {}", loaded.down.as_millis());
            for key in ["alice", "bob", "vip", "carol"] {
                println!("{key} {}", limiter.available(key));
            }
        }
        other => panic!("unknown child half {other:?}"),
    }
}

#[test]
fn a_restart_in_another_process_keeps_each_keys_state_less_the_time_down() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return run_child(&spec);
    }
    let test = "a_restart_in_another_process_keeps_each_keys_state_less_the_time_down";
    let dir = TempDir::new("restart");
    let path = dir.file();
    let path = path.to_str().unwrap();
    let saved = child(test, &format!("save;{path};0"));
    assert_eq!(printed(&saved, "SAVED"), 3, "{saved}");

    // Back 100 ms later: alice's burst still spent, bob's one permit not
    // back yet, vip 1 back of its 2 (10/s).
    let quick = child(test, &format!("load;{path};100"));
    assert_eq!(printed(&quick, "RESTORED"), 3, "{quick}");
    assert_eq!(printed(&quick, "DOWN_MS"), 100, "{quick}");
    assert_eq!(printed(&quick, "alice"), 0, "{quick}");
    assert_eq!(printed(&quick, "bob"), 2, "{quick}");
    assert_eq!(printed(&quick, "vip"), 5, "{quick}");
    assert_eq!(printed(&quick, "carol"), 3, "{quick}");

    // Back 1.5 s later: one of alice's permits back, bob and vip at rest.
    let later = child(test, &format!("load;{path};1500"));
    assert_eq!(printed(&later, "RESTORED"), 1, "{later}");
    assert_eq!(printed(&later, "AT_REST"), 2, "{later}");
    assert_eq!(printed(&later, "alice"), 1, "{later}");
    assert_eq!(printed(&later, "bob"), 3, "{later}");
    assert_eq!(printed(&later, "vip"), 6, "{later}");

    // Back an hour later: never more than the burst.
    let long = child(test, &format!("load;{path};3600000"));
    assert_eq!(printed(&long, "AT_REST"), 3, "{long}");
    assert_eq!(printed(&long, "alice"), 3, "{long}");
}

/// The limits of the daily quota's processes: [`limiter`]'s, and `acme`
/// counted by day, `quota` a day.
fn daily<C: paceline::clock::Clock>(clock: C, quota: u64) -> KeyedLimiter<String, C> {
    let limiter = limiter(clock);
    let day = Limit::per_window(quota, "day".parse().unwrap()).unwrap();
    limiter.set_override_limit("acme".to_string(), day).unwrap();
    limiter
}

/// `save;PATH;MS` takes 7 of acme's 10 a day and one of bob's at
/// `T0 + MS` and saves; `load;PATH;MS;QUOTA` loads at `T0 + MS` under a
/// quota of `QUOTA` and prints what each key has, or the refusal.
fn run_day_child(spec: &str) {
    let parts: Vec<&str> = spec.split(';').collect();
    let (path, ms) = (Path::new(parts[1]), parts[2].parse().unwrap());
    let clock = clock_at(Duration::from_millis(ms));
    match parts[0] {
        "save" => {
            let limiter = daily(clock, 10);
            limiter.try_take_n("acme", 7).unwrap();
            limiter.try_take("bob").unwrap();
            println!("SAVED {}", limiter.save(path).unwrap());
        }
        "load" => {
            let limiter = daily(clock, parts[3].parse().unwrap());
            match limiter.load(path) {
                Ok(loaded) => {
                    println!("RESTORED {}", loaded.restored);
                    println!("AT_REST {}", loaded.at_rest);
                    for key in ["acme", "bob"] {
                        println!("{key} {}", limiter.available(key));
                    }
                }
                Err(e) => println!("REFUSED 1 {e}"),
            }
        }
        other => panic!("unknown child half {other:?}"),
    }
}

#[test]
fn a_daily_quota_keeps_its_count_across_a_restart_until_its_day_ends() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return run_day_child(&spec);
    }
    let test = "a_daily_quota_keeps_its_count_across_a_restart_until_its_day_ends";
    let dir = TempDir::new("daily");
    let path = dir.file();
    let path = path.to_str().unwrap();
    // T0 is 11:06:40 UTC: midnight is 46 400 s later.
    let saved = child(test, &format!("save;{path};0"));
    assert_eq!(printed(&saved, "SAVED"), 2, "{saved}");

    // Back an hour later, the same day: acme's 7 still counted, bob's
    // permit back.
    let hour = child(test, &format!("load;{path};3600000;10"));
    assert_eq!(printed(&hour, "RESTORED"), 1, "{hour}");
    assert_eq!(printed(&hour, "AT_REST"), 1, "{hour}");
    assert_eq!(printed(&hour, "acme"), 3, "{hour}");
    assert_eq!(printed(&hour, "bob"), 3, "{hour}");

    // Back just before midnight: still 3; just after: a new day's 10.
    let before = child(test, &format!("load;{path};46399000;10"));
    assert_eq!(printed(&before, "acme"), 3, "{before}");
    let after = child(test, &format!("load;{path};46400000;10"));
    assert_eq!(printed(&after, "AT_REST"), 2, "{after}");
    assert_eq!(printed(&after, "acme"), 10, "{after}");

    // Under another quota the file is another limit set's: refused.
    let other = child(test, &format!("load;{path};3600000;11"));
    assert_eq!(printed(&other, "REFUSED"), 1, "{other}");
    assert!(other.contains("saved under other limits"), "{other}");
}

#[test]
fn a_restart_on_the_default_clock_counts_the_wall_clock_time_down() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        // On the default clock, whose origin is the process's start: the
        // state goes through the Unix times of the save and the load.
        let (half, path) = spec.split_once(';').unwrap();
        let limiter = KeyedLimiter::<u64>::builder(Rate::per_second(5))
            .slack(2)
            .build()
            .unwrap();
        let hourly = KeyedLimiter::<u64>::builder(Rate::per_hour(1))
            .slack(2)
            .build()
            .unwrap();
        let (fast, slow) = (format!("{path}.fast"), format!("{path}.slow"));
        if half == "save" {
            limiter.try_take_n(&7, 3).unwrap();
            hourly.try_take_n(&7, 3).unwrap();
            limiter.save(&fast).unwrap();
            hourly.save(&slow).unwrap();
        } else {
            limiter.load(&fast).unwrap();
            hourly.load(&slow).unwrap();
            println!("FAST {}", limiter.available(&7));
            println!("SLOW {}", hourly.available(&7));
            let wait = hourly.try_take(&7).unwrap_err().retry_after().unwrap();
            println!("WAIT_S {}", wait.as_secs());
        }
        return;
    }
    let test = "a_restart_on_the_default_clock_counts_the_wall_clock_time_down";
    let dir = TempDir::new("wall");
    let path = dir.file();
    let path = path.to_str().unwrap();
    child(test, &format!("save;{path}"));
    // At 5/s, a second down gives back 5 permits: capped at the burst, 3.
    std::thread::sleep(Duration::from_millis(1100));
    let out = child(test, &format!("load;{path}"));
    assert_eq!(printed(&out, "FAST"), 3, "{out}");
    // At 1/h, a burst spent a second ago is still spent: the next permit
    // is most of an hour away.
    assert_eq!(printed(&out, "SLOW"), 0, "{out}");
    let wait = printed(&out, "WAIT_S");
    assert!((3000..3600).contains(&wait), "{out}");
}

/// A file saved by [`limiter`] with alice's burst spent, at `T0`.
fn saved(dir: &TempDir) -> PathBuf {
    let l = limiter(clock_at(Duration::ZERO));
    l.try_take_n("alice", 3).unwrap();
    assert_eq!(l.save(dir.file()).unwrap(), 1);
    dir.file()
}

/// A limiter of the same limits with bob's burst spent: what a refused
/// load must leave as it was.
fn bystander() -> KeyedLimiter<String, ManualClock> {
    let l = limiter(clock_at(Duration::from_millis(10)));
    l.try_take_n("bob", 3).unwrap();
    l
}

/// `err` is a state file error naming `path` and saying `what`.
fn refused_for(err: BuildError, path: &Path, what: &str) {
    let text = err.to_string();
    assert!(
        matches!(&err, BuildError::StateFile { path: p, .. } if p == path),
        "{err:?}"
    );
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains(what), "{text:?} does not say {what:?}");
}

/// Nothing of the file applied: bob still spent, alice untouched.
fn nothing_applied(l: &KeyedLimiter<String, ManualClock>) {
    assert_eq!(l.available("bob"), 0);
    assert_eq!(l.available("alice"), 3);
    assert_eq!(l.len(), 1);
}

#[test]
fn a_file_saved_under_other_limits_is_refused_and_nothing_applied() {
    let dir = TempDir::new("limits");
    let path = saved(&dir);
    let other = KeyedLimiter::<String>::builder(Rate::per_second(2))
        .slack(2)
        .clock(clock_at(Duration::from_millis(10)))
        .build()
        .unwrap();
    other
        .set_override("vip".to_string(), Rate::per_second(10), 5)
        .unwrap();
    other.try_take_n("bob", 3).unwrap();
    let err = other.load(&path).unwrap_err();
    refused_for(err, &path, "saved under other limits");
    assert_eq!(other.available("alice"), 3);
    assert_eq!(other.len(), 1);

    // The same set, spelled otherwise and set in another order: one
    // fingerprint.
    let same = KeyedLimiter::<String>::builder("60/min".parse().unwrap())
        .slack(2)
        .clock(clock_at(Duration::from_millis(10)))
        .build()
        .unwrap();
    same.set_override("vip".to_string(), Rate::per_second(1), 0)
        .unwrap();
    same.set_override("vip".to_string(), "600/min".parse().unwrap(), 5)
        .unwrap();
    assert_eq!(same.load(&path).unwrap().restored, 1);
    assert_eq!(same.available("alice"), 0);
    // An override more is another set.
    same.set_override("free".to_string(), Rate::per_second(1), 0)
        .unwrap();
    refused_for(same.load(&path).unwrap_err(), &path, "other limits");
}

#[test]
fn a_file_of_another_version_is_refused_and_nothing_applied() {
    let dir = TempDir::new("version");
    let path = saved(&dir);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.starts_with("paceline keyed state\nversion 1\n"),
        "{text}"
    );
    std::fs::write(&path, text.replacen("version 1", "version 2", 1)).unwrap();
    let l = bystander();
    refused_for(l.load(&path).unwrap_err(), &path, "format version 2");
    nothing_applied(&l);
    std::fs::write(
        &path,
        text.replacen("paceline keyed state", "something else", 1),
    )
    .unwrap();
    refused_for(
        l.load(&path).unwrap_err(),
        &path,
        "not a \"paceline keyed state\" file",
    );
    nothing_applied(&l);
}

#[test]
fn a_truncated_file_is_refused_and_nothing_applied() {
    let dir = TempDir::new("truncated");
    let path = saved(&dir);
    let whole = std::fs::read(&path).unwrap();
    let l = bystander();
    // Cut anywhere past the version line, on a line's end or not.
    let from = "paceline keyed state\nversion 1\n".len();
    for len in (from..whole.len()).step_by(7).chain([whole.len() - 1]) {
        std::fs::write(&path, &whole[..len]).unwrap();
        let err = l.load(&path).unwrap_err();
        refused_for(err, &path, "truncated");
        nothing_applied(&l);
    }
    std::fs::write(&path, &whole).unwrap();
    assert_eq!(l.load(&path).unwrap().restored, 1);
    assert_eq!(l.available("alice"), 0);
}

#[test]
fn a_flipped_byte_is_refused_and_nothing_applied() {
    let dir = TempDir::new("flipped");
    let path = saved(&dir);
    let whole = std::fs::read(&path).unwrap();
    let l = bystander();
    // Every byte after the version line, flipped in its low bit.
    let from = "paceline keyed state\nversion 1\n".len();
    for i in from..whole.len() - 1 {
        let mut bad = whole.clone();
        bad[i] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let err = l.load(&path).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("checksum mismatch") || text.contains("truncated"),
            "byte {i}: {text}"
        );
        nothing_applied(&l);
    }
}

#[test]
fn a_missing_file_is_an_io_error_naming_it() {
    let dir = TempDir::new("missing");
    let l = bystander();
    let err = l.load(dir.file()).unwrap_err();
    let io = std::error::Error::source(&err)
        .and_then(|e| e.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    assert_eq!(io, Some(std::io::ErrorKind::NotFound), "{err}");
    refused_for(err, &dir.file(), "not loaded");
    nothing_applied(&l);
}

#[test]
fn a_temporary_file_left_by_a_crash_breaks_neither_load_nor_save() {
    let dir = TempDir::new("atomic");
    let path = saved(&dir);
    let old = std::fs::read(&path).unwrap();
    // A crash between the write and the rename: a half-written temporary
    // file beside the old, whole one.
    let tmp = dir.0.join("keys.state.tmp");
    std::fs::write(&tmp, &old[..old.len() / 2]).unwrap();
    let l = limiter(clock_at(Duration::from_millis(10)));
    assert_eq!(l.load(&path).unwrap().restored, 1, "the old file, whole");
    assert_eq!(l.available("alice"), 0);
    // The next save writes over it and renames it into place.
    l.try_take_n("bob", 2).unwrap();
    assert_eq!(l.save(&path).unwrap(), 2);
    assert!(!tmp.exists(), "the temporary file was renamed");
    let names: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let back = limiter(clock_at(Duration::from_millis(10)));
    assert_eq!(back.load(&path).unwrap().restored, 2);
    assert_eq!((back.available("alice"), back.available("bob")), (0, 1));
}

#[test]
fn a_save_that_cannot_be_written_leaves_the_old_file() {
    let dir = TempDir::new("unwritable");
    let path = saved(&dir);
    let old = std::fs::read(&path).unwrap();
    // The temporary file's name taken by a directory: the write fails.
    std::fs::create_dir(dir.0.join("keys.state.tmp")).unwrap();
    let l = limiter(clock_at(Duration::from_millis(10)));
    l.try_take_n("bob", 3).unwrap();
    let err = l.save(&path).unwrap_err();
    refused_for(err, &path, "not saved");
    assert_eq!(std::fs::read(&path).unwrap(), old);
}

#[test]
fn a_load_replaces_the_keys_it_names_and_leaves_the_others() {
    let dir = TempDir::new("replace");
    let path = saved(&dir); // alice spent at T0
    let l = limiter(clock_at(Duration::from_millis(500)));
    l.try_take("alice").unwrap(); // 2 left here
    l.try_take_n("bob", 3).unwrap();
    let loaded = l.load(&path).unwrap();
    assert_eq!(loaded.restored, 1);
    assert_eq!(loaded.down, Duration::from_millis(500));
    assert_eq!(
        l.available("alice"),
        0,
        "the file's state, not the limiter's"
    );
    assert_eq!(l.available("bob"), 0, "not in the file: as it was");

    // A key the file names that came to rest while down is forgotten here.
    let rested = limiter(clock_at(Duration::from_secs(10)));
    rested.try_take_n("alice", 3).unwrap();
    let loaded = rested.load(&path).unwrap();
    assert_eq!((loaded.restored, loaded.at_rest), (0, 1));
    assert_eq!(rested.available("alice"), 3);
    assert!(rested.is_empty());
}

#[test]
fn a_load_tracks_no_more_keys_than_the_ceiling() {
    let dir = TempDir::new("ceiling");
    let l = limiter(clock_at(Duration::ZERO));
    for key in ["a", "b", "c"] {
        l.try_take_n(key, 3).unwrap();
    }
    assert_eq!(l.save(dir.file()).unwrap(), 3);
    let small = KeyedLimiter::<String>::builder(Rate::per_second(1))
        .slack(2)
        .max_keys(2)
        .clock(clock_at(Duration::ZERO))
        .build()
        .unwrap();
    small
        .set_override("vip".to_string(), Rate::per_second(10), 5)
        .unwrap();
    let loaded = small.load(dir.file()).unwrap();
    assert_eq!((loaded.restored, loaded.no_room), (2, 1));
    assert_eq!(small.len(), 2);
}

#[test]
fn keys_of_any_serde_type_come_back() {
    let dir = TempDir::new("ip");
    let make = || {
        KeyedLimiter::<IpAddr>::builder(Rate::per_minute(1))
            .slack(1)
            .clock(clock_at(Duration::ZERO))
            .build()
            .unwrap()
    };
    let (v4, v6): (IpAddr, IpAddr) = ("10.0.0.7".parse().unwrap(), "2001:db8::1".parse().unwrap());
    let l = make();
    l.try_take_n(&v4, 2).unwrap();
    l.try_take(&v6).unwrap();
    l.save(dir.file()).unwrap();
    let back = make();
    assert_eq!(back.load(dir.file()).unwrap().restored, 2);
    assert_eq!((back.available(&v4), back.available(&v6)), (0, 1));
}

#[test]
fn a_saver_saves_every_period_and_once_more_when_stopped() {
    let dir = TempDir::new("saver");
    let path = dir.file();
    let clock = clock_at(Duration::ZERO);
    let l = Arc::new(limiter(clock.clone()));
    l.try_take_n("alice", 3).unwrap();
    let saver = l.save_every(&path, Duration::from_millis(20));
    // A periodic save, within 5 s on a loaded machine.
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < Duration::from_secs(5), "no save in 5 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(saver.last_error(), None);
    // Bob is taken after; the save at the stop has him.
    l.try_take_n("bob", 3).unwrap();
    assert_eq!(saver.stop().unwrap(), 2);
    let back = limiter(clock.clone());
    assert_eq!(back.load(&path).unwrap().restored, 2);
    assert_eq!((back.available("alice"), back.available("bob")), (0, 0));

    // Dropped, it saves too.
    let saver = l.save_every(&path, Duration::from_secs(3600));
    l.try_take_n("carol", 3).unwrap();
    drop(saver);
    let back = limiter(clock);
    assert_eq!(back.load(&path).unwrap().restored, 3);
}

#[test]
fn a_saver_that_cannot_write_says_why() {
    let dir = TempDir::new("saver-error");
    let path = dir.0.join("no-such-dir").join("keys.state");
    let l = Arc::new(limiter(clock_at(Duration::ZERO)));
    l.try_take("alice").unwrap();
    let saver = l.save_every(&path, Duration::from_millis(10));
    let start = Instant::now();
    let err = loop {
        if let Some(err) = saver.last_error() {
            break err;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "no error in 5 s");
        std::thread::sleep(Duration::from_millis(5));
    };
    refused_for(err, &path, "not saved");
    refused_for(saver.stop().unwrap_err(), &path, "not saved");
}

/// A limiter with no busy key saves a file of no entries, which loads.
#[test]
fn an_empty_file_loads_nothing() {
    let dir = TempDir::new("empty");
    let l = limiter(clock_at(Duration::ZERO));
    assert_eq!(l.save(dir.file()).unwrap(), 0);
    let loaded = l.load(dir.file()).unwrap();
    assert_eq!(loaded, Loaded::default());
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn an_async_keyed_limiters_saver_saves_when_dropped() {
    use paceline::tokio::AsyncKeyedLimiter;
    let dir = TempDir::new("async");
    let path = dir.file();
    let faced = AsyncKeyedLimiter::from(limiter(clock_at(Duration::ZERO)));
    let saver = faced.save_every(&path, Duration::from_secs(3600));
    faced.limiter().try_take_n("alice", 3).unwrap();
    drop(saver);
    let back = limiter(clock_at(Duration::from_millis(10)));
    assert_eq!(back.load(&path).unwrap().restored, 1);
    assert_eq!(back.available("alice"), 0);
}
