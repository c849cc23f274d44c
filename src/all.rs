//! All or nothing over several limits: a request goes only if every limit
//! admits it, and then it has taken from each (a per-user limit and a
//! global one, say; requests per minute and tokens per minute).
//!
//! [`All`] is those limits as one limiter: it answers the take
//! interface ([`Take`]), for any key, which it ignores, as a
//! direct limiter does; [`AsyncAll`] is the same over async faces
//! ([`AsyncTake`]). Each part may cost its own: [`All::book_each`] books
//! one cost per part and hands back the bookings, which
//! [`All::settle_each`] settles with the actual costs once the call has
//! answered (a request's 1 and its tokens, known from the answer).
//!
//! ```
//! # #[cfg(feature = "keyed")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use paceline::all::All;
//! use paceline::{AtomicLimiter, KeyedLimiter, Rate, Take};
//!
//! let global = AtomicLimiter::builder(Rate::per_second(1))
//!     .slack(2)
//!     .full_credit(true) // a burst of 3 at once
//!     .build()?;
//! let per_user = KeyedLimiter::<String>::builder(Rate::per_second(1))
//!     .slack(1) // a burst of 2 per user
//!     .build()?;
//!
//! let alice = per_user.bucket("alice");
//! let both = All::new([&alice, &global]);
//! both.try_take(&())?;
//! both.try_take(&())?;
//! // alice's burst of 2 is spent: refused, and the global limit keeps its permit.
//! assert!(both.try_take(&()).is_err());
//! assert_eq!(global.available(), 1);
//! All::new([&per_user.bucket("bob"), &global]).try_take(&())?; // the global permit left
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "keyed"))]
//! # fn main() {}
//! ```
//!
//! The parts are any limiters of the unit key: a direct limiter, one key
//! of a keyed limiter (its `bucket(&key)`) or of a remote one
//! ([`OnKey`](crate::take::OnKey)), a lease, [`Unlimited`](crate::Unlimited),
//! a limiter of your own; their clocks may differ.
//!
//! # How it decides
//!
//! The parts are asked in order, each with its own step, as a lone call
//! would ([`Take::book`]), a bounded wait sharing one deadline. If one
//! refuses, the parts before it are given back what they granted, in
//! reverse order, and the call fails with that part's refusal. So nothing
//! is ever admitted that any one limit would not have admitted alone: each
//! limit's [window
//! bound](crate::guide::model#slack-and-burst-the-window-bound) holds,
//! whatever runs beside.
//!
//! # What a give-back returns
//!
//! A give-back is a settle at 0 ([`Take::settle`]): the permits go back to
//! the part's schedule even when others have taken from it since, less the
//! nanoseconds since they were booked (which accrue again as soon), and
//! never past its burst. It is dropped, and the permits stay spent, where
//! a settle drops a refund: a part whose schedule has permits waiting
//! ahead, a change of its limit in between, a remote part whose server
//! cannot answer, a limiter of your own. So **put the most contended limit
//! last**: a refusal by the last part has nothing after it to give back. A
//! part's refusal is counted in its `stats()` as usual.
//!
//! A waiting take books each part in turn, each waiting for its slot: the
//! call goes once the last has, and a part whose slot came earlier sees
//! its permit used late, which never breaks its bound.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use crate::limiter::take::{AsyncTake, Booked, Error, State, Take, Taken, Within};
use crate::values::limit::Limit;

/// Several limits as one limiter: a take goes only if every part admits it
/// (see [the module docs](self)). Every call of [`Take`] answers for all
/// the parts, for any key, which it ignores:
///
/// - a take books every part in order, gives the earlier ones back on a
///   refusal and fails with that part's refusal, as it would alone
///   ([`Error::RetryAfter`], [`Error::QueueFull`],
///   [`Error::ExceedsBurst`], [`Error::TooManyKeys`], a remote part's
///   failures, ...);
/// - what a take found and [`state`](Take::state) are the binding
///   part's: the one with the fewest permits free (of equals, the one
///   whose next is furthest); [`limit_for`](Take::limit_for), which asks
///   no one, is the limit that admits least (the smallest burst, then the
///   slowest rate);
/// - [`can_take`](Take::can_take) is whether every part could.
#[derive(Clone, Copy)]
pub struct All<'a, const N: usize> {
    parts: [&'a dyn Take; N],
}

