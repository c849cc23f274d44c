//! `--redis URL --key K`, `--postgres CONN --key K` and `--memcached ADDR
//! --key K`: two `paceline` processes on one key against a real
//! `redis-server`, a real PostgreSQL and a real `memcached`, that this file
//! starts in a temporary directory (the library's harnesses,
//! `tests/support/redis_server.rs`, `pg_server.rs` and
//! `memcached_server.rs`), stopped when the test ends. Together they never pass
//! more than the limit's window bound, `S + 1 + w / T` lines in any window
//! `w` from the start. And a run without a rate, paced by its key's limit
//! in the fleet's limits document on the server, and following it.

#[path = "../../tests/support/redis_server.rs"]
mod support;

#[path = "../../tests/support/pg_server.rs"]
mod pg;

#[path = "../../tests/support/memcached_server.rs"]
mod memcached;

#[path = "../../tests/support/lines.rs"]
mod lines;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::RedisServer;

/// How far the binaries' sleeps and the test's clock may disagree.
const CLOCKS: Duration = Duration::from_millis(2);

#[test]
fn two_processes_on_one_redis_key_never_pass_more_than_the_bound() {
    let server = RedisServer::start();
    two_processes_share_one_limit("--redis", &server.url());
}

#[test]
fn two_processes_on_one_postgres_key_never_pass_more_than_the_bound() {
    let server = pg::PgServer::start();
    two_processes_share_one_limit("--postgres", &server.conn());
}

#[test]
fn two_processes_on_one_memcached_key_never_pass_more_than_the_bound() {
    let server = memcached::MemcachedServer::start();
    two_processes_share_one_limit("--memcached", &server.addr());
}

/// Two runs of the binary with `flag address --key shared`.
fn two_processes_share_one_limit(flag: &str, address: &str) {
    const RATE: u64 = 100; // T = 10 ms
    const BURST: u64 = 5; // S = 4
    const LINES: usize = 100; // per process: 200 lines, about 2 s together
    let t = Duration::from_nanos(1_000_000_000 / RATE);

    let start = Instant::now();
    let runs: Vec<_> = (0..2)
        .map(|p| {
            let mut child = Command::new(env!("CARGO_BIN_EXE_paceline"))
                .args([&format!("{RATE}/s"), "--burst", &BURST.to_string()])
                .args([flag, address, "--key", "shared"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run the paceline binary");
            let mut stdin = child.stdin.take().unwrap();
            let input: String = (0..LINES).map(|i| format!("{p}:{i}\n")).collect();
            thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
            let out = BufReader::new(child.stdout.take().unwrap());
            let reader = thread::spawn(move || {
                out.lines()
                    .map(|l| (Instant::now(), l.unwrap()))
                    .collect::<Vec<_>>()
            });
            (child, reader)
        })
        .collect();

    let mut arrivals = Vec::new();
    for (p, (mut child, reader)) in runs.into_iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "paceline {p} did not end");
            thread::sleep(Duration::from_millis(5));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(0), "paceline {p}: {stderr}");
        let lines = reader.join().unwrap();
        // Each process passes its own lines, in order.
        let expected: Vec<String> = (0..LINES).map(|i| format!("{p}:{i}")).collect();
        assert_eq!(
            lines.iter().map(|(_, l)| l.clone()).collect::<Vec<_>>(),
            expected
        );
        assert!(stderr.contains(&format!("{LINES} lines in ")), "{stderr}");
        arrivals.extend(lines.into_iter().map(|(at, _)| at));
    }
    arrivals.sort();

    // The bound from the start mark (taken before either process started,
    // and the key was fresh): the k-th line (from 1) cannot arrive before
    // (k - S - 1) intervals have passed. Unshared, two processes would
    // pass twice that.
    for (i, at) in arrivals.iter().enumerate() {
        let k = i as u64 + 1;
        let earliest = t * k.saturating_sub(BURST) as u32;
        assert!(
            *at + CLOCKS >= start + earliest,
            "line {k} of both arrived {:?} after the start, before {earliest:?}: over the shared bound",
            at.duration_since(start)
        );
    }
    // Both drew from the limit throughout, loosely: the 200 lines took at
    // least the bound's (200 - 5) * 10 ms, and not 3x that.
    let spent = arrivals.last().unwrap().duration_since(start);
    assert!(spent < t * (2 * LINES as u32) * 3, "{spent:?}");
}

/// `paceline ARGS` over `input`, to its end (a minute at most).
fn paceline(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_paceline"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the paceline binary");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_owned();
    // A run refused at the start reads nothing: the pipe may break.
    thread::spawn(move || stdin.write_all(input.as_bytes()));
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "paceline {args:?} did not end");
        thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().unwrap()
}

/// Lines `1..=n`.
fn seq(n: usize) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

/// The fleet's limits: 1000/s for any key, 40/s with a burst of 2 for
/// `jobs`.
const LIMITS: &str =
    "[default]\nrate = \"1000/s\"\n\n[overrides]\njobs = { rate = \"40/s\", burst = 2 }\n";

