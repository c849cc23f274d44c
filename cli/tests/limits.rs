//! `paceline limits set / get / watch / check` against a real
//! `redis-server`, a real three-node Redis Cluster and a real PostgreSQL,
//! started by the library's harnesses
//! in a temporary directory and stopped when the test ends: a document
//! stored from a file and from stdin, printed back, its versions counted,
//! a broken one refused with status 2 naming the bad value and nothing
//! stored, a write over another version refused with status 1, and a
//! watcher printing each new version.

#[path = "../../tests/support/redis_server.rs"]
mod support;

#[path = "../../tests/support/pg_server.rs"]
mod pg;

#[path = "../../tests/support/lines.rs"]
mod lines;

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const V1: &str =
    "[default]\nrate = \"100/s\"\nburst = 20\n\n[overrides]\n\"tenant:a\" = \"10/s\"\n";
const V2: &str = "[default]\nrate = \"200/s\"\n";
const BROKEN: &str = "[default]\nrate = \"100/s\"\nbrust = 20\n";

fn paceline(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_paceline"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run paceline");
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        // A run refused before it reads stdin (a missing --redis) may have
        // exited already: its status says what happened, not the pipe.
        match input.write_all(text.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.unwrap(),
        }
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `paceline limits ARGS` and checks its status; its stdout and stderr.
fn limits(
    flag: &str,
    at: &str,
    args: &[&str],
    stdin: Option<&str>,
    status: i32,
) -> (String, String) {
    let mut all = vec!["limits", args[0], flag, at];
    all.extend(&args[1..]);
    let out = paceline(&all, stdin);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(status), "{all:?}: {stderr}");
    (stdout, stderr)
}

fn watcher(flag: &str, at: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_paceline"))
        .args(["limits", "watch", flag, at])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = lines::lines(child.stdout.take().unwrap());
    (child, rx)
}

/// Reads the watcher's lines until `# version N` and the document after it
/// (up to the next `# version` or 10 s).
fn next_version(rx: &mpsc::Receiver<String>, n: u64) -> String {
    let header = format!("# version {n}");
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no {header:?} within 10 s"));
        if line == header {
            break;
        }
    }
    let mut doc = String::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(300)) {
        doc.push_str(&line);
        doc.push('\n');
    }
    doc
}

fn the_whole_story(flag: &str, at: &str) {
    let dir =
        std::env::temp_dir().join(format!("paceline-cli-limits-{}-{flag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("limits.toml");
    std::fs::write(&file, V1).unwrap();
    let file = file.to_str().unwrap();

    let (_, err) = limits(flag, at, &["get"], None, 1);
    assert!(err.contains("no document \"paceline:limits\""), "{err}");

    let (mut watch, lines) = watcher(flag, at);
    let (_, err) = limits(flag, at, &["set", file], None, 0);
    assert!(err.contains("stored version 1"), "{err}");
    assert_eq!(next_version(&lines, 1), V1);

    let (out, err) = limits(flag, at, &["get"], None, 0);
    assert_eq!((out.as_str(), err.trim()), (V1, "paceline: version 1"));

    // A broken document: status 2, the bad field named, nothing stored.
    let (_, err) = limits(flag, at, &["set"], Some(BROKEN), 2);
    assert!(err.contains("brust") && err.contains("line 3"), "{err}");
    let (_, err) = limits(flag, at, &["get"], None, 0);
    assert!(err.contains("version 1"), "{err}");

    // From stdin, over the version read.
    let (_, err) = limits(flag, at, &["set", "--if-version", "1", "-"], Some(V2), 0);
    assert!(err.contains("stored version 2"), "{err}");
    assert_eq!(next_version(&lines, 2), V2);
    // Over a version no longer there: status 1, which one is.
    let (_, err) = limits(flag, at, &["set", "--if-version", "1"], Some(V1), 1);
    assert!(err.contains("version 2, not 1"), "{err}");
    let (out, _) = limits(flag, at, &["get"], None, 0);
    assert_eq!(out, V2);

    // Another document beside it, by name.
    let (_, err) = limits(flag, at, &["set", "--name", "eu", file], None, 0);
    assert!(err.contains("stored version 1"), "{err}");
    let (out, _) = limits(flag, at, &["get", "--name", "eu"], None, 0);
    assert_eq!(out, V1);

    watch.kill().unwrap();
    watch.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn limits_set_get_and_watch_with_redis() {
    let server = support::RedisServer::start();
    the_whole_story("--redis", &server.url());
}

#[test]
fn limits_set_get_and_watch_with_a_redis_cluster() {
    let cluster = support::RedisCluster::start();
    the_whole_story("--redis-cluster", &cluster.urls().join(","));
}

#[test]
fn limits_set_get_and_watch_with_postgres() {
    let server = pg::PgServer::start();
    the_whole_story("--postgres", &server.conn());
}

#[test]
fn limits_check_needs_no_server_and_names_the_bad_value() {
    let out = paceline(&["limits", "check"], Some(V1));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = paceline(
        &["limits", "check", "-"],
        Some("[default]\nrate = \"10/1.5s\"\n"),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("10/1.5s") && err.contains("decimals"), "{err}");
    let out = paceline(&["limits", "set"], Some(V1));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr)
        .contains("give --redis URL, --redis-cluster URL[,URL...] or --postgres CONN"));
}

/// A server that is not there: the failure names where it was looked for
/// (the address, never the password the URL or connection string holds).
#[test]
fn limits_get_from_a_dead_server_names_its_address_and_not_its_password() {
    let port = support::free_port();
    let redis = format!("redis://:s3cret@127.0.0.1:{port}/");
    let postgres = format!("host=127.0.0.1 port={port} user=paceline password=s3cret");
    for (flag, at) in [("--redis", &redis), ("--postgres", &postgres)] {
        let (_, err) = limits(flag, at, &["get"], None, 1);
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{flag}: {err}");
        assert!(!err.contains("s3cret"), "{flag}: {err}");
    }
}
