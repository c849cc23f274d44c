//! `BACKEND_TYPE=redis` on a real `redis-server` the test starts: counts
//! under envoyproxy/ratelimit's own keys (a count written in its layout is
//! honoured, as during a rolling migration), several replicas answering as
//! one service, and a Redis stopped and started again under each fail
//! policy.

mod support;

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use redis_server::RedisServer;
use support::{descriptor, one_per_policy, request, today, Server, PER_DAY};

fn socket(redis: &RedisServer) -> String {
    redis.url().trim_start_matches("unix://").to_owned()
}

fn on_redis<'a>(redis: &'a str, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "unix"),
        ("REDIS_URL", redis),
    ];
    env.extend_from_slice(more);
    env
}

/// A limit of a second and one of a day, for `REDIS_PERSECOND`.
const PER_SECOND_AND_DAY: &str = "\
domain: ps
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: team
    rate_limit: {unit: day, requests_per_unit: 1000}
";

/// A server's environment on the Redis Cluster of `nodes` (as
/// [`host_ports`] lists them), with `more`.
fn on_cluster<'a>(nodes: &'a str, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("BACKEND_TYPE", "redis"),
        ("REDIS_TYPE", "cluster"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", nodes),
    ];
    env.extend_from_slice(more);
    env
}

/// A cluster's nodes as `REDIS_URL` lists them: `host:port`,
/// comma-separated.
fn host_ports(cluster: &redis_server::RedisCluster) -> String {
    let nodes: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| {
            u.trim_start_matches("redis://")
                .trim_end_matches('/')
                .to_owned()
        })
        .collect();
    nodes.join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_in_envoyproxy_ratelimit_s_layout_is_honoured_and_kept_there() {
    let redis = RedisServer::start();
    let path = socket(&redis);
    // An envoyproxy/ratelimit replica counted 4 of alice's 5 today.
    let key = format!("pfx_mig_user_alice_{}", today());
    redis.raw(&format!("SET {key} 4"));
    let server = Server::start(
        &[("mig.yaml", PER_DAY)],
        &on_redis(&path, &[("CACHE_KEY_PREFIX", "pfx_")]),
    );
    let ask = || server.ask(request("mig", vec![descriptor(&[("user", "alice")])]));
    let a = ask().await.unwrap();
    assert_eq!(
        (a.overall_code, a.statuses[0].limit_remaining),
        (Code::Ok as i32, 0)
    );
    assert_eq!(ask().await.unwrap().overall_code, Code::OverLimit as i32);
    // Counted in the same key, with an expiry of a day plus its jitter.
    let got = redis.raw(&format!("GET {key}"));
    assert!(got.contains("\r\n6\r\n"), "{got:?}");
    let ttl = redis.raw(&format!("TTL {key}"));
    let ttl: u64 = ttl.trim().trim_start_matches(':').parse().unwrap();
    assert!((86_000..=86_700).contains(&ttl), "{ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_on_one_redis_answer_as_one_service() {
    let redis = RedisServer::start();
    let path = socket(&redis);
    let servers: Vec<Server> = (0..3)
        .map(|_| Server::start(&[("mig.yaml", PER_DAY)], &on_redis(&path, &[])))
        .collect();
    let mut ok = 0;
    for i in 0..12 {
        let s = &servers[i % 3];
        let a = s
            .ask(request("mig", vec![descriptor(&[("user", "bob")])]))
            .await
            .unwrap();
        if a.overall_code == Code::Ok as i32 {
            ok += 1;
        }
    }
    assert_eq!(ok, 5, "5 a day across three replicas");
    let got = redis.raw(&format!("GET mig_user_bob_{}", today()));
    assert!(got.contains("\r\n12\r\n"), "every hit counted: {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_fails_each_policy_s_way_and_a_restarted_one_counts_again() {
    let mut redis = RedisServer::start();
    let path = socket(&redis);
    let servers = one_per_policy(
        &["error", "open", "closed"],
        &[("mig.yaml", PER_DAY)],
        &on_redis(&path, &[]),
    );
    async fn ask(s: &Server, user: &str) -> Result<RateLimitResponse, tonic::Status> {
        s.ask(request("mig", vec![descriptor(&[("user", user)])]))
            .await
    }
    for (_, s) in &servers {
        assert_eq!(ask(s, "carol").await.unwrap().overall_code, Code::Ok as i32);
    }
    redis.stop();
    for (policy, s) in &servers {
        let started = std::time::Instant::now();
        let answer = ask(s, "carol").await;
        match *policy {
            "error" => {
                let e = answer.unwrap_err();
                assert_eq!(e.code(), tonic::Code::Unknown, "{e:?}");
                assert!(e.message().contains("redis"), "{e:?}");
            }
            "open" => assert_eq!(answer.unwrap().overall_code, Code::Ok as i32),
            _ => assert_eq!(answer.unwrap().overall_code, Code::OverLimit as i32),
        }
        // Within its timeouts (a connection and a reply), never a hang.
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        // Counted as Redis's error, under every policy; not the service's.
        let stats = support::stats(s);
        let error = |kind: &str| stats[&format!("ratelimit.service.call.should_rate_limit.{kind}")];
        assert!(error("redis_error") >= 1, "{policy}: {stats:?}");
        assert_eq!(error("service_error"), 0, "{policy}");
    }
    redis.restart();
    // Counting again, from what the restarted server holds (nothing:
    // it keeps no file), within a few tries of the reconnect.
    for (policy, s) in &servers {
        // Counted: OK, and less than the whole limit left.
        let counted = |a: &Result<RateLimitResponse, tonic::Status>| {
            matches!(a, Ok(a) if a.overall_code == Code::Ok as i32
                && a.statuses[0].limit_remaining < 5)
        };
        let mut answer = ask(s, "dave").await;
        for _ in 0..50 {
            if counted(&answer) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            answer = ask(s, "dave").await;
        }
        assert!(counted(&answer), "{policy}: {answer:?}");
    }
    let got = redis.raw(&format!("GET mig_user_dave_{}", today()));
    assert!(
        !got.contains("$-1"),
        "counted again after the restart: {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_a_redis_cluster_count_keys_across_its_slots_as_one() {
    let cluster = redis_server::RedisCluster::start();
    let nodes = host_ports(&cluster);
    let env = on_cluster(&nodes, &[]);
    let servers: Vec<Server> = (0..2)
        .map(|_| Server::start(&[("mig.yaml", PER_DAY)], &env))
        .collect();
    // Four users in one request (keys in several slots), six times over
    // two replicas: 5 a day each, so the sixth request is over.
    let users = ["u1", "u2", "u3", "u4"];
    for i in 0..6 {
        let descriptors = users.iter().map(|u| descriptor(&[("user", u)])).collect();
        let a = servers[i % 2]
            .ask(request("mig", descriptors))
            .await
            .unwrap();
        let want = if i < 5 { Code::Ok } else { Code::OverLimit };
        assert_eq!(a.overall_code, want as i32, "request {i}: {a:?}");
        let left = if i < 5 { 4 - i as u32 } else { 0 };
        for s in &a.statuses {
            assert_eq!(s.limit_remaining, left, "request {i}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_persecond_counts_the_seconds_in_a_redis_of_their_own() {
    let main = RedisServer::start();
    let second = RedisServer::start();
    let (main_path, second_path) = (socket(&main), socket(&second));
    let env = on_redis(
        &main_path,
        &[
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "unix"),
            ("REDIS_PERSECOND_URL", second_path.as_str()),
        ],
    );
    let server = Server::start(&[("ps.yaml", PER_SECOND_AND_DAY)], &env);
    let a = server
        .ask(request(
            "ps",
            vec![descriptor(&[("user", "u")]), descriptor(&[("team", "t")])],
        ))
        .await
        .unwrap();
    assert_eq!(a.statuses[0].limit_remaining, 999);
    assert_eq!(a.statuses[1].limit_remaining, 999);
    let keys = |r: &RedisServer| r.raw("KEYS *");
    let (in_main, in_second) = (keys(&main), keys(&second));
    assert!(
        in_main.contains("ps_team_t_") && !in_main.contains("ps_user_u_"),
        "{in_main:?}"
    );
    assert!(
        in_second.contains("ps_user_u_") && !in_second.contains("ps_team_t_"),
        "{in_second:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_persecond_beside_a_cluster_counts_each_where_it_belongs() {
    let cluster = redis_server::RedisCluster::start();
    let nodes = host_ports(&cluster);
    let second = RedisServer::start();
    let second_path = socket(&second);
    // The main counters in the cluster, the seconds' in a single Redis.
    let env = on_cluster(
        &nodes,
        &[
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "unix"),
            ("REDIS_PERSECOND_URL", second_path.as_str()),
        ],
    );
    let server = Server::start(&[("ps.yaml", PER_SECOND_AND_DAY)], &env);
    let teams = ["t1", "t2", "t3", "t4"];
    let mut descriptors = vec![descriptor(&[("user", "u")])];
    descriptors.extend(teams.iter().map(|t| descriptor(&[("team", t)])));
    let a = server.ask(request("ps", descriptors)).await.unwrap();
    assert!(a.statuses.iter().all(|s| s.limit_remaining == 999), "{a:?}");
    let in_cluster: String = cluster.nodes.iter().map(|n| n.raw("KEYS *")).collect();
    for t in teams {
        assert!(
            in_cluster.contains(&format!("ps_team_{t}_")),
            "{in_cluster:?}"
        );
    }
    assert!(!in_cluster.contains("ps_user_u_"), "{in_cluster:?}");
    let in_second = second.raw("KEYS *");
    assert!(
        in_second.contains("ps_user_u_") && !in_second.contains("ps_team_"),
        "{in_second:?}"
    );

    // And the other way round: a single main Redis, the seconds in the
    // cluster.
    let main = RedisServer::start();
    let main_path = socket(&main);
    let env = on_redis(
        &main_path,
        &[
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_TYPE", "cluster"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
            ("REDIS_PERSECOND_URL", nodes.as_str()),
        ],
    );
    let server = Server::start(&[("ps.yaml", PER_SECOND_AND_DAY)], &env);
    let users = ["v1", "v2", "v3", "v4"];
    let mut descriptors: Vec<_> = users.iter().map(|u| descriptor(&[("user", u)])).collect();
    descriptors.push(descriptor(&[("team", "t")]));
    let a = server.ask(request("ps", descriptors)).await.unwrap();
    assert!(a.statuses.iter().all(|s| s.limit_remaining == 999), "{a:?}");
    let in_cluster: String = cluster.nodes.iter().map(|n| n.raw("KEYS *")).collect();
    for u in users {
        assert!(
            in_cluster.contains(&format!("ps_user_{u}_")),
            "{in_cluster:?}"
        );
    }
    let in_main = main.raw("KEYS *");
    assert!(
        in_main.contains("ps_team_t_") && !in_main.contains("ps_user_"),
        "{in_main:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_down_answers_the_whole_request_by_the_policy_never_part_by_count() {
    let mut cluster = redis_server::RedisCluster::start();
    let nodes = host_ports(&cluster);
    let env = on_cluster(&nodes, &[]);
    let servers = one_per_policy(&["open", "closed"], &[("mig.yaml", PER_DAY)], &env);
    // Twelve users in one request: their keys lie on every node.
    let users: Vec<String> = (0..12).map(|i| format!("w{i}")).collect();
    async fn ask(s: &Server, users: &[String]) -> Result<RateLimitResponse, tonic::Status> {
        let descriptors = users.iter().map(|u| descriptor(&[("user", u)])).collect();
        s.ask(request("mig", descriptors)).await
    }
    for (_, s) in &servers {
        let a = ask(s, &users).await.unwrap();
        assert_eq!(a.overall_code, Code::Ok as i32);
    }
    // Stop the node holding w0's key; the others hold the rest of some.
    let held: Vec<String> = cluster.nodes.iter().map(|n| n.raw("KEYS *")).collect();
    let down = held
        .iter()
        .position(|keys| keys.contains("mig_user_w0_"))
        .expect("w0's key is on a node");
    assert!(
        held.iter()
            .enumerate()
            .any(|(i, keys)| i != down && keys.contains("mig_user_w")),
        "every key on one node: {held:?}"
    );
    cluster.nodes[down].stop();
    for (policy, s) in &servers {
        let a = ask(s, &users).await.unwrap();
        // Every status the policy's: OK with the whole limit (open), or
        // over with none (closed); none of them read from a count (a
        // second hit would leave 3).
        let (code, left) = match *policy {
            "open" => (Code::Ok, 5),
            _ => (Code::OverLimit, 0),
        };
        assert_eq!(a.overall_code, code as i32, "{policy}");
        for st in &a.statuses {
            assert_eq!(
                (st.code, st.limit_remaining),
                (code as i32, left),
                "{policy}: {a:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_cache_refuses_a_window_seen_over_without_asking_redis() {
    let mut redis = RedisServer::start();
    let path = socket(&redis);
    let env = on_redis(&path, &[("LOCAL_CACHE_SIZE_IN_BYTES", "1048576")]);
    let server = Server::start(&[("mig.yaml", PER_DAY)], &env);
    let ask = || server.ask(request("mig", vec![descriptor(&[("user", "gus")])]));
    let mut codes = Vec::new();
    for _ in 0..7 {
        codes.push(ask().await.unwrap().overall_code);
    }
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(codes, [ok, ok, ok, ok, ok, over, over]);
    // The sixth went to Redis and over; the seventh was refused here.
    let got = redis.raw(&format!("GET mig_user_gus_{}", today()));
    assert!(got.contains("\r\n6\r\n"), "{got:?}");
    let stats = support::stats(&server);
    let stat = |name: &str| stats[&format!("ratelimit.service.rate_limit.mig.user.{name}")];
    assert_eq!(
        (stat("over_limit"), stat("over_limit_with_local_cache")),
        (2, 1)
    );
    // Redis gone, under envoyproxy/ratelimit's error policy: the window
    // seen over is still refused, from the cache, not failed.
    redis.stop();
    let a = ask().await.unwrap();
    assert_eq!((a.overall_code, a.statuses[0].limit_remaining), (over, 0));
    let other = server
        .ask(request("mig", vec![descriptor(&[("user", "hal")])]))
        .await;
    assert_eq!(other.unwrap_err().code(), tonic::Code::Unknown);
}
