//! The [`Limiter`] trait: the calls every paceline limiter answers, object
//! safe so that `Box<dyn Limiter>` or `Arc<dyn Limiter>` can hold any of them.

use std::time::Duration;

use crate::clock::Clock;
use crate::error::{BuildError, TakeError};
use crate::pacer::Pacer;
use crate::rate::Rate;
use crate::slack::Slack;
use crate::store::Store;

/// The calls every limiter answers: [`AtomicLimiter`](crate::AtomicLimiter),
/// [`MutexLimiter`](crate::MutexLimiter) and [`Unlimited`](crate::Unlimited).
///
/// The types have the same methods inherently, so the trait is needed only to
/// swap limiters behind a pointer:
///
/// ```
/// use paceline::{AtomicLimiter, Limiter, Rate, Unlimited};
/// use std::sync::Arc;
///
/// fn limiter(enabled: bool) -> Arc<dyn Limiter> {
///     if enabled {
///         Arc::new(AtomicLimiter::new(Rate::per_second(100)))
///     } else {
///         Arc::new(Unlimited)
///     }
/// }
/// limiter(false).take();
/// ```
///
/// Every method returns without panicking; only `take`, `take_n` and the
/// `take_timeout`s block.
pub trait Limiter: Send + Sync {
    /// Blocks until the next permit's slot, and returns the slot's time on
    /// the limiter's clock (since the clock's origin). Like uber's `Take()`.
    fn take(&self) -> Duration;

    /// Blocks until `cost` permits are paid for, as one request ("pay first":
    /// the whole cost must fit before it proceeds).
    ///
    /// # Errors
    /// [`TakeError::CostTooLarge`] when `cost` intervals span over 146 years.
    fn take_n(&self, cost: u64) -> Result<Duration, TakeError>;

    /// Takes a permit if one is free now; never blocks. A refusal stores
    /// nothing.
    ///
    /// # Errors
    /// [`TakeError::RetryAfter`] with how long until it would be admitted.
    fn try_take(&self) -> Result<(), TakeError> {
        self.try_take_n(1)
    }

    /// Takes `cost` permits if they are free now; never blocks. A refusal
    /// stores nothing.
    ///
    /// # Errors
    /// [`TakeError::RetryAfter`] with how long until it would be admitted;
    /// [`TakeError::ExceedsBurst`] when `cost > slack + 1`, which no wait
    /// makes possible; [`TakeError::CostTooLarge`].
    fn try_take_n(&self, cost: u64) -> Result<(), TakeError>;

    /// Takes a permit and waits for it only if its slot is at most `max_wait`
    /// away; otherwise fails at once, storing nothing (the bucket is full).
    ///
    /// # Errors
    /// [`TakeError::QueueFull`] with the wait it would have needed.
    fn take_timeout(&self, max_wait: Duration) -> Result<Duration, TakeError> {
        self.take_n_timeout(1, max_wait)
    }

    /// [`take_timeout`](Limiter::take_timeout) for a cost of `cost` permits.
    ///
    /// # Errors
    /// [`TakeError::QueueFull`]; [`TakeError::ExceedsBurst`] when even a
    /// limiter at rest could not admit `cost` within `max_wait`;
    /// [`TakeError::CostTooLarge`].
    fn take_n_timeout(&self, cost: u64, max_wait: Duration) -> Result<Duration, TakeError>;

    /// Whether [`try_take_n(cost)`](Limiter::try_take_n) would succeed now.
    /// Consumes nothing.
    fn can_take(&self, cost: u64) -> bool;

    /// Changes the rate from now on: slots already handed out stand, later
    /// requests are spaced by the new interval. Safe while other threads take.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when the slack at the new rate banks
    /// over 146 years; [`BuildError::NoRate`] for [`Unlimited`](crate::Unlimited).
    fn set_rate(&self, rate: Rate) -> Result<(), BuildError>;

    /// Changes the slack from now on (`Slack::permits(20)`, or
    /// `Duration::from_millis(5).into()`); banked credit is kept in permits
    /// (up to the new slack), never refilled.
    ///
    /// # Errors
    /// As [`set_rate`](Limiter::set_rate).
    fn set_slack(&self, slack: Slack) -> Result<(), BuildError>;

    /// Changes rate and slack as one unit (see
    /// [`Pacer::set_limit`](crate::Pacer::set_limit)).
    ///
    /// # Errors
    /// As [`set_rate`](Limiter::set_rate).
    fn set_limit(&self, rate: Rate, slack: Slack) -> Result<(), BuildError>;

    /// Puts the limiter back to how it was built (see
    /// [`Pacer::reset`](crate::Pacer::reset)): a deliberate refill. Does
    /// nothing for [`Unlimited`](crate::Unlimited).
    fn reset(&self);

    /// The rate in force; `None` for [`Unlimited`](crate::Unlimited).
    fn rate(&self) -> Option<Rate>;

    /// The slack in force, in permits (the burst is `slack + 1`).
    fn slack(&self) -> u64;

    /// How many permits one request could take now without waiting (at most
    /// `slack + 1`; `u64::MAX` for [`Unlimited`](crate::Unlimited)).
    fn available(&self) -> u64;

    /// How long until a permit is free (zero: one is free now).
    fn next_free(&self) -> Duration;
}

impl<S: Store, C: Clock> Limiter for Pacer<S, C> {
    fn take(&self) -> Duration {
        Pacer::take(self)
    }
    fn take_n(&self, cost: u64) -> Result<Duration, TakeError> {
        Pacer::take_n(self, cost)
    }
    fn try_take(&self) -> Result<(), TakeError> {
        Pacer::try_take(self)
    }
    fn try_take_n(&self, cost: u64) -> Result<(), TakeError> {
        Pacer::try_take_n(self, cost)
    }
    fn take_n_timeout(&self, cost: u64, max_wait: Duration) -> Result<Duration, TakeError> {
        Pacer::take_n_timeout(self, cost, max_wait)
    }
    fn can_take(&self, cost: u64) -> bool {
        Pacer::can_take(self, cost)
    }
    fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        Pacer::set_rate(self, rate)
    }
    fn set_slack(&self, slack: Slack) -> Result<(), BuildError> {
        Pacer::set_slack(self, slack)
    }
    fn set_limit(&self, rate: Rate, slack: Slack) -> Result<(), BuildError> {
        Pacer::set_limit(self, rate, slack)
    }
    fn reset(&self) {
        Pacer::reset(self);
    }
    fn rate(&self) -> Option<Rate> {
        Some(Pacer::rate(self))
    }
    fn slack(&self) -> u64 {
        Pacer::slack(self)
    }
    fn available(&self) -> u64 {
        Pacer::available(self)
    }
    fn next_free(&self) -> Duration {
        Pacer::next_free(self)
    }
}
