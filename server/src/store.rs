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

use paceline::postgres::{AsyncPostgresLimiter, PostgresLimiter};
use paceline::{AsyncTake, Limit, Rate};

use crate::config::Unit;
use crate::counts::Counts;
use crate::lease::{Answer, Counter, Leases};
use crate::settings::RedisAt;

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

/// One text-protocol connection to memcached, made when first used.
type Connection = tokio::sync::Mutex<Option<tokio::io::BufStream<tokio::net::TcpStream>>>;

/// A memcached holding envoyproxy/ratelimit's counters (`BACKEND_TYPE=
/// memcache`), over a few text-protocol connections
/// (`MEMCACHE_MAX_IDLE_CONNS`), each made when first needed and made again
/// after a failure; a call takes a free one, else waits its turn on one.
pub struct Memcache {
    addr: String,
    pool: Vec<Connection>,
    /// Where the next call starts looking for a free connection.
    next: std::sync::atomic::AtomicUsize,
    timeout: Duration,
    jitter_max: u64,
}

impl Memcache {
    /// A client of the memcached at `addr` (`host:port`), over at most
    /// `connections` connections (at least one).
    pub fn new(addr: &str, connections: usize, timeout: Duration, jitter_max: u64) -> Memcache {
        Memcache {
            addr: addr.to_owned(),
            pool: (0..connections.max(1))
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            next: std::sync::atomic::AtomicUsize::new(0),
            timeout,
            jitter_max,
        }
    }

    /// A free connection, else the next one's turn.
    async fn connection(
        &self,
    ) -> tokio::sync::MutexGuard<'_, Option<tokio::io::BufStream<tokio::net::TcpStream>>> {
        let n = self.pool.len();
        let start = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for i in 0..n {
            if let Ok(con) = self.pool[(start + i) % n].try_lock() {
                return con;
            }
        }
        self.pool[start % n].lock().await
    }

    /// Sends `command` and reads one reply line (after its value's lines
    /// for a `get`): the lines.
    async fn call(&self, command: &str, get: bool) -> Result<Vec<String>, String> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let failed = |e: String| format!("memcache error ({}): {e}", self.addr);
        let mut con = self.connection().await;
        let work = async {
            if con.is_none() {
                let tcp = tokio::net::TcpStream::connect(&self.addr)
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = tcp.set_nodelay(true);
                *con = Some(tokio::io::BufStream::new(tcp));
            }
            let c = con.as_mut().expect("connected above");
            c.write_all(command.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            c.flush().await.map_err(|e| e.to_string())?;
            let mut lines = Vec::new();
            loop {
                let mut line = String::new();
                if c.read_line(&mut line).await.map_err(|e| e.to_string())? == 0 {
                    return Err("connection closed".to_owned());
                }
                let line = line.trim_end().to_owned();
                let last =
                    !get || line == "END" || line.starts_with("SERVER_ERROR") || line == "ERROR";
                lines.push(line);
                if last {
                    return Ok(lines);
                }
            }
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok(Ok(lines)) => Ok(lines),
            Ok(Err(e)) => {
                *con = None;
                Err(failed(e))
            }
            Err(_) => {
                *con = None;
                Err(failed(format!("no reply within {:?}", self.timeout)))
            }
        }
    }

    /// envoyproxy/ratelimit's increment: `incr`, else `add` with the
    /// expiry, else (another client added it meanwhile) `incr` again. The
    /// count after.
    async fn add(&self, key: &str, hits: u64, expiry: u64) -> Result<u64, String> {
        let parse = |line: &str| line.parse::<u64>().ok();
        for _ in 0..2 {
            let reply = self.call(&format!("incr {key} {hits}\r\n"), false).await?;
            if let Some(n) = reply.first().and_then(|l| parse(l)) {
                return Ok(n);
            }
            let value = hits.to_string();
            let add = format!("add {key} 0 {expiry} {}\r\n{value}\r\n", value.len());
            let reply = self.call(&add, false).await?;
            if reply.first().is_some_and(|l| l == "STORED") {
                return Ok(hits);
            }
        }
        Err(format!(
            "memcache error ({}): {key} neither incremented nor added",
            self.addr
        ))
    }

    /// The counts of `keys` (0 where absent).
    async fn get(&self, keys: &[String]) -> Result<Vec<u64>, String> {
        let reply = self
            .call(&format!("get {}\r\n", keys.join(" ")), true)
            .await?;
        let mut found = std::collections::HashMap::new();
        let mut lines = reply.iter();
        while let Some(line) = lines.next() {
            if let Some(rest) = line.strip_prefix("VALUE ") {
                let key = rest.split(' ').next().unwrap_or_default();
                let value = lines
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                found.insert(key.to_owned(), value);
            }
        }
        Ok(keys
            .iter()
            .map(|k| found.get(k).copied().unwrap_or(0))
            .collect())
    }
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
    /// `REDIS_PERSECOND`: a second Redis for the counters of a second.
    per_second: Option<RedisStore>,
    memcache: Option<Memcache>,
    /// PostgreSQL, through paceline's limiter: one per unit (in
    /// [`Unit::ALL`]'s order), each key a window limit of the unit at the
    /// most its word counts, and that quota.
    postgres: Option<Vec<(AsyncPostgresLimiter, u64)>>,
    /// What a failed store makes of a request.
    pub fail: FailPolicy,
    /// The hot counters' leased batches (on a remote store only).
    leases: Leases,
}

