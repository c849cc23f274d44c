//! The take interface every limiter kind answers: [`Take`] (blocking) and
//! [`AsyncTake`] (futures), with what a take found ([`Taken`], [`State`])
//! and the one error ([`Error`]).
//!
//! A fitting (the HTTP layer, paced byte streams, the CLI, iterator pacing)
//! is written once against these traits, and every kind fits it: the direct
//! limiters ([`AtomicLimiter`](crate::AtomicLimiter),
//! [`MutexLimiter`](crate::MutexLimiter),
//! [`WarmUpLimiter`](crate::WarmUpLimiter), [`Unlimited`](crate::Unlimited)),
//! a keyed limiter by key, the remote limiters (Redis, PostgreSQL), each
//! async face, and a limiter of your own.
//!
//! # Keys
//!
//! Every call names a key. A keyed or remote limiter limits each key on its
//! own; a direct limiter has one limit, implements the traits for every key
//! type, and ignores the key. Generic code over one limit uses the unit key,
//! `Take<()>`, which is the default: `dyn Take` is a direct limiter behind
//! a pointer.
//!
//! # The time a take returns
//!
//! [`Taken::at`] (and the `Duration` a kind's own `take` returns) is the
//! moment the permit went, as a `Duration` on **the clock that decided
//! it**: its slot, or the time of the decision when a permit was free at
//! once. For an in-process limiter that is the limiter's clock, since the
//! clock's origin (for the default clock, the limiter's creation). For a
//! remote limiter it is the server's clock, as Unix time, so the times of
//! every process sharing a key are on one clock and compare (the wait is
//! counted on the local clock from the reply's arrival, so a permit is
//! never early by the server's); a permit a fail-open policy admitted
//! while the server could not answer went at the local Unix time.
//! [`Unlimited`](crate::Unlimited) has no clock and answers zero.
//!
//! # Implementing it
//!
//! Implement [`Take::take_within`] (or [`AsyncTake::take_within`]) and the
//! three questions (`can_take`, `state`, `limit_for`); the six takes
//! (`take`, `take_n`, `try_take`, `try_take_n`, `take_timeout`,
//! `take_n_timeout`) are provided, each that one call with its
//! [`Within`]. The test suite
//! `tests/interface.rs` runs the same cases against every kind.

use std::future::Future;
use std::time::Duration;

pub use crate::limiter::booked::Booked;
pub use crate::limiter::found::{State, Taken};
use crate::model::schedule::Admit;
pub use crate::values::error::{Delay, Error};
use crate::values::limit::Limit;

/// How long a take may wait for its permits: the one thing `take`,
/// `try_take` and `take_timeout` differ in, and the argument of the one
/// call a kind implements ([`Take::take_within`],
/// [`AsyncTake::take_within`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Within {
    /// Not at all: taken if free now, else refused with
    /// [`Error::RetryAfter`] (`try_take`).
    Now,
    /// Up to this long: else refused at once with [`Error::QueueFull`]
    /// (`take_timeout`).
    Max(Duration),
    /// As long as its slot is away (`take`).
    Any,
}

impl Within {
    /// The step's admission for this wait.
    #[inline]
    pub(crate) fn admit(self) -> Admit {
        match self {
            Within::Now => Admit::Within(0),
            Within::Max(max_wait) => Admit::Within(crate::wait::nanos(max_wait)),
            Within::Any => Admit::Always,
        }
    }

    /// A refusal as this wait reports it: a bounded wait's is the full
    /// queue's, even of a wait of zero.
    #[inline]
    pub(crate) fn refusal(self, e: Error) -> Error {
        match self {
            Within::Max(max_wait) => e.timed_out(max_wait),
            _ => e,
        }
    }
}

