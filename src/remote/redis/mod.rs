//! [`RedisLimiter`]: one limit shared by every process that reaches the same
//! Redis (feature `redis`).
//!
//! A `RedisLimiter` keeps the state word of each limit in a Redis key and
//! runs paceline's step on it inside Redis, atomically, as a Lua script on
//! the server's clock: every process draws from the same schedule. Keys,
//! waiting, failures and fail policies, what a restart forgets, and Cluster:
//! the guide's [remote limits](crate::guide::remote#redis).
//!
//! ```no_run
//! use paceline::redis::{FailPolicy, RedisLimiter};
//! use paceline::Rate;
//! use paceline::Take;
//!
//! let limiter = RedisLimiter::builder("redis://127.0.0.1/", Rate::per_second(100))
//!     .slack(10)
//!     .on_error(FailPolicy::Closed) // Redis down: return the error (the default)
//!     .build()?;
//! limiter.take("api")?; // blocks until this process's share of 100/s comes up
//! # Ok::<(), paceline::redis::Error>(())
//! ```
//!
//! # Implementation details
//!
//! - A key (the prefix, then the caller's key, or its digest: see
//!   `src/remote/key.rs`) holds `tat` of [`schedule`](crate::model::schedule) as a
//!   decimal string, in internal nanoseconds: Redis `TIME` plus
//!   [`ORIGIN`](crate::model::schedule::ORIGIN). The script is
//!   [`schedule::step`](crate::model::schedule::step), decision for decision (a
//!   property test runs both), loaded once and called by its SHA.
//! - Every write sets the TTL to the time until the bucket is back at rest
//!   (`tat - now + tau`, rounded up, plus 2 ms; a lease's lender, deciding
//!   at a reduced slack, keeps it until at rest at the stated one, the
//!   limit's `keep`); an absent key decides as a
//!   bucket at rest, an empty or foreign value fails with
//!   [`Error::Script`] (the script reads at most its first 21 bytes).
//! - Lua numbers are doubles, exact only to 2^53, while internal times
//!   reach 2^62 and saturate at 2^64 - 1: the script keeps every time as a
//!   pair (seconds, nanoseconds) of exact doubles, adds and subtracts them
//!   with carries, and answers with such pairs as integers; the products
//!   `cost * T` and `slack * T` are computed (and checked) in Rust. See
//!   `step.lua`.
//! - A Cluster redirection (`MOVED`, `ASK`) ran nowhere and is sent again,
//!   at most 16 times with a pause doubling from 1 ms to 32 ms.

#[cfg(feature = "tokio")]
mod aio;
mod builder;
mod conn;
mod limiter;
mod link;
mod script;
#[cfg(feature = "tokio")]
pub use aio::{AsyncRedisBackend, AsyncRedisLimiter};
#[cfg(feature = "fleet")]
pub(crate) use builder::address;
pub use builder::{RedisBuilder, RedisSettings, DEFAULT_PREFIX};
#[cfg(feature = "fleet")]
pub(crate) use conn::{Pool, Target};
pub use limiter::{RedisBackend, RedisLimiter};

pub use super::{Cause, Error, FailPolicy, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT};

#[cfg(test)]
mod tests;