/// A fixed window's hits to count.
#[derive(Clone, Copy, Debug)]
pub struct Hit<'a> {
    /// The window's unit.
    pub unit: Unit,
    /// The counter's name, without its window.
    pub key: &'a str,
    /// The hits.
    pub hits: u64,
    /// The rule's limit.
    pub limit: u64,
    /// The rule says `leased: true`.
    pub leased: bool,
}

impl Store {
    /// Counts in process only.
    pub fn local(local: Counts) -> Store {
        Store {
            local,
            redis: None,
            per_second: None,
            memcache: None,
            postgres: None,
            fail: FailPolicy::Error,
            leases: Leases::default(),
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
            per_second: None,
            memcache: None,
            postgres: None,
            fail,
            leases: Leases::default(),
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
            per_second: None,
            memcache: None,
            postgres: None,
            fail,
            leases: Leases::default(),
        })
    }

    /// Fixed windows in the Redis or Redis Cluster `at`.
    pub async fn redis_at(
        local: Counts,
        at: &RedisAt,
        timeout: Duration,
        jitter_max: u64,
        fail: FailPolicy,
    ) -> Result<Store, String> {
        match at {
            RedisAt::Single(url) => Store::redis(local, url, timeout, jitter_max, fail).await,
            RedisAt::Cluster(nodes) => {
                Store::cluster(local, nodes, timeout, jitter_max, fail).await
            }
        }
    }

    /// With `REDIS_PERSECOND`: the counters of a second in the Redis (or
    /// Redis Cluster) `at` instead.
    pub async fn with_per_second(
        mut self,
        at: &RedisAt,
        timeout: Duration,
    ) -> Result<Store, String> {
        let Some(main) = &self.redis else {
            return Err("REDIS_PERSECOND needs BACKEND_TYPE=redis".into());
        };
        let jitter_max = main.jitter_max;
        let fail = self.fail;
        let local = Counts::new(1).map_err(|e| e.to_string())?;
        let other = Store::redis_at(local, at, timeout, jitter_max, fail).await?;
        self.per_second = other.redis;
        Ok(self)
    }

    /// Fixed windows in the memcached `client` reaches.
    pub fn memcache(local: Counts, client: Memcache, fail: FailPolicy) -> Store {
        Store {
            local,
            redis: None,
            per_second: None,
            memcache: Some(client),
            postgres: None,
            fail,
            leases: Leases::default(),
        }
    }

    /// Fixed windows in PostgreSQL at `conn`, through paceline's limiter
    /// (its table and functions installed here if missing): windows on the
    /// database's clock, a counter's key the unit's seconds and the
    /// service's cache key (no window start: the row holds its window).
    pub async fn postgres(
        local: Counts,
        conn: &str,
        timeout: Duration,
        fail: FailPolicy,
    ) -> Result<Store, String> {
        let mut limiters = Vec::new();
        for unit in Unit::ALL {
            let (window, quota) = crate::counts::counted(unit);
            let limit = Limit::per_window(quota, window).map_err(|e| e.to_string())?;
            let blocking = PostgresLimiter::builder(conn, Rate::per_second(1))
                .limit(limit)
                .connect_timeout(timeout)
                .response_timeout(timeout)
                .build()
                .map_err(|e| format!("PostgreSQL at {conn}: {e}"))?;
            limiters.push((AsyncPostgresLimiter::from(blocking), quota));
        }
        limiters[0]
            .0
            .install()
            .await
            .map_err(|e| format!("PostgreSQL at {conn}: cannot install paceline's table: {e}"))?;
        Ok(Store {
            local,
            redis: None,
            per_second: None,
            memcache: None,
            postgres: Some(limiters),
            fail,
            leases: Leases::default(),
        })
    }

    /// Whether the fixed windows are counted outside this process.
    pub fn is_remote(&self) -> bool {
        self.redis.is_some() || self.memcache.is_some() || self.postgres.is_some()
    }

    /// Whether the fixed windows are counted in Redis.
    pub fn is_redis(&self) -> bool {
        self.redis.is_some()
    }

    /// With `leases` for the hot counters.
    pub fn with_leases(mut self, leases: Leases) -> Store {
        self.leases = leases;
        self
    }

    /// Counts each hit in its current window at `now_s`, as
    /// [`add`](Store::add) does, but for the leased counters on a remote
    /// store: the count each decision reads (a leased refusal reads the
    /// limit plus its hits, all over).
    pub async fn take<'a>(&self, hits: &[Hit<'a>], now_s: u64) -> Result<Vec<u64>, String> {
        let plain = |h: &Hit<'a>| (h.unit, h.key, h.hits);
        // Nothing leased, nothing looked at for heat: the counts alone.
        let leasing = hits.iter().any(|h| h.leased) || self.leases.finds();
        if !self.is_remote() || !leasing {
            return self
                .add(&hits.iter().map(plain).collect::<Vec<_>>(), now_s)
                .await;
        }
        let counters: Vec<(String, String, u64)> = hits
            .iter()
            .map(|h| {
                let (name, start) = windowed(h.key, h.unit, now_s);
                let before = start.saturating_sub(h.unit.seconds());
                (name, windowed(h.key, h.unit, before).0, start)
            })
            .collect();
        let counter = |i: usize| Counter {
            name: &counters[i].0,
            previous: &counters[i].1,
            window: counters[i].2,
            length: hits[i].unit.seconds(),
            limit: hits[i].limit,
        };
        let leased: Vec<bool> = hits
            .iter()
            .zip(&counters)
            .map(|(h, (name, _, _))| h.hits > 0 && (h.leased || self.leases.found(name)))
            .collect();
        let direct: Vec<usize> = (0..hits.len()).filter(|i| !leased[*i]).collect();
        let mut counts = vec![0; hits.len()];
        let asked: Vec<(Unit, &str, u64)> = direct.iter().map(|&i| plain(&hits[i])).collect();
        for (&i, count) in direct.iter().zip(self.add(&asked, now_s).await?) {
            counts[i] = count;
            self.leases.observe(&counter(i), hits[i].hits, now_s);
        }
        for i in (0..hits.len()).filter(|i| leased[*i]) {
            let h = hits[i];
            let batch = |size: u64| async move {
                let after = self.add(&[(h.unit, h.key, size)], now_s).await?;
                after
                    .first()
                    .copied()
                    .ok_or_else(|| format!("the store answered no count for {}", h.key))
            };
            counts[i] = match self.leases.take(&counter(i), h.hits, now_s, batch).await? {
                Answer::Admitted(count) => count,
                Answer::Refused => h.limit.saturating_add(h.hits),
                Answer::Unleased => batch(h.hits).await?,
            };
        }
        Ok(counts)
    }

    /// Counts each `(unit, key, hits)` in its current window at `now_s`
    /// (Unix seconds): each counter's value after.
    pub async fn add(&self, items: &[(Unit, &str, u64)], now_s: u64) -> Result<Vec<u64>, String> {
        if let Some(pg) = &self.postgres {
            let mut counts = Vec::with_capacity(items.len());
            for (unit, key, hits) in items {
                let i = Unit::ALL.iter().position(|u| u == unit).unwrap_or(0);
                let (limiter, quota) = &pg[i];
                let key = format!("{}:{key}", unit.seconds());
                let after = if *hits == 0 {
                    let state = limiter.state(&*key).await.map_err(|e| e.to_string())?;
                    quota - state.available().min(*quota)
                } else {
                    match limiter.try_take_n(&*key, *hits).await {
                        Ok(taken) => quota - taken.available().min(*quota),
                        Err(e) if e.is_refusal() => *quota,
                        Err(e) => return Err(format!("postgres error: {e}")),
                    }
                };
                counts.push(after);
            }
            return Ok(counts);
        }
        if let Some(m) = &self.memcache {
            let mut counts = Vec::with_capacity(items.len());
            for (i, (unit, key, hits)) in items.iter().enumerate() {
                let name = windowed(key, *unit, now_s).0;
                let expiry = expiry(*unit, m.jitter_max, now_s, i);
                counts.push(m.add(&name, *hits, expiry).await?);
            }
            return Ok(counts);
        }
        let Some(r) = &self.redis else {
            return Ok(items
                .iter()
                .map(|(unit, key, hits)| self.local.add(*unit, key, *hits).after)
                .collect());
        };
        let Some(per_second) = &self.per_second else {
            return r.add(items, now_s).await;
        };
        // REDIS_PERSECOND: the second's counters in their own Redis.
        let (second, rest) = apart(items, |i| i.0);
        let a = per_second.add(&second.items, now_s).await?;
        let b = r.add(&rest.items, now_s).await?;
        Ok(together(items.len(), [(second.at, a), (rest.at, b)]))
    }

    /// Each `(unit, key)`'s count in its current window at `now_s`,
    /// counting nothing.
    pub async fn count(&self, items: &[(Unit, &str)], now_s: u64) -> Result<Vec<u64>, String> {
        if self.postgres.is_some() {
            let asked: Vec<(Unit, &str, u64)> = items.iter().map(|(u, k)| (*u, *k, 0)).collect();
            return Box::pin(self.add(&asked, now_s)).await;
        }
        if let Some(m) = &self.memcache {
            let keys: Vec<String> = items
                .iter()
                .map(|(unit, key)| windowed(key, *unit, now_s).0)
                .collect();
            return if keys.is_empty() {
                Ok(Vec::new())
            } else {
                m.get(&keys).await
            };
        }
        let Some(r) = &self.redis else {
            return Ok(items
                .iter()
                .map(|(unit, key)| self.local.count(*unit, key))
                .collect());
        };
        let Some(per_second) = &self.per_second else {
            return r.count(items, now_s).await;
        };
        let (second, rest) = apart(items, |i| i.0);
        let a = per_second.count(&second.items, now_s).await?;
        let b = r.count(&rest.items, now_s).await?;
        Ok(together(items.len(), [(second.at, a), (rest.at, b)]))
    }
}

