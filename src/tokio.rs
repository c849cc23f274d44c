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
//! # How it waits
//!
//! A take reserves its slot with the same CAS step as the blocking limiter
//! and then sleeps on Tokio's timer until that slot. Every waiter owns its
//! slot, so waiters are released in reservation order, with no retry loop
//! and no thundering herd, however many tasks share the limiter.
//!
//! # Cancel safety
//!
//! Every async method, and a [`PacedStream`], may be dropped at any point (in
//! `select!`, under `timeout`, with its task aborted). A call dropped before
//! its slot gives the slot back if no one has reserved since: the limiter is
//! then as if it had never been called. If someone has, the slot is spent,
//! so the schedule stays consistent and later waiters keep their slots. A
//! call dropped after its slot has passed has taken its permit.
//!
//! # Testing with paused time
//!
//! With Tokio's `test-util` feature, `#[tokio::test(start_paused = true)]`
//! (or `tokio::time::pause()`) freezes Tokio's clock: when every task waits,
//! the runtime jumps straight to the next timer. A limiter on the default
//! [`TokioClock`] reads that clock, so your own code's pacing is tested
//! exactly and instantly, with no real waiting:
//!
//! ```
//! use std::time::Duration;
//! use paceline::tokio::AsyncLimiter;
//! use paceline::Rate;
//! use tokio::time::Instant;
//!
//! // The code under test: sends `n` requests through `limiter`.
//! async fn send_all(limiter: &AsyncLimiter, n: u32) -> u32 {
//!     let mut sent = 0;
//!     for _ in 0..n {
//!         limiter.take().await;
//!         sent += 1; // ... send ...
//!     }
//!     sent
//! }
//!
//! // In a test file: #[tokio::test(start_paused = true)]
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let limiter = AsyncLimiter::new(Rate::per_second(100));
//! let start = Instant::now();
//! assert_eq!(send_all(&limiter, 301).await, 301);
//! // 301 permits at 100/s: the first at once, the last at exactly 3 s.
//! assert_eq!(start.elapsed(), Duration::from_secs(3));
//! # }
//! ```
//!
//! Build the limiter inside the runtime (or at least use it only there), and
//! on the default clock: a [`DefaultClock`](crate::DefaultClock) keeps
//! reading real time while Tokio's is frozen.
//!
//! # Timer granularity
//!
//! Tokio's timer fires in whole milliseconds: a sleep ends at the first
//! millisecond tick at or after its deadline, and in real time a little after
//! that (about 1.1 ms late at the median on a 2-vCPU VM). Above 1000 permits
//! per second this means:
//!
//! - Permits are released in per-millisecond batches: at 10 000/s, the ten
//!   waiters whose slots fall in one millisecond wake together at its end.
//!   Each still gets its own slot, and the order between batches is the
//!   reservation order.
//! - The long-run rate stays exact as long as the banked window
//!   `slack * interval` covers how late a waiter wakes, because slots come
//!   from the schedule, not from when a waiter woke. Many tasks sharing a
//!   limiter keep slots queued ahead of the clock, so lateness costs them
//!   nothing. A lone task that takes, waits and takes again comes back late
//!   each time: if later than `slack * interval`, that time is forgotten and
//!   the rate is lost for good. The default slack ([`Slack::DEFAULT`](crate::Slack::DEFAULT))
//!   banks 10 ms at every rate from 1000/s up, which covers the timer's
//!   lateness (about 1.1 ms) and most stalls of a busy machine; uber's 10
//!   permits would be 1 ms at 10 000/s, just short of the timer's lateness.
//! - On a machine that stalls tasks for longer, give the slack more time
//!   (`.slack(Duration::from_millis(50))`); the burst after idling grows
//!   with it (`slack + 1` at once).
//! - [`PRECISE`] sleeps until 2 ms before the slot and then yields to the
//!   runtime in a loop until it: permits go within microseconds of their
//!   slots instead of in millisecond batches, at the price of a runtime
//!   thread kept busy while any waiter is that close to its slot. It is
//!   sound (never early; under paused time it falls back to the timer,
//!   which is exact there) but it smooths the flow only when a core is free:
//!   on a machine whose cores are all busy, the OS preempts the spinning
//!   thread for milliseconds at a time, and it loses more rate than the
//!   timer does unless the slack covers those stalls.
//!
//! `docs/PERFORMANCE.md` ("Tokio's 1 ms timer") has the achieved rate and
//! lateness of a lone task and of 1000 tasks at 1k to 1M/s, with the default
//! slack, uber's 10 permits and [`PRECISE`];
//! `cargo run --release --features tokio --example tokio_granularity`
//! measures this on your machine.

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