/// The six takes [`Take`] and [`AsyncTake`] provide alike, each the one
/// call a kind implements with its [`Within`]: `$out` is what a take
/// answers (a `Result`, or a future of one).
macro_rules! takes {
    ($out:ty) => {
        /// Takes a permit of `key`'s limit, waiting until its slot (a
        /// blocking take blocks, an async one waits as a task), and returns
        /// what it found: [`take_within(key, 1, Within::Any)`](Self::take_within).
        ///
        /// # Errors
        /// As [`take_within`](Self::take_within).
        #[inline]
        fn take(&self, key: &K) -> $out {
            self.take_within(key, 1, Within::Any)
        }

        /// Takes `cost` permits, as one request, waiting until they are
        /// paid for.
        ///
        /// # Errors
        /// As [`take_within`](Self::take_within).
        #[inline]
        fn take_n(&self, key: &K, cost: u64) -> $out {
            self.take_within(key, cost, Within::Any)
        }

        /// Takes a permit if one is free now; never waits.
        ///
        /// # Errors
        /// As [`take_within`](Self::take_within).
        #[inline]
        fn try_take(&self, key: &K) -> $out {
            self.take_within(key, 1, Within::Now)
        }

        /// Takes `cost` permits if they are free now; never waits.
        ///
        /// # Errors
        /// As [`take_within`](Self::take_within).
        #[inline]
        fn try_take_n(&self, key: &K, cost: u64) -> $out {
            self.take_within(key, cost, Within::Now)
        }

        /// Takes a permit, waiting for it only if its slot is at most
        /// `max_wait` away; otherwise fails at once, storing nothing.
        ///
        /// # Errors
        /// As [`take_within`](Self::take_within).
        #[inline]
        fn take_timeout(&self, key: &K, max_wait: Duration) -> $out {
            self.take_within(key, 1, Within::Max(max_wait))
        }

        /// [`take_timeout`](Self::take_timeout) for `cost` permits.
        ///
        /// # Errors
        /// As [`take_within`](Self::take_within).
        #[inline]
        fn take_n_timeout(&self, key: &K, cost: u64, max_wait: Duration) -> $out {
            self.take_within(key, cost, Within::Max(max_wait))
        }
    };
}

/// The blocking calls every limiter answers, for a key (see [the module
/// docs](crate::limiter::take)). Object safe: `Box<dyn Take>` holds any direct
/// limiter, `Arc<dyn Take<str>>` any limiter keyed by text.
///
/// ```
/// use paceline::{AtomicLimiter, Rate, Take, Unlimited};
/// use std::sync::Arc;
///
/// // One function, any kind.
/// fn send(limiter: &dyn Take<str>, user: &str) -> Result<u64, paceline::Error> {
///     let taken = limiter.try_take(user)?;
///     Ok(taken.available()) // what is left, found by the take itself
/// }
///
/// # #[cfg(feature = "keyed")]
/// # {
/// let per_user = paceline::KeyedLimiter::<String>::new(Rate::per_second(10));
/// assert_eq!(send(&per_user, "alice")?, 10); // a new key has its burst of 11
/// # }
/// let global = AtomicLimiter::new(Rate::per_second(100));
/// assert_eq!(send(&global, "alice")?, 0); // a new limiter has no credit yet
/// assert_eq!(send(&Unlimited, "alice")?, u64::MAX);
///
/// let off: Arc<dyn Take> = Arc::new(Unlimited); // a direct limiter: key `()`
/// off.take(&())?;
/// # Ok::<(), paceline::Error>(())
/// ```
///
/// Every method returns without panicking; only the waiting ones block.
/// A kind implements [`take_within`](Self::take_within) and the three
/// questions; the six takes are that one call.
pub trait Take<K: ?Sized = ()>: Send + Sync {
    /// Takes `cost` permits of `key`'s limit, as one request ("pay first":
    /// the whole cost must fit the budget before it goes), waiting for them
    /// as `within` allows, and returns what it found. A refusal stores
    /// nothing.
    ///
    /// # Errors
    /// [`Error::RetryAfter`] ([`Within::Now`]), [`Error::QueueFull`]
    /// ([`Within::Max`]), [`Error::ExceedsBurst`] when no wait allowed
    /// helps, [`Error::CostTooLarge`]; a keyed limiter's
    /// [`Error::TooManyKeys`]; a remote limiter's failures its fail policy
    /// does not admit.
    fn take_within(&self, key: &K, cost: u64, within: Within) -> Result<Taken, Error>;

    /// Whether [`try_take_n(key, cost)`](Self::try_take_n) would succeed now.
    /// Consumes nothing.
    ///
    /// # Errors
    /// A remote limiter's failures (a fail-open policy answers `true`).
    fn can_take(&self, key: &K, cost: u64) -> Result<bool, Error>;

    /// `key`'s state now (one look; for a remote limiter one round trip).
    /// Consumes nothing.
    ///
    /// # Errors
    /// A remote limiter's failures, whatever its policy.
    fn state(&self, key: &K) -> Result<State, Error>;

