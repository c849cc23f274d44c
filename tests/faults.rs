//! Faults between hosts: every remote limiter talks to its real server
//! through a fault-injecting TCP proxy (`tests/support/fault_proxy.rs`),
//! which adds latency and jitter, black-holes packets, resets connections
//! mid-reply, drips bytes, and partitions the link until it heals, each
//! switched while traffic flows. For each store (Redis, PostgreSQL,
//! memcached), face
//! (blocking, async) and fault, under both fail policies at once (two
//! limiters on two keys through the same proxy, three callers each):
//!
//! - every call ends within the connect plus response timeouts (a bound on
//!   correctness, with a generous margin for a shared machine, never a
//!   claim on speed), and the fail policy is applied: `Closed` returns the
//!   failure, `Open` admits it (and only it: no other error admits);
//! - a reply that comes after its call gave up changes nothing the callers
//!   were told: every grant a caller was told of is one the server holds
//!   (counted from the key's state afterwards), the server holds no more
//!   than the grants told plus the calls that failed, and the grants told
//!   stay within the burst (the window bound `S + 1 + w / T`, with every
//!   window here far shorter than `T`);
//! - within a second of the link healing, calls are answered again, and
//!   once the limiters are dropped the server holds none of their
//!   connections and the runtime none of their tasks.
//!
//! The figures (time to fail, time to recover) print with `--nocapture`:
//! they are the table in `src/guide/faults.md`.
#![cfg(all(
    feature = "redis",
    feature = "postgres",
    feature = "memcached",
    feature = "tokio",
    feature = "tower"
))]

use paceline::AsyncTake;
use paceline::Take;
#[path = "support/fault_proxy.rs"]
mod fault_proxy;
#[path = "support/memcached_server.rs"]
mod memcached_server;
#[path = "support/pg_server.rs"]
mod pg_server;
#[path = "support/redis_server.rs"]
mod redis_server;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Barrier, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use fault_proxy::{Fault, FaultProxy};
use memcached_server::MemcachedServer;
use paceline::memcached::{AsyncMemcachedLimiter, MemcachedLimiter};
use paceline::postgres::{AsyncPostgresLimiter, PostgresLimiter};
use paceline::redis::FailPolicy;
use paceline::redis::{AsyncRedisLimiter, RedisLimiter};
use paceline::stats::{Counted, Stats};
use paceline::{Error, Rate};
use pg_server::PgServer;
use redis_server::RedisServer;

/// Short timeouts keep the file quick: every faulty call costs one.
const CONNECT: Duration = Duration::from_millis(150);
const RESPONSE: Duration = Duration::from_millis(150);
/// What a call may take beyond its timeouts on a machine shared with
/// other builds: scheduling, a reconnect after a reused connection broke.
/// A hang would take seconds; this bound catches it.
const MARGIN: Duration = Duration::from_millis(450);
/// The longest any call may take.
const CALL_BOUND: Duration = CONNECT.saturating_add(RESPONSE).saturating_add(MARGIN);
/// How soon after the link heals calls must be answered again (the
/// issue's second, and a margin for a shared machine).
const RECOVERY_BOUND: Duration = Duration::from_millis(1250);
/// How long each fault lasts while the callers call.
const FAULT_FOR: Duration = Duration::from_millis(900);
/// Callers per limiter (threads, each with its own connection from the
/// pool; for the async face, concurrent calls on its runtime).
const CALLERS: usize = 3;
/// The limit: one per hour, so no permit comes back during a test and the
/// server's grants can be counted from the key's state (burst minus what
/// is left); a burst large enough that grants are still made while the
/// link is bad.
const SLACK: u64 = 11;
const BURST: u64 = SLACK + 1;
/// PostgreSQL's pool (both faces).
const PG_POOL: usize = 3;

/// The faults every store meets, in order.
fn faults() -> [Fault; 5] {
    [
        // Half the replies come after the response timeout.
        Fault::Latency {
            base: RESPONSE * 2 / 3,
            jitter: RESPONSE * 2 / 3,
        },
        Fault::BlackHole,
        Fault::ResetMidReply,
        // A reply of 4 bytes takes 150 ms, one of 30 bytes 1.5 s.
        Fault::Drip {
            every: Duration::from_millis(50),
        },
        Fault::Partition,
    ]
}

