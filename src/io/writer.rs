//! [`PacedWriter`]: a writer whose bytes are paid for before they are
//! written.

use std::fmt;
use std::io::{self, Write};

use super::{chunk, ByteLimiter};

/// Paces a writer: every byte written through it is first paid for, one
/// permit per byte, through the limiter `L`. Over a [`std::io::Write`] with
/// a [`ByteLimiter`] it is a `Write`; over a Tokio `AsyncWrite` with an
/// [`AsyncByteLimiter`](super::AsyncByteLimiter) it is an `AsyncWrite`
/// (feature `tokio`).
///
/// A write pays for at most one burst (`slack + 1` bytes) of what it is
/// offered and returns how many bytes the inner writer took: a larger write
/// is a short write, which `write_all` (or `tokio::io::copy`) continues in
/// chunks of one burst. What was paid for and not taken by the inner writer
/// (a short or failed write) is kept as credit for the next write, so no
/// byte is paid twice. See the guide's [byte streams](crate::guide::io) for
/// how to choose the slack, and for errors, and [cancel
/// safety](crate::guide::waiting#cancel-safety).
///
/// ```
/// use paceline::io::PacedWriter;
/// use paceline::{AtomicLimiter, clock::ManualClock, Rate};
/// use std::io::Write;
/// use std::time::Duration;
///
/// let clock = ManualClock::with_auto_advance(); // waits move it, instantly
/// let limiter = AtomicLimiter::builder(Rate::per_second(1_000_000)) // 1 MB/s
///     .slack(9_999) // chunks of 10 kB
///     .clock(clock.clone())
///     .build()?;
/// let mut out = PacedWriter::new(Vec::new(), &limiter);
/// assert_eq!(out.write(&[0; 25_000])?, 10_000); // one burst, at once
/// out.write_all(&[0; 25_000])?; // 10 kB, 10 kB, 5 kB, each paid first
/// // The first burst went at once, the next 25 000 bytes 1 µs apart.
/// assert_eq!(clock.elapsed(), Duration::from_millis(25));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PacedWriter<W, L> {
    pub(super) inner: W,
    pub(super) limiter: L,
    /// Bytes paid for and not yet taken by `inner`.
    pub(super) credit: u64,
    /// A pending payment and how many bytes it is for (async only).
    #[cfg(feature = "tokio")]
    pub(super) payment: Option<(u64, super::Pending)>,
}

impl<W, L> PacedWriter<W, L> {
    /// Paces `inner` through `limiter`.
    pub fn new(inner: W, limiter: L) -> Self {
        PacedWriter {
            inner,
            limiter,
            credit: 0,
            #[cfg(feature = "tokio")]
            payment: None,
        }
    }

    /// The inner writer.
    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// The inner writer. Writing to it directly bypasses the pacing.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// The limiter.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    /// How many bytes are paid for and not yet written: what a short or
    /// failed write of the inner writer left over, which the next write uses
    /// before paying again.
    pub fn credit(&self) -> u64 {
        self.credit
    }

    /// The inner writer. A pending async payment is dropped (see [cancel
    /// safety](crate::guide::waiting#cancel-safety)), and unused
    /// [`credit`](Self::credit) is spent.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: Write, L: ByteLimiter> Write for PacedWriter<W, L> {
    /// Pays for up to one burst of `buf` (blocking until its slot) unless
    /// credit is left from an earlier write, then writes it to the inner
    /// writer and returns how many bytes it took.
    ///
    /// # Errors
    /// The inner writer's errors (the payment is kept as credit), and a
    /// failed payment (kind `Other`, a [`PayError`](super::PayError)
    /// inside), which wrote nothing.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return self.inner.write(buf);
        }
        if self.credit == 0 {
            let n = chunk(buf.len(), self.limiter.burst()) as u64;
            self.limiter.pay(n)?;
            self.credit = n;
        }
        let n = self.inner.write(&buf[..chunk(buf.len(), self.credit)])?;
        self.credit -= n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

// Nothing is pinned in place inside (the async face polls the inner writer
// through `Pin::new`, so it must be `Unpin`, and boxes its payment): `Unpin`
// whatever the limiter, with or without the `tokio` feature.
impl<W: Unpin, L> Unpin for PacedWriter<W, L> {}

impl<W: fmt::Debug, L: fmt::Debug> fmt::Debug for PacedWriter<W, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("PacedWriter");
        d.field("inner", &self.inner)
            .field("limiter", &self.limiter)
            .field("credit", &self.credit);
        #[cfg(feature = "tokio")]
        d.field("paying", &self.payment.as_ref().map(|(bytes, _)| bytes));
        d.finish()
    }
}

#[cfg(feature = "tokio")]
mod asynchronous {
    use std::io;
    use std::pin::Pin;
    use std::task::{ready, Context, Poll};

    use tokio::io::AsyncWrite;

    use super::PacedWriter;
    use crate::io::{chunk, AsyncByteLimiter, Pending};

    impl<W: AsyncWrite + Unpin, L: AsyncByteLimiter> PacedWriter<W, L> {
        /// Makes sure some bytes are paid for: `Ready(Ok)` once `credit` is
        /// above zero. Pays for up to one burst of `len` bytes, or goes on
        /// with the payment a cancelled write left pending.
        fn poll_credit(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<()>> {
            if self.credit > 0 {
                return Poll::Ready(Ok(()));
            }
            let (bytes, payment) = match &mut self.payment {
                Some((bytes, payment)) => (*bytes, payment),
                None => {
                    let bytes = chunk(len, self.limiter.burst()) as u64;
                    // Covered by banked credit: paid, no allocation.
                    if self.limiter.try_pay(bytes) {
                        self.credit = bytes;
                        return Poll::Ready(Ok(()));
                    }
                    let payment = Pending::new(self.limiter.pay(bytes));
                    let (_, payment) = self.payment.insert((bytes, payment));
                    (bytes, payment)
                }
            };
            let paid = ready!(payment.get().as_mut().poll(cx));
            self.payment = None;
            paid?;
            self.credit = bytes;
            Poll::Ready(Ok(()))
        }
    }

    impl<W: AsyncWrite + Unpin, L: AsyncByteLimiter> AsyncWrite for PacedWriter<W, L> {
        /// Pays for up to one burst of `buf` unless credit is left, then
        /// writes to the inner writer. While the payment is pending it is
        /// kept in the writer: a write cancelled then (and retried, with
        /// these bytes or others) goes on with the same payment.
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            if buf.is_empty() {
                return Pin::new(&mut this.inner).poll_write(cx, buf);
            }
            ready!(this.poll_credit(cx, buf.len()))?;
            let n = ready!(
                Pin::new(&mut this.inner).poll_write(cx, &buf[..chunk(buf.len(), this.credit)])
            )?;
            this.credit -= n as u64;
            Poll::Ready(Ok(n))
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().inner).poll_flush(cx)
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
        }
    }
}