    /// The limit in force for `key` (an override, if it has one), its slack
    /// in permits; never a round trip. `None` when nothing limits.
    fn limit_for(&self, key: &K) -> Option<Limit>;

    /// Takes `cost` permits as [`take_within`](Self::take_within) does, an
    /// estimate, and hands back the booking, to
    /// [`settle`](Self::settle) with the actual cost once the call is done
    /// (dropped unsettled, the estimate stands: see [`Booked`]).
    ///
    /// The default takes and keeps no booking: for a limiter of your own.
    ///
    /// # Errors
    /// As [`take_within`](Self::take_within).
    fn book(&self, key: &K, cost: u64, within: Within) -> Result<Booked, Error> {
        let taken = self.take_within(key, cost, within)?;
        Ok(Booked::taken_only(taken, cost))
    }

    /// Settles `booked` on `key` with its `actual` cost: the difference
    /// goes back, capped, or the excess is charged now, never refused (see
    /// [`Booked`]). Every kind of paceline's settles exactly, on the state
    /// it keeps. The default charges an excess by a take of it, waiting for
    /// its slot, and drops a refund: for a limiter of your own.
    ///
    /// # Errors
    /// [`Error::Config`] for a booking made by another limiter or on
    /// another key (nothing changes); a remote limiter's failures its fail
    /// policy does not admit.
    fn settle(&self, key: &K, booked: Booked, actual: u64) -> Result<(), Error> {
        match actual.checked_sub(booked.cost()) {
            Some(excess @ 1..) => self.take_within(key, excess, Within::Any).map(drop),
            _ => Ok(()),
        }
    }

    takes!(Result<Taken, Error>);
}

/// The calls every async face answers, as futures (see [the module
/// docs](crate::limiter::take)): `AsyncLimiter`, `AsyncKeyedLimiter`, the async
/// Redis, PostgreSQL and memcached limiters, [`Unlimited`](crate::Unlimited),
/// and a limiter of your own. The same calls as [`Take`]'s, with the same
/// arguments and answers, waiting as a task.
///
/// Its futures are `Send`; it is not object safe (a fitting that must hold
/// any limiter is generic over it, or erases it behind its own boxed
/// future, as the HTTP layer does).
///
/// # Cancel safety
/// An implementation's futures, dropped before they complete, leave the
/// limit as if not asked, or give their booked slot back while no one has
/// booked after it, as paceline's own do ([cancel safety](crate::guide::waiting#cancel-safety)).
pub trait AsyncTake<K: ?Sized + Sync = ()>: Send + Sync {
    /// As [`Take::take_within`], waiting as a task.
    fn take_within(
        &self,
        key: &K,
        cost: u64,
        within: Within,
    ) -> impl Future<Output = Result<Taken, Error>> + Send;

    /// As [`Take::can_take`].
    fn can_take(&self, key: &K, cost: u64) -> impl Future<Output = Result<bool, Error>> + Send;

    /// As [`Take::state`].
    fn state(&self, key: &K) -> impl Future<Output = Result<State, Error>> + Send;

    /// As [`Take::limit_for`]: never a round trip, never awaits.
    fn limit_for(&self, key: &K) -> Option<Limit>;

    /// Answers [`try_take_n`](Self::try_take_n) without awaiting when the
    /// limiter decides in process (`Some`); `None` when the answer needs a
    /// round trip, and then nothing was asked. A fitting on a hot path (the
    /// HTTP layer) uses it to skip a future. The default answers `None`.
    fn try_take_n_now(&self, key: &K, cost: u64) -> Option<Result<Taken, Error>> {
        let _ = (key, cost);
        None
    }

    /// As [`Take::book`], waiting as a task.
    ///
    /// # Cancel safety
    /// Dropped while it waits for its slot, it gives the slot back as a
    /// take does; once it has answered, the booking is the caller's.
    fn book(
        &self,
        key: &K,
        cost: u64,
        within: Within,
    ) -> impl Future<Output = Result<Booked, Error>> + Send {
        async move {
            let taken = self.take_within(key, cost, within).await?;
            Ok(Booked::taken_only(taken, cost))
        }
    }

