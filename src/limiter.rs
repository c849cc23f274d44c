//! The [`Limiter`] trait: the calls every paceline limiter answers, object
//! safe so that `Box<dyn Limiter>` or `Arc<dyn Limiter>` can hold any of them.

use std::time::Duration;

use crate::error::{BuildError, TakeError};
use crate::rate::Rate;

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
    /// Blocks until the next permit's slot, and returns the clock time it was
    /// scheduled at (since the clock's origin). Like uber's `Take()`.
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

/// The inherent methods of a limiter over [`Core`](crate::pacer::Core) (the
/// type must have a `core` field) and its [`Limiter`] impl: written once for
/// [`AtomicLimiter`](crate::AtomicLimiter) and
/// [`MutexLimiter`](crate::MutexLimiter), which differ only in their store.
macro_rules! impl_methods {
    ($ty:ident) => {
        impl<C: $crate::Clock> $ty<C> {
            /// Blocks until the next permit's slot, and returns the clock time
            /// it was scheduled at (since the clock's origin), like uber's
            /// `Take()`. A permit covered by banked credit returns at once.
            ///
            /// Never panics. How it waits is the builder's
            /// [`wait`](crate::Builder::wait) strategy.
            #[inline]
            pub fn take(&self) -> ::std::time::Duration {
                self.core.take()
            }

            /// Blocks until `cost` permits are paid for, as one request ("pay
            /// first": the whole cost must fit before it proceeds, so a large
            /// request waits instead of overdrawing the burst). A cost of 0
            /// returns at once and changes nothing.
            ///
            /// # Errors
            /// [`TakeError::CostTooLarge`](crate::TakeError::CostTooLarge)
            /// when `cost` intervals span over 146 years; nothing is stored.
            pub fn take_n(&self, cost: u64) -> Result<::std::time::Duration, $crate::TakeError> {
                self.core.take_n(cost)
            }

            /// Takes a permit if one is free now; never blocks. A refusal
            /// stores nothing.
            ///
            /// # Errors
            /// [`TakeError::RetryAfter`](crate::TakeError::RetryAfter) with
            /// how long until it would be admitted.
            #[inline]
            pub fn try_take(&self) -> Result<(), $crate::TakeError> {
                self.core.try_take_n(1)
            }

            /// Takes `cost` permits if they are free now; never blocks. A
            /// refusal stores nothing.
            ///
            /// # Errors
            /// [`TakeError::RetryAfter`](crate::TakeError::RetryAfter);
            /// [`TakeError::ExceedsBurst`](crate::TakeError::ExceedsBurst)
            /// when `cost > slack + 1`, which no wait makes possible;
            /// [`TakeError::CostTooLarge`](crate::TakeError::CostTooLarge).
            #[inline]
            pub fn try_take_n(&self, cost: u64) -> Result<(), $crate::TakeError> {
                self.core.try_take_n(cost)
            }

            /// Takes a permit and waits for it only if its slot is at most
            /// `max_wait` away; otherwise fails at once, storing nothing: the
            /// queue ahead is longer than the caller may wait.
            ///
            /// # Errors
            /// [`TakeError::QueueFull`](crate::TakeError::QueueFull) with the
            /// wait it would have needed.
            pub fn take_timeout(
                &self,
                max_wait: ::std::time::Duration,
            ) -> Result<::std::time::Duration, $crate::TakeError> {
                self.core.take_n_timeout(1, max_wait)
            }

            /// [`take_timeout`](Self::take_timeout) for `cost` permits.
            ///
            /// # Errors
            /// [`TakeError::QueueFull`](crate::TakeError::QueueFull);
            /// [`TakeError::ExceedsBurst`](crate::TakeError::ExceedsBurst)
            /// when even a limiter at rest could not admit `cost` within
            /// `max_wait`; [`TakeError::CostTooLarge`](crate::TakeError::CostTooLarge).
            pub fn take_n_timeout(
                &self,
                cost: u64,
                max_wait: ::std::time::Duration,
            ) -> Result<::std::time::Duration, $crate::TakeError> {
                self.core.take_n_timeout(cost, max_wait)
            }

            /// Whether [`try_take_n(cost)`](Self::try_take_n) would succeed
            /// now. Consumes nothing (another thread may take first).
            pub fn can_take(&self, cost: u64) -> bool {
                self.core.can_take(cost)
            }

            /// Changes the rate from now on: slots already handed out stand,
            /// later requests are spaced by the new interval. Safe to call
            /// while other threads take; each grant is paced by one rate or
            /// the other, and once one grant is paced at the new rate, no
            /// grant reserved after it is paced at the old.
            ///
            /// # Errors
            /// [`BuildError::SlackTooLarge`](crate::BuildError::SlackTooLarge)
            /// when the slack at the new rate banks over 146 years; the rate
            /// is then unchanged.
            pub fn set_rate(&self, rate: $crate::Rate) -> Result<(), $crate::BuildError> {
                self.core.set_rate(rate)
            }

            /// The rate in force.
            pub fn rate(&self) -> $crate::Rate {
                self.core.rate()
            }

            /// The slack, in permits: the burst is `slack + 1`.
            pub fn slack(&self) -> u64 {
                self.core.slack()
            }

            /// How the blocking calls wait.
            pub fn wait_strategy(&self) -> $crate::Wait {
                self.core.wait_strategy()
            }

            /// How many permits one request could take now without waiting,
            /// from 0 to `slack + 1`.
            pub fn available(&self) -> u64 {
                self.core.available()
            }

            /// How long until a permit is free (zero: one is free now).
            pub fn next_free(&self) -> ::std::time::Duration {
                self.core.next_free()
            }

            /// The limiter's clock.
            pub fn clock(&self) -> &C {
                &self.core.clock
            }

            /// Loom builds only (`--cfg paceline_loom`), for `loom-tests/`:
            /// reserves `cost` permits without waiting, through the same
            /// `Core::reserve_cancellable` as the async takes.
            #[cfg(paceline_loom)]
            #[doc(hidden)]
            pub fn __reserve(
                &self,
                cost: u64,
                admit: $crate::schedule::Admit,
            ) -> Result<$crate::__Reservation, $crate::TakeError> {
                self.core.reserve_cancellable(cost, admit).map(|(_, r)| r)
            }

            /// Loom builds only (`--cfg paceline_loom`), for `loom-tests/`:
            /// `Core::give_back`, as a dropped async take runs it; `true`
            /// when the reservation was undone.
            #[cfg(paceline_loom)]
            #[doc(hidden)]
            pub fn __give_back(&self, reservation: $crate::__Reservation) -> bool {
                self.core.give_back(reservation)
            }
        }

        impl<C: $crate::Clock> $crate::Limiter for $ty<C> {
            fn take(&self) -> ::std::time::Duration {
                self.take()
            }
            fn take_n(&self, cost: u64) -> Result<::std::time::Duration, $crate::TakeError> {
                self.take_n(cost)
            }
            fn try_take(&self) -> Result<(), $crate::TakeError> {
                self.try_take()
            }
            fn try_take_n(&self, cost: u64) -> Result<(), $crate::TakeError> {
                self.try_take_n(cost)
            }
            fn take_n_timeout(
                &self,
                cost: u64,
                max_wait: ::std::time::Duration,
            ) -> Result<::std::time::Duration, $crate::TakeError> {
                self.take_n_timeout(cost, max_wait)
            }
            fn can_take(&self, cost: u64) -> bool {
                self.can_take(cost)
            }
            fn set_rate(&self, rate: $crate::Rate) -> Result<(), $crate::BuildError> {
                self.set_rate(rate)
            }
            fn rate(&self) -> Option<$crate::Rate> {
                Some(self.rate())
            }
            fn slack(&self) -> u64 {
                self.slack()
            }
            fn available(&self) -> u64 {
                self.available()
            }
            fn next_free(&self) -> ::std::time::Duration {
                self.next_free()
            }
        }
    };
}

pub(crate) use impl_methods;
