//! Limits kept in a server: one limiter type over a backend,
//! [`RemoteLimiter<B, F>`], blocking by default and
//! [`AsyncRemoteLimiter<B>`] on its async face (futures, feature `tokio`),
//! as [`Pacer<S>`](crate::limiter::Pacer) is over a store. The step
//! runs in the server, atomically, on its clock, and the client only asks
//! and then waits; or, for memcached, which has no scripts and no clock,
//! in the client, as a CAS loop on the server's value, on the client's
//! clock.
//!
//! | backend | blocking | async | feature |
//! |---|---|---|---|
//! | Redis (a Lua script) | [`RedisLimiter`](crate::redis::RedisLimiter) | `AsyncRedisLimiter` | `redis` |
//! | PostgreSQL (one SQL statement) | [`PostgresLimiter`](crate::postgres::PostgresLimiter) | `AsyncPostgresLimiter` | `postgres` |
//! | memcached (a CAS loop, the step in the client) | `MemcachedLimiter` | `AsyncMemcachedLimiter` | `memcached` |
//! | in memory, for tests ([`memory`]) | [`MemoryLimiter`](memory::MemoryLimiter) | `AsyncMemoryLimiter` | none |
//!
//! Each name is an alias of the generic type over that backend: the calls
//! are written once, in `src/remote/limiter.rs` and `src/remote/aio.rs`;
//! what only one server has (Redis's prefix, PostgreSQL's `install` and
//! `prune`) is an inherent impl in that backend's folder. A new backend is
//! its folder (the step sent, the reply mapped to a decision) and one line
//! in `lib.rs`. What users see (keys, timeouts, fail policies, clocks, what
//! a restart forgets): the guide's [remote limits](crate::guide::remote).
//!
//! # Implementation details
//!
//! A remote store is one backend: it sends the step for `(key, request)`
//! to its server and maps the reply to a `Decision` (granted at a slot,
//! with the server's now; or a refusal of
//! [`schedule::step`](crate::model::schedule::step)), and it
//! peeks at a key's state and the server's now without storing anything,
//! gives a booking back, settles one with its actual cost
//! ([`schedule::settle`](crate::model::schedule::settle) on the server's
//! state and clock), and forgets a key: five kinds of one call, an `Op`
//! answered by a `Done`. A limit counted by window
//! ([`Limit::per_window`](crate::Limit::per_window)) sends four more of
//! the same shape, the window step's: the step
//! ([`window::step`](crate::model::window::step) on the key's window
//! word), its peek, its undo by the same rule and its settle
//! ([`window::settle`](crate::model::window::settle)); a reset is the
//! same for both. That is `Backend` (blocking) and `AsyncBackend`
//! (a future), one method each. Everything else is here, once, for every
//! backend:
//!
//! - the checks that need no round trip
//!   ([`schedule::span`](crate::model::schedule::span)'s `CostTooLarge`, and
//!   whether a refusal would be
//!   [`schedule::exceeds_burst`](crate::model::schedule::exceeds_burst)),
//!   and the request the backend sends (`Request`);
//! - the [`FailPolicy`] (a failure of the server admits or errs), the
//!   timeouts' defaults, and the one [`Error`] type;
//! - turning a decision into the caller's answer, through
//!   [`Error::refused`](crate::Error), the same mapping every
//!   in-process limiter uses;
//! - waiting, in the crate's one blocking or async wait, on the local clock
//!   for the wait the server reported, counted from the reply's arrival.
//!
//! See `src/remote/core.rs` for the shared logic, and `src/remote/redis/`
//! for the first backend.

#[cfg(feature = "tokio")]
mod aio;
#[cfg(any(feature = "redis", feature = "postgres", feature = "memcached"))]
mod builder;
pub(crate) mod core;
#[cfg(feature = "tokio")]
mod core_aio;
#[cfg(any(feature = "redis", feature = "postgres", feature = "memcached"))]
mod health;
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "memcached",
    feature = "tower"
))]
pub(crate) mod key;
mod lend;
mod limiter;
#[cfg(feature = "memcached")]
pub mod memcached;
pub mod memory;
mod ops;
#[cfg(any(feature = "redis", feature = "memcached"))]
mod pool;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(all(
    test,
    any(feature = "redis", feature = "postgres", feature = "memcached")
))]
mod settle_cases;
#[cfg(all(
    test,
    any(feature = "redis", feature = "postgres", feature = "memcached")
))]
mod window_cases;

use std::time::Duration;

#[cfg(feature = "tokio")]
pub use aio::AsyncRemoteLimiter;
#[cfg(any(feature = "redis", feature = "postgres", feature = "memcached"))]
pub use builder::RemoteBuilder;
#[cfg(feature = "tokio")]
pub use limiter::Async;
pub use limiter::{Blocking, RemoteLimiter};

pub use crate::values::error::{Cause, Error};
#[cfg(feature = "tokio")]
pub use seam::AsyncBackend;
pub use seam::Backend;
pub(crate) use seam::{Decision, Done, Op, Request, Settle};

mod seam;
#[cfg(any(feature = "redis", feature = "memcached"))]
mod socket;

/// A backend's `Debug`: its name and what tells it from another backend
/// of its kind, each `"field": value` read from `$b`, the rest elided.
macro_rules! debug_backend {
    ($name:ident $(<$g:ident>)?, |$b:ident| $($field:literal: $value:expr),+) => {
        impl$(<$g>)? std::fmt::Debug for $name$(<$g>)? {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let $b = self;
                f.debug_struct(stringify!($name))$(.field($field, &$value))+.finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use debug_backend;

/// How long to wait for a connection, unless the builder sets another: a
/// local server answers in well under a millisecond; a second covers a busy
/// network without leaving callers stuck for long.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long to wait for a reply, unless the builder sets another.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

/// What a call does when its server fails it (down, too slow, or the step
/// failed). Refusals by the limit itself are not failures and never change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FailPolicy {
    /// Return the [`Error`]: the unit of work must not go. Safe for a limit
    /// that protects something (a fragile backend, a paid API's quota); an
    /// outage of the server stops the work too. The default.
    #[default]
    Closed,
    /// Admit the request at once, as if the limit had room: an outage of
    /// the server lifts the limit instead of stopping the work (a loop of
    /// blocking takes runs unpaced until the server is back). For limits
    /// that are a courtesy (smoothing, fairness) rather than a protection.
    Open,
}
