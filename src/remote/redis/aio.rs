//! [`AsyncRedisLimiter`]: the Redis limiter's calls as futures, for Tokio
//! (features `redis` and `tokio`).
//!
//! The same script, decisions, keys, fail policy and errors as
//! [`RedisLimiter`], through the same seam (`src/remote/limiter.rs`); only
//! the connection and the waiting differ. Calls go over one multiplexed
//! connection (redis-rs's `ConnectionManager`, or its async cluster
//! connection, made on first use; both reconnect by themselves), so any
//! number of tasks share it without queuing behind each other's round trips.
//! Takes wait in the crate's one async wait (`src/wait/tokio.rs`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, FromRedisValue, RedisResult};
use tokio::sync::OnceCell;

use super::conn::{classify, Target, BACKOFF_MAX, BACKOFF_MIN};
use super::script::{self, Wire};
use super::RedisLimiter;
use crate::error::BuildError;
use crate::rate::Rate;
use crate::remote::limiter::{Core, Shared};
use crate::remote::{AsyncRemote, Decision, Error, FailPolicy, Request, Undo};
use crate::schedule;
use crate::slack::Slack;
use crate::stats::{Counted, Stats};
use crate::wait::Wait;

/// The async face of a [`RedisLimiter`]: its calls as futures, under the
/// same names; made by `AsyncRedisLimiter::from(limiter)`.
///
/// ```no_run
/// use paceline::redis::{AsyncRedisLimiter, RedisLimiter};
/// use paceline::Rate;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), paceline::redis::Error> {
/// let limiter = RedisLimiter::builder("redis://127.0.0.1/", Rate::per_second(100)).build()?;
/// let limiter = AsyncRedisLimiter::from(limiter);
/// limiter.take("api").await?; // sleeps (as a task) until the slot
/// # Ok(())
/// # }
/// ```
///
/// Cheap to clone (clones share the connection); `Send + Sync`.
///
/// # Waiting
///
/// As [`AsyncLimiter`](crate::tokio::AsyncLimiter)'s: on Tokio's timer
/// with [`Wait::Sleep`], or sleeping and then yielding until the slot with
/// [`Wait::Precise`] (the builder's [`wait`](super::RedisBuilder::wait)).
/// An unbounded take books its slot in Redis only once it is within 10 ms;
/// until then it sleeps, and asks again.
///
/// # Cancel safety
/// A [`take`](Self::take) cancelled while it waits for its slot to come
/// within 10 ms (under `tokio::time::timeout`, in `select!`) has booked
/// nothing: the next caller gets the permit. One cancelled after booking
/// (within 10 ms of its slot, or a [`take_timeout`](Self::take_timeout),
/// which books at once) gives its slot back while the slot is still ahead:
/// a task of its own asks Redis to put the key back to the state before the
/// booking, which the script does only if the key still holds that booking
/// (no one has booked since; otherwise the slot stays spent). The give-back
/// is one more round trip, best effort: if it fails, or the runtime is gone,
/// the slot stays spent. A future dropped while its request is on the wire
/// may or may not have booked (Redis may run the script anyway).
///
/// A give-back is never sent twice: run again after another caller booked
/// from the state it restored, it would erase that booking. So on a Redis
/// Cluster, whose client retries a call once after a connection error, the
/// give-backs go through a second client that never retries (a give-back
/// that meets a redirection fails, and its slot stays spent); a single
/// server's connection never resends a call.
#[derive(Clone)]
pub struct AsyncRedisLimiter {
    core: Core<Async>,
}

/// The async backend: one shared connection and the wire format.
struct Async {
    conn: Conn,
    wire: Wire,
    /// The longest a call waits on Redis: connect plus response timeouts.
    budget: Duration,
}

/// The shared connection, made by the first call that needs it (inside the
/// runtime that call runs on; a cluster's asks a node for the slot map: a
/// round trip a conversion should not wait for).
// One per limiter, behind its `Arc`: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Conn {
    Single {
        client: Client,
        config: ConnectionManagerConfig,
        conn: OnceCell<ConnectionManager>,
    },
    Cluster {
        client: Box<ClusterClient>,
        conn: OnceCell<ClusterConnection>,
        /// For give-backs: a client that never retries, and its connection.
        once: Box<ClusterClient>,
        once_conn: OnceCell<ClusterConnection>,
    },
}

