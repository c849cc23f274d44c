//! What a paced reader or writer pays through: [`ByteLimiter`] (blocking)
//! and [`AsyncByteLimiter`] (a future), for every limiter kind; [`OnKey`]
//! for one key of a keyed or remote limiter; [`PayError`].

use std::error::Error;
use std::fmt;
use std::io;
use std::sync::Arc;

use crate::clock::Clock;
use crate::limiter::Limiter;
use crate::pacer::Pacer;
use crate::store::Store;
use crate::unlimited::Unlimited;

/// A limiter that bytes can be paid through, blocking: what a
/// [`PacedReader`](super::PacedReader) or [`PacedWriter`](super::PacedWriter)
/// over a `std::io` reader or writer needs. A byte costs one permit.
///
/// Implemented for [`AtomicLimiter`](crate::AtomicLimiter),
/// [`MutexLimiter`](crate::MutexLimiter), [`Unlimited`] and `dyn Limiter`,
/// for `&L`, `Box<L>` and `Arc<L>` of any of them, and for [`OnKey`] of a
/// keyed or Redis limiter. A [`Limiter`] of your own pays through as
/// `&dyn Limiter` or `Arc<dyn Limiter>` (or implement this trait's two
/// methods).
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
/// use paceline::TakeError;
/// use std::error::Error;
/// use std::io;
///
/// let e = io::Error::from(PayError::new(4096, TakeError::TooManyKeys { max_keys: 10 }));
/// assert_eq!(e.kind(), io::ErrorKind::Other);
/// let pay = e.get_ref().and_then(|e| e.downcast_ref::<PayError>()).unwrap();
/// assert_eq!(pay.bytes(), 4096);
/// assert!(e.source().unwrap().downcast_ref::<TakeError>().is_some());
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

/// A limiter's failure to pay for `bytes`, as the `io::Error` the wrappers
/// return.
fn failed(bytes: u64, e: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> io::Error {
    PayError::new(bytes, e).into()
}

/// `slack + 1`, saturating.
fn burst_of(slack: u64) -> u64 {
    slack.saturating_add(1)
}

impl<S: Store, C: Clock> ByteLimiter for Pacer<S, C> {
    fn burst(&self) -> u64 {
        burst_of(self.slack())
    }
    fn pay(&self, bytes: u64) -> io::Result<()> {
        self.take_n(bytes).map(drop).map_err(|e| failed(bytes, e))
    }
}

impl ByteLimiter for Unlimited {
    fn burst(&self) -> u64 {
        u64::MAX
    }
    fn pay(&self, _bytes: u64) -> io::Result<()> {
        Ok(())
    }
}

impl ByteLimiter for dyn Limiter + '_ {
    fn burst(&self) -> u64 {
        burst_of(self.slack())
    }
    fn pay(&self, bytes: u64) -> io::Result<()> {
        self.take_n(bytes).map(drop).map_err(|e| failed(bytes, e))
    }
}

impl<B: ByteLimiter + ?Sized> ByteLimiter for &B {
    fn burst(&self) -> u64 {
        (**self).burst()
    }
    fn pay(&self, bytes: u64) -> io::Result<()> {
        (**self).pay(bytes)
    }
}

impl<B: ByteLimiter + ?Sized> ByteLimiter for Box<B> {
    fn burst(&self) -> u64 {
        (**self).burst()
    }
    fn pay(&self, bytes: u64) -> io::Result<()> {
        (**self).pay(bytes)
    }
}

impl<B: ByteLimiter + ?Sized> ByteLimiter for Arc<B> {
    fn burst(&self) -> u64 {
        (**self).burst()
    }
    fn pay(&self, bytes: u64) -> io::Result<()> {
        (**self).pay(bytes)
    }
}