fn rate() -> Rate {
    Rate::per_hour(1)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Redis,
    Postgres,
    Memcached,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Face {
    Blocking,
    Async,
}

/// A real server, reached directly (unix socket) by the test and through
/// the proxy (loopback TCP) by the limiters under test.
enum Server {
    Redis(RedisServer),
    Postgres(PgServer),
    Memcached(MemcachedServer),
}

/// One `try_take` on a key, whichever face makes it.
type Call = Box<dyn Fn(&str) -> Result<(), Error> + Send + Sync>;

/// A limiter under test, either face, as the callers use it.
struct Limiter {
    call: Call,
    stats: Box<dyn Fn() -> Stats + Send + Sync>,
}

/// `blocking` as the callers use it, each call a `try_take`: itself, or
/// its async face `A` on `runtime` (`try_blocking` and `try_async` name
/// the two faces' own calls, so each store's inherent `try_take` is what
/// the callers make).
fn faced<L, A>(
    blocking: L,
    face: Face,
    runtime: Option<&tokio::runtime::Runtime>,
    try_blocking: fn(&L, &str) -> Result<(), Error>,
    try_async: fn(&tokio::runtime::Handle, &A, &str) -> Result<(), Error>,
) -> Limiter
where
    L: Counted + Send + Sync + 'static,
    A: From<L> + Counted + Send + Sync + 'static,
{
    match face {
        Face::Blocking => {
            let blocking = Arc::new(blocking);
            let b = Arc::clone(&blocking);
            Limiter {
                call: Box::new(move |key| try_blocking(&blocking, key)),
                stats: Box::new(move || b.stats().unwrap()),
            }
        }
        Face::Async => {
            let a = Arc::new(A::from(blocking));
            let rt = runtime.expect("a runtime").handle().clone();
            let b = Arc::clone(&a);
            Limiter {
                call: Box::new(move |key| try_async(&rt, &a, key)),
                stats: Box::new(move || b.stats().unwrap()),
            }
        }
    }
}

impl Server {
    fn start(kind: Kind) -> Server {
        match kind {
            Kind::Redis => Server::Redis(RedisServer::start_with(Some(0), &[])),
            Kind::Postgres => {
                let server = PgServer::start_tcp();
                PostgresLimiter::builder(&server.conn(), rate())
                    .build()
                    .unwrap()
                    .install()
                    .unwrap();
                Server::Postgres(server)
            }
            // TCP only: memcached listens on a socket or a port, not both.
            Kind::Memcached => Server::Memcached(MemcachedServer::start_with(Some(0), 64)),
        }
    }

    fn upstream(&self) -> SocketAddr {
        match self {
            Server::Redis(s) => SocketAddr::from(([127, 0, 0, 1], s.port().unwrap())),
            Server::Postgres(s) => s.tcp_addr(),
            Server::Memcached(s) => s.addr().parse().unwrap(),
        }
    }

    /// A limiter through `proxy`, with the test's timeouts, counting.
    fn limiter(
        &self,
        proxy: &FaultProxy,
        face: Face,
        policy: FailPolicy,
        runtime: Option<&tokio::runtime::Runtime>,
    ) -> Limiter {
        self.limiter_with_pool(proxy, face, policy, runtime, PG_POOL)
    }

    /// [`limiter`](Self::limiter), with `pg_pool` connections in a
    /// PostgreSQL limiter's pool.
    fn limiter_with_pool(
        &self,
        proxy: &FaultProxy,
        face: Face,
        policy: FailPolicy,
        runtime: Option<&tokio::runtime::Runtime>,
        pg_pool: usize,
    ) -> Limiter {
        let port = proxy.port();
        match self {
            Server::Redis(_) => {
                let blocking = RedisLimiter::builder(format!("redis://127.0.0.1:{port}/"), rate())
                    .slack(SLACK)
                    .on_error(policy)
                    .connect_timeout(CONNECT)
                    .response_timeout(RESPONSE)
                    .stats(true)
                    .build()
                    .unwrap();
                faced(
                    blocking,
                    face,
                    runtime,
                    |l: &RedisLimiter, key| l.try_take(key).map(drop),
                    |rt, a: &AsyncRedisLimiter, key| rt.block_on(a.try_take(key)).map(drop),
                )
            }
            Server::Postgres(_) => {
                let blocking = PostgresLimiter::builder(
                    &format!("host=127.0.0.1 port={port} user=paceline dbname=postgres"),
                    rate(),
                )
                .slack(SLACK)
                .pool_size(pg_pool)
                .on_error(policy)
                .connect_timeout(CONNECT)
                .response_timeout(RESPONSE)
                .stats(true)
                .build()
                .unwrap();
                faced(
                    blocking,
                    face,
                    runtime,
                    |l: &PostgresLimiter, key| l.try_take(key).map(drop),
                    |rt, a: &AsyncPostgresLimiter, key| rt.block_on(a.try_take(key)).map(drop),
                )
            }
            Server::Memcached(_) => {
                let blocking = MemcachedLimiter::builder(format!("127.0.0.1:{port}"), rate())
                    .slack(SLACK)
                    .pool_size(pg_pool)
                    .on_error(policy)
                    .connect_timeout(CONNECT)
                    .response_timeout(RESPONSE)
                    .stats(true)
                    .build()
                    .unwrap();
                faced(
                    blocking,
                    face,
                    runtime,
                    |l: &MemcachedLimiter, key| l.try_take(key).map(drop),
                    |rt, a: &AsyncMemcachedLimiter, key| rt.block_on(a.try_take(key)).map(drop),
                )
            }
        }
    }

    /// How many permits the server granted on `key` (burst minus what is
    /// left: at one per hour, none comes back within a test), read
    /// directly, not through the proxy.
    fn granted(&self, key: &str) -> u64 {
        let left = match self {
            Server::Redis(s) => RedisLimiter::builder(s.url(), rate())
                .slack(SLACK)
                .build()
                .unwrap()
                .available(key),
            Server::Postgres(s) => PostgresLimiter::builder(&s.conn(), rate())
                .slack(SLACK)
                .build()
                .unwrap()
                .available(key),
            Server::Memcached(s) => MemcachedLimiter::builder(s.addr(), rate())
                .slack(SLACK)
                .build()
                .unwrap()
                .available(key),
        }
        .expect("read the key's state directly");
        BURST - left
    }

    /// Client connections the server holds over TCP (the limiters' through
    /// the proxy; the test's own go over the unix socket).
    fn tcp_connections(&self) -> usize {
        match self {
            Server::Redis(s) => redis_client_list(s)
                .lines()
                .filter(|l| l.contains("addr=127.0.0.1:"))
                .count(),
            Server::Postgres(s) => s
                .psql(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE client_addr IS NOT NULL AND backend_type = 'client backend'",
                )
                .parse()
                .unwrap(),
            // Every open connection but the listener's and this question's
            // own (the test reaches memcached over TCP too, directly).
            Server::Memcached(s) => {
                let conns = s.stats("conns");
                let states: Vec<&String> = conns
                    .iter()
                    .filter(|(k, _)| k.ends_with(":state"))
                    .map(|(_, v)| v)
                    .collect();
                states
                    .iter()
                    .filter(|v| v.as_str() != "conn_listening")
                    .count()
                    .saturating_sub(1)
            }
        }
    }
}

/// `CLIENT LIST`, read whole (a bulk string of any length).
fn redis_client_list(server: &RedisServer) -> String {
    let url = server.url();
    let path = url.strip_prefix("unix://").unwrap();
    let mut s = UnixStream::connect(path).expect("connect to redis-server");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"CLIENT LIST\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut header = String::new();
    r.read_line(&mut header).unwrap();
    let len: usize = header.trim_start_matches('$').trim().parse().unwrap();
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).unwrap();
    String::from_utf8_lossy(&body).into_owned()
}

