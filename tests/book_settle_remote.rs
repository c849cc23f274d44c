//! A take booked at an estimate and settled with its actual cost on every
//! remote kind, through the take interface (`Take::book` / `Take::settle`
//! and their async twins), blocking and async: on the in-memory backend
//! and on a real Redis, Redis Cluster, PostgreSQL and memcached started
//! here. A refund gives the difference back, an excess is charged at once
//! as debt, a booking settles only on the limit and key that made it
//! (either face), and a server stopped under a settle fails it at once
//! naming the server (`Closed`) or drops it (`Open`: the estimate
//! stands). Every limit is 1/min with a slack of 4, so a real
//! clock's drift over a case (milliseconds) changes no count.
//! (`src/remote/*/tests.rs` hold each server's settle to the model's
//! state for state.)
#![cfg(feature = "tokio")]

use std::time::{Duration, Instant};

use paceline::remote::memory::{AsyncMemoryLimiter, MemoryBackend, MemoryLimiter};
use paceline::remote::{Backend, FailPolicy, RemoteLimiter};
use paceline::take::Within;
use paceline::{AsyncTake, Error, Limit, Rate, Take};

const BURST: u64 = 5;
const T: Duration = Duration::from_secs(60);

fn limit() -> Limit {
    Limit::new(Rate::per_minute(1), BURST - 1)
}

fn available<L: Take<str> + ?Sized>(limiter: &L, key: &str) -> u64 {
    limiter.state(key).unwrap().available()
}

/// The blocking cases on `key`, at rest.
fn suite<L: Take<str> + ?Sized>(name: &str, limiter: &L, key: &str) {
    assert_eq!(available(limiter, key), BURST, "{name}: at rest");
    // Booked at 4, it cost 1: 3 come back.
    let booked = limiter.book(key, 4, Within::Now).unwrap();
    assert_eq!(booked.taken().available(), 1, "{name}");
    limiter.settle(key, booked, 1).unwrap();
    assert_eq!(available(limiter, key), 4, "{name}: the refund of 3");
    // Booked at 1, it cost 7: 6 more, past what is left, as debt.
    let booked = limiter.book(key, 1, Within::Now).unwrap();
    limiter.settle(key, booked, 7).unwrap();
    assert_eq!(available(limiter, key), 0, "{name}: in debt");
    let wait = limiter.try_take(key).unwrap_err().retry_after().unwrap();
    // 4 + 1 + 7 = 12 permits of a burst of 5: the next waits out 7 - 3.
    assert!(
        wait <= 4 * T && wait > 4 * T - Duration::from_secs(10),
        "{name}: {wait:?}"
    );
    // Settled as booked, nothing moves (and nothing is sent).
    let booked = limiter.book(key, 0, Within::Now).unwrap();
    limiter.settle(key, booked, 0).unwrap();
    assert_eq!(available(limiter, key), 0, "{name}");
    // On another key, refused, and nothing moves.
    let other = format!("{key}/other");
    let booked = limiter.book(&other, 2, Within::Now).unwrap();
    let e = limiter.settle(key, booked, 0).unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{name}: {e}");
    assert!(e.to_string().contains("did not book it"), "{name}: {e}");
    assert_eq!(available(limiter, &other), BURST - 2, "{name}: stands");
}

/// The async cases on `key`, at rest.
async fn suite_async<L: AsyncTake<str>>(name: &str, limiter: &L, key: &str) {
    let left = |s: paceline::State| s.available();
    assert_eq!(left(limiter.state(key).await.unwrap()), BURST, "{name}");
    let booked = limiter.book(key, 4, Within::Now).await.unwrap();
    limiter.settle(key, booked, 1).await.unwrap();
    assert_eq!(left(limiter.state(key).await.unwrap()), 4, "{name}: 3 back");
    // An unbounded book waits for its slot (none here), then settles.
    let booked = limiter.book(key, 1, Within::Any).await.unwrap();
    limiter.settle(key, booked, 7).await.unwrap();
    assert_eq!(left(limiter.state(key).await.unwrap()), 0, "{name}: debt");
    let e = limiter.try_take(key).await.unwrap_err();
    assert!(e.retry_after().unwrap() > 3 * T, "{name}: {e}");
    let other = format!("{key}/other");
    let booked = limiter.book(&other, 2, Within::Now).await.unwrap();
    let e = limiter.settle(key, booked, 0).await.unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{name}: {e}");
}