impl Conn {
    /// A lazy connection to where `target` leads.
    fn new(target: &Target, connect: Duration, response: Duration) -> Conn {
        match target {
            Target::Single(client) => Conn::Single {
                client: client.clone(),
                config: ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect))
                    .set_response_timeout(Some(response))
                    .set_min_delay(BACKOFF_MIN)
                    .set_max_delay(BACKOFF_MAX)
                    // Reconnects run in the background; calls meanwhile fail.
                    .set_number_of_retries(1),
                conn: OnceCell::new(),
            },
            // The blocking pool's client, with the same timeouts.
            Target::Cluster { client, once } => Conn::Cluster {
                client: client.clone(),
                conn: OnceCell::new(),
                once: once.clone(),
                once_conn: OnceCell::new(),
            },
        }
    }

    /// Sends `call` (an `EVALSHA`, or a `PING`); a script call that meets
    /// `NOSCRIPT` loads the script and is sent again.
    ///
    /// With `once`, a call a cluster client would retry after a connection
    /// error fails instead: a give-back must not run twice. (A single
    /// server's connection never resends a call.)
    async fn query<T: FromRedisValue>(&self, call: Call<'_>, once: bool) -> RedisResult<T> {
        match self {
            Conn::Single {
                client,
                config,
                conn,
            } => {
                let conn = conn
                    .get_or_try_init(|| async {
                        client.get_connection_manager_lazy(config.clone())
                    })
                    .await?;
                call.send(&mut conn.clone()).await
            }
            Conn::Cluster {
                client,
                conn,
                once: once_client,
                once_conn,
            } => {
                let (client, conn) = if once {
                    (once_client, once_conn)
                } else {
                    (client, conn)
                };
                let conn = conn
                    .get_or_try_init(|| client.get_async_connection())
                    .await?;
                call.send(&mut conn.clone()).await
            }
        }
    }
}

/// What [`Conn::query`] sends.
#[derive(Clone, Copy)]
enum Call<'a> {
    /// A script call and the wire that made it (which loads the script
    /// after a `NOSCRIPT`).
    Script(&'a Wire, &'a Cmd),
    Cmd(&'a Cmd),
}

impl Call<'_> {
    async fn send<T: FromRedisValue>(
        self,
        conn: &mut (impl redis::aio::ConnectionLike + Send),
    ) -> RedisResult<T> {
        match self {
            Call::Script(wire, cmd) => wire.invoke_async(cmd, conn).await,
            Call::Cmd(cmd) => cmd.query_async(conn).await,
        }
    }
}

impl Async {
    /// Sends a call and waits for its reply within the budget.
    async fn run<T: FromRedisValue>(&self, call: Call<'_>) -> Result<T, Error> {
        self.run_with(call, false).await
    }

    /// [`run`](Self::run), never retried (see [`Conn::query`]).
    async fn run_once<T: FromRedisValue>(&self, call: Call<'_>) -> Result<T, Error> {
        self.run_with(call, true).await
    }

    async fn run_with<T: FromRedisValue>(&self, call: Call<'_>, once: bool) -> Result<T, Error> {
        match tokio::time::timeout(self.budget, self.conn.query(call, once)).await {
            Err(_) => Err(Error::Timeout),
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(classify(e)),
        }
    }
}

impl AsyncRemote for Async {
    async fn step(&self, key: &str, request: &Request) -> Result<Decision, Error> {
        let call = self.wire.step(key, request, None);
        let reply: redis::Value = self.run(Call::Script(&self.wire, &call)).await?;
        script::decision(&reply, request, false).map(|(decision, _ttl)| decision)
    }

    async fn peek(&self, key: &str) -> Result<(u64, u64), Error> {
        let call = self.wire.peek(key, None);
        let reply: redis::Value = self.run(Call::Script(&self.wire, &call)).await?;
        script::peeked(&reply)
    }

