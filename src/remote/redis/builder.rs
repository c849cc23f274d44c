//! [`RedisBuilder`]: where a [`RedisLimiter`] connects, its limit, and how
//! its calls fail and wait.

use std::fmt;
use std::time::Duration;

use ::redis::cluster::{ClusterClient, ClusterClientBuilder};
use ::redis::{Client, ConnectionInfo, IntoConnectionInfo, RedisError};

use super::conn::{Pool, Target};
use super::limiter::RedisBackend;
use super::script::Wire;
use super::{RedisLimiter, DEFAULT_PREFIX};
use crate::rate::Rate;
use crate::remote::core::Core;
use crate::remote::RemoteLimiter;
use crate::remote::{Error, FailPolicy, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT};
use crate::slack::Slack;
use crate::stats::Counting;
use crate::wait::Wait;

/// Configures a [`RedisLimiter`]; made by [`RedisLimiter::builder`] or
/// [`RedisLimiter::cluster_builder`]. For async calls, build the limiter and
/// then take its async face, `AsyncRedisLimiter::from(limiter)` (features
/// `redis` and `tokio`).
#[must_use = "a builder does nothing until .build()"]
pub struct RedisBuilder {
    endpoint: Result<Endpoint, RedisError>,
    rate: Rate,
    slack: Slack,
    prefix: String,
    policy: FailPolicy,
    wait: Wait,
    connect_timeout: Duration,
    response_timeout: Duration,
    counting: Counting,
}

/// Where a builder's limiter connects to.
enum Endpoint {
    /// One server (or a proxy).
    Single(Client),
    /// Some or all nodes of a Redis Cluster.
    Cluster(Vec<ConnectionInfo>),
}

impl RedisLimiter {
    /// A builder for a limiter at `rate` on the Redis at `url`
    /// (`"redis://host:port/db"`, `"unix:///path/to/redis.sock"`, or a
    /// [`redis::ConnectionInfo`]). Nothing connects
    /// until the first call, so a limiter can be built while Redis is down.
    pub fn builder<I: IntoConnectionInfo>(url: I, rate: Rate) -> RedisBuilder {
        let client = url.into_connection_info().map(lean).and_then(Client::open);
        RedisBuilder::new(client.map(Endpoint::Single), rate)
    }

    /// A builder for a limiter at `rate` on the Redis Cluster that `nodes`
    /// (some or all of its nodes) belong to.
    pub fn cluster_builder<I: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = I>,
        rate: Rate,
    ) -> RedisBuilder {
        let nodes: Result<Vec<_>, _> = nodes
            .into_iter()
            .map(|node| node.into_connection_info().map(lean))
            .collect();
        RedisBuilder::new(nodes.map(Endpoint::Cluster), rate)
    }
}

impl RedisBuilder {
    fn new(endpoint: Result<Endpoint, RedisError>, rate: Rate) -> RedisBuilder {
        RedisBuilder {
            endpoint,
            rate,
            slack: Slack::DEFAULT,
            prefix: DEFAULT_PREFIX.to_owned(),
            policy: FailPolicy::default(),
            wait: Wait::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            counting: Counting::default(),
        }
    }

    /// Whether the limiter counts what it decides, all keys (and
    /// `with_limit` siblings) together: `stats()` on the limiter, and
    /// [`Counted`](crate::stats::Counted) for
    /// [`stats::prometheus`](crate::stats::prometheus). Default `false`.
    /// A server's failure counts in [`Stats::failed`](crate::stats::Stats::failed),
    /// and then as admitted or refused as the fail policy decides.
    pub fn stats(mut self, on: bool) -> Self {
        self.counting.on = on;
        self
    }

    /// Counts as [`stats(true)`](Self::stats) and sends the counts to the
    /// `metrics` facade too, labelled `limiter = name` (see
    /// [`Builder::metrics`](crate::Builder::metrics)).
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics(mut self, name: impl Into<String>) -> Self {
        self.counting.facade = Some(name.into());
        self
    }

    /// How much unused time a key may bank for a later burst: a permit
    /// count, a `Duration` or a [`Slack`] (default [`Slack::DEFAULT`], as
    /// in-process: 10 permits, or 10 ms of permits if that is more).
    pub fn slack(mut self, slack: impl Into<Slack>) -> Self {
        self.slack = slack.into();
        self
    }

    /// The prefix put before every key (default [`DEFAULT_PREFIX`]). On
    /// Redis Cluster a prefix with a hash tag (`"{paceline}:"`) puts every
    /// key in one slot, on one primary; without one, keys spread out.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// What a call does when Redis fails it (default [`FailPolicy::Closed`]).
    pub fn on_error(mut self, policy: FailPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How a take waits out its slot (default [`Wait::Sleep`]): blocking
    /// takes, and the async face's takes too (`paceline::tokio::PRECISE`, a
    /// 2 ms spin, suits those).
    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// The longest wait for a new connection (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The longest wait for a reply (default [`DEFAULT_RESPONSE_TIMEOUT`]).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The limiter. It does not connect yet: the first call does.
    ///
    /// # Errors
    /// [`Error::Config`] for a URL that does not parse, a slack whose
    /// intervals span over 146 years, or a zero timeout.
    pub fn build(self) -> Result<RedisLimiter, Error> {
        if self.connect_timeout.is_zero() || self.response_timeout.is_zero() {
            return Err(Error::Config("timeouts must be longer than zero".into()));
        }
        let target = match self.endpoint {
            Ok(Endpoint::Single(client)) => Ok(Target::Single(client)),
            Ok(Endpoint::Cluster(nodes)) => {
                let (connect, response) = (self.connect_timeout, self.response_timeout);
                cluster_client(nodes.clone(), connect, response, 1).and_then(|client| {
                    Ok(Target::Cluster {
                        client: Box::new(client),
                        once: Box::new(cluster_client(nodes, connect, response, 0)?),
                    })
                })
            }
            Err(e) => Err(e),
        }
        .map_err(|e| Error::Config(e.to_string()))?;
        let backend = RedisBackend {
            pool: Pool::new(target, self.connect_timeout, self.response_timeout),
            wire: Wire::new(self.prefix),
        };
        let core = Core::new(
            backend,
            self.rate,
            self.slack,
            self.policy,
            self.wait,
            &self.counting,
        )
        .map_err(|e| Error::Config(e.to_string()))?;
        Ok(RemoteLimiter { core })
    }
}

/// A cluster client with the limiter's timeouts, retrying a call up to
/// `retries` times: 1 for calls (a redirection after a resharding or
/// failover, and a call never waits out many timeouts), 0 for give-backs.
/// A call redirected again is sent again by the limiter, within the call's
/// budget (see `src/remote/redis/conn.rs`): a resharding fails no call.
fn cluster_client(
    nodes: Vec<ConnectionInfo>,
    connect_timeout: Duration,
    response_timeout: Duration,
    retries: u32,
) -> Result<ClusterClient, RedisError> {
    ClusterClientBuilder::new(nodes)
        .connection_timeout(connect_timeout)
        .response_timeout(response_timeout)
        .retries(retries)
        .build()
}

/// `info` without the `CLIENT SETINFO` round trip redis-rs makes on each
/// new connection: one less reply to wait for while reconnecting, so a
/// reconnect to a hung server fails within one timeout.
fn lean(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    info.set_redis_settings(settings)
}

impl fmt::Debug for RedisBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBuilder")
            .field("rate", &self.rate)
            .field("slack", &self.slack)
            .field("prefix", &self.prefix)
            .field("fail_policy", &self.policy)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .finish_non_exhaustive()
    }
}