/// Both faces of `blocking` (its async face made by `to_async`), each on
/// keys of its own; and a booking made on one face settles on the other,
/// but not on a limit made by `with_limit`.
fn both_faces<B: Backend, A: AsyncTake<str>>(
    name: &str,
    blocking: RemoteLimiter<B>,
    to_async: fn(RemoteLimiter<B>) -> A,
) {
    suite(name, &blocking, "alice");
    let sibling = blocking.with_limit(limit().rate(), BURST - 1).unwrap();
    let booked = blocking.book("carol", 3, Within::Now).unwrap();
    let e = sibling.settle("carol", booked, 0).unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{name}, with_limit: {e}");
    let booked = blocking.book("dave", 3, Within::Now).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let limiter = to_async(blocking);
    runtime.block_on(async {
        limiter.settle("dave", booked, 1).await.unwrap();
        let state = AsyncTake::state(&limiter, "dave").await.unwrap();
        assert_eq!(
            state.available(),
            BURST - 1,
            "{name}: settled on the other face"
        );
        suite_async(&format!("async {name}"), &limiter, "bob").await;
    });
}

#[test]
fn the_in_memory_backend_settles_a_booking() {
    let limiter = MemoryLimiter::with_backend(MemoryBackend::new(), limit(), FailPolicy::Closed);
    both_faces("memory", limiter.unwrap(), AsyncMemoryLimiter::from);
}

/// A booking settled after its server stopped, on both faces (the async
/// one made by `to_async`): under `Closed` an error that names the server
/// (`address`), well within the timeouts; under `Open` dropped, the
/// estimate standing.
fn a_stopped_server<B: Backend, A: AsyncTake<str>>(
    closed: RemoteLimiter<B>,
    open: RemoteLimiter<B>,
    to_async: fn(RemoteLimiter<B>) -> A,
    address: &str,
    stop: impl FnOnce(),
) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let booked = closed.book("k", 3, Within::Now).unwrap();
    let booked_open = open.book("k-open", 3, Within::Now).unwrap();
    let closed_async = to_async(closed.clone());
    let booked_async = runtime
        .block_on(closed_async.book("k-async", 3, Within::Now))
        .unwrap();
    stop();
    let start = Instant::now();
    let failures = [
        closed.settle("k", booked, 1).unwrap_err(),
        runtime
            .block_on(closed_async.settle("k-async", booked_async, 1))
            .unwrap_err(),
    ];
    for e in failures {
        // (A stopped server refuses the connection: no timeout to wait out.)
        assert!(matches!(e, Error::Unavailable(_)), "{address}: {e:?}");
        assert!(e.to_string().contains(address), "{address} not in {e}");
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    open.settle("k-open", booked_open, 1).unwrap();
}

#[test]
fn a_down_in_memory_server_fails_or_drops_a_settle_by_the_policy() {
    let backend = MemoryBackend::new();
    let open = MemoryLimiter::with_backend(backend.clone(), limit(), FailPolicy::Open).unwrap();
    let closed = MemoryLimiter::with_backend(backend.clone(), limit(), FailPolicy::Closed);
    a_stopped_server(
        closed.unwrap(),
        open,
        AsyncMemoryLimiter::from,
        "memory",
        || backend.set_down(true),
    );
    backend.set_down(false);
    assert_eq!(
        available(
            &MemoryLimiter::with_backend(backend, limit(), FailPolicy::Closed).unwrap(),
            "k"
        ),
        BURST - 3,
        "the estimate stands"
    );
}

/// A booking the `Open` policy admitted while the server was down holds
/// nothing of the server's: its settle charges an excess (to the server,
/// now back) and drops a refund.
#[test]
fn a_booking_admitted_open_settles_only_its_excess() {
    let backend = MemoryBackend::new();
    let open = MemoryLimiter::with_backend(backend.clone(), limit(), FailPolicy::Open).unwrap();
    backend.set_down(true);
    let excess = open.book("k", 1, Within::Now).unwrap();
    let refund = open.book("k", 4, Within::Now).unwrap();
    backend.set_down(false);
    assert_eq!(available(&open, "k"), BURST, "the server saw neither");
    open.settle("k", refund, 0).unwrap();
    assert_eq!(
        available(&open, "k"),
        BURST,
        "no refund of what it never saw"
    );
    open.settle("k", excess, 3).unwrap();
    assert_eq!(available(&open, "k"), BURST - 2, "the excess charged");
}

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_support;

#[cfg(feature = "redis")]
mod redis {
    use std::time::Duration;

