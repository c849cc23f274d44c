//! `BACKEND_TYPE=memcache` on a real memcached the test starts: counts
//! under envoyproxy/ratelimit's own keys (a count written in its layout is
//! honoured), two replicas as one service, and a memcached stopped and
//! started again under the fail policy.

mod support;

#[path = "../../tests/support/memcached_server.rs"]
mod memcached_server;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use memcached_server::MemcachedServer;
use support::{descriptor, one_per_policy, request, today, Server, PER_DAY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_in_envoyproxy_ratelimit_s_layout_shared_by_replicas() {
    let memcached = MemcachedServer::start_with(Some(0), 64);
    let addr = memcached.addr();
    // An envoyproxy/ratelimit replica counted 3 of alice's 5 today.
    let key = format!("mig_user_alice_{}", today());
    let stored = memcached.raw_until(&format!("set {key} 0 3600 1\r\n3\r\n"), "\r\n");
    assert!(stored.contains("STORED"), "{stored:?}");
    let env = [
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", addr.as_str()),
    ];
    let servers: Vec<Server> = (0..2)
        .map(|_| Server::start(&[("mig.yaml", PER_DAY)], &env))
        .collect();
    let mut codes = Vec::new();
    for i in 0..4 {
        let a = servers[i % 2]
            .ask(request("mig", vec![descriptor(&[("user", "alice")])]))
            .await
            .unwrap();
        codes.push(a.overall_code);
    }
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(codes, vec![ok, ok, over, over]);
    let got = memcached.raw_until(&format!("get {key}\r\n"), "END\r\n");
    assert!(got.contains("\r\n7\r\n"), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_memcached_fails_by_each_policy_and_a_restarted_one_counts_again() {
    let mut memcached = MemcachedServer::start_with(Some(0), 64);
    let addr = memcached.addr();
    let env = [
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", addr.as_str()),
    ];
    let servers = one_per_policy(&["open", "closed"], &[("mig.yaml", PER_DAY)], &env);
    async fn ask(s: &Server, user: &str) -> Result<RateLimitResponse, tonic::Status> {
        s.ask(request("mig", vec![descriptor(&[("user", user)])]))
            .await
    }
    for (_, s) in &servers {
        assert_eq!(ask(s, "bob").await.unwrap().overall_code, Code::Ok as i32);
    }
    memcached.stop();
    for (policy, s) in &servers {
        let a = ask(s, "bob").await.unwrap();
        // The policy's answer, counted nowhere.
        let want = match *policy {
            "open" => (Code::Ok as i32, 5),
            _ => (Code::OverLimit as i32, 0),
        };
        assert_eq!(
            (a.overall_code, a.statuses[0].limit_remaining),
            want,
            "{policy}"
        );
    }
    memcached.restart();
    for (policy, s) in &servers {
        let counted = |a: &RateLimitResponse| {
            a.overall_code == Code::Ok as i32 && a.statuses[0].limit_remaining < 5
        };
        let mut answer = ask(s, "carl").await.unwrap();
        for _ in 0..50 {
            if counted(&answer) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            answer = ask(s, "carl").await.unwrap();
        }
        // Counted afresh: the restarted memcached kept nothing.
        assert!(counted(&answer), "{policy}: {answer:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_share_max_idle_conns_connections_and_count_exactly() {
    let memcached = MemcachedServer::start_with(Some(0), 64);
    let addr = memcached.addr();
    let connections =
        |m: &MemcachedServer| -> u64 { m.stats("")["total_connections"].parse().unwrap() };
    let before = connections(&memcached);
    let env = [
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", addr.as_str()),
        ("MEMCACHE_MAX_IDLE_CONNS", "3"),
    ];
    let server = Server::start(&[("mig.yaml", PER_DAY)], &env);
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let mut client = server.client().await;
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            for _ in 0..5 {
                let a = support::call(
                    &mut client,
                    request("mig", vec![descriptor(&[("user", "dan")])]),
                )
                .await;
                if a.overall_code == Code::Ok as i32 {
                    ok += 1;
                }
            }
            ok
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap();
    }
    // 5 a day, whichever connection counted them.
    assert_eq!(ok, 5);
    // Each call starts at the next connection: all three were made, and no
    // more (the one after `before` is this look's own).
    let made = connections(&memcached) - before - 1;
    assert_eq!(made, 3, "connections the server made");
}
