//! One suite for every kind, written against the take interface (`Take`,
//! `AsyncTake`): the same cases run on the direct limiters, a keyed
//! limiter, several limits as one (`All`), the in-memory remote backend,
//! and a real Redis, PostgreSQL and memcached (started here), blocking and
//! async; and the same calls spelled on the concrete types have one shape
//! per verb. Every limit is 1/s with a slack of
//! 2 (a burst of 3), at rest with full credit, so a real clock's drift
//! over a case (milliseconds) changes no decision.
#![cfg(all(feature = "tokio", feature = "keyed"))]

use std::time::Duration;

use paceline::remote::memory::{MemoryBackend, MemoryLimiter};
use paceline::remote::FailPolicy;
use paceline::{
    take::OnKey, AsyncTake, AtomicLimiter, Error, KeyedLimiter, Limit, MutexLimiter, Rate, Take,
};

const BURST: u64 = 3;

fn limit() -> Limit {
    Limit::new(Rate::per_second(1), BURST - 1)
}

fn retry(e: &Error) -> Duration {
    e.retry_after()
        .unwrap_or_else(|| panic!("{e} is not a refusal a wait cures"))
}

/// The blocking cases, on `key` of `limiter`.
fn suite<K: ?Sized, L: Take<K> + ?Sized>(name: &str, limiter: &L, key: &K) {
    // The limit in force, known without asking anyone.
    assert_eq!(limiter.limit_for(key), Some(limit()), "{name}");
    let before = limiter.state(key).unwrap();
    assert_eq!(
        before.available(),
        BURST,
        "{name}: at rest, the whole burst"
    );
    assert_eq!(before.next_free(), Duration::ZERO, "{name}");
    assert!(limiter.can_take(key, BURST).unwrap(), "{name}");
    // A cost above the burst: no wait helps, nothing is stored.
    let e = limiter.try_take_n(key, BURST + 1).unwrap_err();
    assert!(
        matches!(e, Error::ExceedsBurst { cost: 4, burst: 3 }),
        "{name}: {e}"
    );
    // The burst at once; the take reports what it left.
    let taken = limiter.try_take_n(key, BURST).unwrap();
    assert_eq!(taken.available(), 0, "{name}");
    assert!(
        taken.next_free() > Duration::from_millis(900),
        "{name}: {taken:?}"
    );
    assert!(taken.reset() > Duration::from_millis(2900), "{name}");
    // Now empty: a try learns the wait, a bounded take fails at once.
    let e = limiter.try_take(key).unwrap_err();
    assert!(matches!(e, Error::RetryAfter(_)), "{name}: {e}");
    let wait = retry(&e);
    assert!(
        wait > Duration::from_millis(900) && wait <= Duration::from_secs(1),
        "{name}: {wait:?}"
    );
    let e = limiter
        .take_n_timeout(key, 1, Duration::from_millis(10))
        .unwrap_err();
    assert!(matches!(e, Error::QueueFull { .. }), "{name}: {e}");
    assert!(!limiter.can_take(key, 1).unwrap(), "{name}");
    let after = limiter.state(key).unwrap();
    assert_eq!(after.available(), 0, "{name}");
    assert!(after.next_free() > Duration::from_millis(900), "{name}");
    // A cost far past any clock: refused, never a panic.
    assert!(limiter.try_take_n(key, u64::MAX).is_err(), "{name}");
}

