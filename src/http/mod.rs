//! HTTP fittings for tower (feature `tower`): services and layers for
//! axum, hyper and anything else built on tower and `http` 1.
//!
//! - [`Inspect`]: a look inside the limiters for operators, as one service
//!   to mount (e.g. at `/limits`): a page listing the tracked buckets with
//!   sort and filter, the same as JSON, and Prometheus text.
//!
//! Every service here is `Clone` with its state behind an `Arc`, so it
//! works in axum's `nest_service`, `.layer` and `.route_layer` without a
//! `Buffer`.

pub mod inspect;

#[cfg(feature = "keyed")]
pub use inspect::Tracked;
pub use inspect::{Inspect, InspectService};