/// The bookings of one all-or-nothing take, one per part, in the parts'
/// order ([`All::book_each`], [`AsyncAll::book_each`]); dropped unsettled,
/// every estimate stands.
#[derive(Debug)]
pub struct AllBooked<const N: usize> {
    booked: [Booked; N],
}

impl<const N: usize> AllBooked<N> {
    /// Each part's booking, in the parts' order.
    pub fn each(&self) -> &[Booked; N] {
        &self.booked
    }

    /// What the binding part's take found: the fewest permits left.
    pub fn taken(&self) -> Taken {
        binding(self.booked.iter().map(Booked::taken))
    }
}

/// The binding one of `found`: the fewest free, then the furthest next.
fn binding<T: Found>(found: impl Iterator<Item = T>) -> T {
    found
        .min_by_key(|s| (s.available(), std::cmp::Reverse(s.next_free())))
        .unwrap_or_else(T::free)
}

/// What a take or a look found, as `binding` compares it.
trait Found {
    fn available(&self) -> u64;
    fn next_free(&self) -> Duration;
    fn free() -> Self;
}

impl Found for Taken {
    fn available(&self) -> u64 {
        Taken::available(self)
    }
    fn next_free(&self) -> Duration {
        Taken::next_free(self)
    }
    fn free() -> Taken {
        Taken::new(Duration::ZERO, FREE)
    }
}

impl Found for State {
    fn available(&self) -> u64 {
        State::available(self)
    }
    fn next_free(&self) -> Duration {
        State::next_free(self)
    }
    fn free() -> State {
        FREE
    }
}

/// No part: nothing limits.
const FREE: State = State::new(u64::MAX, Duration::ZERO, None);

/// How long a part may still wait, from `within` and the call's start.
fn left(within: Within, start: Instant) -> Within {
    match within {
        Within::Max(max) => Within::Max(max.saturating_sub(start.elapsed())),
        other => other,
    }
}

