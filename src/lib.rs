//! paceline paces work: call [`take`](AtomicLimiter::take) before each unit
//! of work and it returns when that unit may go, so units leave at a steady
//! rate with a bounded burst. It is modeled on uber-go/ratelimit, with what
//! its users asked for on top: a non-blocking [`try_take`](AtomicLimiter::try_take),
//! a bounded wait ([`take_timeout`](AtomicLimiter::take_timeout)), weighted
//! costs, a question that consumes nothing, live rate changes and a look
//! inside.
//!
//! ```
//! use paceline::{AtomicLimiter, Rate};
//!
//! let limiter = AtomicLimiter::new(Rate::per_second(100)); // slack 10, like uber
//! let first = limiter.take().at(); // when the permit went: at once
//! let mut last = first;
//! for _ in 0..10 {
//!     last = limiter.take().at(); // each in the slot 10 ms after the one before
//! }
//! // Ten slots later, however this thread was scheduled: a thread held up
//! // for a while may then take its banked slots at once (the slack), but
//! // never one before its slot.
//! assert!(last - first >= std::time::Duration::from_millis(100));
//! ```
//!
//! # Which type do I want
//!
//! | you have | use | feature |
//! |---|---|---|
//! | threads, one limit | [`AtomicLimiter`] (lock-free; [`MutexLimiter`] decides alike) | (none) |
//! | a slow start after idle (Guava's warm-up) | [`.warm_up(period)`](Builder::warm_up) on either: a [`WarmUpLimiter`] | (none) |
//! | tasks, one limit | [`tokio::AsyncLimiter`] | `tokio` |
//! | a limit per user / IP / tenant, paced or a quota per day / month ([`Limit::per_window`]; [the guide's `windows`](guide::windows)) | [`KeyedLimiter`] (tasks: [`tokio::AsyncKeyedLimiter`]) | `keyed` (default; tasks: + `tokio`) |
//! | many processes or hosts, one limit | [`redis::RedisLimiter`] (tasks: [`redis::AsyncRedisLimiter`]) | `redis` (tasks: + `tokio`) |
//! | the same, with PostgreSQL and no Redis | [`postgres::PostgresLimiter`] (tasks: [`postgres::AsyncPostgresLimiter`]) | `postgres` (tasks: + `tokio`) |
//! | the same, with memcached (the clients' clocks decide) | [`memcached::MemcachedLimiter`] (tasks: [`memcached::AsyncMemcachedLimiter`]) | `memcached` (tasks: + `tokio`) |
//! | one hot key past one server core (a million a second) | [`lease::Leased`] over one key of any of the three | that store's |
//! | one set of limits for a whole fleet, layered and live | [`config::fleet::Layers`] + [`config::fleet::Document`] | `fleet`, with `redis` or `postgres` |
//! | several limits at once, all or nothing (10/s and 10,000 a day) | [`all`]; over HTTP, `LimitBuilder::and_limiter` | (none) |
//! | an HTTP service: 429 per client; a paced HTTP client | [`http::LimitLayer`]; [`http::PaceLayer`] | `tower` (in an axum app: `axum`) |
//! | a tonic server; a reqwest client, paced to a far side's stated budget or to a limit it does not state (429 / 503); `tracing` events | [`http::LimitBuilder::grpc`], [`reqwest::Pace`] ([`follow_budget`](reqwest::Pace::follow_budget), [`adapt`](reqwest::Pace::adapt)), [`adapt::Adaptive`] over any limiter above, events: the [gRPC](guide::grpc), [outbound](guide::outbound) and [adaptive](guide::adaptive) chapters | `tonic`, `reqwest`, `tracing` (`Adaptive` alone: none) |
//! | bytes of a stream, not requests (`Read`/`Write`, `AsyncRead`/`AsyncWrite`) | [`io::PacedReader`], [`io::PacedWriter`] over any limiter | (none; async: `tokio`) |
//! | a shell pipeline: lines, a command per line, bytes | the `paceline` command ([`guide::cli`]) | `cargo install --path cli` |
//! | Envoy, Istio or Envoy Gateway asking a rate limit service (RLS v3), with envoyproxy/ratelimit's files | `paceline-server` (`server/`) | `cargo install --path server` |
//! | pacing switched off | [`Unlimited`], or any of them behind `Arc<dyn Take>` | (none) |
//! | your own store | [`model::schedule::step`], the pure decision every store runs | (none) |
//!
//! Each snippet in the README and the [`guide`] gives the `Cargo.toml`
//! line its features need.
//!
//! # Contents
//!
//! - [`AtomicLimiter`]: lock-free, one padded `AtomicU64` and a CAS loop.
//! - [`MutexLimiter`]: the same decisions, state under a `Mutex`.
//! - [`limiter::Pacer`]: the one type both name, over a [`store`]; its
//!   methods. The [`limiter`] module holds it and the take interface.
//! - [`Unlimited`]: admits everything (pacing switched off).
//! - [`Take`], [`AsyncTake`]: the take interface every kind answers, for a
//!   key; a take reports what it found ([`Taken`], [`State`]); one
//!   [`Error`] (the limit's refusal, or a remote server's failure).
//! - [`lease::Leased`]: one limit shared past one server core, spent
//!   locally from leased batches under the plain bound.
//! - [`KeyedLimiter`]: one bucket per key (user, IP, tenant), pruned when
//!   idle, bounded by [`keyed::WhenFull`], with per-key overrides and a
//!   look inside; the rest of the [`keyed`] module. With feature
//!   `persist`, its state saved to a file and loaded back across a
//!   restart ([guide](guide::persist)).
//! - [`Rate`]: permits per period, parsed from `"100/s"`, `"7/min"`.
//! - [`Slack`]: the burst a limiter banks, in permits, time, or both.
//! - [`Limit`], [`Limits`]: a rate with its slack; a default limit and
//!   overrides by key. With feature `serde`, these, [`Rate`] and [`Slack`]
//!   read from and write to configuration files (TOML, YAML, JSON, ...).
//! - [`Builder`]: slack, clock, wait strategy, initial credit.
//! - [`clock`]: time, [`Clock`](clock::Clock) and its clocks (the default
//!   TSC one, [`StdClock`](clock::StdClock), and
//!   [`ManualClock`](clock::ManualClock), which moves only when told).
//! - [`Wait`]: how a blocking call waits (sleep, or sleep then spin).
//! - [`PacedExt`]: `jobs.into_iter().paced(&limiter)` paces an iterator.
//! - [`io`]: [`PacedReader`](io::PacedReader) and
//!   [`PacedWriter`](io::PacedWriter) pace the bytes of a `Read` / `Write`
//!   (and, with `tokio`, an `AsyncRead` / `AsyncWrite`), one permit a byte.
//! - [`tokio`] (feature `tokio`): the async faces,
//!   [`AsyncLimiter`](tokio::AsyncLimiter) and
//!   [`AsyncKeyedLimiter`](tokio::AsyncKeyedLimiter) with `take().await`
//!   (each made from its blocking twin with `From`),
//!   [`TokioClock`](tokio::TokioClock) for paused-time tests, stream pacing.
//! - [`adapt`]: an adaptive rate ([`Adaptive`](adapt::Adaptive)) for a far
//!   side that keeps its limit to itself: additive increase while answers
//!   succeed, multiplicative decrease on `429` / `503`, between a floor and
//!   a ceiling, on any in-process limiter or one key of a keyed one.
//! - [`all`]: all or nothing over several limits (a per-user limit and a
//!   global one): a request goes only if every limit admits it.
//! - [`config`]: limits as configuration. [`config::watch`]: a file re-read
//!   when it changes, each version handed to your reload function; one
//!   that fails changes nothing. [`config::fleet`] (feature `fleet`):
//!   limits for a fleet, layers merged key by key and applied as one set;
//!   with `redis` or `postgres`, the limits document kept and watched
//!   there.
//! - [`model`]: the pure steps every store runs ([`model::schedule`], the
//!   pacing step; [`model::warm_up`], Guava's warm-up; [`model::window`],
//!   a quota per fixed or calendar window, no limiter on it yet), public
//!   for a store of your own.
//! - [`stats`]: what a limiter decided, counted when its builder asks;
//!   with feature `metrics`, sent to the `metrics` facade
//!   ([`Builder::metrics`]).
//! - [`Error`], [`BuildError`]: what can go wrong (a refusal; a bad
//!   value, named, wherever one is configured); [`Error::retry_after`]
//!   says when to ask again.
//! - [`http`] (feature `tower`): tower layers that answer 429 per client
//!   ([`LimitLayer`](http::LimitLayer)) and pace a client
//!   ([`PaceLayer`](http::PaceLayer)), and [`Inspect`](http::Inspect), an
//!   operator's page of the tracked buckets (sort, filter) with their JSON
//!   and the limiters' Prometheus text, to mount at e.g. `/limits`.
//!   With feature `tonic`, the inbound layer's gRPC face
//!   (`LimitBuilder::grpc`: `RESOURCE_EXHAUSTED` with `RetryInfo`).
//! - [`reqwest::Pace`] (feature `reqwest`): a reqwest client paced in one
//!   line (a reqwest-middleware middleware), slowed by a far side's
//!   `Retry-After` if asked.
//! - feature `tracing`: events for refusals, reloads and a remote server
//!   lost and back; paceline never prints.
//! - [`redis::RedisLimiter`] (feature `redis`): one limit shared by many
//!   processes, its state in Redis; `redis::AsyncRedisLimiter` with `tokio`.
//! - [`postgres::PostgresLimiter`] (feature `postgres`): the same, its state
//!   in a PostgreSQL table, the step one SQL statement;
//!   `postgres::AsyncPostgresLimiter` with `tokio`.
//! - [`memcached::MemcachedLimiter`] (feature `memcached`): the same, its
//!   state in memcached, the step run by the client as a CAS loop over the
//!   meta protocol (`mg` to read the state and its CAS token, the step,
//!   `ms C<token>` to store it); `memcached::AsyncMemcachedLimiter` with
//!   `tokio`.
//!
//! The [`guide`] tells the long form once, a chapter per topic: [the model
//! and slack](guide::model) (what a limiter promises: at most `slack + 1`
//! at once, and the window bound), [waiting and cancel
//! safety](guide::waiting), [keyed limits](guide::keyed), [remote limits and
//! fail policies](guide::remote), [HTTP](guide::http),
//! [configuration](guide::config), [metrics](guide::metrics), and more. How
//! it is built (layers, the state word, the invariants and the loom models):
//! `docs/ARCHITECTURE.md` in the repository.
//!
//! # Panics
//!
//! No take, try or question panics. Only the constructors that do not return
//! a `Result` do, on input their `Result`-returning twins reject:
//! [`Rate::per_second`] and friends (a zero or sub-nanosecond rate) and
//! [`AtomicLimiter::new`] / [`MutexLimiter::new`] (an interval over 14
//! years, where the default slack would bank more than 146 years).

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// The contents above link every module, those behind a feature too: the
// docs as published (docs.rs, `--all-features`) resolve them all, and a
// build with fewer features would only warn of the ones it leaves out.
#![cfg_attr(
    not(all(
        feature = "tokio",
        feature = "tower",
        feature = "reqwest",
        feature = "fleet",
        feature = "redis",
        feature = "postgres",
        feature = "memcached",
        feature = "keyed"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]
// On docs.rs, rustdoc's `doc_cfg` marks each item behind a feature with it,
// read from the item's own `#[cfg]`.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod adapt;
pub mod all;
pub mod clock;
pub mod config;
pub mod guide;
#[cfg(feature = "tower")]
pub mod http;
pub mod io;
#[cfg(feature = "keyed")]
pub mod keyed;
pub mod lease;
pub mod limiter;
pub mod model;
mod observe;
pub mod paced;
mod primitive;
pub mod remote;
#[cfg(feature = "reqwest")]
pub mod reqwest;
pub mod store;
#[cfg(feature = "tokio")]
pub mod tokio;
mod values;
mod wait;

#[cfg(feature = "keyed")]
pub use keyed::KeyedLimiter;
pub use limiter::builder::Builder;
pub use limiter::pacer::{AtomicLimiter, MutexLimiter, WarmUpLimiter};
pub use limiter::take;
pub use limiter::take::{AsyncTake, Error, State, Take, Taken};
pub use limiter::unlimited::Unlimited;
pub use observe::stats;
pub use paced::PacedExt;
#[cfg(feature = "memcached")]
pub use remote::memcached;
#[cfg(feature = "postgres")]
pub use remote::postgres;
#[cfg(feature = "redis")]
pub use remote::redis;
/// Loom builds only (`--cfg paceline_loom`), for `loom-tests/`: the
/// crate-internal store of a quota per window, whose loop a keyed
/// limiter's window keys run.
#[cfg(paceline_loom)]
#[doc(hidden)]
pub use store::window::WindowStore as __WindowStore;
pub use values::error::BuildError;
pub use values::limit::{Limit, Limits};
pub use values::rate::Rate;
pub use values::slack::Slack;
pub use wait::Wait;

/// The README's examples, compiled and run as doctests (they use every
/// feature, as `scripts/test.sh` builds them).
#[cfg(all(
    doctest,
    feature = "keyed",
    feature = "tokio",
    feature = "redis",
    feature = "tower",
    feature = "postgres"
))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