/// The same cases through the async face.
async fn suite_async<K: ?Sized + Sync, L: AsyncTake<K>>(name: &str, limiter: &L, key: &K) {
    assert_eq!(limiter.limit_for(key), Some(limit()), "{name}");
    let before = limiter.state(key).await.unwrap();
    assert_eq!(
        before.available(),
        BURST,
        "{name}: at rest, the whole burst"
    );
    assert!(limiter.can_take(key, BURST).await.unwrap(), "{name}");
    let e = limiter.try_take_n(key, BURST + 1).await.unwrap_err();
    assert!(
        matches!(e, Error::ExceedsBurst { cost: 4, burst: 3 }),
        "{name}: {e}"
    );
    let taken = limiter.try_take_n(key, BURST).await.unwrap();
    assert_eq!(taken.available(), 0, "{name}");
    assert!(
        taken.next_free() > Duration::from_millis(900),
        "{name}: {taken:?}"
    );
    assert!(taken.reset() > Duration::from_millis(2900), "{name}");
    let e = limiter.try_take(key).await.unwrap_err();
    assert!(matches!(e, Error::RetryAfter(_)), "{name}: {e}");
    let wait = retry(&e);
    assert!(
        wait > Duration::from_millis(900) && wait <= Duration::from_secs(1),
        "{name}: {wait:?}"
    );
    let e = limiter
        .take_n_timeout(key, 1, Duration::from_millis(10))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::QueueFull { .. }), "{name}: {e}");
    assert!(!limiter.can_take(key, 1).await.unwrap(), "{name}");
    assert_eq!(limiter.state(key).await.unwrap().available(), 0, "{name}");
    // The decision on the spot agrees (in process), or is not offered.
    if let Some(now) = limiter.try_take_n_now(key, 1) {
        assert!(now.is_err(), "{name}");
    }
}

fn atomic() -> AtomicLimiter {
    AtomicLimiter::builder(limit().rate())
        .slack(BURST - 1)
        .full_credit(true)
        .build()
        .unwrap()
}

fn keyed() -> KeyedLimiter<String> {
    KeyedLimiter::builder(limit().rate())
        .slack(BURST - 1)
        .build()
        .unwrap()
}

fn memory() -> MemoryLimiter {
    MemoryLimiter::with_backend(MemoryBackend::new(), limit(), FailPolicy::Closed).unwrap()
}

#[test]
fn every_in_process_kind_answers_the_interface_alike() {
    suite("atomic", &atomic(), "k");
    let mutex = MutexLimiter::builder(limit().rate())
        .slack(BURST - 1)
        .full_credit(true)
        .build()
        .unwrap();
    suite("mutex", &mutex, "k");
    let warm = AtomicLimiter::builder(limit().rate())
        .slack(BURST - 1)
        .full_credit(true)
        .warm_up(Duration::ZERO)
        .build()
        .unwrap();
    suite("warm-up", &warm, "k");
    let keyed = keyed();
    suite("keyed", &keyed, "alice");
    let (a, b) = (atomic(), atomic());
    suite("all of two", &paceline::all::All::new([&a, &b]), "k");
    suite("keyed, another key", &keyed, "bob");
    // Behind a pointer, as a fitting holds it.
    let boxed: Box<dyn Take<str>> = Box::new(atomic());
    suite("dyn Take", &*boxed, "k");
    // One key of a keyed limiter as a direct one (unit key).
    suite(
        "OnKey of keyed",
        &OnKey::new(&keyed, "carol".to_string()),
        &(),
    );
    assert_eq!(
        keyed.state("carol").unwrap().available(),
        0,
        "OnKey took from its key"
    );
}

/// What a keyed take reports is what a look right after it finds, for a
/// key new and tracked, by default and under an override: the take reads
/// its state in the same pass as its decision, and must read the same.
#[test]
fn a_keyed_take_reports_the_state_a_look_finds() {
    let clock = paceline::clock::ManualClock::new();
    let keyed = KeyedLimiter::<String>::builder(Rate::per_second(10))
        .slack(4)
        .clock(clock.clone())
        .build()
        .unwrap();
    keyed
        .set_override("vip".to_string(), Rate::per_second(100), 9)
        .unwrap();
    for (key, cost) in [
        ("alice", 2),
        ("alice", 1),
        ("vip", 3),
        ("vip", 5),
        ("bob", 0),
    ] {
        let taken = Take::try_take_n(&keyed, key, cost).unwrap();
        let state = keyed.state(key).unwrap();
        assert_eq!(
            (taken.available(), taken.next_free(), taken.reset()),
            (state.available(), state.next_free(), state.reset()),
            "{key}, cost {cost}"
        );
        assert_eq!(
            taken.at(),
            Duration::from_nanos(paceline::clock::Clock::now(&clock)),
            "{key}"
        );
        clock.advance(Duration::from_millis(3));
    }
    assert_eq!(keyed.state("vip").unwrap().limit().unwrap().burst(), 10);
}