impl<'a, const N: usize> All<'a, N> {
    /// The limits `parts` as one, asked in this order (put the most
    /// contended last: see [what a give-back returns](self#what-a-give-back-returns)).
    pub fn new(parts: [&'a dyn Take; N]) -> All<'a, N> {
        All { parts }
    }

    /// Books `costs[i]` on part `i`, in order, all or nothing, waiting as
    /// `within` allows (one deadline for all), and hands back the
    /// bookings, to [`settle_each`](Self::settle_each) with the actual
    /// costs.
    ///
    /// # Errors
    /// The first refusal (or failure) of a part, after the parts before it
    /// were given back.
    pub fn book_each(&self, costs: [u64; N], within: Within) -> Result<AllBooked<N>, Error> {
        let start = Instant::now();
        let mut booked: Vec<Booked> = Vec::with_capacity(N);
        for (part, cost) in self.parts.iter().zip(costs) {
            match part.book(&(), cost, left(within, start)) {
                Ok(b) => booked.push(b),
                Err(refusal) => {
                    for (part, b) in self.parts.iter().zip(booked).rev() {
                        // A give-back that fails leaves its permits spent.
                        let _ = part.settle(&(), b, 0);
                    }
                    return Err(within.refusal(refusal));
                }
            }
        }
        let booked = booked.try_into().expect("one booking per part");
        Ok(AllBooked { booked })
    }

    /// Settles each part's booking with its `actual` cost, in order
    /// ([`Take::settle`]).
    ///
    /// # Errors
    /// The first part's settle that failed (a remote part's server); the
    /// parts after it are settled all the same.
    pub fn settle_each(&self, booked: AllBooked<N>, actual: [u64; N]) -> Result<(), Error> {
        let settled = self.parts.iter().zip(booked.booked).zip(actual);
        let results: Vec<_> = settled
            .map(|((part, b), actual)| part.settle(&(), b, actual))
            .collect();
        results.into_iter().collect()
    }
}

impl<K: ?Sized, const N: usize> Take<K> for All<'_, N> {
    fn take_within(&self, _key: &K, cost: u64, within: Within) -> Result<Taken, Error> {
        Ok(self.book_each([cost; N], within)?.taken())
    }

    fn can_take(&self, _key: &K, cost: u64) -> Result<bool, Error> {
        for part in &self.parts {
            if !part.can_take(&(), cost)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn state(&self, _key: &K) -> Result<State, Error> {
        let states: Result<Vec<State>, Error> = self.parts.iter().map(|p| p.state(&())).collect();
        Ok(binding(states?.into_iter()))
    }

    /// The limit that admits least, asking no one: the smallest burst,
    /// then the slowest rate.
    fn limit_for(&self, _key: &K) -> Option<Limit> {
        least(self.parts.iter().map(|p| p.limit_for(&())))
    }
}

/// The limit of `limits` that admits least: the smallest burst, then the
/// longest interval; `None` when none limits.
fn least(limits: impl Iterator<Item = Option<Limit>>) -> Option<Limit> {
    let limits = limits.flatten();
    limits.min_by_key(|l| (l.burst(), std::cmp::Reverse(l.rate().interval())))
}

impl<const N: usize> std::fmt::Debug for All<'_, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("All").field("parts", &N).finish()
    }
}

/// A boxed future, as [`AsyncPart`] answers.
type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// An async face as a part of [`AsyncAll`]: every [`AsyncTake`] of the
/// unit key is one (an `AsyncLimiter`, one key of an async keyed or remote
/// limiter through [`OnKey`](crate::take::OnKey)). Sealed: its methods are
/// paceline's own, boxing the futures so that parts of different kinds
/// fit one array.
pub trait AsyncPart: sealed::AsyncPart + Send + Sync {}

impl<T: AsyncTake + ?Sized> AsyncPart for T {}

mod sealed {
    use super::{AsyncTake, Booked, Boxed, Limit, State, Within};

    pub trait AsyncPart {
        fn book(&self, cost: u64, within: Within) -> Boxed<'_, Booked>;
        fn settle(&self, booked: Booked, actual: u64) -> Boxed<'_, ()>;
        fn state(&self) -> Boxed<'_, State>;
        fn can_take(&self, cost: u64) -> Boxed<'_, bool>;
        fn limit(&self) -> Option<Limit>;
    }

    impl<T: AsyncTake + ?Sized> AsyncPart for T {
        fn book(&self, cost: u64, within: Within) -> Boxed<'_, Booked> {
            Box::pin(AsyncTake::book(self, &(), cost, within))
        }
        fn settle(&self, booked: Booked, actual: u64) -> Boxed<'_, ()> {
            Box::pin(AsyncTake::settle(self, &(), booked, actual))
        }
        fn state(&self) -> Boxed<'_, State> {
            Box::pin(AsyncTake::state(self, &()))
        }
        fn can_take(&self, cost: u64) -> Boxed<'_, bool> {
            Box::pin(AsyncTake::can_take(self, &(), cost))
        }
        fn limit(&self) -> Option<Limit> {
            AsyncTake::limit_for(self, &())
        }
    }
}

