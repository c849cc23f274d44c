//! `BACKEND_TYPE=postgres` on a real PostgreSQL the test starts (initdb in
//! a temporary directory): paceline's window limiter counts the fixed
//! windows in its table, two replicas answer as one, and a stopped and
//! restarted server fails by the policy, then counts again.

mod support;

#[path = "../../tests/support/pg_server.rs"]
mod pg_server;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use pg_server::PgServer;
use support::{descriptor, request, Server};

const PER_DAY: &str = "\
domain: pg
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 3
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_postgres_answer_as_one_and_a_restart_fails_by_the_policy() {
    let mut pg = PgServer::start();
    let conn = pg.conn();
    let env = [
        ("BACKEND_TYPE", "postgres"),
        ("POSTGRES_URL", conn.as_str()),
        ("PACELINE_FAIL_POLICY", "open"),
        ("PACELINE_STORE_TIMEOUT_MS", "500"),
    ];
    let servers: Vec<Server> = (0..2)
        .map(|_| Server::start(&[("pg.yaml", PER_DAY)], &env))
        .collect();
    let mut codes = Vec::new();
    for i in 0..5 {
        let a = servers[i % 2]
            .ask(request("pg", vec![descriptor(&[("user", "erin")])]))
            .await
            .unwrap();
        codes.push(a.overall_code);
    }
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(codes, vec![ok, ok, ok, over, over]);
    // A replica under the closed policy beside them.
    let closed_env = [
        ("BACKEND_TYPE", "postgres"),
        ("POSTGRES_URL", conn.as_str()),
        ("PACELINE_FAIL_POLICY", "closed"),
        ("PACELINE_STORE_TIMEOUT_MS", "500"),
    ];
    let closed = Server::start(&[("pg.yaml", PER_DAY)], &closed_env);
    // Stopped: open, so OK, counted nowhere; closed, so over; then
    // counting again.
    pg.stop();
    let a = servers[0]
        .ask(request("pg", vec![descriptor(&[("user", "frank")])]))
        .await
        .unwrap();
    assert_eq!(a.overall_code, ok);
    assert_eq!(a.statuses[0].limit_remaining, 3, "counted nowhere");
    let a = closed
        .ask(request("pg", vec![descriptor(&[("user", "frank")])]))
        .await
        .unwrap();
    assert_eq!(a.overall_code, over);
    assert_eq!(a.statuses[0].limit_remaining, 0);
    pg.restart();
    let mut left = 3;
    for _ in 0..50 {
        let a = servers[1]
            .ask(request("pg", vec![descriptor(&[("user", "frank")])]))
            .await
            .unwrap();
        left = a.statuses[0].limit_remaining;
        if left < 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(left, 2, "counted again after the restart");
    // The closed replica counts on from the same row: nothing it refused
    // while the database was down was counted.
    let mut a = closed
        .ask(request("pg", vec![descriptor(&[("user", "frank")])]))
        .await
        .unwrap();
    for _ in 0..50 {
        if a.overall_code == ok {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        a = closed
            .ask(request("pg", vec![descriptor(&[("user", "frank")])]))
            .await
            .unwrap();
    }
    assert_eq!((a.overall_code, a.statuses[0].limit_remaining), (ok, 1));
}
