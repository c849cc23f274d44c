//! Every configuration example of envoyproxy/ratelimit's README
//! (Examples 1 to 11, copied verbatim into `fixtures/`), each loaded into
//! the real binary and asked what the README says it decides: each
//! descriptor's code, current limit and limit remaining, and the overall
//! code. Where the README names a stat, the debug port's `/stats` is
//! looked at too. An example the README gives as several files of one
//! domain runs each file in a server of its own, as envoyproxy/ratelimit
//! refuses a domain in two files.
//!
//! Each example is written once, over a [`Store`], and run on every
//! `BACKEND_TYPE`: in process (`in_process::example_…`), on a real
//! `redis-server` over its unix socket (`redis::…`), on a real memcached
//! (`memcached::…`) and on a real PostgreSQL (`postgres::…`), each server
//! the test starts in a temporary directory of its own, one for each
//! paceline-server, and stops after it. The answers asked for are the
//! same on every store.

mod support;

#[path = "../../tests/support/memcached_server.rs"]
mod memcached_server;
#[path = "../../tests/support/pg_server.rs"]
mod pg_server;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;

use memcached_server::MemcachedServer;
use pg_server::PgServer;
use redis_server::RedisServer;
use support::{
    brief, call, counting_down, descriptor, in_one_window, over, repeat, request, stats, Brief,
    Server, DAY, HOUR, MINUTE, OK, OVER, SECOND,
};

/// Where a server started by an example counts (`BACKEND_TYPE`).
#[derive(Clone, Copy, Debug)]
enum Store {
    /// In the server's process (the default).
    InProcess,
    /// A `redis-server` on a unix socket.
    Redis,
    /// A memcached on a loopback port.
    Memcached,
    /// A PostgreSQL on a unix socket.
    Postgres,
}

/// The server a [`Running`] counts in, if any: it outlives the
/// paceline-server, whose fields come first.
#[expect(
    dead_code,
    reason = "held to be dropped after the paceline-server, never read"
)]
enum Backing {
    None,
    Redis(RedisServer),
    Memcached(MemcachedServer),
    Postgres(PgServer),
}

/// A paceline-server and the store server it counts in. Fields drop in
/// order: the paceline-server is stopped before its store.
struct Running {
    server: Server,
    _backing: Backing,
}

impl std::ops::Deref for Running {
    type Target = Server;

    fn deref(&self) -> &Server {
        &self.server
    }
}

impl Store {
    /// The paceline-server on the file `name` of `yaml`, counting in a
    /// fresh server of this store.
    fn start(self, name: &str, yaml: &str) -> Running {
        let files = [(name, yaml)];
        let (server, backing) = match self {
            Store::InProcess => (Server::start(&files, &[]), Backing::None),
            Store::Redis => {
                let redis = RedisServer::start();
                let url = redis.url();
                let env = [
                    ("BACKEND_TYPE", "redis"),
                    ("REDIS_SOCKET_TYPE", "unix"),
                    ("REDIS_URL", url.trim_start_matches("unix://")),
                ];
                (Server::start(&files, &env), Backing::Redis(redis))
            }
            Store::Memcached => {
                let memcached = MemcachedServer::start_with(Some(0), 64);
                let addr = memcached.addr();
                let env = [
                    ("BACKEND_TYPE", "memcache"),
                    ("MEMCACHE_HOST_PORT", addr.as_str()),
                ];
                (Server::start(&files, &env), Backing::Memcached(memcached))
            }
            Store::Postgres => {
                let pg = PgServer::start();
                let conn = pg.conn();
                let env = [
                    ("BACKEND_TYPE", "postgres"),
                    ("POSTGRES_URL", conn.as_str()),
                ];
                (Server::start(&files, &env), Backing::Postgres(pg))
            }
        };
        Running {
            server,
            _backing: backing,
        }
    }
}

/// A status with no limit: OK, nothing remaining.
const FREE: Brief = (OK, None, 0);

async fn example_1_two_values_of_one_key_each_limited(store: Store) {
    let s = store.start("example1.yaml", include_str!("fixtures/example1.yaml"));
    let mut c = s.client().await;
    for value in ["users", "default"] {
        let a = call(
            &mut c,
            request("mongo_cps", vec![descriptor(&[("database", value)])]),
        )
        .await;
        assert_eq!(
            brief(&a),
            (OK, vec![(OK, Some((500, SECOND)), 499)]),
            "{value}"
        );
    }
    let a = call(
        &mut c,
        request("mongo_cps", vec![descriptor(&[("database", "logs")])]),
    )
    .await;
    assert_eq!(brief(&a), (OK, vec![FREE]));
}

