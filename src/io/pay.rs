//! What a paced reader or writer pays through: [`ByteLimiter`] (blocking)
//! and [`AsyncByteLimiter`](super::AsyncByteLimiter) (a future), for every
//! limiter through the take interface ([`Take`],
//! [`AsyncTake`](crate::AsyncTake)); [`OnKey`] for one key of a keyed or
//! remote limiter; [`PayError`]. No kind is named here: whatever answers
//! the interface pays.

use std::error::Error;
use std::fmt;
use std::io;

use crate::limiter::take::Take;

/// A limiter that bytes can be paid through, blocking: what a
/// [`PacedReader`](super::PacedReader) or [`PacedWriter`](super::PacedWriter)
/// over a `std::io` reader or writer needs. A byte costs one permit.
///
/// Implemented for every direct limiter ([`Take`] with the unit key:
/// `AtomicLimiter`, `MutexLimiter`, `WarmUpLimiter`, `Unlimited`, a limiter
/// of your own, `dyn Take`, and `&L`, `Box<L>`, `Arc<L>` of them), and for
/// [`OnKey`] of any keyed one (a `KeyedLimiter`, a Redis or PostgreSQL
/// limiter).
///
/// ```
/// use paceline::io::ByteLimiter;
/// use paceline::{AtomicLimiter, Rate};
///
/// let limiter = AtomicLimiter::builder(Rate::per_second(1_000_000))
///     .slack(4095)
///     .build()?;
/// assert_eq!(ByteLimiter::burst(&limiter), 4096);
/// limiter.pay(4096)?; // the first burst goes at once
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait ByteLimiter {
    /// The most bytes one payment should cover: the limiter's burst,
    /// `slack + 1` permits. The wrappers move at most this many bytes per
    /// call.
    fn burst(&self) -> u64;

    /// Blocks until `bytes` permits are paid for, as one request.
    ///
    /// # Errors
    /// The limiter's failure, as an [`io::Error`] of kind
    /// [`Other`](io::ErrorKind::Other) wrapping a [`PayError`].
    fn pay(&self, bytes: u64) -> io::Result<()>;
}

/// Why a paced read or write could not pay for its bytes: the limiter
/// failed. It reaches the caller inside an [`io::Error`] of kind
/// [`Other`](io::ErrorKind::Other), whose own
/// [`source`](Error::source) is the limiter's error.
///
/// ```
/// use paceline::io::PayError;
/// use paceline::Error;
/// use std::error::Error as _;
/// use std::io;
///
/// let e = io::Error::from(PayError::new(4096, Error::TooManyKeys { max_keys: 10 }));
/// assert_eq!(e.kind(), io::ErrorKind::Other);
/// let pay = e.get_ref().and_then(|e| e.downcast_ref::<PayError>()).unwrap();
/// assert_eq!(pay.bytes(), 4096);
/// assert!(e.source().unwrap().downcast_ref::<Error>().is_some());
/// ```
#[derive(Debug)]
pub struct PayError {
    bytes: u64,
    source: Box<dyn Error + Send + Sync + 'static>,
}

impl PayError {
    /// The payment of `bytes` failed with `source`, the limiter's error.
    pub fn new(bytes: u64, source: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        PayError {
            bytes,
            source: source.into(),
        }
    }

    /// How many bytes the failed payment was for.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl fmt::Display for PayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "paced I/O could not pay for {} bytes: the limiter failed: {}",
            self.bytes, self.source
        )
    }
}

impl Error for PayError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

impl From<PayError> for io::Error {
    fn from(e: PayError) -> io::Error {
        io::Error::other(e)
    }
}

/// The most one payment covers: the burst of `limit`, or everything when
/// nothing limits.
fn burst_of(limit: Option<crate::values::limit::Limit>) -> u64 {
    limit.map_or(u64::MAX, |l| l.burst())
}

impl<L: Take + ?Sized> ByteLimiter for L {
    fn burst(&self) -> u64 {
        burst_of(self.limit_for(&()))
    }
    fn pay(&self, bytes: u64) -> io::Result<()> {
        self.take_n(&(), bytes)
            .map(drop)
            .map_err(|e| PayError::new(bytes, e).into())
    }
}

pub use crate::limiter::take::OnKey;

#[cfg(feature = "tokio")]
pub(super) mod asynchronous {
    use std::future::Future;
    use std::io;
    use std::pin::Pin;

    use super::{burst_of, PayError};
    use crate::limiter::take::AsyncTake;

    /// A pending payment: an owned future that completes once the bytes are
    /// paid for. Dropped before that, it gives its slot back as a dropped
    /// async take does (see [cancel safety](crate::guide::waiting#cancel-safety)).
    pub type Payment = Pin<Box<dyn Future<Output = io::Result<()>> + Send + 'static>>;

    /// A limiter that bytes can be paid through without blocking: what a
    /// [`PacedReader`](crate::io::PacedReader) or
    /// [`PacedWriter`](crate::io::PacedWriter) over a Tokio `AsyncRead` or
    /// `AsyncWrite` needs (feature `tokio`). A byte costs one permit.
    ///
    /// Implemented for every owned, `Clone` limiter that answers
    /// [`AsyncTake`] with the unit key (`AsyncLimiter`, `Unlimited`, an
    /// `Arc` of a limiter of your own), and [`OnKey`](crate::take::OnKey) of any keyed one (an
    /// `AsyncKeyedLimiter`, an async Redis or PostgreSQL limiter).
    pub trait AsyncByteLimiter {
        /// The most bytes one payment should cover: the limiter's burst,
        /// `slack + 1` permits.
        fn burst(&self) -> u64;

        /// Pays for `bytes` now if that needs neither a wait nor a round
        /// trip; `false` (having stored nothing) otherwise, and then the
        /// wrapper calls [`pay`](Self::pay). The default always answers
        /// `false`. It spares a payment covered by banked credit its
        /// allocation. One payment is one request in a limiter's stats: a
        /// `false` here should not count as a refusal.
        fn try_pay(&self, bytes: u64) -> bool {
            let _ = bytes;
            false
        }

        /// A future that completes once `bytes` permits are paid for, as
        /// one request; it owns what it needs (a clone of the limiter's
        /// handle), so the wrapper can keep it across polls.
        ///
        /// # Errors
        /// The future fails with the limiter's failure, as an [`io::Error`]
        /// of kind [`Other`](io::ErrorKind::Other) wrapping a
        /// [`PayError`](super::PayError).
        ///
        /// # Cancel safety
        /// Dropped before it completes, it must leave the limiter as a
        /// dropped paceline async take does ([cancel
        /// safety](crate::guide::waiting#cancel-safety)).
        fn pay(&self, bytes: u64) -> Payment;
    }

    impl<L: AsyncTake + Clone + 'static> AsyncByteLimiter for L {
        fn burst(&self) -> u64 {
            burst_of(self.limit_for(&()))
        }
        fn pay(&self, bytes: u64) -> Payment {
            let limiter = self.clone();
            Box::pin(async move {
                limiter
                    .take_n(&(), bytes)
                    .await
                    .map(drop)
                    .map_err(|e| PayError::new(bytes, e).into())
            })
        }
    }
}