/// No RATE with `--redis URL --key K`: the rate and burst are K's in the
/// fleet's limits document (its override, else the default), said on
/// stderr and paced by; no document, or none that limits K, is a runtime
/// failure naming it.
#[test]
fn without_a_rate_the_limits_document_gives_the_keys_limit() {
    let server = RedisServer::start();
    let url = server.url();
    let run = |key: &str, input: &str| paceline(&["--redis", &url, "--key", key], input);

    let out = run("jobs", "1\n");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("no limits document \"paceline:limits\""),
        "{said}"
    );
    assert!(out.stdout.is_empty());

    let set = paceline(&["limits", "set", "--redis", &url], LIMITS);
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );

    // `jobs` at 40/s, burst 2: line k (from 1) is not out before
    // (k - 2) * 25 ms, where the default's 1000/s would pass all twelve
    // within about 10 ms.
    let t = Duration::from_millis(25);
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_paceline"))
        .args(["--redis", &url, "--key", "jobs"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(seq(12).as_bytes())
        .unwrap();
    let arrivals: Vec<Instant> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|l| l.map(|_| Instant::now()).unwrap())
        .collect();
    let mut said = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{said}");
    assert_eq!(arrivals.len(), 12, "{said}");
    for (i, at) in arrivals.iter().enumerate() {
        let earliest = t * (i as u32 + 1).saturating_sub(2);
        assert!(
            *at + CLOCKS >= start + earliest,
            "line {} early: {said}",
            i + 1
        );
    }
    assert!(
        said.starts_with("paceline: rate 40/s, burst 2: \"jobs\" in the limits document \"paceline:limits\" (version 1)"),
        "{said}"
    );

    // --limits names another document, which is not there.
    let out = paceline(
        &["--redis", &url, "--key", "jobs", "--limits", "other:doc"],
        "1\n",
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("no limits document \"other:doc\""), "{said}");

    // Another key has the default.
    let out = run("other", &seq(3));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.starts_with("paceline: rate 1000/s, burst 11: the default"),
        "{said}"
    );

    // A document that limits some keys only: another key is named.
    let set = paceline(
        &["limits", "set", "--redis", &url],
        "[overrides]\njobs = \"40/s\"\n",
    );
    assert!(set.status.success());
    let out = run("other", "1\n");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("no limit for \"other\""), "{said}");
}

/// The same through PostgreSQL: the document `paceline limits` stored
/// there gives the key's limit.
#[test]
fn without_a_rate_the_postgres_limits_document_gives_the_keys_limit() {
    let server = pg::PgServer::start();
    let conn = server.conn();
    let set = paceline(&["limits", "set", "--postgres", &conn], LIMITS);
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let out = paceline(&["--postgres", &conn, "--key", "jobs"], &seq(3));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert_eq!(out.stdout, seq(3).into_bytes());
    assert!(
        said.starts_with("paceline: rate 40/s, burst 2: \"jobs\" in the limits document"),
        "{said}"
    );
}

/// A run paced by the document follows it: a new version's limit for the
/// key is put in force while the run goes, as SIGHUP puts a rate file's; a
/// version without a limit for the key is named and changes nothing.
#[test]
fn a_run_paced_by_the_limits_document_follows_a_new_version() {
    let server = RedisServer::start();
    let url = server.url();
    let slow = "[default]\nrate = \"20/s\"\nburst = 1\n";
    let set = paceline(&["limits", "set", "--redis", &url], slow);
    assert!(set.status.success());

    // 100 lines at 20/s take at least 99 * 50 ms = 4.95 s.
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_paceline"))
        .args(["--redis", &url, "--key", "jobs"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(seq(100).as_bytes())
        .unwrap();
    let out = lines::lines(child.stdout.take().unwrap());
    let said = lines::lines(child.stderr.take().unwrap());
    for _ in 0..3 {
        out.recv_timeout(Duration::from_secs(10)).expect("a line");
    }
    // A version that sets no limit for the key is named, and changes
    // nothing; the next one is put in force.
    let none = "[overrides]\nother = \"1/s\"\n";
    let set = paceline(&["limits", "set", "--redis", &url], none);
    assert!(set.status.success());
    // Its word first: a watcher reads the document as it is when told of
    // a write, and would skip version 2 were version 3 there already.
    let mut told: Vec<String> = Vec::new();
    while !told.iter().any(|l| l.contains("(version 2)")) {
        told.push(
            said.recv_timeout(Duration::from_secs(10))
                .expect("version 2 named"),
        );
    }
    let set = paceline(
        &["limits", "set", "--redis", &url],
        &slow.replace("20/s", "10000/s"),
    );
    assert!(set.status.success());
    let passed = out.iter().count() + 3;
    let status = child.wait().unwrap();
    told.extend(said.iter());
    let said = told;
    assert!(status.success(), "{said:?}");
    assert_eq!(passed, 100, "{said:?}");
    assert!(
        said.iter()
            .any(|l| l.contains("(version 2) has no limit for \"jobs\"")
                && l.ends_with("the limit stays as it is")),
        "{said:?}"
    );
    assert!(
        said.iter().any(
            |l| l.starts_with("paceline: rate 10000/s, burst 1: the default")
                && l.contains("(version 3)")
        ),
        "{said:?}"
    );
    // Under the first version's rate the run could not have ended yet.
    let spent = start.elapsed();
    assert!(spent < Duration::from_millis(4950), "{spent:?}: {said:?}");
}
