//! A class of keys counted by window ([`Limit::per_window`]): its
//! parameters, the map from the keyed limiter's clock to Unix time the
//! window step decides on, and what a window entry answers (its step, its
//! settle, its state, when it comes to rest, its row).
//!
//! The window step ([`window::step`]) cuts Unix time, in ns; a keyed
//! limiter decides on its clock's internal reading (`clock.now()` plus
//! [`ORIGIN`]). The two are one line apart by a constant taken once, when
//! the limiter is built: the Unix time of the clock's origin,
//! [`Clock::unix_origin`](crate::clock::Clock::unix_origin) where the clock knows
//! it (`UnixClock`, `ManualClock`), else the host's Unix time at the build
//! less the clock's reading then. A wall clock stepped after the build
//! moves no window: the limiter counts on its own clock. Every time a
//! window entry hands back (a slot, a decision's clock reading) is mapped
//! back to internal time, so the waits, the bookings and the async takes
//! are the pacing entries' own.

use std::time::Duration;

use super::PRUNE_GRACE;
use crate::clock::{Clock, UnixClock};
use crate::limiter::found::State;
use crate::model::schedule::{self, Admit, Grant, ORIGIN};
use crate::model::window::{self, Params, EMPTY};
use crate::primitive::AtomicU64;
use crate::store::window::{settle_word, update_word};
use crate::values::error::{Delay, Error};
use crate::values::limit::Limit;

/// What a window entry's grant leaves, read from its new word under the
/// shard's lock, so that a try's answer needs no second lookup: permits
/// available, ns until the next is free and until the window ends.
#[derive(Clone, Copy, Default)]
pub(super) struct Left {
    pub(super) available: u64,
    pub(super) next_free: u64,
    pub(super) reset: u64,
}

/// One window class: its step's parameters, the limit it was set from, and
/// the Unix time of the clock's origin.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Windowed {
    pub(super) params: Params,
    pub(super) limit: Limit,
    /// The Unix time (ns) of the limiter's clock's origin: taken once, at
    /// the build (see the module doc).
    pub(super) origin: u64,
}

impl Windowed {
    /// The internal reading `now` as Unix time, ns.
    #[inline]
    pub(super) fn unix(&self, now: u64) -> u64 {
        now.saturating_sub(ORIGIN).saturating_add(self.origin)
    }

    /// The Unix time `t` as an internal reading (saturating at both ends).
    #[inline]
    pub(super) fn internal(&self, t: u64) -> u64 {
        t.saturating_sub(self.origin).saturating_add(ORIGIN)
    }

    /// `grant` (on Unix time) with its slot in internal time.
    fn inward(&self, grant: Grant) -> Grant {
        Grant {
            slot: self.internal(grant.slot),
            ..grant
        }
    }

    /// The window step on `word` at the internal reading `now`, storing
    /// nothing: the grant (its slot in internal time) or the refusal.
    pub(super) fn decide(
        &self,
        word: u64,
        now: u64,
        cost: u64,
        admit: Admit,
    ) -> Result<Grant, Error> {
        window::step(word, self.unix(now), cost, self.params, admit)
            .map(|g| self.inward(g))
            .map_err(|deny| self.refused(deny, cost, admit))
    }

    /// The window step on the entry's word `cell` by the window store's CAS
    /// loop ([`update_word`]), at the internal reading `now`: the grant and
    /// what its word leaves ([`left`](Self::left)'s numbers).
    #[inline(always)]
    pub(super) fn update(
        &self,
        cell: &AtomicU64,
        now: u64,
        cost: u64,
        admit: Admit,
    ) -> Result<(Grant, Left), Error> {
        match update_word(cell, || self.params, self.unix(now), cost, admit) {
            Ok((grant, (available, next_free, reset), _)) => {
                let left = Left {
                    available,
                    next_free,
                    reset,
                };
                Ok((self.inward(grant), left))
            }
            // A try's refusal, built in place as the pacing path builds
            // it: made out of line, it came back in pieces through memory.
            Err(window::Deny::Wait(wait)) if admit == Admit::Within(0) => {
                Err(Error::RetryAfter(Delay(wait)))
            }
            Err(deny) => Err(self.refused(deny, cost, admit)),
        }
    }

    /// Settles a booking on `cell` ([`settle_word`]): `went` is internal
    /// time, as a booking keeps it.
    pub(super) fn settle(
        &self,
        cell: &AtomicU64,
        now: impl Fn() -> u64,
        (went, booked, actual): (u64, u64, u64),
    ) -> (u64, u64) {
        let settled = (self.unix(went), booked, actual);
        settle_word(cell, || self.params, || self.unix(now()), settled)
    }

    /// A window refusal as the caller's error: the wait to the next
    /// window's start (or the stored window's, for a clock read before
    /// it); a cost over the quota is over the burst, which is the quota.
    #[cold]
    fn refused(&self, deny: window::Deny, cost: u64, admit: Admit) -> Error {
        let deny = match deny {
            window::Deny::Wait(wait) => schedule::Deny::Wait(wait),
            window::Deny::ExceedsQuota => schedule::Deny::ExceedsBurst,
            window::Deny::Saturated => schedule::Deny::Saturated,
        };
        Error::refused(deny, cost, admit, self.params.quota().saturating_sub(1))
    }

    /// The state `word` at the internal reading `now`: available the quota
    /// less the current window's count, the next free permit at the next
    /// window's start when this one is spent, whole again at the current
    /// window's end (zero when it has counted nothing).
    pub(super) fn state(&self, word: u64, now: u64) -> State {
        State::of_window(word, self.unix(now), self.params, self.limit)
    }

    /// [`state`](Self::state)'s numbers, without the limit.
    #[inline(always)]
    pub(super) fn left(&self, word: u64, now: u64) -> Left {
        let (available, next_free, reset) = window::left(word, self.unix(now), self.params);
        Left {
            available,
            next_free,
            reset,
        }
    }

    /// When the entry `word` can be dropped, internal time: at the end of
    /// the window it counted in (nothing it counted matters after), plus
    /// the grace a clock read a little behind needs. [`EMPTY`] (nothing
    /// counted) is at rest at once.
    pub(super) fn rest_time(&self, word: u64) -> u64 {
        if word == EMPTY {
            return 0;
        }
        let stored = self.params.unpack(word);
        self.internal(self.params.end(stored.index))
            .saturating_add(PRUNE_GRACE)
    }

    /// The entry `word` when its class changes from this window to `new`
    /// at the internal reading `now` ([`window::rebase`]: a change of quota
    /// leaves the word, so a window's spent count is never refunded; a
    /// change of window carries the count into the new window holding
    /// `now`).
    pub(super) fn rebase(&self, word: u64, now: u64, new: &Windowed) -> u64 {
        window::rebase(word, self.unix(now), self.params, new.params)
    }

    /// The count of the window a take at `now` counts in, and how long
    /// until that window ends: a look inside's row.
    pub(super) fn row(&self, word: u64, now: u64) -> (u64, Duration) {
        let t = self.unix(now);
        let current = self.params.current(word, t);
        let ends = self.params.end(current.index).saturating_sub(t);
        (current.count, Duration::from_nanos(ends))
    }
}

/// The Unix time (ns) of `clock`'s origin: [`Clock::unix_origin`] where the
/// clock knows it, else the host's Unix time less the clock's reading now.
pub(super) fn unix_origin<C: Clock + ?Sized>(clock: &C) -> u64 {
    if let Some(origin) = clock.unix_origin() {
        return origin;
    }
    let reading = clock.now();
    UnixClock.now().saturating_sub(reading)
}