/// Books `costs[i]` on `parts[i]` in turn through `book`, waiting as
/// `within` allows (one deadline for all), and on a refusal gives the parts
/// booked before it back through `give_back` (a settle at 0), in reverse
/// order: the bookings, or the refusing part's place and its refusal. The
/// one loop of every async all-or-nothing: [`AsyncAll`]'s, and the HTTP
/// layer's several limits.
pub(crate) async fn book_in_turn<'a, P: ?Sized>(
    parts: &[&'a P],
    costs: impl IntoIterator<Item = u64>,
    within: Within,
    book: impl Fn(&'a P, u64, Within) -> Boxed<'a, Booked>,
    give_back: impl Fn(&'a P, Booked) -> Boxed<'a, ()>,
) -> Result<Vec<Booked>, (usize, Error)> {
    let start = Instant::now();
    let mut booked: Vec<Booked> = Vec::with_capacity(parts.len());
    for (i, (part, cost)) in parts.iter().zip(costs).enumerate() {
        match book(part, cost, left(within, start)).await {
            Ok(b) => booked.push(b),
            Err(refusal) => {
                for (part, b) in parts.iter().zip(booked).rev() {
                    // A give-back that fails leaves its permits spent.
                    let _ = give_back(part, b).await;
                }
                return Err((i, within.refusal(refusal)));
            }
        }
    }
    Ok(booked)
}

/// [`All`] over async faces: the same decisions, as futures.
///
/// # Cancel safety
/// Dropped while a part waits for its slot, that part gives its slot back
/// (as its own take would); the parts booked before it keep theirs (the
/// permits stay spent).
#[derive(Clone, Copy)]
pub struct AsyncAll<'a, const N: usize> {
    parts: [&'a dyn AsyncPart; N],
}

impl<'a, const N: usize> AsyncAll<'a, N> {
    /// The limits `parts` as one, asked in this order.
    pub fn new(parts: [&'a dyn AsyncPart; N]) -> AsyncAll<'a, N> {
        AsyncAll { parts }
    }

    /// As [`All::book_each`], waiting as a task.
    ///
    /// # Errors
    /// As [`All::book_each`].
    pub async fn book_each(&self, costs: [u64; N], within: Within) -> Result<AllBooked<N>, Error> {
        let book =
            |part: &'a dyn AsyncPart, cost, within| sealed::AsyncPart::book(part, cost, within);
        let give_back = |part: &'a dyn AsyncPart, b| sealed::AsyncPart::settle(part, b, 0);
        let booked = book_in_turn(&self.parts, costs, within, book, give_back)
            .await
            .map_err(|(_, refusal)| refusal)?;
        let booked = booked.try_into().expect("one booking per part");
        Ok(AllBooked { booked })
    }

    /// As [`All::settle_each`].
    ///
    /// # Errors
    /// As [`All::settle_each`].
    pub async fn settle_each(&self, booked: AllBooked<N>, actual: [u64; N]) -> Result<(), Error> {
        let mut first = Ok(());
        for ((part, b), actual) in self.parts.iter().zip(booked.booked).zip(actual) {
            let settled = sealed::AsyncPart::settle(*part, b, actual).await;
            first = first.and(settled);
        }
        first
    }
}

impl<K: ?Sized + Sync, const N: usize> AsyncTake<K> for AsyncAll<'_, N> {
    async fn take_within(&self, _key: &K, cost: u64, within: Within) -> Result<Taken, Error> {
        Ok(self.book_each([cost; N], within).await?.taken())
    }

    async fn can_take(&self, _key: &K, cost: u64) -> Result<bool, Error> {
        for part in &self.parts {
            if !sealed::AsyncPart::can_take(*part, cost).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn state(&self, _key: &K) -> Result<State, Error> {
        let mut states = Vec::with_capacity(N);
        for part in &self.parts {
            states.push(sealed::AsyncPart::state(*part).await?);
        }
        Ok(binding(states.into_iter()))
    }

    /// As [`All`]'s: the limit that admits least, asking no one.
    fn limit_for(&self, _key: &K) -> Option<Limit> {
        least(self.parts.iter().map(|p| sealed::AsyncPart::limit(*p)))
    }
}

impl<const N: usize> std::fmt::Debug for AsyncAll<'_, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncAll").field("parts", &N).finish()
    }
}
