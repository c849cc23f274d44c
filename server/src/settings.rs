//! The server's settings, from the environment as envoyproxy/ratelimit
//! reads them (the same variables, the same defaults, but for
//! `BACKEND_TYPE`, whose default here is in process), and `--config DIR`.
//! A value that does not parse is an error naming the variable and the
//! value; a variable paceline does not act on is accepted where its
//! default is asked for, and refused by name otherwise.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use std::time::Duration;

use crate::service::{Decide, Headers};
use crate::store::FailPolicy;

/// A Redis, from `REDIS_TYPE` and the rest (or their `REDIS_PERSECOND_`
/// twins).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisAt {
    /// A single Redis: the client's URL, from `REDIS_SOCKET_TYPE`,
    /// `REDIS_URL` and `REDIS_AUTH`.
    Single(String),
    /// A Redis Cluster: its nodes' URLs (`REDIS_URL`: `host:port`,
    /// comma-separated).
    Cluster(Vec<String>),
}

/// Where the fixed windows are counted (`BACKEND_TYPE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// In process.
    Memory,
    /// In PostgreSQL, through paceline's limiter (`POSTGRES_URL`).
    Postgres {
        /// The connection string.
        conn: String,
    },
    /// In memcached under envoyproxy/ratelimit's keys.
    Memcache {
        /// `MEMCACHE_HOST_PORT`.
        addr: String,
        /// `EXPIRATION_JITTER_MAX_SECONDS`.
        jitter_max: u64,
        /// `MEMCACHE_MAX_IDLE_CONNS`: the most connections (envoyproxy/
        /// ratelimit's client keeps that many idle).
        connections: usize,
    },
    /// In Redis under envoyproxy/ratelimit's keys.
    Redis {
        /// The Redis.
        at: RedisAt,
        /// `REDIS_PERSECOND`: the Redis for the counters of a second, from
        /// the `REDIS_PERSECOND_*` variables.
        per_second: Option<RedisAt>,
        /// `EXPIRATION_JITTER_MAX_SECONDS`.
        jitter_max: u64,
    },
}

