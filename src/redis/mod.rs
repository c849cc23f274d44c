//! [`RedisLimiter`]: one limit shared by every process that reaches the same
//! Redis (feature `redis`).
//!
//! When a service runs as twenty processes, twenty in-process limiters let
//! twenty times the rate through. A `RedisLimiter` keeps the state word of
//! each limit in a Redis key instead, and runs paceline's step on it inside
//! Redis, atomically, as a Lua script on the server's clock: every process
//! draws from the same schedule, and client clocks never matter.
//!
//! ```no_run
//! use paceline::redis::{FailPolicy, RedisLimiter};
//! use paceline::Rate;
//!
//! let limiter = RedisLimiter::builder("redis://127.0.0.1/", Rate::per_second(100))
//!     .slack(10)
//!     .on_error(FailPolicy::Closed) // Redis down: return the error (the default)
//!     .build()?;
//! limiter.take("api")?; // blocks until this process's share of 100/s comes up
//! match limiter.try_take("user:42") {
//!     Ok(()) => { /* go */ }
//!     Err(e) => eprintln!("{e}"), // "rate limited: retry after 9.98ms", or Redis trouble
//! }
//! # Ok::<(), paceline::redis::Error>(())
//! ```
//!
//! # The model, in Redis
//!
//! Each limiter key (the prefix, `"paceline:"` by default, then the key a
//! call names) holds `tat` of [`schedule`] as a decimal string, in internal
//! nanoseconds: the server's Unix time (Redis `TIME`) plus [`ORIGIN`]. The
//! script is [`schedule::step`], decision for decision (a property test runs
//! both on random sequences), and is sent once and then called by its SHA
//! (`EVALSHA`; after a `NOSCRIPT`, as when the server restarted, it is loaded
//! again transparently).
//!
//! Every write sets the key's TTL to the time until the bucket is back at
//! rest (`tat - now + tau`, rounded up, plus 2 ms for Redis's millisecond
//! expiry clock). An absent key decides as a bucket at rest, with the whole
//! slack banked, so a key that expired and one that never expired decide
//! alike, and idle keys cost no memory. Unlike the in-process limiters, a
//! key's first request therefore finds full credit (their
//! `full_credit(true)`): in Redis "never used" and "idle for long" cannot be
//! told apart.
//!
//! Lua numbers are doubles, exact only to 2^53, while internal times reach
//! 2^62 and saturate at 2^64 - 1. The script therefore keeps every time as a
//! pair (seconds, nanoseconds) of exact doubles, adds and subtracts them with
//! carries, and exchanges decimal strings with the client; the products
//! `cost * T` and `slack * T` are computed (and checked) in Rust. See
//! `step.lua`.
//!
//! # Waiting
//!
//! A blocking [`take`](RedisLimiter::take) reserves its slot in Redis, which
//! answers with the wait (slot minus the server's now); the caller then waits
//! that long on its own clock. The round trip's return leg is added to the
//! wait, so a permit is never early by the server's clock. As in-process,
//! slack absorbs late wake-ups.
//!
//! # Failures
//!
//! A Redis that cannot be reached, a reply that does not come within the
//! response timeout, or a script that fails are each an [`Error`]; with
//! [`FailPolicy::Open`] they admit the request instead. No call panics, and
//! none blocks on Redis longer than the connect plus response timeouts
//! (a blocking take then also waits for its slot). Connections reconnect by
//! themselves, with a backoff of at most 500 ms while the server is down.
//! A call that failed on the way back (a timeout, a dropped connection) may
//! still have taken its permits in Redis: failures err on the side of the
//! limit.
//!
//! # Async
//!
//! With the `tokio` feature too, `RedisBuilder::build_async` makes an
//! `AsyncRedisLimiter`: the same calls as futures, over one multiplexed
//! connection that reconnects by itself, on a single server or a cluster.
//!
//! # Cluster
//!
//! Each call touches exactly one key, so it works on Redis Cluster as is
//! ([`cluster_builder`](RedisLimiter::cluster_builder)); the script is loaded
//! on every primary. Each key then lives on, and is paced by the clock of,
//! one primary. Replication is asynchronous: after a failover the replica's
//! copy may be a few writes behind, and its clock is another host's.