async fn example_2_nested_and_aggregate_descriptors_in_one_request(store: Store) {
    let s = store.start("example2.yaml", include_str!("fixtures/example2.yaml"));
    let mut c = s.client().await;
    let both = |number: &str| {
        request(
            "messaging",
            vec![
                descriptor(&[("message_type", "marketing"), ("to_number", number)]),
                descriptor(&[("to_number", number)]),
            ],
        )
    };
    let answers = in_one_window(86_400, || {
        let mut c = c.clone();
        async move {
            let mut out = Vec::new();
            for _ in 0..6 {
                out.push(brief(&call(&mut c, both("2061111111")).await));
            }
            out.push(brief(&call(&mut c, both("2062222222")).await));
            out
        }
    })
    .await;
    // Five marketing messages a day to a number, a hundred of any kind.
    for (i, a) in answers[..5].iter().enumerate() {
        let n = i as u32 + 1;
        assert_eq!(
            a,
            &(
                OK,
                vec![(OK, Some((5, DAY)), 5 - n), (OK, Some((100, DAY)), 100 - n)]
            ),
            "message {n}"
        );
    }
    // The sixth: the marketing limit refuses, so the request is refused.
    assert_eq!(
        answers[5],
        (
            OVER,
            vec![(OVER, Some((5, DAY)), 0), (OK, Some((100, DAY)), 94)]
        )
    );
    // Another number has its own counters.
    assert_eq!(
        answers[6],
        (
            OK,
            vec![(OK, Some((5, DAY)), 4), (OK, Some((100, DAY)), 99)]
        )
    );
    // ("message_type", "marketing") alone is a placeholder with no limit.
    let a = call(
        &mut c,
        request(
            "messaging",
            vec![descriptor(&[("message_type", "marketing")])],
        ),
    )
    .await;
    assert_eq!(brief(&a), (OK, vec![FREE]));
}

async fn example_3_the_value_is_matched_before_the_key_alone(store: Store) {
    let s = store.start("example3.yaml", include_str!("fixtures/example3.yaml"));
    let c = s.client().await;
    let ip = |v: &str| {
        request(
            "edge_proxy_per_ip",
            vec![descriptor(&[("remote_address", v)])],
        )
    };
    let (answers, black) = in_one_window(1, || {
        let mut c = c.clone();
        async move {
            let answers = repeat(&mut c, 11, || ip("50.0.0.1")).await;
            (answers, brief(&call(&mut c, ip("50.0.0.5")).await))
        }
    })
    .await;
    assert_eq!(answers[..10], counting_down(10, SECOND, 10));
    assert_eq!(answers[10], over(10, SECOND));
    // The black-listed address: 0 a second, refused from its first request.
    assert_eq!(black, over(0, SECOND));
}

async fn example_4_a_request_matches_only_at_its_own_depth(store: Store) {
    let two = || {
        request(
            "example4",
            vec![descriptor(&[("key", "value"), ("subkey", "subvalue")])],
        )
    };
    let one = || request("example4", vec![descriptor(&[("key", "value")])]);

    let s = store.start(
        "example4.yaml",
        include_str!("fixtures/example4_no_match.yaml"),
    );
    let mut c = s.client().await;
    assert_eq!(brief(&call(&mut c, two()).await), (OK, vec![FREE]));
    assert_eq!(
        brief(&call(&mut c, one()).await),
        (OK, vec![(OK, Some((300, SECOND)), 299)])
    );

    let s = store.start(
        "example4.yaml",
        include_str!("fixtures/example4_match.yaml"),
    );
    let mut c = s.client().await;
    assert_eq!(
        brief(&call(&mut c, two()).await),
        (OK, vec![(OK, Some((300, SECOND)), 299)])
    );
    // The first level alone has no limit of its own.
    assert_eq!(brief(&call(&mut c, one()).await), (OK, vec![FREE]));
}

