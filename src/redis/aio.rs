//! [`AsyncRedisLimiter`]: the Redis limiter's calls as futures, for Tokio
//! (features `redis` and `tokio`).
//!
//! The same script, decisions, keys, fail policy and errors as
//! [`RedisLimiter`]; only the waiting differs. Calls go over one multiplexed
//! connection (redis-rs's `ConnectionManager`, or its async cluster
//! connection, made on first use; both reconnect by themselves), so any
//! number of tasks share it without queuing behind each other's round trips;
//! a blocking take waits for its slot with `tokio::time::sleep`.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, RedisResult, ScriptInvocation};
use tokio::sync::OnceCell;

use super::conn::{classify, BACKOFF_MAX, BACKOFF_MIN};
use super::{decision, peeked, went_at, Error, FailPolicy, RedisBuilder, RedisLimiter};
use crate::rate::Rate;
use crate::schedule::{self, Admit};

/// A [`RedisLimiter`] whose calls are futures; made by
/// [`RedisBuilder::build_async`].
///
/// ```no_run
/// use paceline::redis::RedisLimiter;
/// use paceline::Rate;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), paceline::redis::Error> {
/// let limiter = RedisLimiter::builder("redis://127.0.0.1/", Rate::per_second(100))
///     .build_async()?;
/// limiter.take("api").await?; // sleeps (as a task) until the slot
/// # Ok(())
/// # }
/// ```
///
/// Cheap to clone (clones share the connection); `Send + Sync`.
///
/// # Cancel safety
/// A future dropped while its request is on the wire may or may not have
/// taken its permits (Redis may run the script anyway); one dropped while it
/// waits for its slot has taken them: the slot stays spent. Dropping never
/// admits anyone early.
#[derive(Clone)]
pub struct AsyncRedisLimiter {
    limiter: RedisLimiter,
    conn: Conn,
    /// The longest a call waits on Redis: connect plus response timeouts.
    budget: Duration,
}

/// The shared connection.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(Arc<LazyCluster>),
}

/// A cluster connection, made by the first call that needs it (making one
/// asks a node for the slot map: a round trip a builder should not wait for).
struct LazyCluster {
    client: ClusterClient,
    conn: OnceCell<ClusterConnection>,
}

impl Conn {
    /// Sends `cmd` (an `EVALSHA`, or a `PING`), and for a script call that
    /// meets `NOSCRIPT`, loads the script and sends it again.
    async fn query<T: FromRedisValue>(&self, call: Call<'_, '_>) -> RedisResult<T> {
        match self {
            Conn::Single(conn) => call.send(&mut conn.clone()).await,
            Conn::Cluster(lazy) => {
                let conn = lazy
                    .conn
                    .get_or_try_init(|| lazy.client.get_async_connection())
                    .await?;
                call.send(&mut conn.clone()).await
            }
        }
    }
}

/// What [`Conn::query`] sends.
#[derive(Clone, Copy)]
enum Call<'a, 'b> {
    Script(&'a ScriptInvocation<'b>),
    Cmd(&'a Cmd),
}

impl Call<'_, '_> {
    async fn send<T: FromRedisValue>(
        self,
        conn: &mut (impl redis::aio::ConnectionLike + Send),
    ) -> RedisResult<T> {
        match self {
            Call::Script(call) => call.invoke_async(conn).await,
            Call::Cmd(cmd) => cmd.query_async(conn).await,
        }
    }
}

impl RedisBuilder {
    /// The limiter, with async calls. It does not connect yet: the first call
    /// does (in the Tokio runtime it is called from).
    ///
    /// # Errors
    /// As [`build`](Self::build).
    pub fn build_async(self) -> Result<AsyncRedisLimiter, Error> {
        let (connect, response) = (self.connect_timeout, self.response_timeout);
        let conn = match &self.endpoint {
            Ok(super::Endpoint::Single(client)) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect))
                    .set_response_timeout(Some(response))
                    .set_min_delay(BACKOFF_MIN)
                    .set_max_delay(BACKOFF_MAX)
                    // Reconnects run in the background; calls meanwhile fail.
                    .set_number_of_retries(1);
                client.get_connection_manager_lazy(config).map(Conn::Single)
            }
            Ok(super::Endpoint::Cluster(nodes)) => {
                super::cluster_client(nodes.clone(), connect, response).map(|client| {
                    Conn::Cluster(Arc::new(LazyCluster {
                        client,
                        conn: OnceCell::new(),
                    }))
                })
            }
            Err(e) => Err(e.clone()),
        }
        .map_err(|e| Error::Config(e.to_string()))?;
        let limiter = self.build()?;
        Ok(AsyncRedisLimiter {
            limiter,
            conn,
            budget: connect.saturating_add(response),
        })
    }
}

