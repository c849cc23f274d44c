//! Async pacing for Tokio (feature `tokio`): `limiter.take().await`.
//!
//! - [`AsyncLimiter`]: the lock-free limiter with `async` takes, the same
//!   schedule as [`AtomicLimiter`](crate::AtomicLimiter)'s blocking ones.
//! - [`TokioClock`]: a clock on `tokio::time::Instant`, so that paused time
//!   makes pacing deterministic in tests.
//! - [`PacedStreamExt`]: `stream.paced(&limiter)` paces a `Stream`'s items
//!   (the blocking twin for iterators is [`PacedExt`](crate::PacedExt)).
//!
//! ```
//! use paceline::tokio::AsyncLimiter;
//! use paceline::Rate;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let limiter = AsyncLimiter::new(Rate::per_second(50));
//! for _ in 0..5 {
//!     limiter.take().await; // every 20 ms; the first at once
//!     // ... one outbound call ...
//! }
//! # }
//! ```
//!
//! A take decides with the same step as the blocking limiter, then sleeps on
//! Tokio's timer until the limiter's own clock reads its slot: waiters go in
//! booking order, with no retry loop and no herd. An unbounded take books
//! its slot only once it is within 10 ms; every async method (and a
//! [`PacedStream`]) may be dropped at any point without losing capacity in
//! the common case. Under `#[tokio::test(start_paused = true)]` the default
//! [`TokioClock`] makes pacing exact and instant. All of it, with the
//! timer's millisecond granularity and when to use [`PRECISE`]: [waiting
//! and cancel safety](crate::guide::waiting).

mod clock;
mod limiter;
mod stream;
mod take;

pub use self::clock::TokioClock;
pub use self::limiter::AsyncLimiter;
pub use self::stream::{PacedStream, PacedStreamExt};
#[cfg(feature = "keyed")]
pub use crate::keyed::AsyncKeyedLimiter;

use std::time::Duration;

use crate::wait::Wait;

/// The precise async wait: sleep on Tokio's timer until 2 ms before the slot,
/// then yield to the runtime until it. 2 ms is above the timer's granularity
/// plus its usual lateness, so the timer almost never overshoots the slot.
///
/// ```
/// use paceline::tokio::{AsyncLimiter, PRECISE};
/// use paceline::Rate;
///
/// let limiter = AsyncLimiter::builder(Rate::per_second(20_000))
///     .wait(PRECISE)
///     .build()?;
/// # Ok::<(), paceline::BuildError>(())
/// ```
pub const PRECISE: Wait = Wait::Precise {
    spin: Duration::from_millis(2),
};