#[cfg(feature = "tokio")]
mod aio;
mod conn;
#[cfg(test)]
mod tests;

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::redis::cluster::ClusterClientBuilder;
use ::redis::{Client, IntoConnectionInfo, RedisError, Script, ScriptInvocation};

use crate::clock::{Clock, DefaultClock};
use crate::error::{BuildError, TakeError};
use crate::pacer::{self, DEFAULT_SLACK};
use crate::rate::Rate;
use crate::schedule::{self, Admit, Params, MAX_SPAN, ORIGIN};
use crate::wait::{self as wait_mod, Wait};

#[cfg(feature = "tokio")]
pub use aio::AsyncRedisLimiter;
use conn::{Pool, Target};

/// The step, as Redis runs it.
const STEP_LUA: &str = include_str!("step.lua");

/// The key prefix unless the builder sets another: keeps paceline's keys
/// apart from the application's.
pub const DEFAULT_PREFIX: &str = "paceline:";

/// How long to wait for a connection, unless the builder sets another: a
/// local Redis answers in well under a millisecond; a second covers a busy
/// network without leaving callers stuck for long.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long to wait for a reply, unless the builder sets another.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

/// What a call does when Redis fails it (down, too slow, or the script
/// failed). Refusals by the limit itself are not failures and never change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FailPolicy {
    /// Return the [`Error`]: the unit of work must not go. Safe for a limit
    /// that protects something (a fragile backend, a paid API's quota); an
    /// outage of Redis stops the work too. The default.
    #[default]
    Closed,
    /// Admit the request at once, as if the limit had room: an outage of
    /// Redis lifts the limit instead of stopping the work (a loop of
    /// blocking takes runs unpaced until Redis is back). For limits that are
    /// a courtesy (smoothing, fairness) rather than a protection.
    Open,
}

/// Why a call to a [`RedisLimiter`] did not admit its request.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The limit refused the request: the same refusals, with the same
    /// meaning, as the in-process limiters' (nothing was stored).
    Refused(TakeError),
    /// Redis could not be reached, or the connection broke.
    Unavailable(RedisError),
    /// Redis did not answer within the response (or connect) timeout.
    Timeout,
    /// Redis answered with an error: the key holds something that is not a
    /// paceline state, the script failed, or the reply was not understood.
    Script(RedisError),
    /// The builder's configuration cannot work (a URL that does not parse,
    /// a slack too large for the rate).
    Config(String),
}

impl Error {
    /// Whether this is the limit's own refusal, as opposed to a failure of
    /// Redis or of the configuration.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Error::Refused(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Refused(e) => e.fmt(f),
            Error::Unavailable(e) => write!(f, "redis unavailable: {e}"),
            Error::Timeout => f.write_str("redis did not answer within the timeout"),
            Error::Script(e) => write!(f, "redis rejected paceline's step: {e}"),
            Error::Config(e) => write!(f, "invalid redis limiter configuration: {e}"),
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Error::Refused(e) => Some(e),
            Error::Unavailable(e) | Error::Script(e) => Some(e),
            Error::Timeout | Error::Config(_) => None,
        }
    }
}

impl From<TakeError> for Error {
    fn from(e: TakeError) -> Error {
        Error::Refused(e)
    }
}

/// What the script decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    /// Admitted: may proceed at `slot` (server time, internal ns), decided at
    /// `now`; the key now expires in `ttl_ms`.
    Granted {
        slot: u64,
        now: u64,
        #[cfg_attr(not(test), allow(dead_code))]
        ttl_ms: u64,
    },
    /// Refused: admitted only after this many ns.
    Wait(u64),
    /// Refused: the cost never fits within the allowed wait.
    ExceedsBurst,
    /// Refused: the slot would fall past the end of internal time.
    Saturated,
}

/// Everything limiters made by [`RedisLimiter::with_limit`] share.
struct Shared {
    pool: Pool,
    script: Script,
    prefix: String,
    policy: FailPolicy,
    wait: Wait,
    clock: DefaultClock,
}