async fn example_5_unlimited_answers_ok_with_the_most_remaining(store: Store) {
    let s = store.start("example5.yaml", include_str!("fixtures/example5.yaml"));
    let mut c = s.client().await;
    for _ in 0..3 {
        let a = call(
            &mut c,
            request("internal", vec![descriptor(&[("ldap", "bind")])]),
        )
        .await;
        assert_eq!(brief(&a), (OK, vec![(OK, None, u32::MAX)]));
        assert!(a.statuses[0].duration_until_reset.is_none());
    }
    let a = call(
        &mut c,
        request("internal", vec![descriptor(&[("azure", "blob")])]),
    )
    .await;
    assert_eq!(brief(&a), (OK, vec![(OK, Some((100, MINUTE)), 99)]));
}

async fn example_6_shadow_mode_lets_user_a_through_and_limits_user_b(store: Store) {
    let s = store.start("example6.yaml", include_str!("fixtures/example6.yaml"));
    let c = s.client().await;
    let user = |u: &'static str| {
        move || {
            request(
                "example6",
                vec![descriptor(&[("service", "auth-service"), ("user", u)])],
            )
        }
    };
    let (a, b) = in_one_window(1, || {
        let mut c = c.clone();
        async move {
            let a = repeat(&mut c, 12, user("user-a")).await;
            (a, repeat(&mut c, 21, user("user-b")).await)
        }
    })
    .await;
    // user-a: past its 10, OK all the same, nothing remaining.
    let mut want = counting_down(10, SECOND, 10);
    want.extend(vec![(OK, vec![(OK, Some((10, SECOND)), 0)]); 2]);
    assert_eq!(a, want);
    assert_eq!(b[..20], counting_down(20, SECOND, 20));
    assert_eq!(b[20], over(20, SECOND));
    // The breach is in the stats: two hits past 10, let through.
    let st = stats(&s);
    let key = "ratelimit.service.rate_limit.example6.service.user_user-a";
    assert_eq!(st[&format!("{key}.shadow_mode")], 2, "{st:?}");
    assert_eq!(st[&format!("{key}.over_limit")], 2, "{st:?}");
}

async fn example_7_replaces_applies_across_the_request_and_leaves_the_original(store: Store) {
    let s = store.start("example7.yaml", include_str!("fixtures/example7.yaml"));
    let c = s.client().await;
    let first = || descriptor(&[("key_1", "value_1"), ("user", "bkthomps")]);
    let second = || descriptor(&[("key_2", "value_2"), ("user", "bkthomps")]);
    let (both, alone) = in_one_window(1, || {
        let mut c = c.clone();
        async move {
            let both = repeat(&mut c, 11, || request("example7", vec![first(), second()])).await;
            (
                both,
                repeat(&mut c, 6, || request("example7", vec![first()])).await,
            )
        }
    })
    .await;
    // Together, 10 a second: the replaced limit answers OK, uncounted.
    for (i, a) in both[..10].iter().enumerate() {
        let left = 9 - i as u32;
        assert_eq!(a, &(OK, vec![FREE, (OK, Some((10, SECOND)), left)]), "{i}");
    }
    assert_eq!(both[10], (OVER, vec![FREE, (OVER, Some((10, SECOND)), 0)]));
    // Alone, the first keeps its 5 a second, none of it spent above.
    assert_eq!(alone[..5], counting_down(5, SECOND, 5));
    assert_eq!(alone[5], over(5, SECOND));
}

async fn example_8_detailed_metric_names_the_stat_by_the_request_s_value(store: Store) {
    let s = store.start("example8.yaml", include_str!("fixtures/example8.yaml"));
    let mut c = s.client().await;
    let key1 = |v: &str| request("example8", vec![descriptor(&[("key1", v)])]);
    let answers = in_one_window(60, || {
        let mut c = c.clone();
        async move {
            let mut out = Vec::new();
            for v in [
                "unspecified_value",
                "unspecified_value",
                "unspecified_value2",
                "value1",
            ] {
                out.push(brief(&call(&mut c, key1(v)).await));
            }
            out
        }
    })
    .await;
    assert_eq!(
        answers,
        vec![
            (OK, vec![(OK, Some((10, MINUTE)), 9)]),
            (OK, vec![(OK, Some((10, MINUTE)), 8)]),
            (OK, vec![(OK, Some((10, MINUTE)), 9)]),
            (OK, vec![(OK, Some((20, MINUTE)), 19)]),
        ]
    );
    let _ = call(&mut c, key1("value1")).await;
    let st = stats(&s);
    let hits = |k: &str| {
        st.get(&format!(
            "ratelimit.service.rate_limit.example8.{k}.total_hits"
        ))
        .copied()
    };
    assert_eq!(
        (
            hits("key1_unspecified_value"),
            hits("key1_unspecified_value2"),
            hits("key1_value1")
        ),
        (Some(2), Some(1), Some(2)),
        "{st:?}"
    );
    assert_eq!(hits("key1"), None, "{st:?}");
}

