//! Paced byte streams: [`PacedReader`] and [`PacedWriter`] wrap any reader or
//! writer and pace the bytes through a paceline limiter, one permit per byte.
//!
//! - [`PacedReader`]`<R, L>`: [`std::io::Read`] over a [`ByteLimiter`] (any
//!   limiter through [`Take`](crate::Take)), and Tokio's `AsyncRead` over an
//!   [`AsyncByteLimiter`] (an `AsyncLimiter`; feature `tokio`).
//! - [`PacedWriter`]`<W, L>`: the same for [`std::io::Write`] and `AsyncWrite`.
//! - [`ByteLimiter`], [`AsyncByteLimiter`]: what the wrappers pay through,
//!   implemented for every limiter, behind `&`, `Box` and `Arc` too.
//! - [`OnKey`]: one key of a keyed (or Redis) limiter, as a byte limiter.
//! - [`PayError`]: why bytes could not be paid for, inside an `io::Error`.
//!
//! ```
//! use paceline::io::PacedWriter;
//! use paceline::{AtomicLimiter, Rate};
//! use std::io::Write;
//!
//! // 1 MiB/s, with a burst (the largest chunk) of 64 KiB.
//! let limiter = AtomicLimiter::builder(Rate::per_second(1 << 20))
//!     .slack(64 * 1024 - 1)
//!     .build()?;
//! let mut out = PacedWriter::new(Vec::new(), &limiter);
//! out.write_all(&[7; 100 * 1024])?; // 64 KiB at once, then 36 KiB 35 ms later
//! assert_eq!(out.get_ref().len(), 100 * 1024);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The same with Tokio, where `tokio::io::copy` pumps a reader into a
//! writer:
//!
//! ```
//! # #[cfg(feature = "tokio")]
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use paceline::io::PacedReader;
//! use paceline::tokio::AsyncLimiter;
//! use paceline::Rate;
//!
//! let limiter = AsyncLimiter::builder(Rate::per_second(1_000_000)) // 1 MB/s
//!     .slack(4_095) // chunks of 4 KiB
//!     .build()?;
//! let data = vec![1u8; 4_096 + 50_000];
//! let mut paced = PacedReader::new(&data[..], limiter);
//! let mut received = Vec::new();
//! let start = tokio::time::Instant::now();
//! tokio::io::copy(&mut paced, &mut received).await?;
//! assert_eq!(received, data);
//! // The first burst went at once, the other 50 000 bytes 1 µs apart.
//! assert_eq!(start.elapsed(), std::time::Duration::from_millis(50));
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "tokio"))]
//! # fn main() {}
//! ```
//!
//! # Pay first, in chunks of one burst
//!
//! A byte costs one permit, and every byte is paid for before it is handed
//! on, as any request of `n` permits is (its last permit's slot has come).
//! A limiter lets at most its burst, `slack + 1` permits, go at once, so the
//! wrappers move at most one burst per call:
//!
//! - **Writing**: a write pays for up to one burst of the bytes offered,
//!   then hands them to the inner writer, and returns how many it took: a
//!   write larger than the burst is a short write, and `write_all` (or
//!   `tokio::io::copy`) goes on with the rest, one chunk per burst. If the
//!   inner writer takes fewer bytes than were paid for, or fails, the rest of
//!   the payment is kept for the next write: bytes are never paid twice.
//! - **Reading**: a read asks the inner reader for up to one burst, pays
//!   for the bytes that actually came (never for what was asked), and only
//!   then hands them out. Bytes are never handed out unpaid and never lost:
//!   if the payment fails, or is pending in async code, the bytes are held in
//!   the reader and the next read hands them out once they are paid for. An
//!   end of stream costs nothing.
//!
//! # Choosing the slack: the burst is the chunk size
//!
//! Set the slack explicitly: a limiter's default slack is chosen for
//! requests, not as a chunk of bytes. Two things bound it from below:
//!
//! - **Lateness.** A waiter wakes late (a blocking sleep by about 80 µs, a
//!   Tokio timer by about 1 ms, a busy machine by more), and the long-run
//!   rate stays exact only while the banked window, `slack` bytes' worth of
//!   time, covers that lateness (see [`Wait`](crate::Wait)). So
//!   bank at least a few milliseconds of bytes: `rate / 100` (10 ms) is a
//!   comfortable floor, and at least a few kilobytes so each call moves a
//!   useful amount.
//! - **Call overhead.** Each chunk is one take and one call of the inner
//!   reader or writer, so tiny chunks cost CPU at high rates.
//!
//! From above, the slack bounds the burst: after idling, `slack + 1` bytes
//! go at once. At 1 MiB/s, a slack of 64 KiB (62.5 ms of bytes) is a good
//! start; a slack at least as large as your largest write keeps each write
//! whole.
//!
//! # Errors
//!
//! A limiter that fails (a Redis server down, a keyed limiter full of busy
//! keys) makes the read or write fail with an [`std::io::Error`] of kind
//! [`Other`](std::io::ErrorKind::Other) wrapping a [`PayError`]: its message
//! names the bytes and the limiter's error, and its
//! [`source`](std::error::Error::source) is the limiter's error. Nothing
//! panics. No byte is lost: a writer wrote none of them (the caller still
//! has them), a reader holds them, and the next call tries to pay again.
//!
//! # Cancel safety (async)
//!
//! An async wrapper keeps its pending payment (a paceline async take) inside
//! itself, and what it has paid for, across polls:
//!
//! - **A cancelled call** (a `tokio::time::timeout` around a `write` or
//!   `read`, a `select!` branch not taken) leaves the wrapper as it was: the
//!   payment stays pending (booked, or in line for its slot), and the next
//!   call on the wrapper goes on with it, without paying again and, for a
//!   reader, with the bytes it had read (held in the reader, not in the
//!   caller's buffer). So retrying after a timeout, with the same bytes or
//!   others, never pays twice and never loses data.
//! - **A dropped wrapper** drops its pending payment, which behaves as any
//!   dropped paceline async take: if it had booked its slot and the slot is
//!   still ahead, the slot is given back when no one has booked since (the
//!   limiter is then as if the write had never been made); otherwise it is
//!   spent. An unbounded take books only once its slot is within 10 ms, so a
//!   payment dropped earlier has booked nothing. Bytes already paid for and
//!   not yet written (a writer) or handed out (a reader) are dropped with the
//!   wrapper; their permits are spent.
//!
//! # Which limiters
//!
//! | wrapping | limiter |
//! |---|---|
//! | `Read` / `Write` | every direct [`Take`](crate::Take) (`AtomicLimiter`, `MutexLimiter`, `Unlimited`, `dyn Take`, and `&L`, `Box<L>`, `Arc<L>` of them); [`OnKey`] of any keyed `Take<K>` (a `&KeyedLimiter`, a Redis or PostgreSQL limiter) |
//! | `AsyncRead` / `AsyncWrite` | every owned, `Clone` direct `AsyncTake` (`AsyncLimiter`, [`Unlimited`](crate::Unlimited), `Arc<L>` of one); [`OnKey`] of any keyed one (an `AsyncKeyedLimiter`, an async Redis or PostgreSQL limiter) |
//!
//! Or implement [`ByteLimiter`] / [`AsyncByteLimiter`] for your own.

