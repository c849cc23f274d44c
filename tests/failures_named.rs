//! A remote limiter's failures say where: against a real server of each
//! store (Redis, a Redis Cluster, PostgreSQL, memcached), started here and
//! then stopped, a take's `Error::Unavailable` names the server's address
//! (and, with feature `metrics`, the limiter's name), and so do the
//! `tracing` events of the server lost and back; the password the URL or
//! connection string holds appears in none of them.
#![cfg(any(feature = "redis", feature = "postgres", feature = "memcached"))]

#[cfg(feature = "memcached")]
#[path = "support/memcached_server.rs"]
mod memcached_support;
#[cfg(feature = "postgres")]
#[path = "support/pg_server.rs"]
mod pg_support;
#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_support;

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use paceline::remote::{Backend, Error, RemoteBuilder, RemoteLimiter};
use paceline::{Rate, Take};
use tracing_subscriber::util::SubscriberInitExt;

/// The password every URL here holds: it must never be written.
const SECRET: &str = "s3cret-pw";

/// The limiter's name, where limiters have one (feature `metrics`).
fn named<S>(builder: RemoteBuilder<S>) -> RemoteBuilder<S> {
    #[cfg(feature = "metrics")]
    let builder = builder.metrics("api-limit");
    builder
}

/// Where `text` must name the server: its address, the limiter's name
/// where it has one, and no password.
fn says_where(text: &str, address: &str) {
    assert!(text.contains(address), "{address} not in {text}");
    #[cfg(feature = "metrics")]
    assert!(text.contains("api-limit"), "no limiter name in {text}");
    assert!(!text.contains(SECRET), "the password in {text}");
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Whether `limiter` answered (a grant or the limit's refusal).
fn answers<B: Backend>(limiter: &RemoteLimiter<B>) -> bool {
    match limiter.try_take("k") {
        Ok(_) => true,
        Err(e) => e.is_refusal(),
    }
}

/// Takes while the server is up, after `stop` and after `restart`: the
/// failure and both events name `address`.
fn failures_name<B: Backend>(
    limiter: &RemoteLimiter<B>,
    address: &str,
    stop: impl FnOnce(),
    restart: impl FnOnce(),
) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    let _events = tracing_subscriber::fmt()
        .with_writer(move || Sink(Arc::clone(&sink)))
        .set_default();
    assert!(answers(limiter));
    stop();
    // A pooled connection may first fail as a broken one: still unavailable.
    let failed = limiter.try_take("k").unwrap_err();
    assert!(matches!(failed, Error::Unavailable(_)), "{failed:?}");
    says_where(&failed.to_string(), address);
    restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !answers(limiter) {
        assert!(Instant::now() < deadline, "the server did not come back");
        std::thread::sleep(Duration::from_millis(20));
    }
    if cfg!(feature = "tracing") {
        let log = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
        for event in ["server is lost", "server is back"] {
            let line = log.lines().find(|l| l.contains(event));
            says_where(
                line.unwrap_or_else(|| panic!("no {event:?} in {log}")),
                address,
            );
        }
    }
}

#[cfg(feature = "redis")]
#[test]
fn a_redis_failure_names_the_server_and_not_the_password() {
    // A user with a password (the default user needs none, for the
    // harness's own pings).
    let acl = [
        "--user",
        "paceline",
        "on",
        &format!(">{SECRET}"),
        "~*",
        "+@all",
    ];
    let mut server = redis_support::RedisServer::start_with(Some(0), &acl);
    let address = format!("127.0.0.1:{}", server.port().unwrap());
    let url = format!("redis://paceline:{SECRET}@{address}/");
    let limiter = named(paceline::redis::RedisLimiter::builder(
        url,
        Rate::per_second(1000),
    ));
    let limiter = limiter.build().unwrap();
    let server = Mutex::new(&mut server);
    let (stop, restart) = (
        || server.lock().unwrap().stop(),
        || server.lock().unwrap().restart(),
    );
    failures_name(&limiter, &address, stop, restart);
}

#[cfg(feature = "redis")]
#[test]
fn a_redis_builders_debug_names_its_server_and_not_the_password() {
    let url = |at: &str| format!("redis://paceline:{SECRET}@{at}/");
    let rate = Rate::per_second(1000);
    let one = paceline::redis::RedisLimiter::builder(url("127.0.0.1:6390"), rate);
    let nodes = [url("127.0.0.1:7001"), url("127.0.0.1:7002")];
    let cluster = paceline::redis::RedisLimiter::cluster_builder(nodes, rate);
    for (builder, at) in [(one, "127.0.0.1"), (cluster, "7002")] {
        let text = format!("{builder:?}");
        assert!(text.contains(at) && text.contains("paceline:"), "{text}");
        assert!(!text.contains(SECRET), "the password in {text}");
    }
}

#[cfg(feature = "redis")]
#[test]
fn a_redis_cluster_failure_names_its_nodes() {
    let mut cluster = redis_support::RedisCluster::start();
    let limiter =
        paceline::redis::RedisLimiter::cluster_builder(cluster.urls(), Rate::per_second(1000));
    let limiter = named(limiter).build().unwrap();
    let address = format!("127.0.0.1:{}", cluster.nodes[0].port().unwrap());
    let cluster = Mutex::new(&mut cluster);
    let every = |f: fn(&mut redis_support::RedisServer)| {
        cluster.lock().unwrap().nodes.iter_mut().for_each(f)
    };
    failures_name(
        &limiter,
        &address,
        || every(|n| n.stop()),
        || every(|n| n.restart()),
    );
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_failure_names_the_server_and_not_the_password() {
    let mut server = pg_support::PgServer::start();
    let conn = format!("{} password={SECRET}", server.conn());
    let limiter = named(paceline::postgres::PostgresLimiter::builder(
        &conn,
        Rate::per_second(1000),
    ));
    let limiter = limiter.build().unwrap();
    limiter.install().unwrap();
    let address = format!("{}/.s.PGSQL.", server.dir().display());
    let server = Mutex::new(&mut server);
    let (stop, restart) = (
        || server.lock().unwrap().stop(),
        || server.lock().unwrap().restart(),
    );
    failures_name(&limiter, &address, stop, restart);
}

#[cfg(feature = "memcached")]
#[test]
fn a_memcached_failure_names_the_server() {
    let mut server = memcached_support::MemcachedServer::start_with(Some(0), 16);
    let address = server.addr();
    let limiter = paceline::memcached::MemcachedLimiter::builder(&address, Rate::per_second(1000));
    let limiter = named(limiter).build().unwrap();
    let server = Mutex::new(&mut server);
    let (stop, restart) = (
        || server.lock().unwrap().stop(),
        || server.lock().unwrap().restart(),
    );
    failures_name(&limiter, &address, stop, restart);
}