    async fn give_back(&self, key: &str, tau: u64, undo: Undo) -> Result<bool, Error> {
        let call = self.wire.give_back(key, tau, undo, None);
        // Never retried: run twice, a give-back could erase a booking made
        // in between from the state the first run restored.
        let reply: redis::Value = self.run_once(Call::Script(&self.wire, &call)).await?;
        script::given_back(&reply)
    }
}

impl From<RedisLimiter> for AsyncRedisLimiter {
    /// The async face of `limiter`: the same Redis, limit, prefix, fail
    /// policy, wait strategy and timeouts, over one multiplexed connection
    /// of its own (made by the first call, in the runtime that call runs
    /// on). Limiters made from it by [`with_limit`](AsyncRedisLimiter::with_limit)
    /// share that connection.
    fn from(limiter: RedisLimiter) -> AsyncRedisLimiter {
        let blocking = &limiter.core.shared.backend;
        let (connect, response) = blocking.pool.timeouts();
        let backend = Async {
            conn: Conn::new(blocking.pool.target(), connect, response),
            wire: Wire::new(blocking.wire.prefix().to_owned()),
            budget: connect.saturating_add(response),
        };
        let core = &limiter.core;
        AsyncRedisLimiter {
            core: Core {
                shared: Arc::new(Shared {
                    backend,
                    policy: core.shared.policy,
                    wait: core.shared.wait,
                    clock: core.shared.clock.clone(),
                    meter: core.shared.meter.clone(),
                }),
                rate: core.rate,
                slack: core.slack,
                params: core.params,
            },
        }
    }
}

impl AsyncRedisLimiter {
    /// The same limiter (same connection, prefix and policy) at another rate
    /// and slack; see [`RedisLimiter::with_limit`].
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`].
    pub fn with_limit(
        &self,
        rate: Rate,
        slack: impl Into<Slack>,
    ) -> Result<AsyncRedisLimiter, BuildError> {
        Ok(AsyncRedisLimiter {
            core: self.core.with_limit(rate, slack.into())?,
        })
    }

    /// Waits until the next permit of `key`'s limit comes up; see
    /// [`RedisLimiter::take`].
    ///
    /// # Errors
    /// As [`RedisLimiter::take`].
    ///
    /// # Cancel safety
    /// Cancelled while its slot is more than 10 ms away, it has booked
    /// nothing; after booking, it gives its slot back if no one has booked
    /// since (see [the type's](AsyncRedisLimiter#cancel-safety)).
    pub async fn take(&self, key: &str) -> Result<Duration, Error> {
        self.take_n(key, 1).await
    }

    /// Waits until `cost` permits of `key`'s limit are paid for; see
    /// [`RedisLimiter::take_n`].
    ///
    /// # Errors
    /// As [`RedisLimiter::take_n`].
    ///
    /// # Cancel safety
    /// As [`take`](Self::take).
    pub async fn take_n(&self, key: &str, cost: u64) -> Result<Duration, Error> {
        self.core.take_async(key, cost).await
    }

    /// Takes a permit of `key`'s limit if one is free now; see
    /// [`RedisLimiter::try_take`].
    ///
    /// # Errors
    /// As [`RedisLimiter::try_take`].
    ///
    /// # Cancel safety
    /// Dropped while its request is on the wire, it may or may not have
    /// taken its permit.
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
    /// As [`try_take`](Self::try_take).
    pub async fn try_take_n(&self, key: &str, cost: u64) -> Result<(), Error> {
        self.core.try_take_async(key, cost).await
    }

    /// Takes a permit of `key`'s limit, waiting for it only if its slot is at
    /// most `max_wait` away; see [`RedisLimiter::take_timeout`].
    ///
    /// # Errors
    /// As [`RedisLimiter::take_timeout`].
    ///
    /// # Cancel safety
    /// It books its slot at once (if within `max_wait`): dropped after that,
    /// it gives the slot back while the slot is still ahead and no one has
    /// booked since (see [the type's](AsyncRedisLimiter#cancel-safety)). A
    /// refused call stored nothing.
    pub async fn take_timeout(&self, key: &str, max_wait: Duration) -> Result<Duration, Error> {
        self.take_n_timeout(key, 1, max_wait).await
    }

    /// [`take_timeout`](Self::take_timeout) for `cost` permits.
    ///
    /// # Errors
    /// As [`RedisLimiter::take_n_timeout`].
    ///
    /// # Cancel safety
    /// As [`take_timeout`](Self::take_timeout).
    pub async fn take_n_timeout(
        &self,
        key: &str,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, Error> {
        self.core.take_timeout_async(key, cost, max_wait).await
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
        self.core.can_take_async(key, cost).await
    }

    /// How many permits of `key`'s limit one request could take now.
    ///
    /// # Errors
    /// Redis failures, whatever the policy.
    ///
    /// # Cancel safety
    /// Cancel safe: it stores nothing.
    pub async fn available(&self, key: &str) -> Result<u64, Error> {
        self.core.peek_async(key, schedule::available).await
    }

    /// How long until a permit of `key`'s limit is free (zero: now).
    ///
    /// # Errors
    /// Redis failures, whatever the policy.
    ///
    /// # Cancel safety
    /// Cancel safe: it stores nothing.
    pub async fn next_free(&self, key: &str) -> Result<Duration, Error> {
        self.core
            .peek_async(key, |tat, now, p| {
                Duration::from_nanos(schedule::next_free(tat, now, p))
            })
            .await
    }

    /// Forgets `key`'s state, as [`RedisLimiter::reset`]: one `DEL` of the prefixed key, as
    /// redis_rate's `Reset`. The key comes back at rest, as a key never
    /// used, with its whole burst (`slack + 1` at once): a deliberate
    /// refill, for every process sharing the key, and the bound of `slack +
    /// 1 + w / T` in a window `w` holds from the reset on. `true` when the
    /// key held a state (an absent one had expired at rest already).
    ///
    /// Takes racing it land wholly before or after it (Redis runs one
    /// command at a time). An async take booked before the reset and then
    /// dropped gives nothing back: the give-back restores only a key that
    /// still holds that take's state, and the reset removed it. (One
    /// exception, unlike the in-process limiters, which count resets: if
    /// takes after the reset bring the key back to that very state, to the
    /// nanosecond, before the booked take is dropped, its give-back
    /// succeeds, and one slot can go out twice.)
    ///
    /// # Errors
    /// Redis failures, whatever the policy (see [`RedisLimiter::reset`]).
    ///
    /// # Cancel safety
    /// Dropped before the reply, the `DEL` may or may not have run; running
    /// it again is safe.
    pub async fn reset(&self, key: &str) -> Result<bool, Error> {
        let del = self.core.backend().wire.del(key);
        self.core
            .backend()
            .run::<u64>(Call::Cmd(&del))
            .await
            .map(|removed| removed > 0)
    }

