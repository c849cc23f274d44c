//! Remote limiters counting a quota per window (`Limit::per_window`).
//!
//! - On the in-memory backend, at a `ManualClock` read as Unix time: every
//!   call of the interface (try, bounded, can_take, state, book and settle,
//!   reset) answers as `model::window` does on the same word at the same
//!   instant, what a take found included; a server down fails a window
//!   take under `Closed` and admits it under `Open`.
//! - Across processes (`windows_remote_processes` below, with the real
//!   servers): at most the quota in any one window.

use std::time::Duration;

use paceline::clock::ManualClock;
use paceline::model::schedule::Admit;
use paceline::model::window::{self, Params, Weekday, Window, EMPTY};
use paceline::remote::memory::{MemoryBackend, MemoryLimiter};
use paceline::remote::FailPolicy;
use paceline::take::Within;
use paceline::{Error, Limit, Take};
use proptest::prelude::*;

const S: u64 = 1_000_000_000;

fn memory(
    quota: u64,
    w: Window,
    policy: FailPolicy,
) -> (
    ManualClock,
    MemoryBackend<ManualClock>,
    MemoryLimiter<ManualClock>,
) {
    let clock = ManualClock::new();
    let backend = MemoryBackend::with_clock(clock.clone());
    let limit = Limit::per_window(quota, w).unwrap();
    let limiter = MemoryLimiter::with_backend(backend.clone(), limit, policy).unwrap();
    (clock, backend, limiter)
}

#[derive(Clone, Debug)]
enum Call {
    Try(u64),
    /// A bounded take, allowed this many ms (its waits are slept).
    Bounded(u64, u64),
    Can(u64),
    State,
    /// Booked now, settled at once with its cost plus `more` less `less`.
    BookSettle {
        cost: u64,
        more: u64,
        less: u64,
    },
    Reset,
    /// The clock moves this many ms.
    Forward(u64),
    /// The clock goes to `ms` ms before the next window's start.
    Edge(u64),
}

fn calls() -> impl Strategy<Value = Vec<Call>> {
    let cost = prop_oneof![4 => 0..=3u64, 1 => 4..=7u64];
    let call = prop_oneof![
        4 => cost.clone().prop_map(Call::Try),
        2 => (cost.clone(), 0..=3u64).prop_map(|(c, ms)| Call::Bounded(c, ms)),
        1 => cost.clone().prop_map(Call::Can),
        1 => Just(Call::State),
        2 => (cost, 0..=2u64, 0..=3u64)
            .prop_map(|(cost, more, less)| Call::BookSettle { cost, more, less }),
        1 => Just(Call::Reset),
        2 => prop_oneof![0..=5u64, 0..=5_000u64, 0..=90_000_000u64].prop_map(Call::Forward),
        2 => (0..=3u64).prop_map(Call::Edge),
    ];
    proptest::collection::vec(call, 1..30)
}

