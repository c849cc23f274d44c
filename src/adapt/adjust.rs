//! [`Adjust`]: a limit whose rate an [`Adaptive`](super::Adaptive) reads and
//! sets, answered by every in-process kind and one key of a keyed limiter.

use std::sync::Arc;

use crate::limiter::pacer::Pacer;
#[cfg(feature = "keyed")]
use crate::limiter::take::OnKey;
use crate::store::Store;
use crate::values::error::BuildError;
use crate::values::rate::Rate;

/// A limit whose rate an [`Adaptive`](super::Adaptive) can read and set: every in-process
/// kind, and one key of a keyed limiter.
pub trait Adjust: Send + Sync {
    /// The rate in force.
    fn rate(&self) -> Rate;

    /// Sets the rate, keeping the slack (as the limiter's own `set_rate`).
    ///
    /// # Errors
    /// As the limiter's own change of rate.
    fn set_rate(&self, rate: Rate) -> Result<(), BuildError>;

    /// `Ok` when the limit paces, which an adaptive rate needs: a key of a
    /// keyed limiter counted by window refuses
    /// ([`BuildError::WindowNotPaced`]), since setting its rate would make
    /// it pacing. Every other limit paces.
    ///
    /// # Errors
    /// [`BuildError::WindowNotPaced`], naming the limit.
    fn paced(&self) -> Result<(), BuildError> {
        Ok(())
    }
}

impl<T: Adjust + ?Sized> Adjust for &T {
    fn rate(&self) -> Rate {
        (**self).rate()
    }
    fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        (**self).set_rate(rate)
    }
    fn paced(&self) -> Result<(), BuildError> {
        (**self).paced()
    }
}

impl<T: Adjust + ?Sized> Adjust for Arc<T> {
    fn rate(&self) -> Rate {
        (**self).rate()
    }
    fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        (**self).set_rate(rate)
    }
    fn paced(&self) -> Result<(), BuildError> {
        (**self).paced()
    }
}

impl<S: Store, C: crate::clock::Clock> Adjust for Pacer<S, C>
where
    Pacer<S, C>: Send + Sync,
{
    fn rate(&self) -> Rate {
        Pacer::rate(self)
    }
    fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        Pacer::set_rate(self, rate)
    }
}

#[cfg(feature = "tokio")]
impl<C: crate::clock::Clock> Adjust for crate::tokio::AsyncLimiter<C> {
    fn rate(&self) -> Rate {
        self.limiter().rate()
    }
    fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        self.limiter().set_rate(rate)
    }
}

/// One key's rate: its override (the rate and slack it resolves to, the
/// rate replaced); `$keyed` is the keyed limiter, from `$l`, the limiter
/// the key is on.
#[cfg(feature = "keyed")]
macro_rules! adjust_key {
    ([$($lt:lifetime)?] $limiter:ty, $l:ident => $keyed:expr) => {
        impl<$($lt,)? K, C> Adjust for OnKey<$limiter, K>
        where
            K: std::hash::Hash + Eq + Clone + Send + Sync,
            C: crate::clock::Clock,
            OnKey<$limiter, K>: Send + Sync,
        {
            fn rate(&self) -> Rate {
                let $l = self.limiter();
                let keyed: &crate::KeyedLimiter<K, C> = $keyed;
                keyed.rate_for(self.key()).0
            }
            fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
                self.paced()?;
                let $l = self.limiter();
                let keyed: &crate::KeyedLimiter<K, C> = $keyed;
                let (_, slack) = keyed.rate_for(self.key());
                keyed.set_override(self.key().clone(), rate, slack)
            }
            fn paced(&self) -> Result<(), BuildError> {
                let $l = self.limiter();
                let keyed: &crate::KeyedLimiter<K, C> = $keyed;
                keyed.limit_of(self.key()).paced("an adaptive rate")
            }
        }
    };
}

#[cfg(feature = "keyed")]
adjust_key!([] crate::KeyedLimiter<K, C>, l => l);
#[cfg(feature = "keyed")]
adjust_key!(['a] &'a crate::KeyedLimiter<K, C>, l => l);
#[cfg(feature = "keyed")]
adjust_key!([] Arc<crate::KeyedLimiter<K, C>>, l => l);
#[cfg(all(feature = "keyed", feature = "tokio"))]
adjust_key!([] crate::tokio::AsyncKeyedLimiter<K, C>, l => l.limiter());