#[test]
fn the_remote_seam_answers_the_interface_alike() {
    let limiter = memory();
    suite("memory", &limiter, "alice");
    suite("memory, another key", &limiter, "bob");
    suite("OnKey of memory", &OnKey::new(&limiter, "carol"), &());
}

/// Keys a client may send that a server cannot hold as given: ~3 KB of
/// random text (over PostgreSQL's index limit), a NUL byte (which its
/// `text` cannot hold), non-ASCII text; each starts with `tag`.
fn hostile_keys(tag: &str) -> Vec<String> {
    let mut x = 1u64;
    let long: String = (0..3 << 10)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            char::from(b'!' + (x >> 58) as u8)
        })
        .collect();
    vec![
        format!("{tag}:{long}"),
        format!("{tag}:a\0b"),
        format!("{tag}:ключ🙂"),
    ]
}

/// Every key a limiter accepts is limited, whatever its length or
/// bytes: the same suite on hostile keys, here on the
/// in-memory backend, and below on Redis and PostgreSQL.
#[test]
fn every_remote_backend_limits_a_key_whatever_its_length_or_bytes() {
    let limiter = memory();
    for key in hostile_keys("memory") {
        suite("memory, a hostile key", &limiter, &key);
    }
}

#[test]
fn unlimited_reports_nothing_limiting() {
    let taken = Take::<str>::try_take_n(&paceline::Unlimited, "k", u64::MAX).unwrap();
    assert_eq!(taken.available(), u64::MAX);
    assert_eq!(
        (taken.next_free(), taken.reset()),
        (Duration::ZERO, Duration::ZERO)
    );
    assert_eq!(Take::<str>::limit_for(&paceline::Unlimited, "k"), None);
}

#[tokio::test]
async fn every_async_face_answers_the_interface_alike() {
    let direct = paceline::tokio::AsyncLimiter::from(atomic());
    suite_async("async atomic", &direct, "k").await;
    let keyed = paceline::tokio::AsyncKeyedLimiter::from(keyed());
    suite_async("async keyed", &keyed, "alice").await;
    let memory = paceline::remote::memory::AsyncMemoryLimiter::from(memory());
    suite_async("async memory", &memory, "alice").await;
    let on_key = OnKey::new(memory.clone(), "carol");
    suite_async("OnKey of async memory", &on_key, &()).await;
}

/// The fail policy, through the interface: a server that cannot answer
/// admits under `Open` and errs under `Closed`.
#[test]
fn a_down_server_is_admitted_only_by_the_open_policy() {
    let backend = MemoryBackend::new();
    let open = MemoryLimiter::with_backend(backend.clone(), limit(), FailPolicy::Open).unwrap();
    let closed = MemoryLimiter::with_backend(backend.clone(), limit(), FailPolicy::Closed).unwrap();
    backend.set_down(true);
    for _ in 0..10 {
        assert!(Take::<str>::try_take(&open, "k").is_ok());
        let e = Take::<str>::try_take(&closed, "k").unwrap_err();
        assert!(matches!(e, Error::Unavailable(_)), "{e}");
    }
    backend.set_down(false);
    assert_eq!(Take::<str>::state(&open, "k").unwrap().available(), BURST);
}

#[cfg(feature = "memcached")]
#[path = "support/memcached_server.rs"]
mod memcached_support;

#[cfg(feature = "postgres")]
#[path = "support/pg_server.rs"]
mod pg_support;
#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_support;

