//! What paceline-server adds to envoyproxy/ratelimit, on the real binary:
//! a smooth (paced) rule, the debug port's pages, and settings refused by
//! name.

mod support;

use std::process::Command;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;
use support::{descriptor, http, request, Server};

const SMOOTH: &str = "\
domain: api
descriptors:
  - key: tenant
    rate_limit:
      unit: hour
      requests_per_unit: 6
      smooth: true
      burst: 3
  - key: plain
    rate_limit:
      unit: day
      requests_per_unit: 60
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smooth_rule_admits_its_burst_then_one_a_second_where_a_fixed_window_admits_all() {
    let server = Server::start(&[("api.yaml", SMOOTH)], &[]);
    let ask = |key: &'static str| server.ask(request("api", vec![descriptor(&[(key, "t1")])]));
    // 6 an hour, burst 3: three at once, then the fourth waits 10 minutes.
    let mut codes = Vec::new();
    for _ in 0..4 {
        codes.push(ask("tenant").await.unwrap().statuses[0].code);
    }
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(codes, vec![ok, ok, ok, over]);
    // A refusal is not counted: asking again at once is refused the same,
    // and says when the next hit is admitted (in whole seconds).
    let again = ask("tenant").await.unwrap();
    assert_eq!(again.statuses[0].code, over);
    let reset = again.statuses[0]
        .duration_until_reset
        .as_ref()
        .unwrap()
        .seconds;
    assert!((590..=600).contains(&reset), "{reset}");
    // A fixed window of 60 a day: all 60 at once.
    for _ in 0..60 {
        assert_eq!(ask("plain").await.unwrap().overall_code, ok);
    }
    assert_eq!(ask("plain").await.unwrap().overall_code, over);

    // A check that counts nothing (hits_addend 0) on a fresh key: OK, the
    // whole burst left.
    let mut d = descriptor(&[("tenant", "t2")]);
    d.hits_addend = Some(UInt64Value { value: 0 });
    let s = &server.ask(request("api", vec![d])).await.unwrap().statuses[0];
    assert_eq!((s.code, s.limit_remaining), (ok, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_debug_port_shows_the_limits_in_force_the_stats_and_the_counters() {
    let server = Server::start(&[("api.yaml", SMOOTH)], &[]);
    server
        .ask(request("api", vec![descriptor(&[("plain", "k7")])]))
        .await
        .unwrap();
    let (status, config) = http(server.debug, "GET", "/rlconfig", "");
    assert_eq!(status, 200);
    assert!(
        config.contains("api.plain: requests_per_unit=60, unit=DAY"),
        "{config}"
    );
    let (_, stats) = http(server.debug, "GET", "/stats", "");
    assert!(
        stats.contains("ratelimit.service.rate_limit.api.plain.total_hits: 1"),
        "{stats}"
    );
    let (status, rows) = http(server.debug, "GET", "/limits/json", "");
    assert_eq!(status, 200);
    assert!(rows.contains("api_plain_k7_"), "{rows}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draft_11_headers_name_the_policy_and_what_is_left_of_it() {
    let yaml = "\
domain: api
descriptors:
  - key: plain
    rate_limit:
      name: daily
      unit: day
      requests_per_unit: 60
";
    let server = Server::start(
        &[("api.yaml", yaml)],
        &[
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("PACELINE_HEADERS", "draft-11"),
        ],
    );
    let answer = server
        .ask(request("api", vec![descriptor(&[("plain", "x")])]))
        .await
        .unwrap();
    let headers: Vec<(String, String)> = answer
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(
        headers[0],
        ("RateLimit-Policy".into(), "\"daily\";q=60;w=86400".into())
    );
    assert_eq!(headers[1].0, "RateLimit");
    assert!(headers[1].1.starts_with("\"daily\";r=59;t="), "{headers:?}");
    assert_eq!(headers.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_reports_ratelimit_serving() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let server = Server::start(&[("api.yaml", SMOOTH)], &[]);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    for service in ["ratelimit", ""] {
        let status = client
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(
            status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );
    }
}

#[test]
fn a_bad_setting_stops_the_server_at_start_naming_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_paceline-server"))
        .env_clear()
        .env("GRPC_PORT", "eighty")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("GRPC_PORT=\"eighty\""), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_paceline-server"))
        .env_clear()
        .env("BACKEND_TYPE", "cassandra")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("BACKEND_TYPE=\"cassandra\""));
}

#[test]
fn no_port_opens_before_a_configuration_loads() {
    let dir = support::temp_dir("late");
    std::fs::write(dir.join("bad.yaml"), "domain: d\nnot_a_key: 1\n").unwrap();
    let writer = {
        let dir = dir.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(500));
            support::write_config(&dir, "bad.yaml", "domain: d\ndescriptors:\n  - key: k\n");
        })
    };
    let server = Server::start_in(dir, &[]);
    writer.join().unwrap();
    // The broken file was reported before the first port opened.
    let first_port = server
        .early
        .iter()
        .position(|l| l.starts_with("paceline-server: HOST"))
        .unwrap();
    let refused = server.early.iter().position(|l| l.contains("not_a_key"));
    assert!(
        refused.is_some_and(|r| r < first_port),
        "{:#?}",
        server.early
    );
    assert_eq!(http(server.http, "GET", "/healthcheck", "").0, 200);
}