    /// One `PING` round trip on the limiter's connection.
    ///
    /// # Errors
    /// Redis failures, whatever the policy.
    pub async fn ping(&self) -> Result<(), Error> {
        self.core
            .backend()
            .run::<String>(Call::Cmd(&redis::cmd("PING")))
            .await
            .map(drop)
    }

    /// The rate in force.
    pub fn rate(&self) -> Rate {
        self.core.rate
    }

    /// The slack, in permits.
    pub fn slack(&self) -> u64 {
        self.core.slack
    }

    /// What a call does when Redis fails it.
    pub fn fail_policy(&self) -> FailPolicy {
        self.core.fail_policy()
    }

    /// How a take waits out its slot.
    pub fn wait_strategy(&self) -> Wait {
        self.core.wait_strategy()
    }

    /// The prefix put before every key.
    pub fn prefix(&self) -> &str {
        self.core.backend().wire.prefix()
    }

    /// What the limiter decided, all keys and `with_limit` siblings
    /// together (and the blocking limiter it was made from), or `None`
    /// unless its builder asked ([`RedisBuilder::stats`](super::RedisBuilder::stats)).
    pub fn stats(&self) -> Option<Stats> {
        self.core.shared.meter.read()
    }
}

impl Counted for AsyncRedisLimiter {
    fn stats(&self) -> Option<Stats> {
        self.core.shared.meter.read()
    }
}

impl fmt::Debug for AsyncRedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncRedisLimiter")
            .field("rate", &self.rate())
            .field("slack", &self.slack())
            .field("prefix", &self.prefix())
            .field("fail_policy", &self.fail_policy())
            .finish_non_exhaustive()
    }
}