/// Everything the server reads at start.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `HOST:PORT`: `/healthcheck` and `/json`.
    pub http: SocketAddr,
    /// `GRPC_HOST:GRPC_PORT`: the RLS.
    pub grpc: SocketAddr,
    /// `DEBUG_HOST:DEBUG_PORT`: the look inside, `/rlconfig`, `/stats`.
    pub debug: SocketAddr,
    /// The configuration directory.
    pub config_dir: PathBuf,
    /// `MERGE_DOMAIN_CONFIG`.
    pub merge_domains: bool,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`.
    pub healthy_needs_config: bool,
    /// `USE_PROMETHEUS`: Prometheus at this address and path.
    pub prometheus: Option<(SocketAddr, String)>,
    /// `LOG_LEVEL`.
    pub log_level: tracing::Level,
    /// `LOG_FORMAT` is `json`.
    pub log_json: bool,
    /// How the service decides.
    pub decide: Decide,
    /// How often the configuration directory is looked at, ms
    /// (`PACELINE_RELOAD_MS`, default 1000).
    pub reload_ms: u64,
    /// The most keys a counter tracks (`PACELINE_MAX_KEYS`, default
    /// 1 000 000 per unit).
    pub max_keys: usize,
    /// `USE_STATSD` set true: paceline-server sends no statsd, and says so.
    pub statsd_asked: bool,
    /// `BACKEND_TYPE`.
    pub backend: Backend,
    /// `PACELINE_FAIL_POLICY`: what a failed store makes of a request.
    pub fail: FailPolicy,
    /// `PACELINE_STORE_TIMEOUT_MS`: the most a store's round trip or
    /// connection takes (default 1000).
    pub store_timeout: Duration,
    /// `PACELINE_LEASE_ABOVE`: a window's count per second past which its
    /// counter is leased (none: only the rules that say `leased: true`).
    pub lease_above: Option<u64>,
}

/// The environment as a lookup, so tests can give their own.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn get(env: Env<'_>, name: &str, default: &str) -> String {
    env(name).unwrap_or_else(|| default.to_owned())
}

fn boolean(env: Env<'_>, name: &str, default: bool) -> Result<bool, String> {
    match env(name) {
        None => Ok(default),
        Some(v) => match v.to_ascii_lowercase().as_str() {
            "1" | "t" | "true" => Ok(true),
            "0" | "f" | "false" | "" => Ok(false),
            _ => Err(format!("{name}={v:?}: expected true or false")),
        },
    }
}

fn number<T: std::str::FromStr>(env: Env<'_>, name: &str, default: T) -> Result<T, String> {
    match env(name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("{name}={v:?}: expected a number")),
    }
}

fn address(env: Env<'_>, host: &str, port: &str, default_port: u16) -> Result<SocketAddr, String> {
    let h = get(env, host, "0.0.0.0");
    let ip: IpAddr = h
        .parse()
        .map_err(|_| format!("{host}={h:?}: expected an IP address"))?;
    Ok(SocketAddr::new(ip, number(env, port, default_port)?))
}

impl Settings {
    /// The settings `env` and the command line `args` (after the program's
    /// name) give.
    pub fn read(env: Env<'_>, args: &[String]) -> Result<Settings, String> {
        let mut config_dir = None;
        let mut args = args.iter();
        while let Some(a) = args.next() {
            match a.as_str() {
                "--config" => {
                    let dir = args.next().ok_or("--config needs a directory")?;
                    config_dir = Some(PathBuf::from(dir));
                }
                other => match other.strip_prefix("--config=") {
                    Some(dir) => config_dir = Some(PathBuf::from(dir)),
                    None => {
                        return Err(format!(
                            "unknown argument {other:?}: paceline-server takes --config DIR, and the rest from the environment (see its README)"
                        ))
                    }
                },
            }
        }
        let config_dir = config_dir.unwrap_or_else(|| {
            let mut p = PathBuf::from(get(env, "RUNTIME_ROOT", "/srv/runtime_data/current"));
            let sub = get(env, "RUNTIME_SUBDIRECTORY", "");
            if !sub.is_empty() {
                p.push(sub);
            }
            p.push(get(env, "RUNTIME_APPDIRECTORY", "config"));
            p
        });
        // RUNTIME_WATCH_ROOT picks what envoyproxy/ratelimit watches (a
        // swap of the runtime root's symbolic link, or the files of the
        // configuration directory); the look every PACELINE_RELOAD_MS
        // sees both, so either value reloads on either change. A value
        // that is not a boolean is still an error naming it.
        boolean(env, "RUNTIME_WATCH_ROOT", true)?;
        let backend = match get(env, "BACKEND_TYPE", "").as_str() {
            "" | "memory" => Backend::Memory,
            "redis" => {
                let jitter_max = number(env, "EXPIRATION_JITTER_MAX_SECONDS", 300u64)?;
                let per_second = if boolean(env, "REDIS_PERSECOND", false)? {
                    Some(redis_at(env, "REDIS_PERSECOND_")?)
                } else {
                    None
                };
                Backend::Redis {
                    at: redis_at(env, "REDIS_")?,
                    per_second,
                    jitter_max,
                }
            }
            "postgres" => {
                let conn = get(env, "POSTGRES_URL", "");
                if conn.is_empty() {
                    return Err(
                        "POSTGRES_URL=\"\": BACKEND_TYPE=postgres needs a connection string".into(),
                    );
                }
                Backend::Postgres { conn }
            }
            "memcache" => {
                let addr = get(env, "MEMCACHE_HOST_PORT", "");
                if addr.is_empty() || addr.contains(',') {
                    return Err(format!(
                        "MEMCACHE_HOST_PORT={addr:?}: expected one host:port (BACKEND_TYPE=memcache)"
                    ));
                }
                let connections = number(env, "MEMCACHE_MAX_IDLE_CONNS", 2usize)?;
                if connections == 0 {
                    return Err(
                        "MEMCACHE_MAX_IDLE_CONNS=\"0\": expected one connection or more".into(),
                    );
                }
                Backend::Memcache {
                    addr,
                    jitter_max: number(env, "EXPIRATION_JITTER_MAX_SECONDS", 300u64)?,
                    connections,
                }
            }
            other => {
                return Err(format!(
                    "BACKEND_TYPE={other:?}: expected redis, memcache, postgres, or memory (in process, the default)"
                ))
            }
        };
        let fail = match get(env, "PACELINE_FAIL_POLICY", "error").as_str() {
            "error" => FailPolicy::Error,
            "open" => FailPolicy::Open,
            "closed" => FailPolicy::Closed,
            other => {
                return Err(format!(
                    "PACELINE_FAIL_POLICY={other:?}: expected error (envoyproxy/ratelimit's), open or closed"
                ))
            }
        };
        let prometheus = if boolean(env, "USE_PROMETHEUS", false)? {
            let addr = get(env, "PROMETHEUS_ADDR", ":9090");
            let full = if addr.starts_with(':') {
                format!("0.0.0.0{addr}")
            } else {
                addr.clone()
            };
            let addr: SocketAddr = full
                .parse()
                .map_err(|_| format!("PROMETHEUS_ADDR={addr:?}: expected [host]:port"))?;
            Some((addr, get(env, "PROMETHEUS_PATH", "/metrics")))
        } else {
            None
        };
        let level = get(env, "LOG_LEVEL", "WARN");
        let log_level = match level.to_ascii_lowercase().as_str() {
            "trace" => tracing::Level::TRACE,
            "debug" => tracing::Level::DEBUG,
            "info" => tracing::Level::INFO,
            "warn" | "warning" => tracing::Level::WARN,
            "error" | "fatal" | "panic" => tracing::Level::ERROR,
            _ => {
                return Err(format!(
                    "LOG_LEVEL={level:?}: expected TRACE, DEBUG, INFO, WARN or ERROR"
                ))
            }
        };
        let format = get(env, "LOG_FORMAT", "text");
        let log_json = match format.as_str() {
            "text" => false,
            "json" => true,
            _ => return Err(format!("LOG_FORMAT={format:?}: expected text or json")),
        };
        let ratio: f32 = number(env, "NEAR_LIMIT_RATIO", 0.8)?;
        if !(0.0..=1.0).contains(&ratio) {
            return Err(format!(
                "NEAR_LIMIT_RATIO={ratio}: expected a fraction from 0 to 1"
            ));
        }
        let style = get(env, "PACELINE_HEADERS", "ratelimit");
        let draft = match style.as_str() {
            "ratelimit" => false,
            "draft-11" => true,
            _ => {
                return Err(format!(
                    "PACELINE_HEADERS={style:?}: expected ratelimit (envoyproxy/ratelimit's three headers) or draft-11"
                ))
            }
        };
        let headers = boolean(env, "LIMIT_RESPONSE_HEADERS_ENABLED", false)?.then(|| Headers {
            limit: get(env, "LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
            remaining: get(env, "LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
            reset: get(env, "LIMIT_RESET_HEADER", "RateLimit-Reset"),
            draft,
        });
        let statsd_asked = env("USE_STATSD").is_some() && boolean(env, "USE_STATSD", false)?;
        Ok(Settings {
            http: address(env, "HOST", "PORT", 8080)?,
            grpc: address(env, "GRPC_HOST", "GRPC_PORT", 8081)?,
            debug: address(env, "DEBUG_HOST", "DEBUG_PORT", 6070)?,
            config_dir,
            merge_domains: boolean(env, "MERGE_DOMAIN_CONFIG", false)?,
            healthy_needs_config: boolean(env, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?,
            prometheus,
            log_level,
            log_json,
            decide: Decide {
                near_limit_ratio: ratio,
                prefix: get(env, "CACHE_KEY_PREFIX", ""),
                stop_increment_when_over: boolean(
                    env,
                    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
                    false,
                )?,
                shadow_mode: boolean(env, "SHADOW_MODE", false)?,
                quota_mode: boolean(env, "QUOTA_MODE", false)?,
                headers,
                local_cache: number(env, "LOCAL_CACHE_SIZE_IN_BYTES", 0usize)?,
            },
            reload_ms: number(env, "PACELINE_RELOAD_MS", 1000u64)?.max(10),
            max_keys: number(env, "PACELINE_MAX_KEYS", 1_000_000usize)?,
            statsd_asked,
            backend,
            fail,
            store_timeout: Duration::from_millis(
                number(env, "PACELINE_STORE_TIMEOUT_MS", 1000u64)?.max(1),
            ),
            lease_above: match env("PACELINE_LEASE_ABOVE") {
                None => None,
                Some(_) => match number(env, "PACELINE_LEASE_ABOVE", 0u64)? {
                    0 => {
                        return Err(
                            "PACELINE_LEASE_ABOVE=\"0\": expected hits per second, at least 1"
                                .into(),
                        )
                    }
                    n => Some(n),
                },
            },
        })
    }
}

/// The Redis client's URL from envoyproxy/ratelimit's variables:
/// `REDIS_SOCKET_TYPE` (`unix`, its default, or `tcp`), `REDIS_URL` (a
/// socket's path, or `host:port`), `REDIS_AUTH` (`password` or
/// `user:password`), `REDIS_TYPE` (`single`, or `cluster` with
/// `REDIS_URL` its nodes' `host:port`s, comma-separated, over tcp: then the
/// nodes' URLs), `REDIS_POOL_SIZE` (accepted: one multiplexed connection
/// serves every call); or the same named `REDIS_PERSECOND_URL` and so on
/// (`prefix`).
fn redis_at(env: Env<'_>, prefix: &str) -> Result<RedisAt, String> {
    let var = |name: &str| format!("{prefix}{name}");
    let _pool: u64 = number(env, &var("POOL_SIZE"), 10)?;
    let url = get(env, &var("URL"), "/var/run/nutcracker/ratelimit.sock");
    let auth = get(env, &var("AUTH"), "");
    let kind = get(env, &var("TYPE"), "SINGLE");
    if kind.eq_ignore_ascii_case("cluster") {
        let creds = match auth.split_once(':') {
            _ if auth.is_empty() => String::new(),
            Some((user, pass)) => format!("{user}:{pass}@"),
            None => format!(":{auth}@"),
        };
        return Ok(RedisAt::Cluster(
            url.split(',')
                .map(|node| format!("redis://{creds}{}", node.trim()))
                .collect(),
        ));
    }
    if !kind.eq_ignore_ascii_case("single") {
        return Err(format!("{prefix}TYPE={kind:?}: expected single or cluster"));
    }
    Ok(RedisAt::Single(
        match get(env, &var("SOCKET_TYPE"), "unix").as_str() {
            "tcp" => Ok(match auth.split_once(':') {
                _ if auth.is_empty() => format!("redis://{url}"),
                Some((user, pass)) => format!("redis://{user}:{pass}@{url}"),
                None => format!("redis://:{auth}@{url}"),
            }),
            "unix" => Ok(match auth.split_once(':') {
                _ if auth.is_empty() => format!("unix://{url}"),
                Some((user, pass)) => format!("unix://{url}?user={user}&pass={pass}"),
                None => format!("unix://{url}?pass={auth}"),
            }),
            other => Err(format!(
                "{prefix}SOCKET_TYPE={other:?}: expected unix or tcp"
            )),
        }?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&str, &str)], args: &[&str]) -> Result<Settings, String> {
        let env = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        };
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        Settings::read(&env, &args)
    }

    #[test]
    fn the_defaults_are_envoyproxy_ratelimit_s() {
        let s = read(&[], &[]).unwrap();
        assert_eq!(s.http.to_string(), "0.0.0.0:8080");
        assert_eq!(s.grpc.to_string(), "0.0.0.0:8081");
        assert_eq!(s.debug.to_string(), "0.0.0.0:6070");
        assert_eq!(
            s.config_dir,
            PathBuf::from("/srv/runtime_data/current/config")
        );
        assert!(s.prometheus.is_none() && s.decide.headers.is_none());
        assert_eq!(s.decide.near_limit_ratio, 0.8);
    }

    #[test]
    fn the_runtime_path_joins_and_config_overrides_it() {
        let vars = [
            ("RUNTIME_ROOT", "/r"),
            ("RUNTIME_SUBDIRECTORY", "s"),
            ("RUNTIME_APPDIRECTORY", "a"),
        ];
        assert_eq!(
            read(&vars, &[]).unwrap().config_dir,
            PathBuf::from("/r/s/a")
        );
        assert_eq!(
            read(&vars, &["--config", "/x"]).unwrap().config_dir,
            PathBuf::from("/x")
        );
    }

    #[test]
    fn a_bad_value_is_named() {
        let e = read(&[("GRPC_PORT", "eighty")], &[]).unwrap_err();
        assert!(e.contains("GRPC_PORT=\"eighty\""), "{e}");
        let e = read(&[("BACKEND_TYPE", "cassandra")], &[]).unwrap_err();
        assert!(e.contains("BACKEND_TYPE=\"cassandra\""), "{e}");
        let e = read(&[("BACKEND_TYPE", "memcache")], &[]).unwrap_err();
        assert!(e.contains("MEMCACHE_HOST_PORT=\"\""), "{e}");
        let e = read(
            &[("BACKEND_TYPE", "redis"), ("REDIS_TYPE", "sentinel")],
            &[],
        )
        .unwrap_err();
        assert!(e.contains("REDIS_TYPE=\"sentinel\""), "{e}");
        let e = read(&[("RUNTIME_WATCH_ROOT", "sometimes")], &[]).unwrap_err();
        assert!(e.contains("RUNTIME_WATCH_ROOT=\"sometimes\""), "{e}");
        assert!(read(&[("RUNTIME_WATCH_ROOT", "false")], &[]).is_ok());
        for bad in ["0", "lots"] {
            let e = read(&[("PACELINE_LEASE_ABOVE", bad)], &[]).unwrap_err();
            assert!(
                e.contains(&format!("PACELINE_LEASE_ABOVE=\"{bad}\"")),
                "{e}"
            );
        }
        let s = read(&[("PACELINE_LEASE_ABOVE", "500")], &[]).unwrap();
        assert_eq!(s.lease_above, Some(500));
        let e = read(&[], &["--verbose"]).unwrap_err();
        assert!(e.contains("--verbose"), "{e}");
    }
}
