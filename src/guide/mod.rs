//! The guide: paceline's long form, one chapter per topic, each told once.
//!
//! The crate's front page and each module's own doc say what a type is and
//! what it promises; the chapters below say how the pieces fit, why they
//! behave as they do, and what to pick. Every example in them runs as a
//! doctest.
//!
//! 1. [The model and slack](model): one word of state, the window bound,
//!    slack and burst, full credit, costs, rate changes and resets.
//!    [Pacing or a window](windows): what each promises, which to pick,
//!    quotas by the calendar, and "10/s and 10,000 a day" on one key.
//! 2. [Waiting and cancel safety](waiting): how a take waits (threads and
//!    tasks), timer granularity, paused-time tests, and what a dropped
//!    future gives back.
//! 3. [Keyed limits](keyed): one bucket per key, rest and pruning, the
//!    ceiling, overrides and rate changes. [Keyed state across a
//!    restart](persist): saved to a file and loaded back, on a period and
//!    at shutdown, and what a load refuses.
//! 4. [Remote limits and fail policies](remote): one limit across
//!    processes in Redis or PostgreSQL, timeouts, fail policies, clocks.
//!    [The same through memcached](memcached): its CAS, on the clients'
//!    clocks. [Faults between hosts](faults): what latency, a black hole,
//!    a reset, a drip and a partition do to each store, measured.
//!    [Leases](leases): one limit past one server core, batches spent
//!    locally under the stated bound.
//! 5. [HTTP](http): the tower layers, keys, proxies, modes, fields,
//!    bodies, and the look inside. [gRPC, outbound reqwest and
//!    tracing](grpc): the layer's gRPC face on tonic, pacing a reqwest
//!    client, and the events paceline sends instead of printing.
//!    [Outbound calls to a metered API](outbound): what `Pace` reads of
//!    the far side's budget, pacing to it, holding, retry.
//! 6. [Configuration](config): limits from files, `Watch`, the settle time;
//!    a fleet's layers and documents in Redis or PostgreSQL.
//! 7. [Metrics](metrics): stats, the `metrics` facade, Prometheus text.
//! 8. [The command line](cli): `paceline` in a shell pipeline.
//! 9. [Warm-up](warm_up): Guava's slow start after idle.
//! 10. [Byte streams](io): paced readers and writers.
//! 11. [Compared with the peers](peers): uber-go/ratelimit, x/time/rate,
//!     governor, leaky-bucket.
//! 12. [An adaptive rate](adaptive): finding a limit the far side keeps to
//!     itself (429 / 503), by additive increase and multiplicative
//!     decrease.
//!
//! How the crate is built (its layers, the state word, the invariants and
//! the loom models) is for maintainers: `docs/ARCHITECTURE.md` in the
//! repository. Measurements: `docs/PERFORMANCE.md`.
//!
//! This module holds no items: each chapter is an empty module whose doc is
//! a markdown file of this folder.

// Adding a chapter (a topic of its own: `faults`, `memcached`, `leases`,
// `grpc`, ...):
//
// 1. write `src/guide/<topic>.md`, starting with a `# Title` line; link
//    items as `crate::...` (intra-doc links resolve from the chapter's
//    module), and gate an example that needs a feature inside it
//    (`# #[cfg(feature = "x")]` on a hidden `fn main`, with a
//    `# #[cfg(not(feature = "x"))] fn main() {}` twin) so that the doctests
//    pass under every feature set of `.ci/run`; use `rust,no_run` where a
//    server is needed and `rust,ignore` only where even compiling needs
//    what a doctest cannot have, and say why;
// 2. add `<topic>` to the `chapters!` line below, in the order of the list
//    above, and a line to that list;
// 3. tell the topic here only: module docs link to the chapter, as
//    `crate::guide::<topic>`, rather than repeat it; the README does not
//    grow (at most a row of its chooser table).
//
// Chapters are not gated on features: their links to feature-gated items
// resolve in the documented build (all features, as docs.rs builds it).

/// Each chapter: an empty module whose doc is `<chapter>.md`.
macro_rules! chapters {
    ($($chapter:ident)*) => {$(
        #[doc = include_str!(concat!(stringify!($chapter), ".md"))]
        pub mod $chapter {}
    )*};
}

chapters!(model windows waiting keyed persist remote memcached faults leases http grpc outbound adaptive config metrics cli warm_up io peers);