impl RedisStore {
    /// [`Store::add`] on this Redis.
    async fn add(&self, items: &[(Unit, &str, u64)], now_s: u64) -> Result<Vec<u64>, String> {
        let r = self;
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipes = vec![redis::pipe()];
        for (i, (unit, key, hits)) in items.iter().enumerate() {
            let name = windowed(key, *unit, now_s).0;
            // On a cluster, a pipeline per key: its keys must share a slot.
            if i > 0 && matches!(r.con, Con::Cluster(_)) {
                pipes.push(redis::pipe());
            }
            let pipe = pipes.last_mut().expect("one at least");
            pipe.cmd("INCRBY").arg(&name).arg(*hits);
            let expiry = expiry(*unit, r.jitter_max, now_s, i);
            pipe.cmd("EXPIRE").arg(&name).arg(expiry).ignore();
        }
        let mut counts = Vec::with_capacity(items.len());
        for pipe in &pipes {
            let some: Vec<i64> = r.query(pipe).await?;
            counts.extend(some.into_iter().map(|c| c.max(0) as u64));
        }
        Ok(counts)
    }

    /// [`Store::count`] on this Redis.
    async fn count(&self, items: &[(Unit, &str)], now_s: u64) -> Result<Vec<u64>, String> {
        let r = self;
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipes = vec![redis::pipe()];
        for (i, (unit, key)) in items.iter().enumerate() {
            if i > 0 && matches!(r.con, Con::Cluster(_)) {
                pipes.push(redis::pipe());
            }
            let pipe = pipes.last_mut().expect("one at least");
            pipe.cmd("GET").arg(windowed(key, *unit, now_s).0);
        }
        let mut counts = Vec::with_capacity(items.len());
        for pipe in &pipes {
            let some: Vec<Option<i64>> = r.query(pipe).await?;
            counts.extend(some.into_iter().map(|c| c.unwrap_or(0).max(0) as u64));
        }
        Ok(counts)
    }

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

/// Some of a request's counters, and where each stands among them all.
struct Part<T> {
    at: Vec<usize>,
    items: Vec<T>,
}

/// `items` cut into the counters of a second and the rest
/// (`REDIS_PERSECOND`), `unit` reading each one's unit.
fn apart<T: Copy>(items: &[T], unit: impl Fn(&T) -> Unit) -> (Part<T>, Part<T>) {
    let mut parts = (
        Part {
            at: Vec::new(),
            items: Vec::new(),
        },
        Part {
            at: Vec::new(),
            items: Vec::new(),
        },
    );
    for (i, item) in items.iter().enumerate() {
        let part = if unit(item) == Unit::Second {
            &mut parts.0
        } else {
            &mut parts.1
        };
        part.at.push(i);
        part.items.push(*item);
    }
    parts
}

/// The counts of the parts [`apart`] made, back in the request's order.
fn together(n: usize, parts: [(Vec<usize>, Vec<u64>); 2]) -> Vec<u64> {
    let mut counts = vec![0; n];
    for (at, got) in parts {
        for (i, c) in at.into_iter().zip(got) {
            counts[i] = c;
        }
    }
    counts
}

/// A counter's window of `unit` at `now_s` as the stores name it
/// (envoyproxy/ratelimit's cache key): the counter's name with the
/// window's start in Unix seconds after it; and that start.
pub fn windowed(key: &str, unit: Unit, now_s: u64) -> (String, u64) {
    let div = unit.seconds();
    let start = now_s / div * div;
    (format!("{key}{start}"), start)
}

/// The expiry of the `i`th counter of a call at `now_s`: its unit, plus
/// up to `EXPIRATION_JITTER_MAX_SECONDS`.
fn expiry(unit: Unit, jitter_max: u64, now_s: u64, i: usize) -> u64 {
    let spread = if jitter_max > 0 {
        jitter(now_s, i as u64) % jitter_max
    } else {
        0
    };
    unit.seconds() + spread
}

/// A number that differs from call to call and key to key, for the
/// expiry's jitter (which only spreads expiries; it decides nothing).
fn jitter(now_s: u64, i: u64) -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one((now_s, i))
}
