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
//! - [`LimitLayer`] (inbound): a bucket per client address (trusted
//!   proxies only, right-most untrusted entry of `X-Forwarded-For` /
//!   `Forwarded`: [`Forwarding`]), header, function of the request's head,
//!   or one for all; a request without a key is never a silent pass
//!   ([`MissingKey`]); 429 with `Retry-After` rounded up (never before the
//!   slot) and the IETF draft's `RateLimit` fields ([`Fields`]), a [`Body`]
//!   of text, JSON or problem+json (or by the request's `Accept`); refuse, hold with a bounded wait, or
//!   dry run ([`Mode`]); over the builder's keyed limiter or any
//!   [`AsyncTake`](crate::AsyncTake) for a [`ClientKey`] (a remote one
//!   included). `Clone`, one limiter shared: no `Buffer` needed. Its
//!   answers are written in the inner service's own body type
//!   ([`AnswerBody`]), so its response type is the inner one's.
//! - its gRPC face (feature `tonic`, [`LimitBuilder::grpc`]): a refusal as
//!   `RESOURCE_EXHAUSTED` with `RetryInfo` and `grpc-retry-pushback-ms`,
//!   per peer, per metadata key or per method: the guide's
//!   [gRPC](crate::guide::grpc) chapter.
//! - [`PaceLayer`] (outbound): the slot waited for in `poll_ready`, spent by
//!   `call`.
//! - [`Inspect`]: an operator's look inside the limiters, as one service to
//!   mount (a page with sort and filter, JSON, Prometheus text).
//!
//! All of it, with the fields' mapping of a paceline limit and the layer's
//! measured cost against tower_governor: the guide's [HTTP](crate::guide::http)
//! chapter.

mod accept;
mod builder;
mod client_ip;
mod fields;
mod future;
#[cfg(feature = "tonic")]
mod grpc;
pub mod inspect;
mod json;
mod layer;
mod pace;
mod shared;
mod terms;

pub use builder::LimitBuilder;
pub use client_ip::{Cidr, Forwarding, MAX_HOPS};
pub use future::{AnswerBody, LimitBody, ResponseFuture};
pub use inspect::{Inspect, InspectService, Tracked};
pub use layer::{LimitLayer, Limited};
pub use pace::{BoxError, PaceLayer, Paced, Sent};
pub use terms::{Answered, Body, ClientKey, Fields, LayerStats, MissingKey, Mode, MAX_KEY_BYTES};