/// What the callers of one limiter saw in one phase.
#[derive(Default, Debug, Clone)]
struct Seen {
    /// Admitted (by the server, or by `Open` on a failure).
    ok: u64,
    refused: u64,
    /// Failures returned (`Timeout`, `Unavailable`).
    failed: u64,
    /// Calls the server answered (a grant or a refusal) while no call of
    /// the limiter failed: the limiter's failure count did not move
    /// across them.
    clean: u64,
    /// How long each failed call took (under `Open`, each admission while
    /// the limiter's failure count moved).
    fail_times: Vec<Duration>,
    /// The longest call.
    longest: Duration,
    /// Anything else: a defect.
    wrong: Vec<String>,
}

impl Seen {
    fn add(&mut self, other: Seen) {
        self.ok += other.ok;
        self.refused += other.refused;
        self.failed += other.failed;
        self.clean += other.clean;
        self.fail_times.extend(other.fail_times);
        self.longest = self.longest.max(other.longest);
        self.wrong.extend(other.wrong);
    }

    fn answered(&self) -> u64 {
        self.ok + self.refused
    }
}

/// One call, timed and sorted into `seen`.
fn call(limiter: &Limiter, key: &str, policy: FailPolicy, seen: &mut Seen) {
    let failed_before = (limiter.stats)().failed;
    let start = Instant::now();
    let result = (limiter.call)(key);
    let took = start.elapsed();
    let failed_meanwhile = (limiter.stats)().failed != failed_before;
    seen.longest = seen.longest.max(took);
    if took > CALL_BOUND {
        seen.wrong.push(format!(
            "a call took {took:?}, over {CALL_BOUND:?} ({result:?})"
        ));
    }
    match (result, policy) {
        (Ok(()), _) => {
            seen.ok += 1;
            if failed_meanwhile {
                seen.fail_times.push(took);
            } else {
                seen.clean += 1;
            }
        }
        (Err(e), _) if e.is_refusal() => {
            seen.refused += 1;
            seen.clean += u64::from(!failed_meanwhile);
        }
        (Err(Error::Timeout | Error::Unavailable(_)), FailPolicy::Closed) => {
            seen.failed += 1;
            seen.fail_times.push(took);
        }
        // memcached's CAS loop: a race lost, then the budget gone on a slow
        // link. The key's own answer (contention), which no policy admits:
        // under `Open` too, the call errs on the side of the limit.
        (Err(Error::Script(e)), _) if e.to_string().contains("CAS races lost") => {
            seen.failed += 1;
            seen.fail_times.push(took);
        }
        (Err(e), policy) => {
            seen.wrong.push(format!("{policy:?} answered {e:?}"));
        }
    }
}

