//! [`PacedReader`]: a reader whose bytes are paid for before they are
//! handed out.

use std::fmt;
use std::io::{self, Read};

use super::{chunk, ByteLimiter};

/// Paces a reader: every byte read through it is first paid for, one permit
/// per byte, through the limiter `L`. Over a [`std::io::Read`] with a
/// [`ByteLimiter`] it is a `Read`; over a Tokio `AsyncRead` with an
/// [`AsyncByteLimiter`](super::AsyncByteLimiter) it is an `AsyncRead`
/// (feature `tokio`).
///
/// Each read asks the inner reader for at most one burst (`slack + 1`
/// bytes) and pays for as many as came; see the guide's [byte
/// streams](crate::guide::io) for how to choose the slack, and for errors,
/// and [cancel safety](crate::guide::waiting#cancel-safety).
///
/// ```
/// use paceline::io::PacedReader;
/// use paceline::{AtomicLimiter, Rate};
/// use std::time::{Duration, Instant};
///
/// let limiter = AtomicLimiter::builder(Rate::per_second(100_000)) // 100 kB/s
///     .slack(999) // reads of up to 1 kB
///     .build()?;
/// let mut paced = PacedReader::new(&[9u8; 5_000][..], &limiter);
/// let start = Instant::now();
/// let mut data = Vec::new();
/// std::io::copy(&mut paced, &mut data)?;
/// assert_eq!(data.len(), 5_000);
/// // The first kilobyte at once, the other 4 000 bytes 10 µs apart.
/// assert!(start.elapsed() >= Duration::from_millis(40));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PacedReader<R, L> {
    pub(super) inner: R,
    pub(super) limiter: L,
    /// Bytes read from `inner` and not handed out yet: those whose payment
    /// failed or is pending, and the rest of paid ones that did not fit the
    /// caller's buffer.
    pub(super) held: Vec<u8>,
    /// Whether `held` is paid for.
    pub(super) paid: bool,
    /// The payment for `held`, while it is pending (async only).
    #[cfg(feature = "tokio")]
    pub(super) payment: Option<super::Pending>,
}

impl<R, L> PacedReader<R, L> {
    /// Paces `inner` through `limiter`.
    pub fn new(inner: R, limiter: L) -> Self {
        PacedReader {
            inner,
            limiter,
            held: Vec::new(),
            paid: false,
            #[cfg(feature = "tokio")]
            payment: None,
        }
    }

    /// The inner reader.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The inner reader. Reading from it directly bypasses the pacing.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// The limiter.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    /// Bytes read from the inner reader and not handed out yet: after a
    /// failed payment, while an async payment is pending, or when a paid
    /// read did not fit the caller's buffer. At most one burst.
    pub fn buffer(&self) -> &[u8] {
        &self.held
    }

    /// The inner reader. The bytes in [`buffer`](Self::buffer), if any, are
    /// dropped (as `BufReader::into_inner` drops its buffer), and so is a
    /// pending async payment (see [cancel
    /// safety](crate::guide::waiting#cancel-safety)).
    pub fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: Read, L: ByteLimiter> Read for PacedReader<R, L> {
    /// Reads up to one burst from the inner reader, pays for what came
    /// (blocking until its slot), and returns it. An end of stream costs
    /// nothing.
    ///
    /// # Errors
    /// The inner reader's errors, and a failed payment (kind `Other`, a
    /// [`PayError`](super::PayError) inside); after the latter the bytes
    /// are kept, and the next read pays for them again and returns them.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return self.inner.read(buf);
        }
        // Bytes from an earlier read: pay if still unpaid, then hand out.
        if !self.held.is_empty() {
            if !self.paid {
                self.limiter.pay(self.held.len() as u64)?;
                self.paid = true;
            }
            let n = self.held.len().min(buf.len());
            buf[..n].copy_from_slice(&self.held[..n]);
            self.held.drain(..n);
            return Ok(n);
        }
        let limit = chunk(buf.len(), self.limiter.burst());
        let n = self.inner.read(&mut buf[..limit])?;
        if n == 0 {
            return Ok(0);
        }
        match self.limiter.pay(n as u64) {
            Ok(()) => Ok(n),
            Err(e) => {
                // Unpaid: not handed out, but not lost either.
                // (Nothing is held here: `held` keeps its room.)
                self.held.extend_from_slice(&buf[..n]);
                self.paid = false;
                Err(e)
            }
        }
    }
}

