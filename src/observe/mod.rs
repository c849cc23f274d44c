//! Looking at what limiters decide, without deciding anything: the counts
//! ([`stats`](crate::stats), striped so that threads do not contend on
//! them, with the `metrics` facade and Prometheus' text), a lease's counts,
//! and the events sent through `tracing` (feature `tracing`; paceline never
//! prints).

pub(crate) mod event;
pub(crate) mod lease_stats;
pub mod stats;
pub(crate) mod stripes;
