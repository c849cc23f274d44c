//! `--redis URL --key K`, `--postgres CONN --key K` and `--memcached ADDR
//! --key K`: two `paceline` processes on one key against a real
//! `redis-server`, a real PostgreSQL and a real `memcached`, that this file
//! starts in a temporary directory (the library's harnesses,
//! `tests/support/redis_server.rs`, `pg_server.rs` and
//! `memcached_server.rs`), stopped when the test ends. Together they never pass
//! more than the limit's window bound, `S + 1 + w / T` lines in any window
//! `w` from the start.

#[path = "../../tests/support/redis_server.rs"]
mod support;

#[path = "../../tests/support/pg_server.rs"]
mod pg;

#[path = "../../tests/support/memcached_server.rs"]
mod memcached;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
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
