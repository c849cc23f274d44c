//! Limits for a fleet against a real Redis and a real PostgreSQL this file
//! starts itself: a document written once reaches every one of several
//! processes, whole (checked from their decisions); a broken document is
//! refused at write and, written behind the library's back, reported and
//! ignored by every reader; an outage keeps the last good set and an update
//! after it lands; a version never goes back; layers merge key by key; and
//! under load, while versions alternate, the window bound holds.
#![cfg(all(
    feature = "fleet",
    feature = "redis",
    feature = "postgres",
    feature = "keyed"
))]

use paceline::Take;
mod common;
#[path = "support/lines.rs"]
mod lines;
#[path = "support/pg_server.rs"]
mod pg_server;
#[path = "support/redis_server.rs"]
mod redis_server;

use std::cell::Cell;
use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::windows::{check_windows_between, Recording, LAST_READ};
use paceline::config::fleet::{Document, FleetError, Layer, Layers};
use paceline::keyed::path_parent;
use paceline::{KeyedLimiter, Limit, Rate};
use pg_server::PgServer;
use redis_server::{RedisCluster, RedisServer};

/// How long an update may take to reach every process.
const REACH: Duration = Duration::from_secs(10);

const CHILD_ENV: &str = "PACELINE_FLEET_CHILD";

