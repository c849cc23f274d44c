//! Limits for a fleet (feature `fleet`): layers of limits merged key by
//! key and applied as one set, fed by documents kept on the servers the
//! fleet already runs (Redis, PostgreSQL) and by local files.
//!
//! - [`Layer`]: one document's limits, the default optional; [`merge`]
//!   layers in order, a later layer winning key by key.
//! - [`Layers`]: named layers, lowest first, each fed new versions by a
//!   [`Feed`]; each new version is merged with the others and applied to
//!   the limiter in one step. A version that cannot be used is reported and
//!   changes nothing; a layer never goes back to an older version.
//! - [`Document`] (with `redis` or `postgres`): a limits document on a
//!   server (Redis, a Redis Cluster, PostgreSQL), its version bumped atomically by each write, each write
//!   announced (Redis pub/sub, PostgreSQL `LISTEN`/`NOTIFY`) and a poll as
//!   the safety net; [`check`] refuses a broken document before any server
//!   sees it.
//! - Local files through [`Watch`](crate::config::watch::Watch) and
//!   [`Feed::reload`].
//!
//! When to use a file, a fleet document, or both: the guide's
//! [configuration](crate::guide::config#a-fleet-layers-and-documents)
//! chapter.
//!
//! ```no_run
//! # #[cfg(all(feature = "redis", feature = "keyed"))]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use paceline::config::fleet::{Document, Layers};
//! use paceline::config::watch::Watch;
//! use paceline::{KeyedLimiter, Rate};
//! use std::sync::Arc;
//!
//! let limiter = Arc::new(KeyedLimiter::<String>::new(Rate::per_second(10)));
//! let target = Arc::clone(&limiter);
//! let layers = Layers::new(move |limits| target.apply(limits));
//! // The fleet's document, then this server's file over it.
//! let _global = Document::redis("redis://127.0.0.1/", None)?.feed(layers.add("global"))?;
//! let _local = Watch::new("local.toml").start(layers.add("local").reload())?;
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "redis", feature = "keyed")))]
//! # fn main() {}
//! ```

mod document;
mod layer;
mod layers;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod source;

pub use document::{check, FleetError, Versioned, DEFAULT_NAME, MAX_DOCUMENT_BYTES, MAX_OVERRIDES};
pub use layer::{merge, Layer};
pub use layers::{Feed, LayerStatus, Layers, Offered};
#[cfg(any(feature = "redis", feature = "postgres"))]
pub use source::{Document, Watching};