/// `CALLERS` threads per limiter call until `stop` says so; what each
/// limiter's callers saw.
fn run_callers(
    limiters: &[(&Limiter, &str, FailPolicy)],
    stop: impl Fn(&Seen, Instant) -> bool + Sync,
) -> Vec<Seen> {
    let start = Instant::now();
    let barrier = Barrier::new(limiters.len() * CALLERS);
    let stop = &stop;
    let barrier = &barrier;
    thread::scope(|s| {
        let handles: Vec<Vec<_>> = limiters
            .iter()
            .map(|&(limiter, key, policy)| {
                (0..CALLERS)
                    .map(|_| {
                        s.spawn(move || {
                            barrier.wait();
                            let mut seen = Seen::default();
                            while !stop(&seen, start) {
                                call(limiter, key, policy, &mut seen);
                                // A bounded loop: a caller whose stop never
                                // comes is a defect of its own.
                                if start.elapsed() > Duration::from_secs(10) {
                                    seen.wrong.push("a caller ran for 10 s".into());
                                    break;
                                }
                                thread::sleep(Duration::from_millis(5));
                            }
                            seen
                        })
                    })
                    .collect()
            })
            .collect();
        handles
            .into_iter()
            .map(|hs| {
                let mut all = Seen::default();
                for h in hs {
                    all.add(h.join().unwrap());
                }
                all
            })
            .collect()
    })
}