mod pay;
mod reader;
mod writer;

#[cfg(feature = "tokio")]
pub use self::pay::{AsyncByteLimiter, Payment};
pub use self::pay::{ByteLimiter, OnKey, PayError};
pub use self::reader::PacedReader;
pub use self::writer::PacedWriter;

/// A pending payment, as a wrapper keeps it. The `Mutex` is never locked
/// (the wrapper reaches the payment only through `&mut`, with `get_mut`):
/// it is there so that a wrapper is `Sync` whenever what it wraps is,
/// with or without the `tokio` feature (a future need not be `Sync`), and
/// so the feature stays additive.
#[cfg(feature = "tokio")]
struct Pending(std::sync::Mutex<Payment>);

#[cfg(feature = "tokio")]
impl Pending {
    fn new(payment: Payment) -> Pending {
        Pending(std::sync::Mutex::new(payment))
    }

    fn get(&mut self) -> &mut Payment {
        // Never poisoned: it is never locked.
        self.0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The most bytes one call moves: `len` (the caller's), at most one burst,
/// and at least one byte when `len` is not zero (a limiter answering a burst
/// of 0 is treated as 1).
fn chunk(len: usize, burst: u64) -> usize {
    usize::try_from(burst.max(1)).map_or(len, |burst| len.min(burst))
}