/// A remote limiter through both suites: `blocking` itself, then its async
/// face (`to_async(blocking)`), each on a plain key and on every hostile
/// one.
#[cfg(any(feature = "redis", feature = "postgres", feature = "memcached"))]
fn both_faces<L: Take<str>, A: AsyncTake<str>>(name: &str, blocking: L, to_async: fn(L) -> A) {
    suite(name, &blocking, "alice");
    for key in hostile_keys(name) {
        suite(&format!("{name}, a hostile key"), &blocking, key.as_str());
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let limiter = to_async(blocking);
    let name = format!("async {name}");
    runtime.block_on(suite_async(&name, &limiter, "bob"));
    for key in hostile_keys(&name) {
        let name = format!("{name}, a hostile key");
        runtime.block_on(suite_async(&name, &limiter, key.as_str()));
    }
}

#[cfg(feature = "memcached")]
mod memcached {
    use super::memcached_support::MemcachedServer;

    use paceline::memcached::{AsyncMemcachedLimiter, MemcachedLimiter};

    #[test]
    fn memcached_answers_the_interface_alike() {
        let server = MemcachedServer::start();
        let limiter = MemcachedLimiter::builder(server.addr(), super::limit().rate())
            .slack(super::BURST - 1)
            .build()
            .unwrap();
        super::both_faces("memcached", limiter, AsyncMemcachedLimiter::from);
    }
}

#[cfg(feature = "redis")]
mod redis {
    use super::redis_support as support;

    use paceline::redis::{AsyncRedisLimiter, RedisLimiter};

    #[test]
    fn redis_answers_the_interface_alike() {
        let server = support::RedisServer::start();
        let limiter = RedisLimiter::builder(server.url(), super::limit().rate())
            .slack(super::BURST - 1)
            .build()
            .unwrap();
        super::both_faces("redis", limiter, AsyncRedisLimiter::from);
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::pg_support as support;

    use paceline::postgres::{AsyncPostgresLimiter, PostgresLimiter};

    #[test]
    fn postgres_answers_the_interface_alike() {
        let server = support::PgServer::start();
        let limiter = PostgresLimiter::builder(&server.conn(), super::limit().rate())
            .slack(super::BURST - 1)
            .build()
            .unwrap();
        limiter.install().unwrap();
        super::both_faces("postgres", limiter, AsyncPostgresLimiter::from);
    }
}

/// A remote-backed layer makes one round trip a request, with the
/// `RateLimit` fields on every response too: the take's own answer
/// carries them.
#[cfg(feature = "tower")]
#[tokio::test]
async fn a_remote_backed_layer_makes_one_round_trip_per_request() {
    use paceline::http::{Fields, LimitLayer};
    use paceline::remote::memory::AsyncMemoryLimiter;
    use tower::{Layer, ServiceExt};

    let backend = MemoryBackend::new();
    let limiter = MemoryLimiter::with_backend(
        backend.clone(),
        Limit::new(Rate::per_second(1), 4),
        FailPolicy::Closed,
    )
    .unwrap();
    let layer = LimitLayer::per_header("x-key", Rate::per_second(1))
        .limiter(AsyncMemoryLimiter::from(limiter))
        .fields(Fields::Always)
        .build()
        .unwrap();
    let inner = tower::service_fn(|_req: http::Request<String>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    });
    let service = layer.layer(inner);
    let mut statuses = Vec::new();
    for i in 0..8 {
        let request = http::Request::builder()
            .header("x-key", "client-a")
            .body(String::new())
            .unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        statuses.push(response.status().as_u16());
        assert!(
            response.headers().contains_key("ratelimit-policy"),
            "request {i}"
        );
        assert_eq!(backend.round_trips(), i + 1, "request {i}");
    }
    // A burst of 5, then refusals: 8 requests, 8 round trips.
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
}

/// What a future answers, named at compile time (the future is never
/// polled).
fn answers<T, F: std::future::Future<Output = T>>(_: F) -> std::marker::PhantomData<T> {
    std::marker::PhantomData
}

/// The same calls spelled on the concrete types have one shape per verb: a
/// direct limiter's own calls are the interface's without the key (its
/// `take` a `Taken`, its questions a `bool` and a `State`: it cannot
/// fail); every other kind's are the interface's own. Checked by the
/// compiler: a call whose shape drifts fails to build this test.
#[test]
fn the_calls_have_one_shape_per_verb() {
    use paceline::take::{Booked, Within};
    use paceline::{State, Taken, WarmUpLimiter};
    type R = Result<Taken, Error>;
    macro_rules! direct {
        ($($l:ty),*) => {$(
            let _: fn(&$l) -> Taken = <$l>::take;
            let _: fn(&$l, u64) -> R = <$l>::take_n;
            let _: fn(&$l) -> R = <$l>::try_take;
            let _: fn(&$l, u64) -> R = <$l>::try_take_n;
            let _: fn(&$l, Duration) -> R = <$l>::take_timeout;
            let _: fn(&$l, u64, Duration) -> R = <$l>::take_n_timeout;
            let _: fn(&$l, u64) -> bool = <$l>::can_take;
            let _: fn(&$l) -> State = <$l>::state;
            let _: fn(&$l) -> Limit = <$l>::limit;
            let _: fn(&$l, u64, Within) -> Result<Booked, Error> = <$l>::book;
            let _: fn(&$l, Booked, u64) -> Result<(), Error> = <$l>::settle;
            // The interface's, with the key.
            let _: fn(&$l, &()) -> R = <$l as Take>::take;
            let _: fn(&$l, &(), u64, Within) -> Result<Booked, Error> = <$l as Take>::book;
            let _: fn(&$l, &(), u64) -> R = <$l as Take>::try_take_n;
        )*};
    }
    direct!(AtomicLimiter, MutexLimiter, WarmUpLimiter);
    let _: fn(&KeyedLimiter<String>, &str) -> R = <KeyedLimiter<String> as Take<str>>::take;
    let _: fn(&KeyedLimiter<String>, &str, u64) -> R =
        <KeyedLimiter<String> as Take<str>>::try_take_n;
    let _: fn(&KeyedLimiter<String>, &str, u64) -> Result<bool, Error> =
        <KeyedLimiter<String> as Take<str>>::can_take;
    let _: fn(&MemoryLimiter, &str, u64) -> R = <MemoryLimiter as Take<str>>::try_take_n;
    let _: fn(&KeyedLimiter<String>, &str, Booked, u64) -> Result<(), Error> =
        <KeyedLimiter<String> as Take<str>>::settle;
    let _: fn(&MemoryLimiter, &str) -> Result<State, Error> = <MemoryLimiter as Take<str>>::state;

    // The async face of a direct limiter: the same, as futures.
    let direct = paceline::tokio::AsyncLimiter::new(Rate::per_second(1));
    let _: std::marker::PhantomData<Taken> = answers(direct.take());
    let _: std::marker::PhantomData<R> = answers(direct.take_n(1));
    let _: std::marker::PhantomData<R> = answers(direct.try_take());
    let _: std::marker::PhantomData<R> = answers(direct.try_take_n(1));
    let _: std::marker::PhantomData<R> = answers(direct.take_timeout(Duration::ZERO));
    let _: std::marker::PhantomData<R> = answers(direct.take_n_timeout(1, Duration::ZERO));
    let _: std::marker::PhantomData<bool> = answers(direct.can_take(1));
    let _: std::marker::PhantomData<State> = answers(direct.state());
    let _: std::marker::PhantomData<Result<Booked, Error>> = answers(direct.book(1, Within::Now));
    let _: std::marker::PhantomData<R> = answers(AsyncTake::<()>::try_take_n(&direct, &(), 1));
}