/// One row of the guide's table: what the callers saw while the fault
/// lasted, and how soon after the heal they were answered.
struct Row {
    store: Kind,
    face: Face,
    fault: Fault,
    closed: Seen,
    open: Seen,
    recovered_in: Duration,
}

fn median(times: &[Duration]) -> Option<Duration> {
    let mut t = times.to_vec();
    t.sort();
    t.get(t.len() / 2).copied()
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{}", d.as_millis()))
}

/// The guide's table's head (`src/guide/faults.md`).
const TABLE_HEAD: &str = "\
| store | face | fault | `Closed`: calls failed | `Closed`: time to fail, median (longest call) | `Open`: admitted on a failure | `Open`: time to admit, median | answered again after the heal |
|---|---|---|---|---|---|---|---|";

impl Row {
    fn print(&self) {
        let calls = |s: &Seen| s.failed + s.answered();
        println!(
            "| {:?} | {:?} | {} | {} of {} | {} ms ({} ms) | {} of {} | {} ms | {} ms |",
            self.store,
            self.face,
            self.fault.name(),
            self.closed.failed,
            calls(&self.closed),
            ms(median(&self.closed.fail_times)),
            self.closed.longest.as_millis(),
            self.open.fail_times.len(),
            calls(&self.open),
            ms(median(&self.open.fail_times)),
            self.recovered_in.as_millis(),
        );
    }
}

