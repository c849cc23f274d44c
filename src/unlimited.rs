//! [`Unlimited`]: a limiter that never limits (uber's `NewUnlimited`).

use std::time::Duration;

use crate::error::{BuildError, TakeError};
use crate::limiter::Limiter;
use crate::rate::Rate;
use crate::slack::Slack;

/// A limiter that admits every call at once: for configurations where pacing
/// is off, behind the same [`Limiter`] interface.
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
    pub fn take_n(&self, _cost: u64) -> Result<Duration, TakeError> {
        Ok(Duration::ZERO)
    }

    /// Always `Ok`.
    ///
    /// # Errors
    /// Never.
    #[inline]
    pub fn try_take(&self) -> Result<(), TakeError> {
        Ok(())
    }

    /// Always `Ok`, whatever the cost.
    ///
    /// # Errors
    /// Never.
    #[inline]
    pub fn try_take_n(&self, _cost: u64) -> Result<(), TakeError> {
        Ok(())
    }

    /// Returns at once with `Duration::ZERO`.
    ///
    /// # Errors
    /// Never.
    #[inline]
    pub fn take_timeout(&self, _max_wait: Duration) -> Result<Duration, TakeError> {
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

impl Limiter for Unlimited {
    fn take(&self) -> Duration {
        Unlimited::take(self)
    }
    fn take_n(&self, cost: u64) -> Result<Duration, TakeError> {
        Unlimited::take_n(self, cost)
    }
    fn try_take_n(&self, cost: u64) -> Result<(), TakeError> {
        Unlimited::try_take_n(self, cost)
    }
    fn take_n_timeout(&self, _cost: u64, _max_wait: Duration) -> Result<Duration, TakeError> {
        Ok(Duration::ZERO)
    }
    fn can_take(&self, cost: u64) -> bool {
        Unlimited::can_take(self, cost)
    }
    /// Always [`BuildError::NoRate`]: there is no rate to change.
    fn set_rate(&self, _rate: Rate) -> Result<(), BuildError> {
        Err(BuildError::NoRate)
    }
    fn set_slack(&self, _slack: Slack) -> Result<(), BuildError> {
        Err(BuildError::NoRate)
    }
    fn set_limit(&self, _rate: Rate, _slack: Slack) -> Result<(), BuildError> {
        Err(BuildError::NoRate)
    }
    fn reset(&self) {
        Unlimited::reset(self);
    }
    fn rate(&self) -> Option<Rate> {
        None
    }
    fn slack(&self) -> u64 {
        u64::MAX
    }
    fn available(&self) -> u64 {
        u64::MAX
    }
    fn next_free(&self) -> Duration {
        Duration::ZERO
    }
}