/// One key of a keyed or remote limiter, as a byte limiter: every payment
/// takes from that key's limit (its own rate and slack, overrides
/// included).
///
/// | `OnKey` of | pays through |
/// |---|---|
/// | `&KeyedLimiter<K, C>` or `Arc<KeyedLimiter<K, C>>`, key `K` | [`ByteLimiter`] |
/// | `RedisLimiter` or `&RedisLimiter`, key `String` (feature `redis`) | [`ByteLimiter`] |
/// | `AsyncKeyedLimiter<K, C>`, key `K` (feature `tokio`) | [`AsyncByteLimiter`] |
/// | `AsyncRedisLimiter`, key `String` (features `redis`, `tokio`) | [`AsyncByteLimiter`] |
///
/// ```
/// # #[cfg(feature = "keyed")]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use paceline::io::{OnKey, PacedWriter};
/// use paceline::{KeyedLimiter, Rate};
/// use std::io::Write;
///
/// // Each tenant uploads at 1 MB/s, in chunks of up to 16 kB.
/// let uploads = KeyedLimiter::<String>::builder(Rate::per_second(1_000_000))
///     .slack(15_999)
///     .build()?;
/// let mut out = PacedWriter::new(Vec::new(), OnKey::new(&uploads, "tenant-a".to_string()));
/// out.write_all(b"hello")?;
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "keyed"))]
/// # fn main() {}
/// ```
#[derive(Clone, Debug)]
pub struct OnKey<L, K> {
    limiter: L,
    key: K,
}

impl<L, K> OnKey<L, K> {
    /// Pays through `limiter` on `key`.
    pub fn new(limiter: L, key: K) -> Self {
        OnKey { limiter, key }
    }

    /// The limiter.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }
}

#[cfg(feature = "keyed")]
mod keyed {
    use std::hash::Hash;
    use std::io;
    use std::sync::Arc;

    use super::{burst_of, failed, ByteLimiter, OnKey};
    use crate::clock::Clock;
    use crate::keyed::KeyedLimiter;

    fn burst<K: Hash + Eq + Clone, C: Clock>(limiter: &KeyedLimiter<K, C>, key: &K) -> u64 {
        burst_of(limiter.rate_for(key).1)
    }

    fn pay<K: Hash + Eq + Clone, C: Clock>(
        limiter: &KeyedLimiter<K, C>,
        key: &K,
        bytes: u64,
    ) -> io::Result<()> {
        limiter
            .take_n(key, bytes)
            .map(drop)
            .map_err(|e| failed(bytes, e))
    }

    impl<K: Hash + Eq + Clone, C: Clock> ByteLimiter for OnKey<&KeyedLimiter<K, C>, K> {
        fn burst(&self) -> u64 {
            burst(self.limiter, &self.key)
        }
        fn pay(&self, bytes: u64) -> io::Result<()> {
            pay(self.limiter, &self.key, bytes)
        }
    }

    impl<K: Hash + Eq + Clone, C: Clock> ByteLimiter for OnKey<Arc<KeyedLimiter<K, C>>, K> {
        fn burst(&self) -> u64 {
            burst(&self.limiter, &self.key)
        }
        fn pay(&self, bytes: u64) -> io::Result<()> {
            pay(&self.limiter, &self.key, bytes)
        }
    }
}

#[cfg(feature = "redis")]
mod redis {
    use std::io;

    use super::{burst_of, failed, ByteLimiter, OnKey};
    use crate::redis::RedisLimiter;

    impl ByteLimiter for OnKey<RedisLimiter, String> {
        fn burst(&self) -> u64 {
            burst_of(self.limiter.slack())
        }
        fn pay(&self, bytes: u64) -> io::Result<()> {
            self.limiter
                .take_n(&self.key, bytes)
                .map(drop)
                .map_err(|e| failed(bytes, e))
        }
    }

    impl ByteLimiter for OnKey<&RedisLimiter, String> {
        fn burst(&self) -> u64 {
            burst_of(self.limiter.slack())
        }
        fn pay(&self, bytes: u64) -> io::Result<()> {
            self.limiter
                .take_n(&self.key, bytes)
                .map(drop)
                .map_err(|e| failed(bytes, e))
        }
    }
}

#[cfg(feature = "tokio")]
pub use self::asynchronous::{AsyncByteLimiter, Payment};

#[cfg(feature = "tokio")]
mod asynchronous {
    use std::future::{ready, Future};
    use std::io;
    use std::pin::Pin;
    use std::sync::Arc;

    use super::{burst_of, failed};
    use crate::clock::Clock;
    use crate::tokio::AsyncLimiter;
    use crate::unlimited::Unlimited;

    /// A pending payment: an owned future that completes once the bytes are
    /// paid for. Dropped before that, it gives its slot back as a dropped
    /// async take does (see the [module docs](super::super#cancel-safety-async)).
    pub type Payment = Pin<Box<dyn Future<Output = io::Result<()>> + Send + 'static>>;