    use paceline::redis::{AsyncRedisLimiter, RedisLimiter};
    use paceline::remote::FailPolicy;

    use super::redis_support::{RedisCluster, RedisServer};

    #[test]
    fn redis_settles_a_booking() {
        let server = RedisServer::start();
        let limiter = RedisLimiter::builder(server.url(), super::limit().rate())
            .slack(super::BURST - 1)
            .build()
            .unwrap();
        super::both_faces("redis", limiter, AsyncRedisLimiter::from);
    }

    #[test]
    fn a_redis_cluster_settles_a_booking() {
        let cluster = RedisCluster::start();
        let limiter = RedisLimiter::cluster_builder(cluster.urls(), super::limit().rate())
            .slack(super::BURST - 1)
            .build()
            .unwrap();
        super::both_faces("redis cluster", limiter, AsyncRedisLimiter::from);
    }

    #[test]
    fn a_stopped_redis_fails_or_drops_a_settle_by_the_policy() {
        let mut server = RedisServer::start_with(Some(0), &[]);
        let address = format!("127.0.0.1:{}", server.port().unwrap());
        let build = |policy| {
            RedisLimiter::builder(server.tcp_url(), super::limit().rate())
                .slack(super::BURST - 1)
                .on_error(policy)
                .connect_timeout(Duration::from_millis(500))
                .response_timeout(Duration::from_millis(500))
                .build()
                .unwrap()
        };
        let (closed, open) = (build(FailPolicy::Closed), build(FailPolicy::Open));
        super::a_stopped_server(closed, open, AsyncRedisLimiter::from, &address, || {
            server.stop()
        });
    }
}

#[cfg(feature = "postgres")]
#[path = "support/pg_server.rs"]
mod pg_support;

#[cfg(feature = "postgres")]
mod postgres {
    use std::time::Duration;

    use paceline::postgres::{AsyncPostgresLimiter, PostgresLimiter};
    use paceline::remote::FailPolicy;

    use super::pg_support::PgServer;

    fn limiter(server: &PgServer, policy: FailPolicy) -> PostgresLimiter {
        let limiter = PostgresLimiter::builder(&server.conn(), super::limit().rate())
            .slack(super::BURST - 1)
            .on_error(policy)
            .connect_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        limiter.install().unwrap();
        limiter
    }

    #[test]
    fn postgres_settles_a_booking() {
        let server = PgServer::start();
        let limiter = limiter(&server, FailPolicy::Closed);
        super::both_faces("postgres", limiter, AsyncPostgresLimiter::from);
    }

    #[test]
    fn a_stopped_postgres_fails_or_drops_a_settle_by_the_policy() {
        let mut server = PgServer::start();
        let (closed, open) = (
            limiter(&server, FailPolicy::Closed),
            limiter(&server, FailPolicy::Open),
        );
        let address = format!("{}/.s.PGSQL.", server.dir().display());
        super::a_stopped_server(closed, open, AsyncPostgresLimiter::from, &address, || {
            server.stop()
        });
    }
}

#[cfg(feature = "memcached")]
#[path = "support/memcached_server.rs"]
mod memcached_support;

#[cfg(feature = "memcached")]
mod memcached {
    use std::time::Duration;

    use paceline::memcached::{AsyncMemcachedLimiter, MemcachedLimiter};
    use paceline::remote::FailPolicy;

    use super::memcached_support::MemcachedServer;

    #[test]
    fn memcached_settles_a_booking() {
        let server = MemcachedServer::start();
        let limiter = MemcachedLimiter::builder(server.addr(), super::limit().rate())
            .slack(super::BURST - 1)
            .build()
            .unwrap();
        super::both_faces("memcached", limiter, AsyncMemcachedLimiter::from);
    }

    #[test]
    fn a_stopped_memcached_fails_or_drops_a_settle_by_the_policy() {
        let mut server = MemcachedServer::start_with(Some(0), 16);
        let address = server.addr();
        let build = |policy| {
            MemcachedLimiter::builder(&address, super::limit().rate())
                .slack(super::BURST - 1)
                .on_error(policy)
                .connect_timeout(Duration::from_millis(500))
                .response_timeout(Duration::from_millis(500))
                .build()
                .unwrap()
        };
        let (closed, open) = (build(FailPolicy::Closed), build(FailPolicy::Open));
        super::a_stopped_server(closed, open, AsyncMemcachedLimiter::from, &address, || {
            server.stop()
        });
    }
}