/// Asks `server` for each `(key, value)` once: the briefs.
async fn each_once(server: &Server, domain: &str, key: &str, values: &[&str]) -> Vec<Brief> {
    let mut c = server.client().await;
    let mut out = Vec::new();
    for v in values {
        let a = call(&mut c, request(domain, vec![descriptor(&[(key, v)])])).await;
        out.push(brief(&a).1.remove(0));
    }
    out
}

async fn example_9_wildcards_trailing_middle_and_multiple(store: Store) {
    let limited = (OK, Some((20, MINUTE)), 19);
    let s = store.start(
        "example9.yaml",
        include_str!("fixtures/example9_trailing.yaml"),
    );
    let got = each_once(
        &s,
        "example9",
        "key1",
        &["value1", "value2", "valueXYZ", "value", "other"],
    )
    .await;
    // Each value its own counter (no share_threshold): 19 left each.
    assert_eq!(got, vec![limited, limited, limited, limited, FREE]);

    let s = store.start(
        "example9.yaml",
        include_str!("fixtures/example9_middle.yaml"),
    );
    let got = each_once(
        &s,
        "example9",
        "path",
        &["/api/123/action", "/api/user-id/action", "/api/123/other"],
    )
    .await;
    assert_eq!(got, vec![limited, limited, FREE]);

    let s = store.start(
        "example9.yaml",
        include_str!("fixtures/example9_multiple.yaml"),
    );
    let got = each_once(
        &s,
        "example9",
        "route",
        &[
            "/api/v1/resource/123/action",
            "/api/v2/resource/456/action",
            "/api/v1/resource/123/other",
        ],
    )
    .await;
    assert_eq!(got, vec![limited, limited, FREE]);
}

async fn example_10_value_to_metric_puts_the_request_s_values_in_the_stat(store: Store) {
    let s = store.start("example10.yaml", include_str!("fixtures/example10.yaml"));
    let mut c = s.client().await;
    for (route, method, subject) in [("api", "GET", "123"), ("web", "POST", "456")] {
        let d = descriptor(&[
            ("route", route),
            ("http_method", method),
            ("subject_id", subject),
        ]);
        let a = call(&mut c, request("example10", vec![d])).await;
        assert_eq!(brief(&a), (OK, vec![(OK, Some((60, MINUTE)), 59)]));
    }
    let st = stats(&s);
    for key in [
        "example10.route_api.http_method_GET.subject_id",
        "example10.route_web.http_method_POST.subject_id",
    ] {
        let name = format!("ratelimit.service.rate_limit.{key}.total_hits");
        assert_eq!(st.get(&name), Some(&1), "{name} in {st:?}");
    }

    let s = store.start(
        "example10_wildcard.yaml",
        include_str!("fixtures/example10_wildcard.yaml"),
    );
    let mut c = s.client().await;
    let d = descriptor(&[
        ("user", "alice"),
        ("action", "readfile"),
        ("resource", "documents"),
    ]);
    let a = call(&mut c, request("example10_wildcard", vec![d])).await;
    assert_eq!(brief(&a), (OK, vec![(OK, Some((100, MINUTE)), 99)]));
    let d = descriptor(&[
        ("user", "alice"),
        ("action", "write"),
        ("resource", "documents"),
    ]);
    let a = call(&mut c, request("example10_wildcard", vec![d])).await;
    assert_eq!(brief(&a), (OK, vec![FREE]));
    let st = stats(&s);
    let name = "ratelimit.service.rate_limit.example10_wildcard.user_alice.action_readfile.resource.total_hits";
    assert_eq!(st.get(name), Some(&1), "{st:?}");
}