/// A limiter whose state lives in Redis, so that every process using the same
/// Redis and key shares one limit.
///
/// Calls name a key (`"api"`, `"user:42"`): each key is its own limit at this
/// limiter's rate and slack, stored under the prefix. The calls and their
/// meaning are [`AtomicLimiter`](crate::AtomicLimiter)'s, plus a Redis
/// [`Error`] on failure. See [the module docs](self) for the model, waiting
/// and failures.
///
/// It is cheap to clone (the clones share connections) and `Send + Sync`.
#[derive(Clone)]
pub struct RedisLimiter {
    shared: Arc<Shared>,
    rate: Rate,
    slack: u64,
    params: Params,
}

/// Configures a [`RedisLimiter`]; made by [`RedisLimiter::builder`] or
/// [`RedisLimiter::cluster_builder`].
#[must_use = "a builder does nothing until .build()"]
pub struct RedisBuilder {
    endpoint: Result<Endpoint, RedisError>,
    rate: Rate,
    slack: u64,
    prefix: String,
    policy: FailPolicy,
    wait: Wait,
    connect_timeout: Duration,
    response_timeout: Duration,
}

/// Where a builder's limiter connects to.
enum Endpoint {
    /// One server (or a proxy).
    Single(Client),
    /// Some or all nodes of a Redis Cluster.
    Cluster(Vec<::redis::ConnectionInfo>),
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

    /// The same limiter (same Redis, connections, prefix and policy) at
    /// another rate and slack: for keys that need their own limit.
    ///
    /// ```no_run
    /// # use paceline::{redis::RedisLimiter, Rate};
    /// let users = RedisLimiter::builder("redis://127.0.0.1/", Rate::per_second(10)).build()?;
    /// let partners = users.with_limit(Rate::per_second(500), 50)?;
    /// users.take("user:42")?;
    /// partners.take("user:7")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Every process must use the same limit for a key; if two disagree, each
    /// request is paced by the limit of the process that made it.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when `slack` intervals of `rate` span
    /// over 146 years.
    pub fn with_limit(&self, rate: Rate, slack: u64) -> Result<RedisLimiter, BuildError> {
        Ok(RedisLimiter {
            shared: Arc::clone(&self.shared),
            rate,
            slack,
            params: pacer::params(rate, slack)?,
        })
    }

    /// Blocks until the next permit of `key`'s limit comes up, and returns
    /// its slot as the server's Unix time.
    ///
    /// # Errors
    /// A failure of Redis ([`Error::Unavailable`], [`Error::Timeout`],
    /// [`Error::Script`]) under [`FailPolicy::Closed`]; under
    /// [`FailPolicy::Open`] it returns at once with the local Unix time.
    pub fn take(&self, key: &str) -> Result<Duration, Error> {
        self.take_n(key, 1)
    }

    /// Blocks until `cost` permits of `key`'s limit are paid for, as one
    /// request ("pay first"), and returns its slot as the server's Unix time.
    ///
    /// # Errors
    /// [`TakeError::CostTooLarge`] (as [`Error::Refused`]) when `cost`
    /// intervals span over 146 years; Redis failures as [`take`](Self::take).
    pub fn take_n(&self, key: &str, cost: u64) -> Result<Duration, Error> {
        self.take_admitted(key, cost, Admit::Always)
    }

    /// Takes a permit of `key`'s limit if one is free now; never waits for
    /// one. A refusal stores nothing.
    ///
    /// # Errors
    /// [`TakeError::RetryAfter`] (as [`Error::Refused`]) with how long until
    /// it would be admitted; Redis failures as [`take`](Self::take) (under
    /// [`FailPolicy::Open`] they admit).
    pub fn try_take(&self, key: &str) -> Result<(), Error> {
        self.try_take_n(key, 1)
    }

    /// Takes `cost` permits of `key`'s limit if they are free now.
    ///
    /// # Errors
    /// As [`try_take`](Self::try_take), and [`TakeError::ExceedsBurst`] when
    /// `cost > slack + 1`, [`TakeError::CostTooLarge`].
    pub fn try_take_n(&self, key: &str, cost: u64) -> Result<(), Error> {
        let decision = self.decide(key, cost, Admit::Within(0), None);
        self.settle(decision, cost, Admit::Within(0)).map(drop)
    }