/// Everything one fault does to one store and face, checked.
fn one_fault(
    server: &Server,
    face: Face,
    fault: Fault,
    runtime: Option<&tokio::runtime::Runtime>,
) -> Row {
    let store = match server {
        Server::Redis(_) => Kind::Redis,
        Server::Postgres(_) => Kind::Postgres,
        Server::Memcached(_) => Kind::Memcached,
    };
    let proxy = FaultProxy::start(server.upstream());
    let tag = format!("{store:?}-{face:?}-{}", fault.name()).replace(' ', "-");
    let keys = [format!("{tag}-closed"), format!("{tag}-open")];
    let closed = server.limiter(&proxy, face, FailPolicy::Closed, runtime);
    let open = server.limiter(&proxy, face, FailPolicy::Open, runtime);
    let both = [
        (&closed, keys[0].as_str(), FailPolicy::Closed),
        (&open, keys[1].as_str(), FailPolicy::Open),
    ];
    let context = format!("{store:?}, {face:?}, {fault:?}");

    // A clean link first: every caller's connection is made and in use
    // when the fault starts.
    let warm = run_callers(&both, |seen, _| seen.ok + seen.refused > 0);
    for (seen, (_, _, policy)) in warm.iter().zip(&both) {
        assert!(
            seen.wrong.is_empty(),
            "{context}, {policy:?}: {:?}",
            seen.wrong
        );
        assert_eq!(seen.ok, CALLERS as u64, "{context}: warm-up {seen:?}");
    }

    // The fault, while the callers call.
    proxy.set(fault);
    let during = run_callers(&both, |_, start| start.elapsed() >= FAULT_FOR);
    for (seen, (_, _, policy)) in during.iter().zip(&both) {
        assert!(
            seen.wrong.is_empty(),
            "{context}, {policy:?}: {:?}",
            seen.wrong
        );
    }
    if matches!(
        fault,
        Fault::BlackHole | Fault::ResetMidReply | Fault::Partition
    ) {
        // Every call over a dead link fails (or is admitted by `Open`).
        assert_eq!(
            during[0].answered(),
            0,
            "{context}: Closed answered {:?}",
            during[0]
        );
        assert!(during[0].failed > 0, "{context}: no call failed");
        assert_eq!(
            during[1].clean, 0,
            "{context}: Open answered {:?}",
            during[1]
        );
        assert!(
            !during[1].fail_times.is_empty(),
            "{context}: Open admitted no failure {:?}",
            during[1]
        );
    }

    // Healed: answered again within the bound, by every caller.
    proxy.set(Fault::None);
    let healed = Instant::now();
    let recovery = run_callers(&both, |seen, _| seen.clean > 0);
    let recovered_in = healed.elapsed();
    for (seen, (_, _, policy)) in recovery.iter().zip(&both) {
        assert!(
            seen.wrong.is_empty(),
            "{context}, {policy:?}: {:?}",
            seen.wrong
        );
    }
    // (Under `Open` an admission may be a failure's: the counts tell.)
    let failed_before: Vec<u64> = both.iter().map(|(l, _, _)| (l.stats)().failed).collect();
    let after = run_callers(&both, |seen, _| seen.answered() + seen.failed >= 3);
    for ((seen, (limiter, _, policy)), before) in after.iter().zip(&both).zip(failed_before) {
        assert!(
            seen.wrong.is_empty(),
            "{context}, {policy:?}: {:?}",
            seen.wrong
        );
        assert_eq!(
            (limiter.stats)().failed,
            before,
            "{context}, {policy:?}: calls failed after recovery"
        );
    }
    assert!(
        recovered_in <= RECOVERY_BOUND,
        "{context}: answered again {recovered_in:?} after the link healed"
    );

    // The table shows the fault's phase.
    let (closed_during, open_during) = (during[0].clone(), during[1].clone());
    // What callers were told against what the server holds.
    let mut totals = [Seen::default(), Seen::default()];
    for phase in [warm, during, recovery, after] {
        for (total, seen) in totals.iter_mut().zip(phase) {
            total.add(seen);
        }
    }
    for (total, (limiter, key, policy)) in totals.iter().zip(&both) {
        let stats = (limiter.stats)();
        let failures = stats.failed;
        // Every failure a caller saw is one the limiter counted; under
        // `Open` the failures are admissions.
        let told_granted = match policy {
            FailPolicy::Closed => {
                assert_eq!(failures, total.failed, "{context}: failures counted");
                total.ok
            }
            _ => total.ok.checked_sub(failures).unwrap_or_else(|| {
                panic!(
                    "{context}: {failures} failures admitted, {} admissions",
                    total.ok
                )
            }),
        };
        let granted = server.granted(key);
        assert!(
            told_granted <= granted,
            "{context}, {policy:?}: callers were told of {told_granted} grants, the server \
             made {granted}: a reply was taken for another's"
        );
        assert!(
            granted <= told_granted + failures,
            "{context}, {policy:?}: the server made {granted} grants, callers were told of \
             {told_granted} and {failures} calls failed"
        );
        assert!(
            told_granted <= BURST,
            "{context}, {policy:?}: {told_granted} grants told, over the burst {BURST}"
        );
    }

    // No connection kept beyond the callers' (each limiter: one per
    // caller, a pool's size, or one multiplexed), and none once dropped.
    let most = match (store, face) {
        (Kind::Redis, Face::Blocking) => 2 * CALLERS,
        (Kind::Redis, Face::Async) => 2,
        (Kind::Postgres | Kind::Memcached, _) => 2 * PG_POOL,
    };
    // A connection a caller dropped during the fault may still be open on
    // the server's side while the proxy hands on what the fault held (its
    // close comes last): it must be gone soon, but the server may count it
    // for a moment. Kept ones never go.
    let settle = Instant::now() + Duration::from_secs(1);
    let mut held = server.tcp_connections();
    while held > most && Instant::now() < settle {
        thread::sleep(Duration::from_millis(20));
        held = server.tcp_connections();
    }
    assert!(
        held <= most,
        "{context}: the server holds {held} connections, over {most}"
    );
    let row = Row {
        store,
        face,
        fault,
        closed: closed_during,
        open: open_during,
        recovered_in,
    };
    drop((closed, open));
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let (held, open, tasks) = (
            server.tcp_connections(),
            proxy.open_connections(),
            runtime.map_or(0, |rt| rt.metrics().num_alive_tasks()),
        );
        if held == 0 && open == 0 && tasks == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{context}: 3 s after the limiters were dropped, the server holds {held} of \
             their connections, the proxy {open}, the runtime {tasks} tasks"
        );
        thread::sleep(Duration::from_millis(20));
    }
    row
}

