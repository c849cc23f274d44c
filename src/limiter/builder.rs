//! [`Builder`]: configures an [`AtomicLimiter`](crate::AtomicLimiter), a
//! [`MutexLimiter`](crate::MutexLimiter) or (feature `tokio`) an
//! `AsyncLimiter`; and the constructors of [`Pacer`] that make one.

use std::fmt;
use std::time::Duration;

use crate::clock::{Clock, DefaultClock};
use crate::limiter::pacer::{Config, Pacer};
use crate::observe::stats::Counting;
use crate::store::{Store, WarmStore};
use crate::values::error::BuildError;
use crate::values::rate::Rate;
use crate::values::slack::Slack;
use crate::wait::Wait;

impl<S: Store> Pacer<S> {
    /// A limiter at `rate` with the default slack ([`Slack::DEFAULT`]: 10
    /// permits, as uber's, or 10 ms of permits if that is more), on the
    /// [`DefaultClock`], waiting by sleeping.
    ///
    /// # Panics
    /// If ten intervals of `rate` exceed 146 years (an interval over about
    /// 14 years); [`builder`](Self::builder) reports that as an error.
    pub fn new(rate: Rate) -> Self {
        Self::builder(rate)
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A builder for a limiter at `rate`, to set its slack, clock, wait
    /// strategy or initial credit.
    ///
    /// ```
    /// use paceline::{AtomicLimiter, clock::ManualClock, Rate, Wait};
    ///
    /// let limiter = AtomicLimiter::builder("500/s".parse()?)
    ///     .slack(0)                 // uber's WithoutSlack
    ///     .wait(Wait::PRECISE)      // sleep, then spin the last 150 µs
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(rate: Rate) -> Builder<Self> {
        Builder::new(rate, ClockChoice::Default(DefaultClock::new))
    }
}

/// Configures a limiter of type `L`; made by
/// [`AtomicLimiter::builder`](Pacer::builder),
/// [`MutexLimiter::builder`](Pacer::builder) or `AsyncLimiter::builder`.
///
/// ```
/// use paceline::{AtomicLimiter, Rate, clock::StdClock, Wait};
///
/// let limiter = AtomicLimiter::builder(Rate::per_second(100))
///     .slack(20)            // bank up to 20 permits (default: 10, or 10 ms)
///     .full_credit(true)    // start with them banked (default: none)
///     .wait(Wait::Sleep)    // the default
///     .clock(StdClock::new())
///     .build()?;
/// assert_eq!(limiter.available(), 21);
/// # Ok::<(), paceline::BuildError>(())
/// ```
#[must_use = "a builder does nothing until .build()"]
pub struct Builder<L: sealed::Build> {
    config: Config,
    clock: ClockChoice<L::Clock>,
}

/// The clock a builder will use: one given to it, or the default, made only
/// at `build`, so a builder whose clock is replaced never makes the default
/// one (quanta's clock costs about 15 µs to make, 0.6 ms the first time).
pub(crate) enum ClockChoice<C> {
    Given(C),
    Default(fn() -> C),
}

impl<L: sealed::Build> Builder<L> {
    /// A builder with `clock` chosen, or made at `build` unless
    /// [`clock`](Self::clock) replaces it first.
    pub(crate) fn new(rate: Rate, clock: ClockChoice<L::Clock>) -> Self {
        Builder {
            config: Config {
                rate,
                slack: Slack::DEFAULT,
                wait: Wait::default(),
                full_credit: false,
                warm_up: 0,
                counting: Counting::default(),
            },
            clock,
        }
    }

    /// How much unused time the limiter may bank for a later burst: a
    /// permit count (`.slack(20)`), a time (`.slack(Duration::from_millis(5))`,
    /// resolved to whole permits at the rate in force) or a [`Slack`].
    /// The default, [`Slack::DEFAULT`], is the larger of uber's 10 permits
    /// and 10 ms, which keeps the long-run rate exact through the stalls of
    /// a busy machine. 0 is uber's `WithoutSlack`: permits are strictly
    /// spaced by the interval.
    pub fn slack(mut self, slack: impl Into<Slack>) -> Self {
        self.config.slack = slack.into();
        self
    }

    /// Whether the limiter starts with its full slack banked. By default
    /// (`false`, uber's behaviour) a new limiter grants its first request at
    /// once (up to a burst of `slack + 1`) and banks credit only from then
    /// on, however late that first call: the next permit is one interval
    /// after it.
    pub fn full_credit(mut self, full: bool) -> Self {
        self.config.full_credit = full;
        self
    }