    /// Takes a permit of `key`'s limit and waits for it only if its slot is
    /// at most `max_wait` away; otherwise fails at once, storing nothing.
    ///
    /// # Errors
    /// [`TakeError::QueueFull`] (as [`Error::Refused`]); Redis failures as
    /// [`take`](Self::take).
    pub fn take_timeout(&self, key: &str, max_wait: Duration) -> Result<Duration, Error> {
        self.take_n_timeout(key, 1, max_wait)
    }

    /// [`take_timeout`](Self::take_timeout) for `cost` permits.
    ///
    /// # Errors
    /// As [`take_timeout`](Self::take_timeout), and
    /// [`TakeError::ExceedsBurst`], [`TakeError::CostTooLarge`].
    pub fn take_n_timeout(
        &self,
        key: &str,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, Error> {
        self.take_admitted(key, cost, Admit::Within(wait_mod::nanos(max_wait)))
    }

    /// Whether [`try_take_n(key, cost)`](Self::try_take_n) would succeed now.
    /// Consumes nothing.
    ///
    /// # Errors
    /// Redis failures under [`FailPolicy::Closed`]; under
    /// [`FailPolicy::Open`] they answer `true`.
    pub fn can_take(&self, key: &str, cost: u64) -> Result<bool, Error> {
        self.peek(key, |tat, now, p| {
            schedule::step(tat, now, cost, p, Admit::Within(0)).is_ok()
        })
        .or_else(|e| self.fail(e, true))
    }

    /// How many permits of `key`'s limit one request could take now without
    /// waiting, from 0 to `slack + 1`.
    ///
    /// # Errors
    /// Redis failures (whatever the policy: there is nothing to admit).
    pub fn available(&self, key: &str) -> Result<u64, Error> {
        self.peek(key, schedule::available)
    }

    /// How long until a permit of `key`'s limit is free (zero: one is free
    /// now).
    ///
    /// # Errors
    /// Redis failures (whatever the policy).
    pub fn next_free(&self, key: &str) -> Result<Duration, Error> {
        self.peek(key, |tat, now, p| {
            Duration::from_nanos(schedule::next_free(tat, now, p))
        })
    }

    /// One `PING` round trip on one of the limiter's connections: a health
    /// check (at start-up, say), and the floor a call's round trip is
    /// measured against. Connects if no connection is open.
    ///
    /// # Errors
    /// Redis failures, whatever the policy.
    pub fn ping(&self) -> Result<(), Error> {
        self.shared
            .pool
            .run(|c| ::redis::cmd("PING").query::<String>(c))
            .map(drop)
    }

    /// The rate in force.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The slack, in permits: the burst is `slack + 1`.
    pub fn slack(&self) -> u64 {
        self.slack
    }

    /// What a call does when Redis fails it.
    pub fn fail_policy(&self) -> FailPolicy {
        self.shared.policy
    }

    /// The prefix put before every key.
    pub fn prefix(&self) -> &str {
        &self.shared.prefix
    }

    /// Reserves and waits.
    fn take_admitted(&self, key: &str, cost: u64, admit: Admit) -> Result<Duration, Error> {
        let decision = self.decide(key, cost, admit, None);
        let granted = self.settle(decision, cost, admit)?;
        if let Some((slot, now)) = granted {
            if slot > now {
                // The server's wait, counted from the reply's arrival.
                let clock = &self.shared.clock;
                let deadline = clock.now().saturating_add(slot - now);
                self.shared.wait.wait_until(clock, deadline);
            }
        }
        Ok(went_at(granted))
    }

    /// Turns a decision into the caller's answer: `Some((slot, now))` when
    /// granted, `None` when admitted by [`FailPolicy::Open`].
    fn settle(
        &self,
        decision: Result<Decision, Error>,
        cost: u64,
        admit: Admit,
    ) -> Result<Option<(u64, u64)>, Error> {
        match decision {
            Ok(Decision::Granted { slot, now, .. }) => Ok(Some((slot, now))),
            Ok(Decision::Wait(wait)) => Err(Error::Refused(match admit {
                Admit::Within(0) | Admit::Always => {
                    TakeError::RetryAfter(Duration::from_nanos(wait))
                }
                Admit::Within(max) => TakeError::QueueFull {
                    wait: Duration::from_nanos(wait),
                    max_wait: Duration::from_nanos(max),
                },
            })),
            Ok(Decision::ExceedsBurst) => Err(Error::Refused(TakeError::ExceedsBurst {
                cost,
                burst: self.slack.saturating_add(1),
            })),
            Ok(Decision::Saturated) => Err(Error::Refused(TakeError::Saturated)),
            Err(e) => self.fail(e, None),
        }
    }

    /// Applies the fail policy to `e`: refusals and configuration errors
    /// pass through; Redis failures pass under `Closed`, admit under `Open`.
    fn fail<T>(&self, e: Error, admitted: T) -> Result<T, Error> {
        match (&e, self.shared.policy) {
            (Error::Refused(_) | Error::Config(_), _) | (_, FailPolicy::Closed) => Err(e),
            (_, FailPolicy::Open) => Ok(admitted),
        }
    }

    /// The Redis key of `key`.
    fn full_key(&self, key: &str) -> String {
        let mut full = String::with_capacity(self.shared.prefix.len() + key.len());
        full.push_str(&self.shared.prefix);
        full.push_str(key);
        full
    }

    /// Runs the step in Redis: at the server's `TIME`, or at `now` (internal
    /// ns; tests only, and then the key is stored without expiry).
    fn decide(
        &self,
        key: &str,
        cost: u64,
        admit: Admit,
        now: Option<u64>,
    ) -> Result<Decision, Error> {
        let call = self.step_call(key, cost, admit, now)?;
        let reply: Vec<String> = self.shared.pool.run(|c| call.invoke(c))?;
        decision(&reply)
    }

    /// The script call for a step, or the refusal that needs no round trip.
    fn step_call(
        &self,
        key: &str,
        cost: u64,
        admit: Admit,
        now: Option<u64>,
    ) -> Result<ScriptInvocation<'_>, Error> {
        let interval = self.params.interval();
        let span = match cost.checked_mul(interval) {
            Some(span) if span <= MAX_SPAN => span,
            _ => return Err(Error::Refused(TakeError::CostTooLarge { cost })),
        };
        let lead = span.saturating_sub(interval);
        let tau = self.params.tau();
        let (max, exceeds) = match admit {
            Admit::Always => (String::new(), false),
            // Even at rest the slot would be `lead - tau` away.
            Admit::Within(max) => (max.to_string(), lead.saturating_sub(tau) > max),
        };
        let mut call = self.shared.script.key(self.full_key(key));
        call.arg("take")
            .arg(lead)
            .arg(span)
            .arg(tau)
            .arg(max)
            .arg(if exceeds { "1" } else { "0" })
            .arg(now.map(|n| n.to_string()).unwrap_or_default());
        Ok(call)
    }