    /// As [`Take::settle`]: for a remote limiter one round trip.
    ///
    /// # Cancel safety
    /// Dropped before it answers, a settle may or may not have been
    /// applied (a remote one may have reached its server); the booking is
    /// gone either way, and the estimate or the settle stands.
    fn settle(
        &self,
        key: &K,
        booked: Booked,
        actual: u64,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        async move {
            match actual.checked_sub(booked.cost()) {
                Some(excess @ 1..) => self.take_within(key, excess, Within::Any).await.map(drop),
                _ => Ok(()),
            }
        }
    }

    takes!(impl Future<Output = Result<Taken, Error>> + Send);
}

/// One key of a keyed or remote limiter, as a direct limiter: every call
/// takes from that key's limit (its own rate and slack, overrides
/// included), and the key it is handed (`()`) is ignored.
///
/// It answers [`Take`] when `L` answers `Take<K>` (a `&KeyedLimiter<K>`, an
/// `Arc` of one, a `RedisLimiter` with a `String` key), and [`AsyncTake`]
/// when `L` answers `AsyncTake<K>` (an `AsyncKeyedLimiter<K>`, an
/// `AsyncRedisLimiter`). So a fitting written for one limit takes one key of
/// any limiter: a paced byte stream per tenant
/// ([`io`](crate::io), which re-exports it), a `PaceLayer` on one Redis key.
///
/// ```
/// # #[cfg(feature = "keyed")]
/// # fn main() -> Result<(), paceline::Error> {
/// use paceline::{KeyedLimiter, take::OnKey, Rate, Take};
///
/// let per_tenant = KeyedLimiter::<String>::new(Rate::per_second(10));
/// let tenant_a = OnKey::new(&per_tenant, "a".to_string());
/// tenant_a.try_take(&())?;
/// assert_eq!(per_tenant.state(&"a".to_string())?.available(), 10); // of 11
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
    /// Takes through `limiter` on `key`.
    pub fn new(limiter: L, key: K) -> Self {
        OnKey { limiter, key }
    }

    /// The limiter.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    /// The limiter, to change it in place (a lease sets its limit).
    pub fn limiter_mut(&mut self) -> &mut L {
        &mut self.limiter
    }

    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<L: Take<K>, K: Send + Sync> Take for OnKey<L, K> {
    fn take_within(&self, _: &(), cost: u64, within: Within) -> Result<Taken, Error> {
        self.limiter.take_within(&self.key, cost, within)
    }
    fn can_take(&self, _: &(), cost: u64) -> Result<bool, Error> {
        self.limiter.can_take(&self.key, cost)
    }
    fn state(&self, _: &()) -> Result<State, Error> {
        self.limiter.state(&self.key)
    }
    fn limit_for(&self, _: &()) -> Option<Limit> {
        self.limiter.limit_for(&self.key)
    }
    fn book(&self, _: &(), cost: u64, within: Within) -> Result<Booked, Error> {
        self.limiter.book(&self.key, cost, within)
    }
    fn settle(&self, _: &(), booked: Booked, actual: u64) -> Result<(), Error> {
        self.limiter.settle(&self.key, booked, actual)
    }
}

impl<L: AsyncTake<K>, K: Send + Sync> AsyncTake for OnKey<L, K> {
    fn take_within(
        &self,
        _: &(),
        cost: u64,
        within: Within,
    ) -> impl Future<Output = Result<Taken, Error>> + Send {
        self.limiter.take_within(&self.key, cost, within)
    }
    fn can_take(&self, _: &(), cost: u64) -> impl Future<Output = Result<bool, Error>> + Send {
        self.limiter.can_take(&self.key, cost)
    }
    fn state(&self, _: &()) -> impl Future<Output = Result<State, Error>> + Send {
        self.limiter.state(&self.key)
    }
    fn limit_for(&self, _: &()) -> Option<Limit> {
        self.limiter.limit_for(&self.key)
    }
    fn try_take_n_now(&self, _: &(), cost: u64) -> Option<Result<Taken, Error>> {
        self.limiter.try_take_n_now(&self.key, cost)
    }
    fn book(
        &self,
        _: &(),
        cost: u64,
        within: Within,
    ) -> impl Future<Output = Result<Booked, Error>> + Send {
        self.limiter.book(&self.key, cost, within)
    }
    fn settle(
        &self,
        _: &(),
        booked: Booked,
        actual: u64,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.limiter.settle(&self.key, booked, actual)
    }
}