impl AsyncRedisLimiter {
    /// The same limiter (same connection, prefix and policy) at another rate
    /// and slack; see [`RedisLimiter::with_limit`].
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`](crate::BuildError::SlackTooLarge).
    pub fn with_limit(
        &self,
        rate: Rate,
        slack: u64,
    ) -> Result<AsyncRedisLimiter, crate::BuildError> {
        Ok(AsyncRedisLimiter {
            limiter: self.limiter.with_limit(rate, slack)?,
            conn: self.conn.clone(),
            budget: self.budget,
        })
    }

    /// Waits until the next permit of `key`'s limit comes up; see
    /// [`RedisLimiter::take`].
    ///
    /// # Errors
    /// As [`RedisLimiter::take`].
    ///
    /// # Cancel safety
    /// See [the type's](AsyncRedisLimiter#cancel-safety).
    pub async fn take(&self, key: &str) -> Result<Duration, Error> {
        self.take_admitted(key, 1, Admit::Always).await
    }

    /// Waits until `cost` permits of `key`'s limit are paid for; see
    /// [`RedisLimiter::take_n`].
    ///
    /// # Errors
    /// As [`RedisLimiter::take_n`].
    ///
    /// # Cancel safety
    /// See [the type's](AsyncRedisLimiter#cancel-safety).
    pub async fn take_n(&self, key: &str, cost: u64) -> Result<Duration, Error> {
        self.take_admitted(key, cost, Admit::Always).await
    }

    /// Takes a permit of `key`'s limit if one is free now; see
    /// [`RedisLimiter::try_take`].
    ///
    /// # Errors
    /// As [`RedisLimiter::try_take`].
    ///
    /// # Cancel safety
    /// See [the type's](AsyncRedisLimiter#cancel-safety).
    pub async fn try_take(&self, key: &str) -> Result<(), Error> {
        self.try_take_n(key, 1).await
    }

    /// Takes `cost` permits of `key`'s limit if they are free now; see
    /// [`RedisLimiter::try_take_n`].
    ///
    /// # Errors
    /// As [`RedisLimiter::try_take_n`].
    ///
    /// # Cancel safety
    /// See [the type's](AsyncRedisLimiter#cancel-safety).
    pub async fn try_take_n(&self, key: &str, cost: u64) -> Result<(), Error> {
        let decision = self.decide(key, cost, Admit::Within(0)).await;
        self.limiter
            .settle(decision, cost, Admit::Within(0))
            .map(drop)
    }

    /// Takes a permit of `key`'s limit, waiting for it only if its slot is at
    /// most `max_wait` away; see [`RedisLimiter::take_timeout`].
    ///
    /// # Errors
    /// As [`RedisLimiter::take_timeout`].
    ///
    /// # Cancel safety
    /// See [the type's](AsyncRedisLimiter#cancel-safety).
    pub async fn take_timeout(&self, key: &str, max_wait: Duration) -> Result<Duration, Error> {
        self.take_n_timeout(key, 1, max_wait).await
    }

    /// [`take_timeout`](Self::take_timeout) for `cost` permits.
    ///
    /// # Errors
    /// As [`RedisLimiter::take_n_timeout`].
    ///
    /// # Cancel safety
    /// See [the type's](AsyncRedisLimiter#cancel-safety).
    pub async fn take_n_timeout(
        &self,
        key: &str,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, Error> {
        let max = crate::wait::nanos(max_wait);
        self.take_admitted(key, cost, Admit::Within(max)).await
    }

    /// Whether [`try_take_n(key, cost)`](Self::try_take_n) would succeed now;
    /// consumes nothing.
    ///
    /// # Errors
    /// As [`RedisLimiter::can_take`].
    ///
    /// # Cancel safety
    /// Cancel safe: it stores nothing.
    pub async fn can_take(&self, key: &str, cost: u64) -> Result<bool, Error> {
        let peeked = self.peek(key).await;
        let params = self.limiter.params;
        match peeked {
            Ok((tat, now)) => Ok(schedule::step(tat, now, cost, params, Admit::Within(0)).is_ok()),
            Err(e) => self.limiter.fail(e, true),
        }
    }

    /// How many permits of `key`'s limit one request could take now.
    ///
    /// # Errors
    /// Redis failures, whatever the policy.
    ///
    /// # Cancel safety
    /// Cancel safe: it stores nothing.
    pub async fn available(&self, key: &str) -> Result<u64, Error> {
        let (tat, now) = self.peek(key).await?;
        Ok(schedule::available(tat, now, self.limiter.params))
    }

    /// How long until a permit of `key`'s limit is free (zero: now).
    ///
    /// # Errors
    /// Redis failures, whatever the policy.
    ///
    /// # Cancel safety
    /// Cancel safe: it stores nothing.
    pub async fn next_free(&self, key: &str) -> Result<Duration, Error> {
        let (tat, now) = self.peek(key).await?;
        Ok(Duration::from_nanos(schedule::next_free(
            tat,
            now,
            self.limiter.params,
        )))
    }

    /// One `PING` round trip on the limiter's connection.
    ///
    /// # Errors
    /// Redis failures, whatever the policy.
    pub async fn ping(&self) -> Result<(), Error> {
        self.run::<String>(Call::Cmd(&redis::cmd("PING")))
            .await
            .map(drop)
    }

    /// The rate in force.
    pub fn rate(&self) -> Rate {
        self.limiter.rate()
    }

    /// The slack, in permits.
    pub fn slack(&self) -> u64 {
        self.limiter.slack()
    }

    /// What a call does when Redis fails it.
    pub fn fail_policy(&self) -> FailPolicy {
        self.limiter.fail_policy()
    }

    async fn take_admitted(&self, key: &str, cost: u64, admit: Admit) -> Result<Duration, Error> {
        let decision = self.decide(key, cost, admit).await;
        let granted = self.limiter.settle(decision, cost, admit)?;
        if let Some((slot, now)) = granted {
            if slot > now {
                tokio::time::sleep(Duration::from_nanos(slot - now)).await;
            }
        }
        Ok(went_at(granted))
    }

    async fn decide(&self, key: &str, cost: u64, admit: Admit) -> Result<super::Decision, Error> {
        let call = self.limiter.step_call(key, cost, admit, None)?;
        decision(&self.run::<Vec<String>>(Call::Script(&call)).await?)
    }

    async fn peek(&self, key: &str) -> Result<(u64, u64), Error> {
        let call = self.limiter.peek_call(key, None);
        peeked(&self.run::<Vec<String>>(Call::Script(&call)).await?)
    }

    /// Sends a call and waits for its reply within the budget.
    async fn run<T: FromRedisValue>(&self, call: Call<'_, '_>) -> Result<T, Error> {
        match tokio::time::timeout(self.budget, self.conn.query(call)).await {
            Err(_) => Err(Error::Timeout),
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(classify(e)),
        }
    }
}

impl std::fmt::Debug for AsyncRedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncRedisLimiter")
            .field("rate", &self.limiter.rate)
            .field("slack", &self.limiter.slack)
            .field("prefix", &self.limiter.shared.prefix)
            .field("fail_policy", &self.limiter.shared.policy)
            .finish_non_exhaustive()
    }
}