// Nothing is pinned in place inside (the async face polls the inner reader
// through `Pin::new`, so it must be `Unpin`, and boxes its payment): `Unpin`
// whatever the limiter, with or without the `tokio` feature.
impl<R: Unpin, L> Unpin for PacedReader<R, L> {}

impl<R: fmt::Debug, L: fmt::Debug> fmt::Debug for PacedReader<R, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("PacedReader");
        d.field("inner", &self.inner)
            .field("limiter", &self.limiter)
            .field("held", &self.held.len());
        #[cfg(feature = "tokio")]
        d.field("paying", &self.payment.is_some());
        d.finish()
    }
}

#[cfg(feature = "tokio")]
mod asynchronous {
    use std::io;
    use std::pin::Pin;
    use std::task::{ready, Context, Poll};

    use tokio::io::{AsyncRead, ReadBuf};

    use super::PacedReader;
    use crate::io::{chunk, AsyncByteLimiter, Pending};

    impl<R: AsyncRead + Unpin, L: AsyncByteLimiter> PacedReader<R, L> {
        /// Polls the payment for the held bytes (starting it if there is
        /// none pending); `Ready(Ok)` once they are paid for.
        fn poll_pay_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            let bytes = self.held.len() as u64;
            let limiter = &self.limiter;
            let payment = self
                .payment
                .get_or_insert_with(|| Pending::new(limiter.pay(bytes)));
            let paid = ready!(payment.get().as_mut().poll(cx));
            self.payment = None;
            self.paid = paid.is_ok();
            Poll::Ready(paid)
        }
    }

    impl<R: AsyncRead + Unpin, L: AsyncByteLimiter> AsyncRead for PacedReader<R, L> {
        /// Reads up to one burst from the inner reader, pays for what came,
        /// and fills `buf` with it once paid. While the payment is pending
        /// the bytes are held in the reader (not in `buf`), so a cancelled
        /// read loses nothing: the next read goes on with the same payment
        /// and hands them out.
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            if buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            if this.held.is_empty() {
                // Read up to one burst straight into `buf` (through a view
                // of its unfilled part, initialized: no unsafe code).
                let before = buf.filled().len();
                let limit = chunk(buf.remaining(), this.limiter.burst());
                let n = {
                    let mut view = ReadBuf::new(buf.initialize_unfilled_to(limit));
                    ready!(Pin::new(&mut this.inner).poll_read(cx, &mut view))?;
                    view.filled().len()
                };
                if n == 0 {
                    return Poll::Ready(Ok(()));
                }
                buf.advance(n);
                // Covered by banked credit: paid, no allocation.
                if this.limiter.try_pay(n as u64) {
                    return Poll::Ready(Ok(()));
                }
                // Otherwise the bytes move out of `buf` into the reader
                // until they are paid for: a read that returns `Pending`
                // must leave `buf` unfilled.
                this.held.extend_from_slice(&buf.filled()[before..]);
                this.paid = false;
                buf.set_filled(before);
            }
            // Held bytes (just read, or from an earlier call): see them paid,
            // then hand out what fits.
            if !this.paid {
                ready!(this.poll_pay_held(cx))?;
            }
            let n = this.held.len().min(buf.remaining());
            buf.put_slice(&this.held[..n]);
            this.held.drain(..n);
            Poll::Ready(Ok(()))
        }
    }
}