    /// Reads `key`'s state and the server's time atomically, and answers
    /// `f(tat, now, params)` without storing anything.
    fn peek<T>(&self, key: &str, f: impl FnOnce(u64, u64, Params) -> T) -> Result<T, Error> {
        let (tat, now) = self.peek_at(key, None)?;
        Ok(f(tat, now, self.params))
    }

    fn peek_at(&self, key: &str, now: Option<u64>) -> Result<(u64, u64), Error> {
        let call = self.peek_call(key, now);
        let reply: Vec<String> = self.shared.pool.run(|c| call.invoke(c))?;
        peeked(&reply)
    }

    /// The script call that reads a key's state and the server's time.
    fn peek_call(&self, key: &str, now: Option<u64>) -> ScriptInvocation<'_> {
        let mut call = self.shared.script.key(self.full_key(key));
        call.arg("peek")
            .arg(0)
            .arg(0)
            .arg(0)
            .arg("")
            .arg("0")
            .arg(now.map(|n| n.to_string()).unwrap_or_default());
        call
    }
}

/// When a permit went: its slot (or, if that was past, the moment it was
/// granted) on the server's Unix clock; the local Unix time for a permit the
/// fail-open policy admitted.
fn went_at(granted: Option<(u64, u64)>) -> Duration {
    match granted {
        Some((slot, now)) => Duration::from_nanos(slot.max(now).saturating_sub(ORIGIN)),
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default(),
    }
}

