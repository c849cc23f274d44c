//! The RLS as Envoy calls it, on the real binary: envoyproxy/ratelimit's
//! decisions on its own configuration examples, `/healthcheck`, `/json`,
//! and a graceful stop.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{rate_limit::Unit, Code};
use envoy_types::pb::google::protobuf::UInt64Value;
use support::{descriptor, http, request, Server};

const EXAMPLE_1: &str = "\
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_1_limits_each_value_and_answers_ok_without_a_limit() {
    let server = Server::start(&[("example1.yaml", EXAMPLE_1)], &[]);
    let answer = server
        .ask(request(
            "mongo_cps",
            vec![descriptor(&[("database", "users")])],
        ))
        .await
        .unwrap();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    let s = &answer.statuses[0];
    assert_eq!(s.code, Code::Ok as i32);
    let limit = s.current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (500, Unit::Second as i32)
    );
    assert_eq!(s.limit_remaining, 499);
    assert_eq!(s.duration_until_reset.as_ref().unwrap().seconds, 1);

    // A value no descriptor names: OK, no limit, nothing remaining.
    let answer = server
        .ask(request(
            "mongo_cps",
            vec![descriptor(&[("database", "other")])],
        ))
        .await
        .unwrap();
    let s = &answer.statuses[0];
    assert_eq!(
        (s.code, s.current_limit.is_none(), s.limit_remaining),
        (Code::Ok as i32, true, 0)
    );

    // An unknown domain: OK for each descriptor.
    let answer = server
        .ask(request(
            "nowhere",
            vec![descriptor(&[("database", "users")])],
        ))
        .await
        .unwrap();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    assert!(answer.statuses[0].current_limit.is_none());
}

// An hour's window: the test's calls land in one window unless they
// straddle the top of an hour.
const PER_HOUR: &str = "\
domain: d
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 3
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_count_before_the_decision_and_a_refused_hit_stays_counted() {
    let server = Server::start(&[("d.yaml", PER_HOUR)], &[]);
    let ask = |user: &'static str, hits: Option<u64>| {
        let mut d = descriptor(&[("user", user)]);
        d.hits_addend = hits.map(|value| UInt64Value { value });
        server.ask(request("d", vec![d]))
    };
    // 2 of 3, then 2 more: over (4 > 3), and counted.
    let a = ask("alice", Some(2)).await.unwrap();
    assert_eq!(a.statuses[0].limit_remaining, 1);
    let a = ask("alice", Some(2)).await.unwrap();
    assert_eq!(a.overall_code, Code::OverLimit as i32);
    assert_eq!(a.statuses[0].code, Code::OverLimit as i32);
    // One more, which would fit had the refused hits not counted: over.
    let a = ask("alice", None).await.unwrap();
    assert_eq!(a.overall_code, Code::OverLimit as i32);
    // A check that counts nothing (hits_addend 0): over, and so it stays.
    let a = ask("alice", Some(0)).await.unwrap();
    assert_eq!(a.overall_code, Code::OverLimit as i32);
    // Another value has its own counter.
    let b = ask("bob", None).await.unwrap();
    assert_eq!(
        (b.overall_code, b.statuses[0].limit_remaining),
        (Code::Ok as i32, 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_domain_or_descriptors_is_unknown_with_its_message() {
    let server = Server::start(&[("d.yaml", PER_HOUR)], &[]);
    let e = server
        .ask(request("", vec![descriptor(&[("user", "a")])]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unknown);
    assert_eq!(e.message(), "rate limit domain must not be empty");
    let e = server.ask(request("d", vec![])).await.unwrap_err();
    assert_eq!(e.message(), "rate limit descriptor list must not be empty");
    // A descriptor's own limit in no unit: refused by name, not a crash.
    let mut d = descriptor(&[("user", "a")]);
    d.limit = Some(
        envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride {
            requests_per_unit: 5,
            unit: 0,
        },
    );
    let e = server.ask(request("d", vec![d])).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("unit 0"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_and_json_answer_as_envoyproxy_ratelimit_s() {
    let mut server = Server::start(&[("d.yaml", PER_HOUR)], &[]);
    assert_eq!(
        http(server.http, "GET", "/healthcheck", ""),
        (200, "OK".into())
    );
    let body = r#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"carol"}]}]}"#;
    let (status, json) = http(server.http, "POST", "/json", body);
    assert_eq!(status, 200, "{json}");
    assert_eq!(
        json,
        r#"{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":3,"unit":"HOUR"},"limitRemaining":2,"durationUntilReset":"#
            .to_owned()
            + &json[json.find("\"durationUntilReset\":").unwrap() + 21..]
    );
    assert!(json.ends_with("s\"}]}"), "{json}");
    for _ in 0..2 {
        http(server.http, "POST", "/json", body);
    }
    let (status, json) = http(server.http, "POST", "/json", body);
    assert_eq!(status, 429, "{json}");
    assert!(json.starts_with(r#"{"overallCode":"OVER_LIMIT""#), "{json}");
    let (status, _) = http(server.http, "POST", "/json", "{not json");
    assert_eq!(status, 400);
    let (status, text) = http(server.http, "POST", "/json", r#"{"domain":"d"}"#);
    assert_eq!(status, 400);
    assert!(text.contains("descriptor list must not be empty"), "{text}");

    // SIGTERM: a clean stop.
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
}
