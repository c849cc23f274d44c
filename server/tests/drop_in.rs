//! What a fleet migrated from envoyproxy/ratelimit notices, one behaviour
//! a test, on the real binary: `replaces` across a request's descriptors
//! (the sequences of its integration test `replaces.sh`, on its example
//! configuration `examples/ratelimit/config/example.yaml`, copied verbatim
//! into `fixtures/`), `unlimited`, shadow mode (a rule's and
//! `SHADOW_MODE`), a descriptor sent twice,
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, the response headers,
//! `CACHE_KEY_PREFIX`, and counts kept across a change of configuration.

mod support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::UInt64Value;
use support::{
    brief, call, descriptor, in_one_window, request, write_config, Client, Server, MINUTE, OK, OVER,
};

const EXAMPLE: &str = include_str!("fixtures/integration_example.yaml");

/// The descriptors Envoy sends for the example's routes
/// (`examples/envoy/proxy.yaml`): each pair of headers present is one
/// descriptor, in the route's order.
fn headers(pairs: &[[(&str, &str); 2]], category: Option<&str>) -> Vec<RateLimitDescriptor> {
    let mut out: Vec<_> = pairs.iter().map(|p| descriptor(p)).collect();
    if let Some(c) = category {
        out.push(descriptor(&[("category", c)]));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaces_applies_across_the_descriptors_of_a_request_as_replaces_sh_checks() {
    let s = Server::start(&[("example.yaml", EXAMPLE)], &[]);
    let c = s.client().await;
    let codes = in_one_window(60, || {
        let mut c = c.clone();
        async move {
            let mut codes = Vec::new();
            let mut ask = async |d: Vec<RateLimitDescriptor>| {
                codes.push(call(&mut c, request("rl", d)).await.overall_code);
            };
            let fb = |foo, bar| [("foo", foo), ("bar", bar)];
            let sd = |dest| [("source_cluster", "proxy"), ("destination_cluster", dest)];
            // replaces increases the limit: banned_limit (0) replaced by
            // override's 2 a minute.
            ask(headers(&[fb("bkthomps", "banned")], None)).await;
            ask(headers(&[fb("bkthomps", "banned"), sd("mock")], None)).await;
            for _ in 0..3 {
                ask(headers(&[fb("bkthomps", "banned"), sd("override")], None)).await;
            }
            // replaces leaves the original limit alone.
            for _ in 0..3 {
                ask(headers(&[fb("my_foo", "bkthomps"), sd("bkthomps")], None)).await;
            }
            for _ in 0..2 {
                ask(headers(
                    &[fb("my_foo", "bkthomps"), sd("not_bkthomps")],
                    None,
                ))
                .await;
            }
            ask(headers(&[fb("my_foo", "bkthomps"), sd("bkthomps")], None)).await;
            // replaces replaces several limits.
            let five = || headers(&[fb("my_foo", "bkthomps"), sd("fake")], Some("account"));
            for _ in 0..5 {
                ask(five()).await;
            }
            for _ in 0..2 {
                ask(headers(&[fb("foo_2", "bkthomps")], None)).await;
            }
            for _ in 0..3 {
                ask(headers(&[fb("foo_3", "bar_3"), sd("fake")], None)).await;
            }
            ask(five()).await;
            codes
        }
    })
    .await;
    let want = [
        OVER, OVER, OK, OK, OVER, // banned, then overridden
        OK, OK, OVER, OK, OVER, OVER, // bkthomps and its replacement
        OK, OK, OK, OK, OVER, OK, OVER, OK, OK, OVER, OVER, // account
    ];
    assert_eq!(codes, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlimited_answers_the_most_remaining_and_no_limit() {
    let s = Server::start(&[("example.yaml", EXAMPLE)], &[]);
    let mut c = s.client().await;
    let d = vec![
        descriptor(&[("qux", "anything")]),
        descriptor(&[("foo", "x"), ("bay", "y")]),
        descriptor(&[("foo", "x"), ("bar", "y")]),
    ];
    for n in 0..2 {
        let a = call(&mut c, request("rl", d.clone())).await;
        assert_eq!(
            brief(&a),
            (
                OK,
                vec![
                    (OK, None, u32::MAX),
                    (OK, None, u32::MAX),
                    (OK, Some((3, MINUTE)), 2 - n)
                ]
            )
        );
        assert!(a.statuses[..2]
            .iter()
            .all(|s| s.duration_until_reset.is_none()));
    }
}

const TWO: &str = "\
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: soft
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: none
    rate_limit: {unit: minute, requests_per_unit: 0}
";

async fn briefs(c: &mut Client, ds: &[&[(&str, &str)]], n: usize) -> Vec<RateLimitResponse> {
    let mut out = Vec::new();
    for _ in 0..n {
        let d = ds.iter().map(|d| descriptor(d)).collect();
        out.push(call(c, request("d", d)).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_never_refuses_a_rule_s_or_the_server_s() {
    let s = Server::start(&[("d.yaml", TWO)], &[]);
    let mut c = s.client().await;
    let a = briefs(&mut c, &[&[("soft", "u")]], 3).await;
    let a: Vec<_> = a.iter().map(brief).collect();
    let want = |left| (OK, vec![(OK, Some((1, MINUTE)), left)]);
    assert_eq!(a, vec![want(0), want(0), want(0)]);

    // SHADOW_MODE: each status says OVER_LIMIT, the answer OK.
    let s = Server::start(&[("d.yaml", TWO)], &[("SHADOW_MODE", "true")]);
    let mut c = s.client().await;
    let a = briefs(&mut c, &[&[("none", "u")], &[("k", "u")]], 3).await;
    let a: Vec<_> = a.iter().map(brief).collect();
    let none = (OVER, Some((0, MINUTE)), 0);
    assert_eq!(
        a,
        vec![
            (OK, vec![none, (OK, Some((2, MINUTE)), 1)]),
            (OK, vec![none, (OK, Some((2, MINUTE)), 0)]),
            (OK, vec![none, (OVER, Some((2, MINUTE)), 0)]),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_sent_twice_counts_twice() {
    let s = Server::start(&[("d.yaml", TWO)], &[]);
    let mut c = s.client().await;
    let twice: &[&[(&str, &str)]] = &[&[("k", "u")], &[("k", "u")]];
    let a = briefs(&mut c, twice, 2).await;
    let a: Vec<_> = a.iter().map(brief).collect();
    let k = |code, left| (code, Some((2, MINUTE)), left);
    assert_eq!(
        a,
        vec![
            (OK, vec![k(OK, 1), k(OK, 0)]),
            (OVER, vec![k(OVER, 0), k(OVER, 0)]),
        ]
    );
}

/// Three requests of `k` and `wide`, then `wide` alone: the answers, and
/// `wide`'s total hits and hits within its limit in the stats.
async fn wide_after_k_goes_over(
    env: &[(&str, &str)],
) -> (Vec<(i32, Vec<support::Brief>)>, (u64, u64)) {
    let s = Server::start(&[("d.yaml", TWO)], env);
    let c = s.client().await;
    let answers = in_one_window(60, || {
        let mut c = c.clone();
        async move {
            let mut a = briefs(&mut c, &[&[("k", "u")], &[("wide", "u")]], 3).await;
            a.extend(briefs(&mut c, &[&[("wide", "u")]], 1).await);
            a.iter().map(brief).collect()
        }
    })
    .await;
    let st = support::stats(&s);
    let wide = "ratelimit.service.rate_limit.d.wide";
    let stat = |name: &str| st[&format!("{wide}.{name}")];
    (answers, (stat("total_hits"), stat("within_limit")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_cache_key_increment_when_overlimit_counts_only_those_going_over() {
    let k = |code, left| (code, Some((2, MINUTE)), left);
    let wide = |left| (OK, Some((10, MINUTE)), left);
    let (stopped, stats) =
        wide_after_k_goes_over(&[("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")]).await;
    assert_eq!(
        stopped,
        vec![
            (OK, vec![k(OK, 1), wide(9)]),
            (OK, vec![k(OK, 0), wide(8)]),
            // k would go over: only k counts, wide stays at 2.
            (OVER, vec![k(OVER, 0), wide(8)]),
            (OK, vec![wide(7)]),
        ]
    );
    // The hit spared from the counter is in the stats all the same.
    assert_eq!(stats, (4, 4));
    // By default every descriptor counts.
    let (counted, _) = wide_after_k_goes_over(&[]).await;
    assert_eq!(counted[2], (OVER, vec![k(OVER, 0), wide(7)]));
    assert_eq!(counted[3], (OK, vec![wide(6)]));
}

/// The response headers, by name.
fn headers_of(a: &RateLimitResponse) -> Vec<(String, String)> {
    a.response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_headers_come_from_the_least_remaining_or_the_last_over() {
    let env = [("LIMIT_RESPONSE_HEADERS_ENABLED", "true")];
    let s = Server::start(&[("d.yaml", TWO)], &env);
    let mut c = s.client().await;
    let reset = |a: &RateLimitResponse, i: usize| {
        a.statuses[i]
            .duration_until_reset
            .as_ref()
            .unwrap()
            .seconds
            .to_string()
    };
    let named = |limit: &str, left: &str, reset: String| {
        vec![
            ("RateLimit-Limit".to_owned(), limit.to_owned()),
            ("RateLimit-Remaining".to_owned(), left.to_owned()),
            ("RateLimit-Reset".to_owned(), reset),
        ]
    };
    // The least remaining: k (1 of 2) before wide (9 of 10).
    let a = briefs(&mut c, &[&[("wide", "u")], &[("k", "u")]], 1)
        .await
        .remove(0);
    assert_eq!(headers_of(&a), named("2", "1", reset(&a, 1)));
    // Two over: the last one's.
    let a = briefs(
        &mut c,
        &[
            &[("none", "u")],
            &[("k", "u")],
            &[("k", "u")],
            &[("wide", "u")],
        ],
        1,
    )
    .await
    .remove(0);
    assert_eq!(a.overall_code, OVER);
    assert_eq!(headers_of(&a), named("2", "0", reset(&a, 2)));
    let a = briefs(&mut c, &[&[("k", "u")], &[("none", "u")]], 1)
        .await
        .remove(0);
    assert_eq!(headers_of(&a), named("0", "0", reset(&a, 1)));
    // No descriptor with a limit: no headers.
    let a = briefs(&mut c, &[&[("other", "u")]], 1).await.remove(0);
    assert!(a.response_headers_to_add.is_empty());

    // The names are the environment's.
    let env = [
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LIMIT_LIMIT_HEADER", "X-Limit"),
        ("LIMIT_REMAINING_HEADER", "X-Left"),
        ("LIMIT_RESET_HEADER", "X-Reset"),
    ];
    let s = Server::start(&[("d.yaml", TWO)], &env);
    let mut c = s.client().await;
    let a = briefs(&mut c, &[&[("wide", "u")]], 1).await.remove(0);
    let names: Vec<_> = headers_of(&a).into_iter().map(|(k, _)| k).collect();
    assert_eq!(names, ["X-Limit", "X-Left", "X-Reset"]);
    assert_eq!(headers_of(&a)[1].1, "9");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_key_prefix_does_not_change_decisions() {
    let mut seen = Vec::new();
    for env in [vec![], vec![("CACHE_KEY_PREFIX", "fleet_")]] {
        let s = Server::start(&[("d.yaml", TWO)], &env);
        let c = s.client().await;
        let answers = in_one_window(60, || {
            let mut c = c.clone();
            async move {
                let a = briefs(&mut c, &[&[("k", "u")], &[("wide", "u")]], 3).await;
                // No response headers unless asked for.
                assert!(a.iter().all(|r| r.response_headers_to_add.is_empty()));
                a.iter().map(brief).collect::<Vec<_>>()
            }
        })
        .await;
        seen.push(answers);
    }
    assert_eq!(seen[0][2].0, OVER);
    assert_eq!(seen[0], seen[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_configuration_keeps_the_counts() {
    let s = Server::start(&[("d.yaml", TWO)], &[]);
    let c = s.client().await;
    let (before, after) = in_one_window(60, || {
        let mut c = c.clone();
        let dir = s.dir.clone();
        async move {
            let before = briefs(&mut c, &[&[("k", "u")]], 2).await;
            write_config(
                &dir,
                "d.yaml",
                &TWO.replace("requests_per_unit: 2}", "requests_per_unit: 5}"),
            );
            // Ask without counting (hits_addend 0) until the new limit is in.
            let mut look = descriptor(&[("k", "u")]);
            look.hits_addend = Some(UInt64Value { value: 0 });
            for _ in 0..200 {
                let a = call(&mut c, request("d", vec![look.clone()])).await;
                if brief(&a).1[0].1 == Some((5, MINUTE)) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            }
            let after = briefs(&mut c, &[&[("k", "u")]], 1).await;
            (before, after)
        }
    })
    .await;
    let before: Vec<_> = before.iter().map(brief).collect();
    assert_eq!(before[1], (OK, vec![(OK, Some((2, MINUTE)), 0)]));
    // The two hits counted under 2 a minute still count under 5.
    assert_eq!(brief(&after[0]), (OK, vec![(OK, Some((5, MINUTE)), 2)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_s_own_limit_shares_the_rule_s_counter() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
    let s = Server::start(&[("d.yaml", TWO)], &[]);
    let c = s.client().await;
    let answers = in_one_window(60, || {
        let mut c = c.clone();
        async move {
            let mut own = descriptor(&[("k", "u")]);
            own.limit = Some(RateLimitOverride {
                requests_per_unit: 5,
                unit: MINUTE,
            });
            let mut out = Vec::new();
            for _ in 0..2 {
                out.push(brief(&call(&mut c, request("d", vec![own.clone()])).await));
            }
            out.extend(briefs(&mut c, &[&[("k", "u")]], 2).await.iter().map(brief));
            out
        }
    })
    .await;
    // The key has no limit in it: 2 hits under 5, then the rule's 2 is spent.
    assert_eq!(
        answers,
        vec![
            (OK, vec![(OK, Some((5, MINUTE)), 4)]),
            (OK, vec![(OK, Some((5, MINUTE)), 3)]),
            (OVER, vec![(OVER, Some((2, MINUTE)), 0)]),
            (OVER, vec![(OVER, Some((2, MINUTE)), 0)]),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_domain_config_joins_one_domain_s_files() {
    let files = [
        ("a.yaml", include_str!("fixtures/example9_trailing.yaml")),
        ("b.yaml", include_str!("fixtures/example9_middle.yaml")),
        ("c.yaml", include_str!("fixtures/example9_multiple.yaml")),
    ];
    let s = Server::start(&files, &[("MERGE_DOMAIN_CONFIG", "true")]);
    let mut c = s.client().await;
    for (key, value) in [
        ("key1", "value1"),
        ("path", "/api/1/action"),
        ("route", "/api/v1/resource/1/action"),
    ] {
        let a = call(
            &mut c,
            request("example9", vec![descriptor(&[(key, value)])]),
        )
        .await;
        assert_eq!(brief(&a), (OK, vec![(OK, Some((20, MINUTE)), 19)]), "{key}");
    }
}

const ORDER: &str = "\
domain: o
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k
    value: pre*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: k
    value: p*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: k
    value: prefix
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: k
    value: free
  - key: a
    value: x
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: a
    descriptors:
      - key: c
        rate_limit: {unit: minute, requests_per_unit: 6}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matching_tries_the_value_then_wildcards_in_file_order_then_the_key() {
    let s = Server::start(&[("o.yaml", ORDER)], &[]);
    let mut c = s.client().await;
    let mut limit_of = async |entries: &[(&str, &str)]| {
        let a = call(&mut c, request("o", vec![descriptor(entries)])).await;
        brief(&a).1[0].1.map(|(n, _)| n)
    };
    assert_eq!(limit_of(&[("k", "prefix")]).await, Some(4));
    // Both wildcards match: the first in the file wins.
    assert_eq!(limit_of(&[("k", "pre1")]).await, Some(2));
    assert_eq!(limit_of(&[("k", "px")]).await, Some(3));
    assert_eq!(limit_of(&[("k", "q")]).await, Some(1));
    // A value without a limit allows it: no fall-back to the key's.
    assert_eq!(limit_of(&[("k", "free")]).await, None);
    assert_eq!(limit_of(&[("a", "x"), ("b", "y")]).await, Some(5));
    assert_eq!(limit_of(&[("a", "z"), ("c", "y")]).await, Some(6));
    // (a, x) found, its level has no c: no going back to a's default.
    assert_eq!(limit_of(&[("a", "x"), ("c", "y")]).await, None);
}