/// One server at a time: the runs measure latency, and each starts servers
/// and processes.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Version `v` of the global document: every limit's burst says its
/// version (the default's `10 v`, the override's `10 v + 5`), so a process
/// shows from its decisions which version it decides by.
fn doc(v: u64) -> String {
    format!(
        "[default]\nrate = \"1/h\"\nburst = {}\n\n[overrides]\n\"shared\" = {{ rate = \"1/h\", burst = {} }}\n",
        10 * v,
        10 * v + 5
    )
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A server that keeps the fleet's document.
trait Server {
    /// How a child process reaches it: `redis URL` / `postgres CONN`.
    fn spec(&self) -> String;
    /// Writes version `v` as `body` behind the library's back (no check,
    /// no version bump), and announces it.
    fn write_behind(&self, v: u64, body: &str);
    fn stop(&mut self);
    fn restart(&mut self);
}

impl Server for RedisServer {
    fn spec(&self) -> String {
        format!("redis {}", self.url())
    }
    fn write_behind(&self, v: u64, body: &str) {
        let mut conn = redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap();
        redis::cmd("HSET")
            .arg("paceline:limits")
            .arg("version")
            .arg(v)
            .arg("body")
            .arg(body)
            .exec(&mut conn)
            .unwrap();
        redis::cmd("PUBLISH")
            .arg("paceline:limits")
            .arg(v)
            .exec(&mut conn)
            .unwrap();
    }
    fn stop(&mut self) {
        RedisServer::stop(self);
    }
    fn restart(&mut self) {
        RedisServer::restart(self);
    }
}

impl Server for PgServer {
    fn spec(&self) -> String {
        format!("postgres {}", self.conn())
    }
    fn write_behind(&self, v: u64, body: &str) {
        let body = body.replace('\'', "''");
        self.psql(&format!(
            "UPDATE paceline_documents SET version = {v}, body = '{body}' \
             WHERE name = 'paceline:limits'; NOTIFY paceline_documents, '{v}:paceline:limits'"
        ));
    }
    fn stop(&mut self) {
        PgServer::stop(self);
    }
    fn restart(&mut self) {
        PgServer::restart(self);
    }
}

fn document(spec: &str) -> Document {
    let (kind, at) = spec.split_once(' ').unwrap();
    let doc = match kind {
        "redis" => Document::redis(at, None),
        "postgres" => Document::postgres(at, None),
        _ => unreachable!("{spec}"),
    };
    doc.unwrap().poll_every(Duration::from_millis(500))
}

/// A child process's half: a keyed limiter fed by the global document and a
/// local layer of its own; prints each set applied (`APPLIED <default
/// burst> <unix ns>`) and each error the global layer reports; probes its
/// decisions until stdin closes, then prints what it found.
fn child(spec: &str) {
    let limiter = Arc::new(
        KeyedLimiter::<String>::builder(Rate::per_hour(1))
            .slack(0)
            .parent(path_parent)
            .build()
            .unwrap(),
    );
    let target = Arc::clone(&limiter);
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let printer = Arc::clone(&out);
    let layers = Layers::new(move |limits| {
        target.apply(limits)?;
        let line = format!("APPLIED {} {}\n", limits.default_limit().burst(), now_ns());
        let mut out = printer.lock().unwrap_or_else(PoisonError::into_inner);
        out.write_all(line.as_bytes())?;
        out.flush()?;
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    });
    let global = layers.add("global");
    let local = layers.add("local");
    local
        .offer(
            1,
            Layer::new().with_override("mine", Limit::new(Rate::per_hour(1), 2)),
        )
        .unwrap();
    let _watching = document(spec).feed(global).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let stdin_closed = Arc::clone(&stop);
    thread::spawn(move || {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
        stdin_closed.store(true, Ordering::Release);
    });
    let (mut checks, mut mixed, mut last_error) = (0u64, 0u64, None);
    let mut i = 0u64;
    while !stop.load(Ordering::Acquire) {
        // A fresh key holds its limit's whole burst: the default's twice,
        // the override's between. The same version before and after means
        // none came between, so the override's must be of that version.
        i += 1;
        let before = limiter.available(&format!("fresh/{i}/a"));
        let shared = limiter.available(&format!("shared/{i}"));
        let after = limiter.available(&format!("fresh/{i}/b"));
        if before == after && before >= 10 {
            checks += 1;
            if shared != before + 5 {
                mixed += 1;
            }
        }
        let error = layers.status()[0].error.clone();
        if error.is_some() && error != last_error {
            let mut out = out.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = writeln!(
                out,
                "ERROR {}",
                error.as_deref().unwrap().replace('\n', " ")
            );
            let _ = out.flush();
        }
        last_error = error;
        thread::sleep(Duration::from_millis(2));
    }
    let mine = limiter.limits();
    println!(
        "DONE {checks} {mixed} {} {}",
        limiter.rate_for("mine").1 + 1,
        mine.layer("mine").unwrap_or("-")
    );
}

/// A child process, its lines as they come.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    fn spawn(test: &str, spec: &str) -> Proc {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, spec)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn a child process");
        let lines = lines::lines(child.stdout.take().unwrap());
        Proc {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (at most [`REACH`]) for a line starting with `prefix`; the
    /// line, or `None`.
    fn wait_for(&mut self, prefix: &str) -> Option<String> {
        let deadline = Instant::now() + REACH;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    // The test harness's own words may open the line.
                    if let Some(at) = line.find(prefix) {
                        return Some(line[at..].to_owned());
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// Every line seen by now.
    fn drain(&mut self) -> &[String] {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        &self.seen
    }

    /// Closes stdin and returns the child's `DONE` line.
    fn finish(mut self) -> String {
        drop(self.stdin.take());
        let done = self.wait_for("DONE").expect("the child's summary");
        assert!(self.child.wait().unwrap().success(), "a child failed");
        done
    }
}

/// Waits for `APPLIED <burst>` in every child; each one's time from `since`.
fn reached(procs: &mut [Proc], burst: u64, since: u64) -> Vec<Duration> {
    procs
        .iter_mut()
        .enumerate()
        .map(|(i, p)| {
            let line = p.wait_for(&format!("APPLIED {burst} ")).unwrap_or_else(|| {
                panic!(
                    "process {i}: burst {burst} not applied within {REACH:?}: {:?}",
                    p.seen
                )
            });
            let at: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            Duration::from_nanos(at.saturating_sub(since))
        })
        .collect()
}

fn applied(p: &mut Proc, burst: u64) -> bool {
    let tag = format!("APPLIED {burst} ");
    p.drain().iter().any(|l| l.contains(&tag))
}

/// The whole story on one server, three processes.
fn fleet_story(server: &mut dyn Server, test: &str) {
    let spec = server.spec();
    let mut writer = document(&spec);
    assert_eq!(writer.get().unwrap(), None);
    assert_eq!(writer.set(&doc(1), Some(0)).unwrap(), 1);
    let mut procs: Vec<Proc> = (0..3).map(|_| Proc::spawn(test, &spec)).collect();
    reached(&mut procs, 10, 0);

    // Updates reach everyone, each soon.
    let mut latencies = Vec::new();
    for v in 2..=6 {
        let since = now_ns();
        assert_eq!(writer.set(&doc(v), Some(v - 1)).unwrap(), v);
        latencies.extend(reached(&mut procs, 10 * v, since));
    }
    latencies.sort();
    eprintln!(
        "{test}: an update in force in every process after {:?} median, {:?} max ({} samples)",
        latencies[latencies.len() / 2],
        latencies.last().unwrap(),
        latencies.len()
    );

    // Two writers: the one that read an older version is refused.
    assert_eq!(
        writer.set(&doc(7), Some(5)),
        Err(FleetError::Conflict {
            expected: 5,
            found: 6
        })
    );
    // A broken document is refused before the server sees it.
    let broken = "[default]\nrate = \"ten/s\"\n";
    match writer.set(broken, None) {
        Err(FleetError::Invalid(why)) => assert!(why.contains("ten/s"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(writer.get().unwrap().unwrap().version, 6);

    // Written behind the library's back: every reader reports it and keeps
    // version 6.
    server.write_behind(7, "garbage");
    for (i, p) in procs.iter_mut().enumerate() {
        let error = p
            .wait_for("ERROR ")
            .unwrap_or_else(|| panic!("process {i}: {:?}", p.seen));
        assert!(error.contains("version 7"), "{error}");
    }
    assert_eq!(writer.set(&doc(8), Some(7)).unwrap(), 8);
    reached(&mut procs, 80, 0);
    for p in &mut procs {
        assert!(!applied(p, 70));
    }

    // An outage: the last good set stays in force; an update after it lands.
    server.stop();
    for (i, p) in procs.iter_mut().enumerate() {
        p.wait_for("ERROR ")
            .unwrap_or_else(|| panic!("process {i}: the outage not reported: {:?}", p.seen));
    }
    thread::sleep(Duration::from_millis(300));
    server.restart();
    let since = now_ns();
    assert_eq!(writer.set(&doc(9), Some(8)).unwrap(), 9);
    let after_outage = reached(&mut procs, 90, since);
    eprintln!("{test}: after the outage, in force after {after_outage:?}");

    // A version never goes back: an older one written behind the library's
    // back is ignored, a newer one is taken.
    // (Version 4 with limits no version had: burst 500.)
    server.write_behind(4, &doc(50));
    thread::sleep(Duration::from_secs(1));
    server.write_behind(11, &doc(11));
    reached(&mut procs, 110, 0);
    for p in &mut procs {
        assert!(!applied(p, 500), "went back to version 4: {:?}", p.seen);
    }

    for (i, p) in procs.into_iter().enumerate() {
        let done = p.finish();
        let f: Vec<&str> = done.split(' ').collect();
        let (checks, mixed): (u64, u64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        assert!(checks > 0, "process {i}: {done}");
        assert_eq!(
            mixed, 0,
            "process {i} decided by a mix of two versions: {done}"
        );
        // The local layer's override stayed through every global version.
        assert_eq!((f[3], f[4]), ("3", "local"), "process {i}: {done}");
    }
}

#[test]
fn redis_updates_reach_every_process_whole_and_never_go_back() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec);
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    // Kept on disk, so that a restart is an outage, not a new server.
    let mut server = RedisServer::start_with(None, &["--appendonly", "yes"]);
    fleet_story(
        &mut server,
        "redis_updates_reach_every_process_whole_and_never_go_back",
    );
}

#[test]
fn postgres_updates_reach_every_process_whole_and_never_go_back() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec);
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let mut server = PgServer::start();
    fleet_story(
        &mut server,
        "postgres_updates_reach_every_process_whole_and_never_go_back",
    );
}

const SLACK: u64 = 20;

/// Threads take while the global document alternates between two rates,
/// written to Redis every 10 ms and applied by a watcher: no window holds
/// more than the faster rate's spacing and the slower one's banked window
/// allow.
#[test]
fn window_bound_holds_while_document_versions_alternate_under_load() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let server = RedisServer::start();
    let (fast, slow) = (Rate::per_second(20_000), Rate::per_second(10_000));
    let text = |rate: Rate| format!("[default]\nrate = \"{rate}\"\nburst = {}\n", SLACK + 1);
    let mut writer = Document::redis(&server.url(), None).unwrap();
    writer.set(&text(fast), None).unwrap();
    let limiter = Arc::new(
        KeyedLimiter::<String>::builder(fast)
            .slack(SLACK)
            .clock(Recording::default())
            .build()
            .unwrap(),
    );
    let target = Arc::clone(&limiter);
    let layers = Layers::new(move |limits| target.apply(limits));
    let watching = Document::redis(&server.url(), None)
        .unwrap()
        .feed(layers.add("global"))
        .unwrap();
    let deadline = Instant::now() + Duration::from_millis(1500);
    let permits: Vec<(u64, u64)> = thread::scope(|s| {
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let limiter = &limiter;
                s.spawn(move || {
                    let mut mine = Vec::new();
                    while Instant::now() < deadline {
                        if limiter.try_take("hot").is_ok() {
                            mine.push((LAST_READ.with(Cell::get), 1));
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut flips = 0;
        while Instant::now() < deadline {
            flips += 1;
            writer.set(&text([slow, fast][flips % 2]), None).unwrap();
            thread::sleep(Duration::from_millis(10));
        }
        assert!(flips > 10, "{flips}");
        takers.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    drop(watching);
    let versions = layers.status()[0].version.unwrap();
    assert!(versions > 10, "only {versions} versions applied");
    assert!(permits.len() > 100, "only {} permits", permits.len());
    let ns = |r: Rate| r.interval().as_nanos() as u64;
    check_windows_between("fleet", permits, SLACK, ns(fast), ns(slow));
}

/// The check above can fail: one permit over the bound is caught.
#[test]
#[should_panic(expected = "more than the bound allows")]
fn the_window_check_catches_one_permit_too_many() {
    check_windows_between(
        "fleet",
        vec![(1_000, 1); SLACK as usize + 2],
        SLACK,
        1_000,
        1_000,
    );
}

/// A local file is a layer too, through `Watch`: the fleet's default with
/// the file's override over it; a broken save keeps the file's last good
/// version and the other layer's limits.
#[test]
fn a_local_file_layers_over_the_global_document() {
    let dir = std::env::temp_dir().join(format!("paceline-fleet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("local.toml");
    let save = |text: &str| {
        let tmp = dir.join("local.toml.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    };
    save("[overrides]\n\"b\" = \"5/s\"\n");
    let limiter = Arc::new(KeyedLimiter::<String>::new(Rate::per_second(1)));
    let target = Arc::clone(&limiter);
    let layers = Layers::new(move |limits| target.apply(limits));
    let global = layers.add("global");
    let watcher = paceline::config::watch::Watch::new(&path)
        .every(Duration::from_millis(10))
        .settle(Duration::ZERO)
        .start(layers.add("local").reload())
        .unwrap();
    // The file alone sets no default: nothing is applied yet.
    assert_eq!(limiter.rate(), Rate::per_second(1));
    global
        .offer(
            1,
            Layer::new()
                .with_default(Rate::per_second(100))
                .with_override("a", Rate::per_second(10))
                .with_override("b", Rate::per_second(20)),
        )
        .unwrap();
    let limits = limiter.limits();
    assert_eq!(limits.get("b"), Some(&Limit::from(Rate::per_second(5))));
    assert_eq!(
        (limits.layer("a"), limits.layer("b"), limits.default_layer()),
        (Some("global"), Some("local"), Some("global"))
    );

    save("[overrides]\n\"b\" = \"5/1.5s\"\n");
    let deadline = Instant::now() + REACH;
    while watcher.last_error().is_none() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    let error = watcher
        .last_error()
        .expect("the broken save reported")
        .to_string();
    assert!(error.contains("5/1.5s"), "{error}");
    assert_eq!(limiter.rate_for("b").0, Rate::per_second(5));

    save("[overrides]\n\"b\" = \"7/s\"\n");
    let deadline = Instant::now() + REACH;
    while limiter.rate_for("b").0 != Rate::per_second(7) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(limiter.rate_for("b").0, Rate::per_second(7));
    assert_eq!(limiter.rate_for("a").0, Rate::per_second(10));
    drop(watcher);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A document on a real three-node Redis Cluster: written and read through
/// the node that holds its slot, a conflict refused, and each version
/// announced to watchers subscribed on every node in turn (two of the three
/// do not hold the document), fast: their poll is a minute away.
#[test]
fn a_document_on_a_redis_cluster_is_written_read_and_announced_on_every_node() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let cluster = RedisCluster::start();
    let urls = cluster.urls();
    let name = "paceline:cluster-limits";
    let mut writer = Document::redis_cluster(&urls, Some(name)).unwrap();
    assert!(writer.get().unwrap().is_none());
    assert_eq!(writer.set(&doc(1), Some(0)).unwrap(), 1);
    match writer.set(&doc(9), Some(0)) {
        Err(FleetError::Conflict {
            expected: 0,
            found: 1,
        }) => {}
        other => panic!("a write over the wrong version: {other:?}"),
    }
    let read = writer.get().unwrap().expect("the document is there");
    assert_eq!((read.version, read.text.as_str()), (1, doc(1).as_str()));

    // One watcher per node: each subscribes on the first URL it is given.
    let limiters: Vec<Arc<KeyedLimiter<String>>> = (0..urls.len())
        .map(|_| Arc::new(KeyedLimiter::<String>::new(Rate::per_second(1))))
        .collect();
    let _watchers: Vec<_> = (0..urls.len())
        .map(|first| {
            let target = Arc::clone(&limiters[first]);
            let layers = Layers::new(move |limits| target.apply(limits));
            let rotated = urls[first..].iter().chain(&urls[..first]);
            Document::redis_cluster(rotated, Some(name))
                .unwrap()
                .poll_every(Duration::from_secs(60))
                .feed(layers.add("global"))
                .unwrap()
        })
        .collect();
    let reached = |version: u64| {
        let deadline = Instant::now() + REACH;
        while Instant::now() < deadline {
            if limiters
                .iter()
                .all(|l| l.limits().default_limit().burst() == 10 * version)
            {
                return true;
            }
            thread::sleep(Duration::from_millis(5));
        }
        false
    };
    assert!(reached(1), "every watcher read version 1 at its start");
    assert_eq!(writer.set(&doc(2), Some(1)).unwrap(), 2);
    assert!(reached(2), "version 2 announced on every node");
}