    /// Whether the limiter counts what it decides, for its `stats()`
    /// (default `false`: counting costs a few atomic additions per call,
    /// and nothing when off). See [`Stats`](crate::observe::stats::Stats).
    pub fn stats(mut self, on: bool) -> Self {
        self.config.counting.on = on;
        self
    }

    /// Counts what the limiter decides (as [`stats(true)`](Self::stats))
    /// and sends the counts to the [`metrics`](https://docs.rs/metrics)
    /// facade too, labelled `limiter = name`, through the recorder
    /// installed when the limiter is built. The series are those of
    /// [`stats::prometheus`](crate::observe::stats::prometheus).
    #[cfg(feature = "metrics")]
    pub fn metrics(mut self, name: impl Into<String>) -> Self {
        self.config.counting.facade = Some(name.into());
        self
    }

    /// How takes wait for their slot (default [`Wait::Sleep`]).
    pub fn wait(mut self, wait: Wait) -> Self {
        self.config.wait = wait;
        self
    }

    /// The clock to read and wait on (default [`DefaultClock`](crate::clock::DefaultClock)).
    pub fn clock<C2: Clock>(self, clock: C2) -> Builder<L::With<C2>> {
        Builder {
            config: self.config,
            clock: ClockChoice::Given(clock),
        }
    }

    /// The limiter.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when `slack * interval` is over 146 years.
    pub fn build(self) -> Result<L, BuildError> {
        let clock = match self.clock {
            ClockChoice::Given(clock) => clock,
            ClockChoice::Default(make) => make(),
        };
        L::build(self.config, clock)
    }
}

impl<S: Store, C: Clock> Builder<Pacer<S, C>> {
    /// Guava's warm-up (`SmoothWarmingUp`, cold factor 3): after idle the
    /// limiter starts cold, its permits spaced by three intervals, and
    /// speeds up linearly to the rate as it is used, over `period` of use;
    /// idle for `period`, it is cold again. It starts cold. Builds a
    /// [`WarmUpLimiter`](crate::WarmUpLimiter), with the same methods.
    ///
    /// Where it differs from Guava (it pays first, and the slack still
    /// absorbs a caller's lateness: with a slack of 0 the decisions are
    /// Guava's): the guide's [warm-up](crate::guide::warm_up); the step:
    /// [`warm_up`](crate::model::warm_up). Two
    /// words of state do not fit one 64-bit CAS, so a warming-up limiter
    /// decides under a lock, as [`MutexLimiter`](crate::MutexLimiter) does.
    ///
    /// ```
    /// use paceline::{AtomicLimiter, clock::ManualClock, Rate};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::with_auto_advance();
    /// let limiter = AtomicLimiter::builder(Rate::per_second(2))
    ///     .slack(0)
    ///     .warm_up(Duration::from_secs(4))
    ///     .clock(clock)
    ///     .build()?;
    /// let slots: Vec<f64> = (0..6).map(|_| limiter.take().at().as_secs_f64()).collect();
    /// // Guava's ramp: 1.375 s, 1.125 s, 0.875 s, 0.625 s, then 0.5 s apart.
    /// assert_eq!(slots, [0.0, 1.375, 2.5, 3.375, 4.0, 4.5]);
    /// # Ok::<(), paceline::BuildError>(())
    /// ```
    ///
    /// A `period` over 146 years fails [`build`](Self::build) with
    /// [`BuildError::WarmUpTooLong`].
    pub fn warm_up(self, period: Duration) -> Builder<Pacer<WarmStore, C>> {
        let warm_up = crate::wait::nanos(period);
        Builder {
            config: Config {
                warm_up,
                ..self.config
            },
            clock: self.clock,
        }
    }
}

impl<L: sealed::Build> fmt::Debug for Builder<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("rate", &self.config.rate)
            .field("slack", &self.config.slack)
            .field("wait", &self.config.wait)
            .field("full_credit", &self.config.full_credit)
            .field("warm_up", &Duration::from_nanos(self.config.warm_up))
            .finish_non_exhaustive()
    }
}

pub(crate) mod sealed {
    use super::*;

    /// The limiters a [`Builder`] builds. Sealed: not for implementing.
    pub trait Build: Sized {
        /// The clock the limiter runs on.
        type Clock: Clock;
        /// The same limiter on another clock.
        type With<C2: Clock>: Build<Clock = C2>;
        /// Builds it.
        #[doc(hidden)]
        fn build(config: Config, clock: Self::Clock) -> Result<Self, BuildError>;
    }

    impl<S: Store, C: Clock> Build for Pacer<S, C> {
        type Clock = C;
        type With<C2: Clock> = Pacer<S, C2>;
        fn build(config: Config, clock: C) -> Result<Self, BuildError> {
            Pacer::from_config(config, clock)
        }
    }
}
