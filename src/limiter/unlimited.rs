//! [`Unlimited`]: a limiter that never limits (uber's `NewUnlimited`).

use std::time::Duration;

use crate::observe::stats::{Counted, Stats};
use crate::values::error::Error;

/// A limiter that admits every call at once: for configurations where pacing
/// is off, behind the same [`Take`](crate::Take) interface.
///
/// It keeps no clock, so [`take`](Self::take) returns `Duration::ZERO`.
///
/// ```
/// use paceline::Unlimited;
///
/// for _ in 0..1000 {
///     Unlimited.take();
/// }
/// assert!(Unlimited.try_take_n(u64::MAX).is_ok());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unlimited;

impl Unlimited {
    /// Returns at once with `Duration::ZERO`.
    #[inline]
    pub fn take(&self) -> Duration {
        Duration::ZERO
    }

    /// Returns at once with `Duration::ZERO`, whatever the cost.
    ///
    /// # Errors
    /// Never.
    #[inline]
    pub fn take_n(&self, _cost: u64) -> Result<Duration, Error> {
        Ok(Duration::ZERO)
    }

    /// Always `Ok`.
    ///
    /// # Errors
    /// Never.
    #[inline]
    pub fn try_take(&self) -> Result<(), Error> {
        Ok(())
    }

    /// Always `Ok`, whatever the cost.
    ///
    /// # Errors
    /// Never.
    #[inline]
    pub fn try_take_n(&self, _cost: u64) -> Result<(), Error> {
        Ok(())
    }

    /// Returns at once with `Duration::ZERO`.
    ///
    /// # Errors
    /// Never.
    #[inline]
    pub fn take_timeout(&self, _max_wait: Duration) -> Result<Duration, Error> {
        Ok(Duration::ZERO)
    }

    /// Always `true`.
    #[inline]
    pub fn can_take(&self, _cost: u64) -> bool {
        true
    }

    /// Does nothing: there is no state to forget.
    #[inline]
    pub fn reset(&self) {}
}

/// Counts nothing: [`stats`](Counted::stats) is `None`.
impl Counted for Unlimited {
    fn stats(&self) -> Option<Stats> {
        None
    }
}
