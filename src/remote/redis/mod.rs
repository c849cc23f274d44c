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
//! call names, as given up to 512 bytes; see "Keys" below) holds `tat` of [`schedule`](crate::schedule) as a decimal string, in internal
//! nanoseconds: the server's Unix time (Redis `TIME`) plus
//! [`ORIGIN`](crate::schedule::ORIGIN). The
//! script is [`schedule::step`](crate::schedule::step), decision for decision (a property test runs
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
//! carries, and answers with such pairs as integers; the products
//! `cost * T` and `slack * T` are computed (and checked) in Rust. See
//! `step.lua`.
//!
//! # Keys
//!
//! A key comes from a client, so every key is limited, whatever its length
//! or bytes, at a bounded cost to Redis. Redis keys are binary-safe (a NUL
//! or any other byte is stored as given), but a key costs its length for as
//! long as it lives (a 1 MB key, a megabyte), so a key over 512 bytes, or
//! one that starts with `~sha256:`, is stored as the prefix, `~sha256:` and
//! the 64 hex digits of the SHA-256 of its bytes (see `src/remote/key.rs`).
//! No two keys share a Redis key, and `reset` and every process find the
//! same one. On a Cluster such a key's slot is its digest's: a hash tag in
//! it no longer places it (one in the prefix still does).
//!
//! # Waiting
//!
//! A blocking [`take`](RedisLimiter::take) reserves its slot in Redis, which
//! answers with the wait (slot minus the server's now); the caller then waits
//! that long on its own clock, with the builder's [`Wait`](crate::Wait). The
//! round trip's return leg is added to the wait, so a permit is never early
//! by the server's clock. As in-process, slack absorbs late wake-ups.
//!
//! # Failures
//!
//! A Redis that cannot be reached, a reply that does not come within the
//! response timeout, or a script that fails are each an [`Error`]; with
//! [`FailPolicy::Open`] the first two admit the request instead (a script's
//! error is the server's answer about that key, and never admits). No call panics, and
//! none blocks on Redis longer than the connect plus response timeouts
//! (a blocking take then also waits for its slot), however slowly the
//! reply's bytes come (for TCP and unix sockets without TLS or RESP3, whose
//! connections redis-rs makes, a timeout bounds each read). Connections
//! reconnect by themselves, with a backoff of at most 500 ms while the
//! server is down; one that timed out while nothing came back on it is
//! dropped (a link that died without a reset).
//! A call that failed on the way back (a timeout, a dropped connection) may
//! still have taken its permits in Redis: failures err on the side of the
//! limit. A key holding something that is not a paceline state (another
//! application's value, binary garbage of any size) fails the calls on that
//! key with [`Error::Script`], naming the key and the value's length but
//! never echoing it; the connection stays in use for every other key. The
//! script reads at most the value's first 21 bytes, so a huge value costs no
//! more than a state. (An empty value is such a value too: only an absent
//! key is a bucket at rest.)
//!
//! # What a restart forgets
//!
//! Recovery means the limiter works again, not that it remembers: the state
//! lives only in Redis. A Redis that restarts without persistence, a
//! `FLUSHALL` or `FLUSHDB`, a failover to a replica that had not yet received
//! the last writes, or an eviction under `maxmemory` (paceline's keys carry
//! a TTL, so `volatile-*` policies pick them first) forgets the state of
//! every key it loses, and such a key decides as a bucket at rest: it grants
//! a whole burst of `slack + 1` at once, however recently the limit was
//! spent. At 1 per minute with slack 4, a key that just spent its burst of
//! 5 grants 5 more right after a `FLUSHALL`: 10 permits within seconds
//! (`tests/redis.rs` pins this). What bounds the damage:
//!
//! - **Persistence**: Redis with AOF (`appendonly yes`, `appendfsync
//!   everysec` loses at most about a second of writes) or RDB snapshots
//!   keeps the keys across a restart; their TTLs keep running while it is
//!   down, which is what the model needs.
//! - **A slack that bounds it**: each loss grants at most `slack + 1` extra
//!   permits per key; for a limit that protects something, keep the slack
//!   small.
//! - **[`FailPolicy::Closed`]** (the default) stops the work while Redis is
//!   down rather than running unpaced; it cannot restore what was lost.
//! - A `maxmemory-policy` of `noeviction` (or a Redis of its own for limits)
//!   keeps memory pressure from evicting live limits.
//!
//! # Async
//!
//! With the `tokio` feature too, `AsyncRedisLimiter::from(limiter)` is a
//! limiter's async face: the same calls as futures, over one multiplexed
//! connection that reconnects by itself, on a single server or a cluster.
//!
//! # Cluster
//!
//! Each call touches exactly one key, so it works on Redis Cluster as is
//! ([`cluster_builder`](RedisLimiter::cluster_builder)); the script is loaded
//! on every primary. Each key then lives on, and is paced by the clock of,
//! one primary. Replication is asynchronous: after a failover the replica's
//! copy may be a few writes behind, and its clock is another host's.
//!
//! A resharding fails no call. While a slot moves, its nodes answer a call
//! on it with `MOVED` or `ASK`, and when the source learns of the move
//! before the target does, each sends the call to the other for as long as
//! that lasts (~100 ms). A redirected call ran nowhere: the limiter sends
//! it again, after a pause that doubles from 1 ms to 32 ms, up to 16 times
//! and within the call's timeouts. A call still redirected after that fails
//! with the redirection as an [`Error::Script`], which no fail policy
//! admits: a redirection is the server's answer, not an outage.

#[cfg(feature = "tokio")]
mod aio;
mod builder;
mod conn;
mod limiter;
mod link;
mod script;
#[cfg(test)]
mod tests;

#[cfg(feature = "tokio")]
pub use aio::{AsyncRedisBackend, AsyncRedisLimiter};
pub use builder::{RedisBuilder, RedisSettings};
pub use limiter::{RedisBackend, RedisLimiter};

pub use super::Cause;
pub use super::{Error, FailPolicy, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT};

/// The key prefix unless the builder sets another: keeps paceline's keys
/// apart from the application's.
pub const DEFAULT_PREFIX: &str = "paceline:";
