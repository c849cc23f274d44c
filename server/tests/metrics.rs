//! The stats as Prometheus reads them from the real binary
//! (`USE_PROMETHEUS=true`): the names and labels envoyproxy/ratelimit's
//! default statsd mapping gives (`ratelimit_service_rate_limit_*` with
//! `domain`, `key1` and `key2`, no `_total`), hits counted as its base
//! limiter counts them (near the limit only in `(floor(0.8 L), L]`, over
//! only past `L`), a key-only match named without the request's value, an
//! IPv4 value's dots made `_` as its stat names' sanitizing does, and the
//! text checked by `promtool check metrics` (Debian's `prometheus`;
//! `scripts/test.sh` installs it, and a missing one fails the test); the
//! calls, their time, the errors, global shadow mode and unknown domains
//! counted as envoyproxy/ratelimit counts them.

mod support;

#[path = "../../tests/support/promtool.rs"]
mod promtool;

use std::collections::BTreeMap;

use envoy_types::pb::google::protobuf::UInt64Value;
use support::{call, descriptor, http, in_one_window, request, Server};

const CONFIG: &str = "\
domain: m
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: jump
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: a
    value: x
    descriptors:
      - key: b
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: s
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: ip
    value: 10.0.0.1
    rate_limit: {unit: hour, requests_per_unit: 100}
";

