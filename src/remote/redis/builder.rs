//! [`RedisBuilder`]: where a [`RedisLimiter`] connects, its limit, and how
//! its calls fail and wait.

use ::redis::{ConnectionInfo, IntoConnectionInfo, RedisError};

use super::conn::{Pool, Target};
use super::limiter::{RedisBackend, RedisLimiter};
use super::script::Wire;
use crate::remote::builder::RemoteBuilder;
use crate::remote::Error;
use crate::values::rate::Rate;

/// The key prefix unless the builder sets another: keeps paceline's keys
/// apart from the application's.
pub const DEFAULT_PREFIX: &str = "paceline:";

/// Configures a [`RedisLimiter`]; made by [`RedisLimiter::builder`] or
/// [`RedisLimiter::cluster_builder`]. The settings every remote limiter
/// has are [`RemoteBuilder`]'s; Redis adds [`prefix`](Self::prefix). For
/// async calls, build the limiter and then take its async face,
/// `AsyncRedisLimiter::from(limiter)` (features `redis` and `tokio`).
pub type RedisBuilder = RemoteBuilder<RedisSettings>;

/// What only a Redis limiter's builder sets: where it connects and the
/// prefix of its keys (see [`RedisBuilder`]). Its `Debug` shows a URL's
/// password as redis-rs shows it: `<redacted>`.
#[derive(Debug)]
pub struct RedisSettings {
    /// The server, or (`cluster`) some or all nodes of a Redis Cluster.
    nodes: Result<Vec<ConnectionInfo>, RedisError>,
    cluster: bool,
    prefix: String,
}

impl RedisLimiter {
    /// A builder for a limiter at `rate` on the Redis at `url`
    /// (`"redis://host:port/db"`, `"unix:///path/to/redis.sock"`, or a
    /// [`redis::ConnectionInfo`]). Nothing connects
    /// until the first call, so a limiter can be built while Redis is down.
    pub fn builder<I: IntoConnectionInfo>(url: I, rate: Rate) -> RedisBuilder {
        RedisBuilder::redis([url], false, rate)
    }

    /// A builder for a limiter at `rate` on the Redis Cluster that `nodes`
    /// (some or all of its nodes) belong to.
    pub fn cluster_builder<I: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = I>,
        rate: Rate,
    ) -> RedisBuilder {
        RedisBuilder::redis(nodes, true, rate)
    }
}

impl RedisBuilder {
    fn redis<I: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = I>,
        cluster: bool,
        rate: Rate,
    ) -> RedisBuilder {
        let nodes = nodes
            .into_iter()
            .map(|node| node.into_connection_info().map(lean));
        RemoteBuilder::new(
            rate,
            RedisSettings {
                nodes: nodes.collect(),
                cluster,
                prefix: DEFAULT_PREFIX.to_owned(),
            },
        )
    }

    crate::values::setters! {
        /// The prefix put before every key (default [`DEFAULT_PREFIX`]). On
        /// Redis Cluster a prefix with a hash tag (`"{paceline}:"`) puts every
        /// key in one slot, on one primary; without one, keys spread out.
        prefix(prefix: impl Into<String>) => server.prefix;
    }

    /// The limiter. It does not connect yet: the first call does.
    ///
    /// # Errors
    /// [`Error::Config`] for a URL that does not parse, a slack whose
    /// intervals span over 146 years, or a zero timeout.
    pub fn build(self) -> Result<RedisLimiter, Error> {
        let RemoteBuilder { common, server } = self;
        let (connect, response) = (common.connect_timeout, common.response_timeout);
        let nodes = server.nodes.map_err(|e| Error::Config(e.to_string()))?;
        let at = address(&nodes);
        let target = Target::new(nodes, server.cluster, connect, response)
            .map_err(|e| Error::Config(e.to_string()))?;
        let backend = RedisBackend {
            pool: Pool::new(target, connect, response),
            wire: Wire::new(server.prefix),
        };
        common.limiter(backend, &at)
    }
}

/// Where `nodes` are, never with a password: each `host:port` (or socket
/// path). Also the fleet's documents'.
pub(crate) fn address(nodes: &[ConnectionInfo]) -> String {
    let at = nodes.iter().map(|node| node.addr().to_string());
    at.collect::<Vec<_>>().join(", ")
}

/// `info` without the `CLIENT SETINFO` round trip redis-rs makes on each
/// new connection: one less reply to wait for while reconnecting, so a
/// reconnect to a hung server fails within one timeout.
fn lean(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    info.set_redis_settings(settings)
}