fn runtime(face: Face) -> Option<tokio::runtime::Runtime> {
    (face == Face::Async).then(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn every_fault(kind: Kind, face: Face) {
    let server = Server::start(kind);
    let runtime = runtime(face);
    let rows: Vec<Row> = faults()
        .into_iter()
        .map(|fault| one_fault(&server, face, fault, runtime.as_ref()))
        .collect();
    let out = std::io::stdout();
    let _one_table = lock(&PRINT);
    println!("{TABLE_HEAD}");
    for row in &rows {
        row.print();
    }
    let _ = out.lock().flush();
}

/// The four tests print their rows one table at a time.
static PRINT: Mutex<()> = Mutex::new(());

#[test]
fn redis_blocking_under_every_fault() {
    every_fault(Kind::Redis, Face::Blocking);
}

#[test]
fn redis_async_under_every_fault() {
    every_fault(Kind::Redis, Face::Async);
}

#[test]
fn postgres_blocking_under_every_fault() {
    every_fault(Kind::Postgres, Face::Blocking);
}

#[test]
fn memcached_blocking_under_every_fault() {
    every_fault(Kind::Memcached, Face::Blocking);
}

#[test]
fn memcached_async_under_every_fault() {
    every_fault(Kind::Memcached, Face::Async);
}

#[test]
fn postgres_async_under_every_fault() {
    every_fault(Kind::Postgres, Face::Async);
}

/// A black hole that comes and goes while every connection sits idle (a
/// NAT or firewall that lost its state: no packet was lost yet, but every
/// connection through it is dead) costs one call its timeout, not one per
/// pooled connection: the first timeout with no reply anywhere since it was
/// sent drops the idle ones too. With PostgreSQL's default pool of 8 and
/// the default timeouts of a second, it cost up to 8 s of failures.
fn dead_idle_connections(kind: Kind, face: Face) -> Duration {
    let server = Server::start(kind);
    let runtime = runtime(face);
    let proxy = FaultProxy::start(server.upstream());
    let pool = paceline::postgres::DEFAULT_POOL_SIZE;
    let limiter =
        server.limiter_with_pool(&proxy, face, FailPolicy::Closed, runtime.as_ref(), pool);
    let context = format!("{kind:?}, {face:?}, idle connections in a black hole");
    let key = format!("{kind:?}-{face:?}-idle");
    // Calls at once until the pool holds several connections (the async
    // Redis face has one, multiplexed).
    let want = if (kind, face) == (Kind::Redis, Face::Async) {
        1
    } else {
        4
    };
    let limiter = &limiter;
    for round in 0.. {
        assert!(round < 50, "{context}: the pool never grew to {want}");
        let barrier = &Barrier::new(pool);
        thread::scope(|s| {
            for _ in 0..pool {
                s.spawn(|| {
                    barrier.wait();
                    let _ = (limiter.call)(&key);
                });
            }
        });
        if server.tcp_connections() >= want {
            break;
        }
    }
    proxy.set(Fault::BlackHole);
    thread::sleep(Duration::from_millis(50));
    proxy.set(Fault::None);
    let healed = Instant::now();
    let mut seen = Seen::default();
    while seen.answered() == 0 {
        assert!(
            healed.elapsed() < Duration::from_secs(10),
            "{context}: no answer for 10 s: {seen:?}"
        );
        call(limiter, &key, FailPolicy::Closed, &mut seen);
    }
    let recovered_in = healed.elapsed();
    assert!(seen.wrong.is_empty(), "{context}: {:?}", seen.wrong);
    assert!(
        seen.failed <= 1,
        "{context}: {} calls failed one after the other, each on a dead connection",
        seen.failed
    );
    assert!(
        recovered_in <= RECOVERY_BOUND,
        "{context}: {recovered_in:?}"
    );
    recovered_in
}

#[test]
fn dead_idle_connections_cost_one_timeout_not_one_each() {
    let mut lines = Vec::new();
    for kind in [Kind::Redis, Kind::Postgres] {
        for face in [Face::Blocking, Face::Async] {
            let took = dead_idle_connections(kind, face);
            lines.push(format!(
                "| {kind:?} | {face:?} | black hole while idle | {} ms |",
                took.as_millis()
            ));
        }
    }
    let _one_table = lock(&PRINT);
    println!("| store | face | fault | answered again after the heal |\n|---|---|---|---|");
    for line in lines {
        println!("{line}");
    }
}

/// The HTTP layer over a remote limiter behind a faulty link: a request is
/// answered 503 (`Closed`) or forwarded (`Open`) within the limiter's
/// timeouts, never held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_layer_answers_within_its_timeouts_over_a_faulty_link() {
    use std::convert::Infallible;

    use http::{Request, Response, StatusCode};
    use paceline::http::LimitLayer;
    use tower::{Layer, ServiceExt};

    let redis = RedisServer::start_with(Some(0), &[]);
    let pg = tokio::task::spawn_blocking(|| Server::start(Kind::Postgres))
        .await
        .unwrap();
    let redis = Server::Redis(redis);
    let memcached = Server::start(Kind::Memcached);
    for server in [&redis, &pg, &memcached] {
        let proxy = FaultProxy::start(server.upstream());
        for fault in [Fault::BlackHole, Fault::ResetMidReply, Fault::Partition] {
            proxy.set(fault);
            for (policy, status) in [
                (FailPolicy::Closed, StatusCode::SERVICE_UNAVAILABLE),
                (FailPolicy::Open, StatusCode::OK),
            ] {
                let port = proxy.port();
                let layer = match server {
                    Server::Redis(_) => {
                        LimitLayer::per_ip(rate()).limiter(AsyncRedisLimiter::from(
                            RedisLimiter::builder(format!("redis://127.0.0.1:{port}/"), rate())
                                .on_error(policy)
                                .connect_timeout(CONNECT)
                                .response_timeout(RESPONSE)
                                .build()
                                .unwrap(),
                        ))
                    }
                    Server::Postgres(_) => {
                        LimitLayer::per_ip(rate()).limiter(AsyncPostgresLimiter::from(
                            PostgresLimiter::builder(
                                &format!(
                                    "host=127.0.0.1 port={port} user=paceline dbname=postgres"
                                ),
                                rate(),
                            )
                            .on_error(policy)
                            .connect_timeout(CONNECT)
                            .response_timeout(RESPONSE)
                            .build()
                            .unwrap(),
                        ))
                    }
                    Server::Memcached(_) => {
                        LimitLayer::per_ip(rate()).limiter(AsyncMemcachedLimiter::from(
                            MemcachedLimiter::builder(format!("127.0.0.1:{port}"), rate())
                                .on_error(policy)
                                .connect_timeout(CONNECT)
                                .response_timeout(RESPONSE)
                                .build()
                                .unwrap(),
                        ))
                    }
                }
                .build()
                .unwrap();
                let service = layer.layer(tower::service_fn(|_: Request<()>| async {
                    Ok::<_, Infallible>(Response::new(String::new()))
                }));
                for _ in 0..3 {
                    let mut request = Request::new(());
                    request
                        .extensions_mut()
                        .insert(SocketAddr::from(([127, 0, 0, 9], 4000)));
                    let start = Instant::now();
                    let response = tokio::time::timeout(
                        Duration::from_secs(5),
                        service.clone().oneshot(request),
                    )
                    .await
                    .expect("the layer held a request for 5 s")
                    .unwrap();
                    let took = start.elapsed();
                    let store = match server {
                        Server::Redis(_) => "Redis",
                        Server::Postgres(_) => "PostgreSQL",
                        Server::Memcached(_) => "memcached",
                    };
                    assert_eq!(response.status(), status, "{store}, {fault:?}, {policy:?}");
                    assert!(
                        took <= CALL_BOUND,
                        "{store}, {fault:?}, {policy:?}: answered in {took:?}"
                    );
                }
            }
        }
    }
}