/// Each sample of `text` with a whole value: `name{labels}` and its
/// value (a histogram's `_sum` in seconds is left out).
fn samples(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_shows_the_default_mapping_s_names_labels_and_hits() {
    let env = [
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:0"),
    ];
    let s = Server::start(&[("m.yaml", CONFIG)], &env);
    let c = s.client().await;
    in_one_window(3_600, || {
        let mut c = c.clone();
        async move {
            let mut ask = async |entries: &[(&str, &str)], hits: Option<u64>| {
                let mut d = descriptor(entries);
                d.hits_addend = hits.map(|value| UInt64Value { value });
                call(&mut c, request("m", vec![d])).await
            };
            for _ in 0..12 {
                ask(&[("k", "v1")], None).await;
            }
            // 7 hits, then 5: 2 of them in (8, 10], 2 past 10.
            ask(&[("jump", "v")], Some(7)).await;
            ask(&[("jump", "v")], Some(5)).await;
            for _ in 0..6 {
                ask(&[("a", "x"), ("b", "y")], None).await;
            }
            for _ in 0..3 {
                ask(&[("s", "u")], None).await;
            }
            ask(&[("ip", "10.0.0.1")], None).await;
        }
    })
    .await;
    let (status, text) = http(s.prometheus.unwrap(), "GET", "/metrics", "");
    assert_eq!(status, 200, "{text}");
    promtool::check(&text);
    let got = samples(&text);
    let series = |name: &str, labels: &str| {
        let key = format!("ratelimit_service_rate_limit_{name}{{{labels}}}");
        *got.get(&key)
            .unwrap_or_else(|| panic!("no {key} in\n{text}"))
    };
    // (total, within, near, over, shadow) by labels.
    for (labels, want) in [
        (r#"domain="m",key1="k""#, (12, 10, 2, 2, 0)),
        (r#"domain="m",key1="jump""#, (12, 7, 2, 2, 0)),
        (r#"domain="m",key1="a_x",key2="b""#, (6, 5, 1, 1, 0)),
        (r#"domain="m",key1="s""#, (3, 1, 1, 2, 2)),
        (r#"domain="m",key1="ip_10_0_0_1""#, (1, 1, 0, 0, 0)),
    ] {
        let seen = (
            series("total_hits", labels),
            series("within_limit", labels),
            series("near_limit", labels),
            series("over_limit", labels),
            series("shadow_mode", labels),
        );
        assert_eq!(seen, want, "{labels}");
    }
    // A key-only match is named without the request's value.
    assert!(!text.contains("k_v1") && !text.contains("jump_v"), "{text}");
    assert!(
        !text.contains("_total{") && !text.contains("_total "),
        "{text}"
    );
    assert_eq!(got["ratelimit_service_config_load_success"], 1);
    assert_eq!(got["ratelimit_service_config_load_error"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoyproxy_ratelimit_s_integration_scripts_on_its_example_configuration() {
    let env = [
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:0"),
    ];
    let example = include_str!("fixtures/integration_example.yaml");
    let s = Server::start(&[("example.yaml", example)], &env);
    let c = s.client().await;
    // The descriptors Envoy sends for the scripts' headers
    // (examples/envoy/proxy.yaml): /twoheader with foo and baz, /unspec.
    let (plain, shady, unspec) = in_one_window(60, || {
        let mut c = c.clone();
        async move {
            let mut codes = async |entries: &[(&str, &str)], n: usize| {
                let mut out = Vec::new();
                for _ in 0..n {
                    let a = call(&mut c, request("rl", vec![descriptor(entries)])).await;
                    out.push(a.overall_code);
                }
                out
            };
            (
                // trigger-ratelimit.sh: 3 a minute, the fourth refused.
                codes(&[("foo", "pelle"), ("baz", "not-so-shady")], 4).await,
                // trigger-shadow-mode-key.sh: past 3, never refused.
                codes(&[("foo", "pelle"), ("baz", "shady")], 6).await,
                // value-included-in-stats-key-when-unspecified.sh.
                codes(&[("unspec", "unspecified_value")], 3).await,
            )
        }
    })
    .await;
    let (ok, over) = (support::OK, support::OVER);
    assert_eq!(plain, [ok, ok, ok, over]);
    assert_eq!(shady, [ok; 6]);
    assert_eq!(unspec, [ok, ok, over]);
    // detailed_metric: the stat names the value, and one hit was over.
    let (_, text) = http(s.prometheus.unwrap(), "GET", "/metrics", "");
    promtool::check(&text);
    let got = samples(&text);
    let name =
        r#"ratelimit_service_rate_limit_over_limit{domain="rl",key1="unspec_unspecified_value"}"#;
    assert_eq!(got.get(name), Some(&1), "{text}");
    let name =
        r#"ratelimit_service_rate_limit_shadow_mode{domain="rl",key1="foo",key2="baz_shady"}"#;
    assert_eq!(got.get(name), Some(&3), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_their_time_errors_global_shadow_mode_and_unknown_domains_are_counted() {
    let env = [
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:0"),
        ("SHADOW_MODE", "true"),
    ];
    let s = Server::start(&[("m.yaml", CONFIG)], &env);
    let mut c = s.client().await;
    in_one_window(3_600, || {
        let mut c = c.clone();
        async move {
            // 10 an hour under SHADOW_MODE: the eleventh is over,
            // answered OK.
            for _ in 0..11 {
                let a = call(&mut c, request("m", vec![descriptor(&[("k", "g")])])).await;
                assert_eq!(a.overall_code, support::OK);
            }
        }
    })
    .await;
    // Two descriptors of a domain no file names, twice.
    for _ in 0..2 {
        let d = vec![descriptor(&[("k", "v")]), descriptor(&[("k", "w")])];
        call(&mut c, request("nope", d)).await;
    }
    // A request without a domain: the service's error.
    let e = c
        .should_rate_limit(request("", vec![descriptor(&[("k", "v")])]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unknown);

    let (_, text) = http(s.prometheus.unwrap(), "GET", "/metrics", "");
    promtool::check(&text);
    let got = samples(&text);
    let method = r#"{grpc_method="ShouldRateLimit"}"#;
    assert_eq!(
        got[&format!("ratelimit_service_total_requests{method}")],
        14,
        "{text}"
    );
    assert_eq!(
        got[&format!("ratelimit_service_response_time_seconds_count{method}")],
        14
    );
    let inf = r#"ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="+Inf"}"#;
    assert_eq!(got[inf], 14);
    assert_eq!(
        got[r#"ratelimit_service_should_rate_limit_error{err_type="service_error"}"#],
        1
    );
    assert_eq!(
        got[r#"ratelimit_service_should_rate_limit_error{err_type="redis_error"}"#],
        0
    );
    assert_eq!(got["ratelimit_service_global_shadow_mode"], 1);
    let stats = support::stats(&s);
    assert_eq!(
        stats["ratelimit.service.rate_limit.nope.domain_not_found"],
        4
    );
    assert_eq!(stats["ratelimit_server.ShouldRateLimit.total_requests"], 14);
    assert_eq!(stats["ratelimit.service.global_shadow_mode"], 1);
    assert_eq!(
        stats["ratelimit.service.call.should_rate_limit.service_error"],
        1
    );
}