fn window_kind() -> impl Strategy<Value = Window> {
    prop_oneof![
        Just(Window::Fixed { seconds: 1 }),
        Just(Window::Fixed { seconds: 60 }),
        (-12i32..=14).prop_map(|h| Window::Day { offset: h * 3_600 }),
        Just(Window::Week {
            starts: Weekday::Sunday,
            offset: 9 * 3_600
        }),
        Just(Window::Month { offset: 0 }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_window_limit_on_memory_answers_as_the_window_step(
        quota in 1..=5u64,
        w in window_kind(),
        start in 0..=2_000_000_000u64,
        calls in calls(),
    ) {
        let (clock, _backend, lim) = memory(quota, w, FailPolicy::Closed);
        let p = Params::new(quota, w).unwrap();
        let mut now = start * S;
        clock.set(Duration::from_nanos(now));
        let (mut word, mut present) = (EMPTY, false);
        for call in calls {
            let seen = format!("word {word:#x} now {now} {call:?}");
            match call {
                Call::Try(cost) | Call::Bounded(cost, _) => {
                    let (admit, within) = match call {
                        Call::Bounded(_, ms) => (
                            Admit::Within(ms * 1_000_000),
                            Within::Max(Duration::from_millis(ms)),
                        ),
                        _ => (Admit::Within(0), Within::Now),
                    };
                    let model = window::step(word, now, cost, p, admit);
                    let got = lim.take_within("k", cost, within);
                    match (model, got) {
                        (Ok(g), Ok(taken)) => {
                            prop_assert_eq!(taken.at(), Duration::from_nanos(g.slot), "{}", seen);
                            let left = window::available(g.next, g.slot, p);
                            prop_assert_eq!(taken.available(), left, "{}", seen);
                            let current = p.current(g.next, g.slot);
                            let reset = match current.count {
                                0 => 0,
                                _ => p.end(current.index) - g.slot,
                            };
                            prop_assert_eq!(taken.reset(), Duration::from_nanos(reset), "{}", seen);
                            present |= cost > 0;
                            word = g.next;
                        }
                        (Err(window::Deny::ExceedsQuota), Err(Error::ExceedsBurst { cost: c, burst })) => {
                            prop_assert_eq!((c, burst), (cost, quota), "{}", seen)
                        }
                        (Err(window::Deny::Wait(wait)), Err(e)) => {
                            prop_assert_eq!(e.retry_after(), Some(Duration::from_nanos(wait)), "{}", seen);
                            let full = matches!(e, Error::QueueFull { .. });
                            prop_assert_eq!(full, matches!(call, Call::Bounded(..)), "{}", seen);
                        }
                        (model, got) => {
                            return Err(TestCaseError::fail(format!("{seen}: model {model:?}, memory {got:?}")))
                        }
                    }
                }
                Call::Can(cost) => {
                    let model = window::step(word, now, cost, p, Admit::Within(0)).is_ok();
                    prop_assert_eq!(lim.can_take("k", cost).unwrap(), model, "{}", seen);
                }
                Call::State => {
                    let state = Take::state(&lim, "k").unwrap();
                    prop_assert_eq!(state.available(), window::available(word, now, p), "{}", seen);
                    let next = window::next_free(word, now, p).unwrap();
                    prop_assert_eq!(state.next_free(), Duration::from_nanos(next), "{}", seen);
                    // Whole again at the window's end; now, when it has
                    // counted nothing.
                    let current = p.current(word, now);
                    let reset = if current.count == 0 { 0 } else { p.end(current.index) - now };
                    prop_assert_eq!(state.reset(), Duration::from_nanos(reset), "{}", seen);
                    prop_assert_eq!(state.limit(), Some(Limit::per_window(quota, w).unwrap()));
                }
                Call::BookSettle { cost, more, less } => {
                    let model = window::step(word, now, cost, p, Admit::Within(0));
                    match (model, lim.book("k", cost, Within::Now)) {
                        (Ok(g), Ok(booked)) => {
                            let actual = (cost + more).saturating_sub(less);
                            lim.settle("k", booked, actual).unwrap();
                            present |= cost > 0;
                            let settled = window::settle(g.next, now, g.slot, cost, actual, p);
                            present |= settled != g.next;
                            word = settled;
                        }
                        (Err(_), Err(_)) => {}
                        (model, got) => {
                            return Err(TestCaseError::fail(format!("{seen}: model {model:?}, memory {got:?}")))
                        }
                    }
                }
                Call::Reset => {
                    prop_assert_eq!(lim.reset("k").unwrap(), present, "{}", seen);
                    (word, present) = (EMPTY, false);
                }
                Call::Forward(ms) => now += ms * 1_000_000,
                Call::Edge(ms) => now = p.end(p.index_at(now)) - ms * 1_000_000,
            }
            clock.set(Duration::from_nanos(now));
            // The limiter's own view agrees after every call.
            let state = Take::state(&lim, "k").unwrap();
            prop_assert_eq!(state.available(), window::available(word, now, p), "after {}", seen);
        }
    }
}

#[test]
fn a_window_take_fails_or_is_admitted_by_the_policy_when_the_server_is_down() {
    for policy in [FailPolicy::Closed, FailPolicy::Open] {
        let (_clock, backend, lim) = memory(2, Window::MINUTE, policy);
        backend.set_down(true);
        let got = lim.try_take("k");
        match policy {
            FailPolicy::Closed => {
                let e = got.unwrap_err();
                assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
                assert!(e.to_string().contains("memory"), "{e}");
            }
            FailPolicy::Open => {
                let taken = got.unwrap();
                assert_eq!(taken.available(), 0, "nothing known");
            }
        }
        // Questions fail whatever the policy: there is nothing to admit.
        assert!(lim.available("k").is_err());
        backend.set_down(false);
        assert_eq!(lim.available("k").unwrap(), 2);
    }
}

#[test]
fn a_window_limit_is_reported_and_a_sibling_may_pace() {
    let daily = Limit::per_window(10, Window::Day { offset: 0 }).unwrap();
    let (_clock, _backend, lim) = memory(10, Window::Day { offset: 0 }, FailPolicy::Closed);
    assert_eq!(lim.limit(), daily);
    assert_eq!(lim.slack(), 9);
    assert_eq!(Take::<str>::limit_for(&lim, "k"), Some(daily));
    // A sibling at a pacing limit, and back.
    let paced = lim.with(paceline::Rate::per_second(5)).unwrap();
    assert_eq!(paced.limit().window(), None);
    assert_eq!(paced.with(daily).unwrap().limit(), daily);
}

#[test]
fn a_cost_over_the_quota_is_refused_before_any_round_trip() {
    let (_clock, backend, lim) = memory(3, Window::MINUTE, FailPolicy::Closed);
    for within in [
        Within::Now,
        Within::Max(Duration::from_secs(3600)),
        Within::Any,
    ] {
        let e = lim.take_within("k", 4, within).unwrap_err();
        assert!(
            matches!(e, Error::ExceedsBurst { cost: 4, burst: 3 }),
            "{e:?}"
        );
    }
    assert_eq!(backend.round_trips(), 0);
}

#[test]
fn a_spent_window_waits_for_the_next_one_s_start() {
    // An unbounded take on a spent window of a second: granted at the
    // next window's start, which the take waits for on the real clock.
    let clock = ManualClock::new();
    let backend = MemoryBackend::with_clock(clock.clone());
    let limit = Limit::per_window(2, Window::SECOND).unwrap();
    let lim = MemoryLimiter::with_backend(backend, limit, FailPolicy::Closed).unwrap();
    // 50 ms before a window's end.
    clock.set(Duration::from_millis(41_950));
    lim.try_take_n("k", 2).unwrap();
    let begun = std::time::Instant::now();
    let taken = lim.take("k").unwrap();
    assert_eq!(taken.at(), Duration::from_secs(42));
    assert!(
        begun.elapsed() >= Duration::from_millis(50),
        "{:?}",
        begun.elapsed()
    );
    assert_eq!(taken.available(), 1);
    // A bounded one refused with the wait to the start after.
    let e = lim
        .take_n_timeout("k", 2, Duration::from_millis(10))
        .unwrap_err();
    assert!(matches!(e, Error::QueueFull { .. }), "{e:?}");
    assert_eq!(e.retry_after(), Some(Duration::from_millis(1_050)));
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn the_async_face_counts_the_window_and_books_the_next_one() {
    use paceline::remote::memory::AsyncMemoryLimiter;
    use paceline::AsyncTake;
    let clock = ManualClock::new();
    let backend = MemoryBackend::with_clock(clock.clone());
    let limit = Limit::per_window(3, Window::SECOND).unwrap();
    let lim = MemoryLimiter::with_backend(backend, limit, FailPolicy::Closed).unwrap();
    let lim = AsyncMemoryLimiter::from(lim);
    clock.set(Duration::from_millis(7_970));
    assert_eq!(lim.try_take_n("k", 3).await.unwrap().available(), 0);
    assert!(!AsyncTake::can_take(&lim, "k", 1).await.unwrap());
    let state = AsyncTake::state(&lim, "k").await.unwrap();
    assert_eq!(state.reset(), Duration::from_millis(30));
    assert_eq!(state.next_free(), Duration::from_millis(30));
    // Bounded: booked at once, and waited for (on the real clock) the
    // 30 ms to the next window. (An unbounded one asks again within 10 ms
    // of its slot, which the manual clock here would never reach.)
    let taken = lim
        .take_n_timeout("k", 2, Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(taken.at(), Duration::from_secs(8));
    assert_eq!(taken.available(), 1);
    // A bounded take refused at once; a try told when to come back.
    let e = lim.try_take_n("k", 2).await.unwrap_err();
    assert_eq!(e.retry_after(), Some(Duration::from_millis(1_030)));
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

/// Across processes and a stopped server, on the real servers this file
/// starts itself.
#[cfg(any(feature = "redis", feature = "postgres", feature = "memcached"))]
mod servers {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::Instant;

    use paceline::clock::{Clock, UnixClock};

    use super::*;

    #[cfg(feature = "memcached")]
    use super::memcached_support;
    #[cfg(feature = "postgres")]
    use super::pg_support;
    #[cfg(feature = "redis")]
    use super::redis_support;

    /// The quota per window of a second the processes share.
    const QUOTA: u64 = 7;
    /// How many processes take on the one key.
    const PROCESSES: usize = 8;
    /// Set in the children: "store;address;stop (Unix ns)".
    const CHILD_ENV: &str = "PACELINE_WINDOW_CHILD";

    fn limit() -> Limit {
        Limit::per_window(QUOTA, Window::SECOND).unwrap()
    }

    /// A limiter of the quota on `store` at `address`, with these
    /// timeouts.
    fn build(
        store: &str,
        address: &str,
        policy: FailPolicy,
        timeout: Duration,
    ) -> Box<dyn Take<str>> {
        match store {
            #[cfg(feature = "redis")]
            "redis" => Box::new(
                paceline::redis::RedisLimiter::builder(address, paceline::Rate::per_second(1))
                    .limit(limit())
                    .on_error(policy)
                    .connect_timeout(timeout)
                    .response_timeout(timeout)
                    .build()
                    .unwrap(),
            ),
            #[cfg(feature = "memcached")]
            "memcached" => Box::new(
                paceline::memcached::MemcachedLimiter::builder(
                    address,
                    paceline::Rate::per_second(1),
                )
                .limit(limit())
                .on_error(policy)
                .connect_timeout(timeout)
                .response_timeout(timeout)
                .build()
                .unwrap(),
            ),
            #[cfg(feature = "postgres")]
            "postgres" => {
                let lim = paceline::postgres::PostgresLimiter::builder(
                    address,
                    paceline::Rate::per_second(1),
                )
                .limit(limit())
                .on_error(policy)
                .connect_timeout(timeout)
                .response_timeout(timeout)
                .build()
                .unwrap();
                Box::new(lim)
            }
            other => panic!("no store {other}"),
        }
    }

    /// The child's half: tries on one key until `stop`, printing the time
    /// each permit went.
    fn child(spec: &str) {
        let parts: Vec<&str> = spec.split(';').collect();
        // Long timeouts: eight processes on one key of a busy server must
        // not time out (a take that did might have been granted unseen).
        let lim = build(
            parts[0],
            parts[1],
            FailPolicy::Closed,
            Duration::from_secs(10),
        );
        let stop: u64 = parts[2].parse().unwrap();
        while UnixClock.now() < stop {
            match lim.try_take("shared") {
                Ok(taken) => println!("PERMIT {}", taken.at().as_nanos()),
                Err(e) if e.retry_after().is_some() => {}
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// Runs `PROCESSES` children of `test` on `store` at `address` for 3 s;
    /// checks that no window of a second granted more than the quota, and
    /// that the processes did press it (windows filled, by more than one
    /// process).
    fn at_most_the_quota_per_window(test: &str, store: &str, address: &str) {
        let stop = UnixClock.now() + 3_000_000_000;
        let children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", test, "--nocapture", "--test-threads=1"])
                    .env(CHILD_ENV, format!("{store};{address};{stop}"))
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("spawn a child process")
            })
            .collect();
        let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
        let mut takers = 0;
        for mut child in children {
            let out = BufReader::new(child.stdout.take().unwrap());
            let mut mine = 0;
            for line in out.lines().map_while(Result::ok) {
                // (The first may follow the test harness's "test … ... ".)
                if let Some((_, t)) = line.split_once("PERMIT ") {
                    let t: u64 = t.parse().unwrap();
                    *per_window.entry(t / 1_000_000_000).or_default() += 1;
                    mine += 1;
                }
            }
            assert!(child.wait().unwrap().success(), "a child process failed");
            takers += usize::from(mine > 0);
        }
        let worst = per_window.values().max().copied().unwrap_or(0);
        assert!(
            worst <= QUOTA,
            "a window granted {worst} > {QUOTA}: {per_window:?}"
        );
        let full = per_window.values().filter(|&&n| n == QUOTA).count();
        assert!(full >= 2, "the quota was never pressed: {per_window:?}");
        assert!(takers >= 2, "permits went to {takers} process(es) only");
        println!("{store}: {per_window:?} across {takers} processes");
    }

    /// A stopped server fails a window take within its timeouts, naming
    /// it, under `Closed`, and admits it under `Open`.
    fn stopped(store: &str, address: &str, stop: impl FnOnce()) {
        let timeout = Duration::from_millis(300);
        #[cfg(feature = "postgres")]
        if store == "postgres" {
            let installer = paceline::postgres::PostgresLimiter::builder(
                address,
                paceline::Rate::per_second(1),
            );
            installer.build().unwrap().install().unwrap();
        }
        let closed = build(store, address, FailPolicy::Closed, timeout);
        let open = build(store, address, FailPolicy::Open, timeout);
        closed.try_take("k").unwrap();
        stop();
        let begun = Instant::now();
        let e = closed.try_take("k").unwrap_err();
        assert!(matches!(e, Error::Unavailable(_) | Error::Timeout), "{e:?}");
        if matches!(e, Error::Unavailable(_)) {
            let shown = e.to_string();
            let named = address
                .split(['/', '@', '?'])
                .any(|p| !p.is_empty() && shown.contains(p));
            assert!(named, "{shown} names no part of {address}");
        }
        assert!(open.try_take("k").is_ok());
        assert!(
            begun.elapsed() < Duration::from_secs(3),
            "{:?}",
            begun.elapsed()
        );
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_eight_processes_never_pass_the_quota_of_a_window() {
        if let Ok(spec) = std::env::var(CHILD_ENV) {
            return child(&spec);
        }
        let server = redis_support::RedisServer::start();
        at_most_the_quota_per_window(
            "servers::redis_eight_processes_never_pass_the_quota_of_a_window",
            "redis",
            &server.url(),
        );
    }

    #[cfg(feature = "memcached")]
    #[test]
    fn memcached_eight_processes_never_pass_the_quota_of_a_window() {
        if let Ok(spec) = std::env::var(CHILD_ENV) {
            return child(&spec);
        }
        let server = memcached_support::MemcachedServer::start();
        at_most_the_quota_per_window(
            "servers::memcached_eight_processes_never_pass_the_quota_of_a_window",
            "memcached",
            &server.addr(),
        );
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_eight_processes_never_pass_the_quota_of_a_window() {
        if let Ok(spec) = std::env::var(CHILD_ENV) {
            return child(&spec);
        }
        let server = pg_support::PgServer::start();
        let installer = paceline::postgres::PostgresLimiter::builder(
            &server.conn(),
            paceline::Rate::per_second(1),
        );
        installer.build().unwrap().install().unwrap();
        at_most_the_quota_per_window(
            "servers::postgres_eight_processes_never_pass_the_quota_of_a_window",
            "postgres",
            &server.conn(),
        );
    }

    #[cfg(feature = "redis")]
    #[test]
    fn a_stopped_redis_fails_a_window_take_by_the_policy() {
        let mut server = redis_support::RedisServer::start();
        let url = server.url();
        stopped("redis", &url, || server.stop());
    }

    #[cfg(feature = "memcached")]
    #[test]
    fn a_stopped_memcached_fails_a_window_take_by_the_policy() {
        let mut server = memcached_support::MemcachedServer::start();
        let addr = server.addr();
        stopped("memcached", &addr, || server.stop());
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_stopped_postgres_fails_a_window_take_by_the_policy() {
        let mut server = pg_support::PgServer::start();
        let conn = server.conn();
        stopped("postgres", &conn, || server.stop());
    }

    #[cfg(feature = "redis")]
    #[test]
    fn a_slack_beside_a_quota_is_refused_by_name_at_build() {
        let server = redis_support::RedisServer::start();
        let builder =
            paceline::redis::RedisLimiter::builder(server.url(), paceline::Rate::per_second(1));
        let e = builder.limit(limit()).slack(3).build().unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e:?}");
        assert!(e.to_string().contains("7 per 1s"), "{e}");
        // The slack first, then the quota: the quota's own.
        let builder =
            paceline::redis::RedisLimiter::builder(server.url(), paceline::Rate::per_second(1));
        assert_eq!(
            builder.slack(3).limit(limit()).build().unwrap().limit(),
            limit()
        );
    }

    /// The async face on each store: a spent minute, a bounded take booked
    /// into the next minute and cancelled while it waits gives its permit
    /// back by the one rule (the key holds this minute's count again), and
    /// a settle's refund lands.
    #[cfg(feature = "tokio")]
    async fn async_window<B: paceline::remote::AsyncBackend>(
        lim: paceline::remote::AsyncRemoteLimiter<B>,
    ) {
        use paceline::AsyncTake;
        let minute = || UnixClock.now() / 60_000_000_000;
        for _ in 0..3 {
            let (before, key) = (minute(), format!("k{}", UnixClock.now()));
            let booked = lim.book(&key, 3, Within::Now).await.unwrap();
            lim.settle(&key, booked, 2).await.unwrap(); // one back: 2 left
            assert!(AsyncTake::can_take(&lim, &key, 2).await.unwrap());
            lim.try_take_n(&key, 2).await.unwrap();
            // Booked at once into the next minute, then cancelled.
            let waiting = lim.take_n_timeout(&key, 3, Duration::from_secs(61));
            let cancelled = tokio::time::timeout(Duration::from_millis(100), waiting).await;
            assert!(cancelled.is_err(), "granted at once in a spent minute?");
            // The give-back is a task of its own: give it its round trip.
            // Given back, the key holds this minute's 5 again, and 3 more
            // fit the next minute; else the next minute holds those 3, and
            // 3 more wait two minutes.
            let mut given = false;
            for _ in 0..100 {
                let e = lim.try_take_n(&key, 3).await.unwrap_err();
                if e.retry_after().unwrap() <= Duration::from_secs(60) {
                    given = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if minute() != before {
                continue; // a minute turned meanwhile: another window
            }
            assert!(given, "the cancelled take's permits were not given back");
            return;
        }
        panic!("three minutes turned during three tries");
    }

    #[cfg(all(feature = "redis", feature = "tokio"))]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_s_async_face_counts_gives_back_and_settles_windows() {
        let server = redis_support::RedisServer::start();
        let lim =
            paceline::redis::RedisLimiter::builder(server.url(), paceline::Rate::per_second(1))
                .limit(Limit::per_window(5, Window::MINUTE).unwrap())
                .build()
                .unwrap();
        async_window(paceline::redis::AsyncRedisLimiter::from(lim)).await;
    }

    #[cfg(all(feature = "memcached", feature = "tokio"))]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memcached_s_async_face_counts_gives_back_and_settles_windows() {
        let server = memcached_support::MemcachedServer::start();
        let lim = paceline::memcached::MemcachedLimiter::builder(
            server.addr(),
            paceline::Rate::per_second(1),
        )
        .limit(Limit::per_window(5, Window::MINUTE).unwrap())
        .build()
        .unwrap();
        async_window(paceline::remote::AsyncRemoteLimiter::from(lim)).await;
    }

    #[cfg(all(feature = "postgres", feature = "tokio"))]
    #[test]
    fn postgres_s_async_face_counts_gives_back_and_settles_windows() {
        let server = pg_support::PgServer::start();
        let lim = paceline::postgres::PostgresLimiter::builder(
            &server.conn(),
            paceline::Rate::per_second(1),
        )
        .limit(Limit::per_window(5, Window::MINUTE).unwrap())
        .build()
        .unwrap();
        lim.install().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async_window(paceline::remote::AsyncRemoteLimiter::from(
            lim,
        )));
    }

    #[cfg(feature = "redis")]
    #[test]
    fn a_redis_cluster_counts_windows_as_one_server() {
        let cluster = redis_support::RedisCluster::start();
        let lim = paceline::redis::RedisLimiter::cluster_builder(
            cluster.urls(),
            paceline::Rate::per_second(1),
        )
        .limit(Limit::per_window(3, Window::MINUTE).unwrap())
        .build()
        .unwrap();
        // Keys on several nodes: each its own quota; a booking of 2 settled
        // at 1 gives one back; the quota spent, a try is told to wait for
        // the next minute.
        let minute = || UnixClock.now() / 60_000_000_000;
        for key in ["a", "b", "c", "d", "e"] {
            let before = minute();
            let booked = lim.book(key, 2, Within::Now).unwrap();
            lim.settle(key, booked, 1).unwrap();
            let taken = lim.try_take_n(key, 2).unwrap();
            let e = lim.try_take(key).unwrap_err();
            if minute() != before {
                continue; // a minute turned meanwhile: another window
            }
            assert_eq!(taken.available(), 0, "{key}");
            assert!(e.retry_after().unwrap() <= Duration::from_secs(60), "{e}");
        }
    }
}
