//! Where the fixed windows' hits are counted (`BACKEND_TYPE`): in process
//! ([`Counts`], the default), or in Redis under envoyproxy/ratelimit's own
//! keys, so that its replicas and these share their counts while a fleet
//! moves from one to the other.
//!
//! On Redis a window's counter is the key envoyproxy/ratelimit names it:
//! `CACHE_KEY_PREFIX`, the domain, each entry's key and value, then the
//! window's start in Unix seconds (the service's cache key, with the
//! window's start put after it), counted by `INCRBY` and given `EXPIRE`
//! of the unit plus up to `EXPIRATION_JITTER_MAX_SECONDS`, every counter
//! of a request in one pipeline, one round trip (on a Redis Cluster, one
//! pipeline per counter, in turn: a request's keys lie in many slots).

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{FromRedisValue, Pipeline};

use crate::config::Unit;
use crate::counts::Counts;

/// What a failed store makes of a request (`PACELINE_FAIL_POLICY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailPolicy {
    /// envoyproxy/ratelimit's: the request fails (gRPC `UNKNOWN`), and
    /// Envoy's filter decides (`failure_mode_deny`).
    Error,
    /// The descriptors the store could not count are `OK`.
    Open,
    /// The descriptors the store could not count are `OVER_LIMIT`.
    Closed,
}

/// A connection to a single Redis or to a cluster.
enum Con {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// A Redis holding envoyproxy/ratelimit's counters.
pub struct RedisStore {
    con: Con,
    /// `EXPIRATION_JITTER_MAX_SECONDS`.
    jitter_max: u64,
    /// Where it is, for a failure's message.
    name: String,
}

/// The counters.
pub struct Store {
    /// In process: the fixed windows where there is no Redis, and every
    /// smooth rule's pacing.
    pub local: Counts,
    redis: Option<RedisStore>,
    /// What a failed store makes of a request.
    pub fail: FailPolicy,
}

impl Store {
    /// Counts in process only.
    pub fn local(local: Counts) -> Store {
        Store {
            local,
            redis: None,
            fail: FailPolicy::Error,
        }
    }

    /// Fixed windows in a Redis Cluster whose nodes (some of them) are
    /// `nodes` (`redis://host:port`).
    pub async fn cluster(
        local: Counts,
        nodes: &[String],
        timeout: Duration,
        jitter_max: u64,
        fail: FailPolicy,
    ) -> Result<Store, String> {
        let name = nodes.join(",");
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(1)
            .build()
            .map_err(|e| format!("REDIS_URL {name}: {e}"))?;
        let con = client
            .get_async_connection()
            .await
            .map_err(|e| format!("cannot reach the Redis Cluster at {name}: {e}"))?;
        Ok(Store {
            local,
            redis: Some(RedisStore {
                con: Con::Cluster(con),
                jitter_max,
                name,
            }),
            fail,
        })
    }

    /// Fixed windows in Redis at `url` (`redis://`, `unix://`).
    pub async fn redis(
        local: Counts,
        url: &str,
        timeout: Duration,
        jitter_max: u64,
        fail: FailPolicy,
    ) -> Result<Store, String> {
        let client = redis::Client::open(url).map_err(|e| format!("REDIS_URL {url}: {e}"))?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1);
        let con = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| format!("cannot reach Redis at {url}: {e}"))?;
        Ok(Store {
            local,
            redis: Some(RedisStore {
                con: Con::Single(con),
                jitter_max,
                name: url.to_owned(),
            }),
            fail,
        })
    }

    /// Counts each `(unit, key, hits)` in its current window at `now_s`
    /// (Unix seconds): each counter's value after.
    pub async fn add(&self, items: &[(Unit, &str, u64)], now_s: u64) -> Result<Vec<u64>, String> {
        let Some(r) = &self.redis else {
            return Ok(items
                .iter()
                .map(|(unit, key, hits)| self.local.add(*unit, key, *hits).after)
                .collect());
        };
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipes = vec![redis::pipe()];
        for (i, (unit, key, hits)) in items.iter().enumerate() {
            let div = unit.seconds();
            let jitter = if r.jitter_max > 0 {
                jitter(now_s, i as u64) % r.jitter_max
            } else {
                0
            };
            let name = format!("{key}{}", now_s / div * div);
            // On a cluster, a pipeline per key: its keys must share a slot.
            if i > 0 && matches!(r.con, Con::Cluster(_)) {
                pipes.push(redis::pipe());
            }
            let pipe = pipes.last_mut().expect("one at least");
            pipe.cmd("INCRBY").arg(&name).arg(*hits);
            pipe.cmd("EXPIRE").arg(&name).arg(div + jitter).ignore();
        }
        let mut counts = Vec::with_capacity(items.len());
        for pipe in &pipes {
            let some: Vec<i64> = r.query(pipe).await?;
            counts.extend(some.into_iter().map(|c| c.max(0) as u64));
        }
        Ok(counts)
    }

    /// Each `(unit, key)`'s count in its current window at `now_s`,
    /// counting nothing.
    pub async fn count(&self, items: &[(Unit, &str)], now_s: u64) -> Result<Vec<u64>, String> {
        let Some(r) = &self.redis else {
            return Ok(items
                .iter()
                .map(|(unit, key)| self.local.count(*unit, key))
                .collect());
        };
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipes = vec![redis::pipe()];
        for (i, (unit, key)) in items.iter().enumerate() {
            let div = unit.seconds();
            if i > 0 && matches!(r.con, Con::Cluster(_)) {
                pipes.push(redis::pipe());
            }
            let pipe = pipes.last_mut().expect("one at least");
            pipe.cmd("GET").arg(format!("{key}{}", now_s / div * div));
        }
        let mut counts = Vec::with_capacity(items.len());
        for pipe in &pipes {
            let some: Vec<Option<i64>> = r.query(pipe).await?;
            counts.extend(some.into_iter().map(|c| c.unwrap_or(0).max(0) as u64));
        }
        Ok(counts)
    }
}

impl RedisStore {
    /// Sends `pipe` (on a cluster, one key's commands: a pipeline's keys
    /// must share a slot there).
    async fn query<T: FromRedisValue>(&self, pipe: &Pipeline) -> Result<T, String> {
        let failed = |e: redis::RedisError| format!("redis error ({}): {e}", self.name);
        match &self.con {
            Con::Single(con) => pipe.query_async(&mut con.clone()).await.map_err(failed),
            Con::Cluster(con) => pipe.query_async(&mut con.clone()).await.map_err(failed),
        }
    }
}

/// A number that differs from call to call and key to key, for the
/// expiry's jitter (which only spreads expiries; it decides nothing).
fn jitter(now_s: u64, i: u64) -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one((now_s, i))
}
