//! paceline for HTTP services (feature `tower`): a tower layer that limits
//! requests per client and answers 429 properly ([`LimitLayer`]), and one
//! that paces a client's outbound calls ([`PaceLayer`]). axum, tonic and
//! hyper take both; with feature `axum` the inbound layer reads axum's
//! `ConnectInfo` for the client's address.
//!
//! ```no_run
//! # #[cfg(feature = "axum")]
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! use axum::{routing::get, Router};
//! use paceline::http::LimitLayer;
//! use std::net::SocketAddr;
//!
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(LimitLayer::per_ip("5/s".parse()?).build()?); // 429 + Retry-After per client
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Inbound: [`LimitLayer`]
//!
//! - **Keys:** the client's address ([`LimitLayer::per_ip`]; IPv6 grouped
//!   by /64, [`ipv6_prefix`](LimitBuilder::ipv6_prefix)), a header
//!   ([`per_header`](LimitLayer::per_header)), one global limit
//!   ([`global`](LimitLayer::global)), or a function of the request's head
//!   ([`per_key`](LimitLayer::per_key)).
//! - **Behind proxies** the address comes from `X-Forwarded-For` (or
//!   `Forwarded`) only when the peer is one of the
//!   [`trust_proxies`](LimitBuilder::trust_proxies), and then it is the
//!   right-most entry that is not a trusted proxy: the left-most is
//!   whatever the client wrote, and never read (see [`Forwarding`]).
//! - **No key** (no peer address, an unreadable chain, no header): the
//!   [`MissingKey`] outcome, by default a 400 saying why; or a shared key.
//!   Never a silent pass.
//! - **Costs:** [`cost`](LimitBuilder::cost) from the request's head (a
//!   costly route takes n). Per-route limits: a layer per route
//!   (`route_layer`), or a [`per_key`](LimitLayer::per_key) key that names
//!   the route.
//! - **Refusals:** 429 with `Retry-After` in whole seconds, rounded up, so
//!   never before the slot; the IETF httpapi draft's `RateLimit-Policy`
//!   and `RateLimit` fields, on refusals or on every response
//!   ([`Fields`]); a [`Body`] of text, JSON or `application/problem+json`.
//! - **Modes:** refuse at once, hold a request up to a bounded wait and
//!   forward it, or a dry run that counts what it would refuse ([`Mode`]).
//! - **Limiters:** an in-process keyed limiter made by the builder, or
//!   any limiter that answers [`AsyncTake`](crate::AsyncTake) for a
//!   [`ClientKey`], handed in with [`limiter`](LimitBuilder::limiter): a
//!   keyed limiter of yours with its overrides, one
//!   [`AsyncLimiter`](crate::tokio::AsyncLimiter) for all, a remote limit
//!   shared by every process (Redis, PostgreSQL), or your own.
//! - The layer and its service are `Clone` and share one limiter: they go
//!   in axum's `.layer` and `.route_layer` as they are, with no `Buffer`.
//!   A request held by the wait mode books its slot only once it is within
//!   10 ms (as the async takes do): one whose client goes away, in whatever
//!   order held requests go, gives its place back to those after it.
//!
//! # Outbound: [`PaceLayer`]
//!
//! Wraps a client service so its calls leave at a limiter's pace: the slot
//! is waited for in `poll_ready`, spent by `call`.
//!
//! How the fields map a paceline limit: `src/http/fields.rs`' module doc.
//!
//! # Cost
//!
//! `benches/http.rs` (`cargo bench -p paceline-benches --features http
//! --bench http`) times one request through no layer, `LimitLayer::per_ip`
//! and tower_governor's `GovernorLayer` around the same trivial service, in
//! thread CPU time. Three runs on the 2-core machine of `docs/PERFORMANCE.md`
//! (ns added to the 230–290 ns of no layer, median and range):
//!
//! | | paceline | tower_governor | paceline ÷ governor |
//! |---|---:|---:|---:|
//! | one client, admitted | +135 (92–168) | +106 (78–116) | 1.18× (1.16–1.58) |
//! | 10,000 clients in turn, admitted | +205 (184–225) | +122 (111–146) | 1.54× (1.51–1.85) |
//! | refused (429), in all | 1.11 µs (1.09–1.19) | 17.8 µs (15.6–18.0) | 0.06× |
//!
//! Those runs predate the take interface (`paceline::take`), through which
//! the layer now holds any limiter behind one boxed trait. One run since,
//! on a machine shared with other builds: +175 ns beside governor's +105
//! (1.67×) for one client, +209 beside +112 (1.86×) for 10,000 clients,
//! and a refusal at 0.99 µs beside 26.0 µs (0.04×).
//!
//! The admitted path costs paceline more than governor: its keyed limiter
//! keeps each key's last use and counts (for pruning at rest and the look
//! inside), and with 10,000 keys at rest between their requests it prunes
//! and re-inserts them, where governor keeps every key it has seen. Through
//! a real server on loopback (`benches/examples/http_load.rs`, one server
//! thread, 16 connections, 5 rounds of 2 s) both are within the noise of
//! no layer: requests/s 0.96× (0.83–0.99) for paceline, 0.97×
//! (0.74–1.05) for governor.
//!
//! # Look inside: [`Inspect`]
//!
//! A look inside the limiters for operators, as one service to mount (e.g.
//! `nest_service("/limits", ...)`): a page listing the tracked buckets
//! with sort and filter, the same as JSON, and Prometheus text. See the
//! [`inspect`] module.

mod builder;
mod client_ip;
mod fields;
mod future;
pub mod inspect;
mod json;
mod layer;
mod pace;
mod sha256;
mod terms;

pub use builder::{LayerError, LimitBuilder};
pub use client_ip::{Cidr, CidrError, Forwarding, MAX_HOPS};
pub use future::{LimitBody, ResponseFuture};
pub use inspect::{Inspect, InspectService, Tracked};
pub use layer::{Limit, LimitLayer};
pub use pace::{BoxError, PaceLayer, Paced, Sent};
pub use terms::{Body, ClientKey, Fields, LayerStats, MissingKey, Mode, MAX_KEY_BYTES};