    /// A limiter that bytes can be paid through without blocking: what a
    /// [`PacedReader`](crate::io::PacedReader) or
    /// [`PacedWriter`](crate::io::PacedWriter) over a Tokio `AsyncRead` or
    /// `AsyncWrite` needs (feature `tokio`). A byte costs one permit.
    ///
    /// Implemented for [`AsyncLimiter`], [`Unlimited`], `&L`, `Box<L>` and
    /// `Arc<L>` of them, and [`OnKey`](super::OnKey) of an `AsyncKeyedLimiter` or an
    /// `AsyncRedisLimiter`.
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
        /// dropped paceline async take does: slot given back, if no one has
        /// booked since.
        fn pay(&self, bytes: u64) -> Payment;
    }

    impl<C: Clock + 'static> AsyncByteLimiter for AsyncLimiter<C> {
        fn burst(&self) -> u64 {
            burst_of(self.slack())
        }
        fn try_pay(&self, bytes: u64) -> bool {
            // Not counted if refused: the payment that follows is the request.
            self.probe_n(bytes)
        }
        fn pay(&self, bytes: u64) -> Payment {
            let limiter = self.clone();
            Box::pin(async move {
                limiter
                    .take_n(bytes)
                    .await
                    .map(drop)
                    .map_err(|e| failed(bytes, e))
            })
        }
    }

    impl AsyncByteLimiter for Unlimited {
        fn burst(&self) -> u64 {
            u64::MAX
        }
        fn try_pay(&self, _bytes: u64) -> bool {
            true
        }
        fn pay(&self, _bytes: u64) -> Payment {
            Box::pin(ready(Ok(())))
        }
    }

    impl<A: AsyncByteLimiter + ?Sized> AsyncByteLimiter for &A {
        fn burst(&self) -> u64 {
            (**self).burst()
        }
        fn try_pay(&self, bytes: u64) -> bool {
            (**self).try_pay(bytes)
        }
        fn pay(&self, bytes: u64) -> Payment {
            (**self).pay(bytes)
        }
    }

    impl<A: AsyncByteLimiter + ?Sized> AsyncByteLimiter for Box<A> {
        fn burst(&self) -> u64 {
            (**self).burst()
        }
        fn try_pay(&self, bytes: u64) -> bool {
            (**self).try_pay(bytes)
        }
        fn pay(&self, bytes: u64) -> Payment {
            (**self).pay(bytes)
        }
    }

    impl<A: AsyncByteLimiter + ?Sized> AsyncByteLimiter for Arc<A> {
        fn burst(&self) -> u64 {
            (**self).burst()
        }
        fn try_pay(&self, bytes: u64) -> bool {
            (**self).try_pay(bytes)
        }
        fn pay(&self, bytes: u64) -> Payment {
            (**self).pay(bytes)
        }
    }

    #[cfg(feature = "keyed")]
    impl<K, C> AsyncByteLimiter for super::OnKey<crate::keyed::AsyncKeyedLimiter<K, C>, K>
    where
        K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
        C: Clock + 'static,
    {
        fn burst(&self) -> u64 {
            burst_of(self.limiter.limiter().rate_for(&self.key).1)
        }
        // No `try_pay`: a keyed limiter counts a refused try in its stats,
        // and a chunk that waits is no refusal.
        fn pay(&self, bytes: u64) -> Payment {
            let (limiter, key) = (self.limiter.clone(), self.key.clone());
            Box::pin(async move {
                limiter
                    .take_n(&key, bytes)
                    .await
                    .map(drop)
                    .map_err(|e| failed(bytes, e))
            })
        }
    }

    #[cfg(feature = "redis")]
    impl AsyncByteLimiter for super::OnKey<crate::redis::AsyncRedisLimiter, String> {
        fn burst(&self) -> u64 {
            burst_of(self.limiter.slack())
        }
        fn pay(&self, bytes: u64) -> Payment {
            let (limiter, key) = (self.limiter.clone(), self.key.clone());
            Box::pin(async move {
                limiter
                    .take_n(&key, bytes)
                    .await
                    .map(drop)
                    .map_err(|e| failed(bytes, e))
            })
        }
    }
}
