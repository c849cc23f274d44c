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
//! Every byte is paid for before it is handed on, at most one burst
//! (`slack + 1` bytes) per call: a larger write is a short write, a read
//! holds bytes it could not pay for yet, and no byte is paid twice or lost,
//! a failed payment included (an `io::Error` wrapping a [`PayError`]). Set
//! the slack explicitly: it is the chunk size. The async wrappers keep their
//! pending payment across polls, so a cancelled call never pays twice. How
//! to choose the slack, the Tokio example, and which limiters fit: the
//! guide's [byte streams](crate::guide::io) chapter.

mod pay;
mod reader;
mod writer;

#[cfg(feature = "tokio")]
pub use self::pay::asynchronous::{AsyncByteLimiter, Payment};
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
