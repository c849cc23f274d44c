//! Leased batches of a hot descriptor's windows on a real store (Redis,
//! memcached, PostgreSQL): several replicas admit a window's limit together
//! and no more, in far fewer round trips than requests; a counter found hot from traffic
//! (`PACELINE_LEASE_ABOVE`) is leased too.

mod support;

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;

#[path = "../../tests/support/memcached_server.rs"]
mod memcached_server;

#[path = "../../tests/support/pg_server.rs"]
mod pg_server;

use memcached_server::MemcachedServer;
use pg_server::PgServer;
use redis_server::RedisServer;
use support::{call, descriptor, request, Server, OK, OVER};

/// 600 a day for each user, leased.
const LEASED: &str = "\
domain: hot
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 600
      leased: true
";

/// 100000 an hour for each user, not marked.
const PLAIN: &str = "\
domain: hot
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 100000
";

fn hot() -> envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
    request("hot", vec![descriptor(&[("user", "hot")])])
}

/// Drives `servers` with two tasks each, 400 requests per server, then
/// asks each server until it refuses: the requests admitted in all.
async fn admitted_across(servers: &[Server]) -> u64 {
    let mut tasks = Vec::new();
    for s in servers {
        for _ in 0..2 {
            let mut client = s.client().await;
            tasks.push(tokio::spawn(async move {
                let mut ok = 0u64;
                for _ in 0..200 {
                    let a = call(&mut client, hot()).await;
                    assert_eq!(a.statuses.len(), 1);
                    let remaining = a.statuses[0].limit_remaining;
                    assert!(remaining < 600, "remaining {remaining}");
                    if a.overall_code == OK {
                        ok += 1;
                    } else {
                        assert_eq!(a.overall_code, OVER);
                    }
                }
                ok
            }));
        }
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap();
    }
    // What a replica still holds is admitted until it refuses (a refusal
    // of one hit leaves it nothing).
    for s in servers {
        let mut client = s.client().await;
        for asked in 0.. {
            assert!(asked <= 600, "a replica admitted past the limit");
            if call(&mut client, hot()).await.overall_code == OVER {
                break;
            }
            ok += 1;
        }
    }
    ok
}

/// `n` replicas of the leased limit on the store `env` names, driven by
/// [`admitted_across`]: exactly the day's limit admitted across them.
async fn replicas_admit_the_limit(n: usize, env: &[(&str, &str)]) {
    let servers: Vec<Server> = (0..n)
        .map(|_| Server::start(&[("hot.yaml", LEASED)], env))
        .collect();
    let ok = admitted_across(&servers).await;
    assert_eq!(ok, 600, "the day's limit, across {n} replicas");
}

/// A fresh redis-server and the environment of a server on it, with
/// `more`.
fn on_redis(more: &[(&'static str, &'static str)]) -> (RedisServer, Vec<(&'static str, String)>) {
    let redis = RedisServer::start();
    let path = redis.url().trim_start_matches("unix://").to_owned();
    let mut env = vec![
        ("BACKEND_TYPE", "redis".to_owned()),
        ("REDIS_SOCKET_TYPE", "unix".to_owned()),
        ("REDIS_URL", path),
    ];
    env.extend(more.iter().map(|(k, v)| (*k, (*v).to_owned())));
    (redis, env)
}

fn borrowed<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn calls(info: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_on_one_redis_admit_a_leased_window_s_limit_and_no_more() {
    let (redis, env) = on_redis(&[]);
    replicas_admit_the_limit(3, &borrowed(&env)).await;
    let incrby = calls(&redis.raw("INFO commandstats"), "incrby");
    assert!(
        incrby * 4 < 1200,
        "{incrby} INCRBY for 1200 requests and more: not leased"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_memcached_admit_a_leased_window_s_limit_and_no_more() {
    let memcached = MemcachedServer::start_with(Some(0), 64);
    let addr = memcached.addr();
    let env = [
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", addr.as_str()),
    ];
    replicas_admit_the_limit(2, &env).await;
    let stats = memcached.stats("");
    let incr: u64 = ["incr_hits", "incr_misses"]
        .iter()
        .map(|k| stats[*k].parse::<u64>().unwrap())
        .sum();
    assert!(incr * 4 < 800, "{incr} incr for 800 requests and more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_postgresql_admit_a_leased_window_s_limit_and_no_more() {
    let pg = PgServer::start();
    let conn = pg.conn();
    let env = [
        ("BACKEND_TYPE", "postgres"),
        ("POSTGRES_URL", conn.as_str()),
    ];
    replicas_admit_the_limit(2, &env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_found_hot_from_traffic_is_leased() {
    let (redis, env) = on_redis(&[("PACELINE_LEASE_ABOVE", "20")]);
    let server = Server::start(&[("hot.yaml", PLAIN)], &borrowed(&env));
    let mut client = server.client().await;
    for _ in 0..1000 {
        assert_eq!(call(&mut client, hot()).await.overall_code, OK);
    }
    let incrby = calls(&redis.raw("INFO commandstats"), "incrby");
    assert!(incrby < 250, "{incrby} INCRBY for 1000 requests");
    // A cold counter beside it is counted hit by hit.
    for _ in 0..5 {
        let cold = request("hot", vec![descriptor(&[("user", "cold")])]);
        assert_eq!(call(&mut client, cold).await.overall_code, OK);
    }
    let after = calls(&redis.raw("INFO commandstats"), "incrby");
    assert_eq!(after, incrby + 5);
}
