//! Where an in-process limiter keeps its state word, and how it updates it
//! atomically: [`AtomicStore`] (a CAS loop on one padded `AtomicU64`),
//! [`MutexStore`] (the word under a `Mutex`) and [`WarmStore`] (the word and
//! Guava's coldness under a `Mutex`). [`Pacer`](crate::limiter::Pacer) is the one
//! limiter type over each; [`AtomicLimiter`](crate::AtomicLimiter),
//! [`MutexLimiter`](crate::MutexLimiter) and
//! [`WarmUpLimiter`](crate::WarmUpLimiter) name the three.
//!
//! The first two run [`schedule::step`](crate::model::schedule::step) and
//! nothing else, so they decide alike; the warm-up store runs `warm_up`'s
//! step, which is `schedule::step` when the warm-up period is 0. The property tests check
//! each against its step, decision for decision, and the loom models check
//! the CAS loop.
//!
//! What a take booked, and the one rule that undoes it, is a [`Booking`]:
//! the same for these stores, the keyed one and the remote ones.

pub(crate) mod atomic;
mod booking;
mod mutex;
mod warm;
pub(crate) mod window;

pub use atomic::AtomicStore;
pub use booking::Booking;
pub use mutex::MutexStore;
pub use warm::WarmStore;

/// A store of one limiter's state word and its parameters. Sealed:
/// paceline's three stores are the only ones (a store of your own can run
/// [`schedule::step`](crate::model::schedule::step) directly), and its
/// methods are paceline's own.
pub trait Store: sealed::Store {}

impl<T: sealed::Store> Store for T {}

pub(crate) mod sealed {
    use crate::model::schedule::{self, Admit, Deny, Grant, Params};

    /// What a [`Store`](super::Store) does.
    pub trait Store: Send + Sync {
        /// The name of the limiter over this store, for `Debug`.
        const LIMITER: &'static str;

        /// A store holding `tat` with `params` and a warm-up period of
        /// `warm_up` ns (0 but for `WarmStore`).
        fn new(tat: u64, params: Params, warm_up: u64) -> Self;

        /// Runs the step on the current state and stores its result
        /// atomically with respect to every other update; with the grant,
        /// the parameters the step ran under (what a take's answer reads
        /// its state by).
        fn update(&self, now: u64, cost: u64, admit: Admit) -> Result<(Grant, Params), Deny>;

        /// [`update`](Self::update), with the coldness the update left and
        /// the warm-up period, ns (both 0 but for `WarmStore`).
        #[inline(always)]
        fn update_warm(
            &self,
            now: u64,
            cost: u64,
            admit: Admit,
        ) -> Result<(Grant, Params, u64, u64), Deny> {
            let (grant, params) = self.update(now, cost, admit)?;
            Ok((grant, params, 0, 0))
        }

        /// Reads the state and the parameters it is paced by, consistently
        /// enough for a question that consumes nothing.
        fn peek(&self) -> (u64, Params);

        /// Whether a request of `cost` would be admitted at `now` without
        /// waiting. Consumes nothing.
        fn can_take(&self, now: u64, cost: u64) -> bool {
            let (tat, params) = self.peek();
            schedule::step(tat, now, cost, params, Admit::Within(0)).is_ok()
        }

        /// How many permits one request could take at `now` without waiting.
        fn available(&self, now: u64) -> u64 {
            let (tat, params) = self.peek();
            schedule::available(tat, now, params)
        }

        /// The most permits one request could take at once at rest, as of
        /// `now`: `slack + 1` (fewer for a cold `WarmStore`).
        fn burst(&self, _now: u64) -> u64 {
            self.peek().1.slack().saturating_add(1)
        }

        /// Publishes `params` (interval and slack as one unit) and
        /// [rebases](schedule::rebase) the state at `now`. Calls are
        /// serialized by the caller.
        fn set_params(&self, now: u64, params: Params);

        /// Puts the state back to `tat` ([`FRESH`](schedule::FRESH) or
        /// [`FULL`](schedule::FULL)), as [`new`](Store::new) made it (cold
        /// again, for `WarmStore`), atomically with respect to every update;
        /// the parameters stay. Calls are serialized by the caller, with
        /// [`set_params`](Store::set_params).
        fn reset(&self, tat: u64);

        /// Puts `grant` back (state `grant.next` → `grant.prev`) if no one
        /// has updated the state since; `true` when it did.
        fn give_back(&self, grant: Grant) -> bool;

        /// Settles a booking of `booked` permits whose permit went at
        /// `went` with its `actual` cost ([`schedule::settle`]), on the
        /// state it finds and in the parameters in force, atomically with
        /// respect to every other update; the state it found and the state
        /// it left. The clock is read by `now` after the state (again on a
        /// retry): a refund reckons with the time since its permit went, so
        /// a reading older than the state would give back too much. A refund of a
        /// booking made before a reset or a change of parameters must not
        /// come here: the limiter drops it by its generation, under the
        /// lock its changes take, as it drops an undo
        /// ([`Booking`](super::Booking)); an excess may (a take at the
        /// settle is sound in any parameters).
        fn settle(&self, now: impl Fn() -> u64, went: u64, booked: u64, actual: u64) -> (u64, u64);
    }
}

#[cfg(test)]
#[cfg(not(paceline_loom))]
mod tests;