async fn example_11_share_threshold_shares_one_counter_across_a_wildcard(store: Store) {
    let s = store.start("example11.yaml", include_str!("fixtures/example11.yaml"));
    let c = s.client().await;
    let ask = |key: &'static str, value: &'static str| {
        move || request("example11", vec![descriptor(&[(key, value)])])
    };
    let (shared, apart) = in_one_window(3_600, || {
        let mut c = c.clone();
        async move {
            let mut shared = repeat(&mut c, 5, ask("files", "files/a.pdf")).await;
            shared.extend(repeat(&mut c, 5, ask("files", "files/b.csv")).await);
            shared.extend(repeat(&mut c, 1, ask("files", "files/c.txt")).await);
            let mut apart = repeat(&mut c, 11, ask("files_no_share", "files_no_share/a.pdf")).await;
            apart.extend(repeat(&mut c, 1, ask("files_no_share", "files_no_share/b.csv")).await);
            (shared, apart)
        }
    })
    .await;
    // 5 + 5 on one counter, then c.txt is over.
    assert_eq!(shared[..10], counting_down(10, HOUR, 10));
    assert_eq!(shared[10], over(10, HOUR));
    // Without sharing, a.pdf spends its own 10, and b.csv still has 10.
    assert_eq!(apart[..10], counting_down(10, HOUR, 10));
    assert_eq!(apart[10], over(10, HOUR));
    assert_eq!(apart[11], counting_down(10, HOUR, 1)[0]);
}

async fn example_11_share_threshold_with_value_to_metric(store: Store) {
    let s = store.start(
        "example11_metrics.yaml",
        include_str!("fixtures/example11_metrics.yaml"),
    );
    let mut c = s.client().await;
    let ask = |route: &str, method: &str| {
        request(
            "example11_metrics",
            vec![descriptor(&[("route", route), ("method", method)])],
        )
    };
    let answers = in_one_window(60, || {
        let mut c = c.clone();
        async move {
            vec![
                brief(&call(&mut c, ask("api/v1", "GET")).await),
                brief(&call(&mut c, ask("api/v2", "GET")).await),
                brief(&call(&mut c, ask("api/v2", "POST")).await),
            ]
        }
    })
    .await;
    // All api/* routes share a counter per method.
    assert_eq!(
        answers,
        vec![
            (OK, vec![(OK, Some((60, MINUTE)), 59)]),
            (OK, vec![(OK, Some((60, MINUTE)), 58)]),
            (OK, vec![(OK, Some((60, MINUTE)), 59)]),
        ]
    );
    let _ = call(&mut c, ask("web", "GET")).await;
    // The stat key keeps the pattern, `*` included, and leaves out the
    // method, which matched by its key alone: envoyproxy/ratelimit's
    // GetLimit (src/config/config_impl.go) and its test of this case
    // (test/config/config_test.go, "route_api/*.method") give this, where
    // the README's prose says `route_api.method_GET`.
    let st = stats(&s);
    let name = "ratelimit.service.rate_limit.example11_metrics.route_api/*.method.total_hits";
    assert_eq!(st.get(name), Some(&3), "{st:?}");
}

/// One test per example and store, in a module named for the store:
/// `redis::example_1_two_values_of_one_key_each_limited` and so on.
macro_rules! on_every_store {
    ([$($module:ident => $store:ident),* $(,)?], $examples:tt) => {
        $(on_every_store!(@one $module, $store, $examples);)*
    };
    (@one $module:ident, $store:ident, [$($example:ident),* $(,)?]) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $example() {
                    super::$example(super::Store::$store).await;
                }
            )*
        }
    };
}

on_every_store!(
    [
        in_process => InProcess,
        redis => Redis,
        memcached => Memcached,
        postgres => Postgres,
    ],
    [
        example_1_two_values_of_one_key_each_limited,
        example_2_nested_and_aggregate_descriptors_in_one_request,
        example_3_the_value_is_matched_before_the_key_alone,
        example_4_a_request_matches_only_at_its_own_depth,
        example_5_unlimited_answers_ok_with_the_most_remaining,
        example_6_shadow_mode_lets_user_a_through_and_limits_user_b,
        example_7_replaces_applies_across_the_request_and_leaves_the_original,
        example_8_detailed_metric_names_the_stat_by_the_request_s_value,
        example_9_wildcards_trailing_middle_and_multiple,
        example_10_value_to_metric_puts_the_request_s_values_in_the_stat,
        example_11_share_threshold_shares_one_counter_across_a_wildcard,
        example_11_share_threshold_with_value_to_metric,
    ]
);