/// The script's reply to a step.
fn decision(reply: &[String]) -> Result<Decision, Error> {
    let num = |i: usize| -> Result<u64, Error> {
        reply
            .get(i)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad_reply(reply))
    };
    match reply.first().map(String::as_str) {
        Some("1") => Ok(Decision::Granted {
            slot: num(1)?,
            now: num(2)?,
            ttl_ms: num(3)?,
        }),
        Some("0") => Ok(Decision::Wait(num(1)?)),
        Some("2") => Ok(Decision::ExceedsBurst),
        Some("4") => Ok(Decision::Saturated),
        _ => Err(bad_reply(reply)),
    }
}

/// The script's reply to a peek: `(tat, now)`.
fn peeked(reply: &[String]) -> Result<(u64, u64), Error> {
    match (
        reply.first().map(String::as_str),
        reply.get(1),
        reply.get(2),
    ) {
        (Some("3"), Some(tat), Some(now)) => match (tat.parse(), now.parse()) {
            (Ok(tat), Ok(now)) => Ok((tat, now)),
            _ => Err(bad_reply(reply)),
        },
        _ => Err(bad_reply(reply)),
    }
}

/// A cluster client with the limiter's timeouts.
fn cluster_client(
    nodes: Vec<::redis::ConnectionInfo>,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<::redis::cluster::ClusterClient, RedisError> {
    ClusterClientBuilder::new(nodes)
        .connection_timeout(connect_timeout)
        .response_timeout(response_timeout)
        // One retry (a redirection after a resharding or failover), so a
        // call never waits out many timeouts.
        .retries(1)
        .build()
}

/// `info` without the `CLIENT SETINFO` round trip redis-rs makes on each
/// new connection: one less reply to wait for while reconnecting, so a
/// reconnect to a hung server fails within one timeout.
fn lean(info: ::redis::ConnectionInfo) -> ::redis::ConnectionInfo {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    info.set_redis_settings(settings)
}

fn bad_reply(reply: &[String]) -> Error {
    Error::Script(RedisError::from((
        ::redis::ErrorKind::Parse,
        "unexpected reply from paceline's step script",
        format!("{reply:?}"),
    )))
}

impl RedisBuilder {
    fn new(endpoint: Result<Endpoint, RedisError>, rate: Rate) -> RedisBuilder {
        RedisBuilder {
            endpoint,
            rate,
            slack: DEFAULT_SLACK,
            prefix: DEFAULT_PREFIX.to_owned(),
            policy: FailPolicy::default(),
            wait: Wait::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
        }
    }

    /// How many unused permits a key may bank for a later burst (default 10,
    /// as in-process).
    pub fn slack(mut self, permits: u64) -> Self {
        self.slack = permits;
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

    /// How a blocking take waits out its slot (default [`Wait::Sleep`]).
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
        let params =
            pacer::params(self.rate, self.slack).map_err(|e| Error::Config(e.to_string()))?;
        if self.connect_timeout.is_zero() || self.response_timeout.is_zero() {
            return Err(Error::Config("timeouts must be longer than zero".into()));
        }
        let target = match self.endpoint {
            Ok(Endpoint::Single(client)) => Ok(Target::Single(client)),
            Ok(Endpoint::Cluster(nodes)) => {
                cluster_client(nodes, self.connect_timeout, self.response_timeout)
                    .map(|c| Target::Cluster(Box::new(c)))
            }
            Err(e) => Err(e),
        }
        .map_err(|e| Error::Config(e.to_string()))?;
        Ok(RedisLimiter {
            shared: Arc::new(Shared {
                pool: Pool::new(target, self.connect_timeout, self.response_timeout),
                script: Script::new(STEP_LUA),
                prefix: self.prefix,
                policy: self.policy,
                wait: self.wait,
                clock: DefaultClock::new(),
            }),
            rate: self.rate,
            slack: self.slack,
            params,
        })
    }
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("rate", &self.rate)
            .field("slack", &self.slack)
            .field("prefix", &self.shared.prefix)
            .field("fail_policy", &self.shared.policy)
            .finish_non_exhaustive()
    }
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
