//! [`WarmStore`]: a warming-up limiter's two words, `tat` and the coldness,
//! under one `Mutex`.
//!
//! A 64-bit CAS cannot update two words as one, and both enter every
//! decision; so this store locks, as [`MutexStore`](super::MutexStore)
//! does, and holds the lock only to decide. What that costs against the
//! one-word atomic store is measured in `docs/PERFORMANCE.md`.

use crate::model::schedule::{self, Admit, Deny, Grant, Params};
use crate::model::warm_up::{self, WarmState as State};
use crate::primitive::{lock, Mutex};

use super::sealed::Store;

/// The store of [`WarmUpLimiter`](crate::WarmUpLimiter).
pub struct WarmStore {
    inner: Mutex<Inner>,
}

struct Inner {
    state: State,
    params: Params,
    /// The warm-up period, ns.
    warm_up: u64,
    /// The state the last grant replaced, to put back if it is given back
    /// while it is still the last.
    undo: Option<(Grant, State)>,
}

impl Store for WarmStore {
    const LIMITER: &'static str = "WarmUpLimiter";

    fn new(tat: u64, params: Params, warm_up: u64) -> Self {
        WarmStore {
            inner: Mutex::new(Inner {
                state: State::cold(tat, warm_up),
                params,
                warm_up,
                undo: None,
            }),
        }
    }

    #[inline]
    fn update(&self, now: u64, cost: u64, admit: Admit) -> Result<(Grant, Params), Deny> {
        let (grant, params, _, _) = self.update_warm(now, cost, admit)?;
        Ok((grant, params))
    }

    #[inline]
    fn update_warm(
        &self,
        now: u64,
        cost: u64,
        admit: Admit,
    ) -> Result<(Grant, Params, u64, u64), Deny> {
        let mut inner = lock(&self.inner);
        let (grant, next) =
            warm_up::step(inner.state, now, cost, inner.params, inner.warm_up, admit)?;
        if cost > 0 {
            inner.undo = Some((grant, inner.state));
            inner.state = next;
        }
        Ok((grant, inner.params, inner.state.cold, inner.warm_up))
    }

    fn peek(&self) -> (u64, Params) {
        let inner = lock(&self.inner);
        (inner.state.tat, inner.params)
    }

    fn can_take(&self, now: u64, cost: u64) -> bool {
        let inner = lock(&self.inner);
        warm_up::step(
            inner.state,
            now,
            cost,
            inner.params,
            inner.warm_up,
            Admit::Within(0),
        )
        .is_ok()
    }

    fn available(&self, now: u64) -> u64 {
        let inner = lock(&self.inner);
        warm_up::available(inner.state, now, inner.params, inner.warm_up)
    }

    fn burst(&self, now: u64) -> u64 {
        let inner = lock(&self.inner);
        warm_up::burst(inner.state, now, inner.params, inner.warm_up)
    }

    fn set_params(&self, now: u64, params: Params) {
        let mut inner = lock(&self.inner);
        inner.state = warm_up::rebase(inner.state, now, inner.params, params, inner.warm_up);
        inner.params = params;
        inner.undo = None;
    }

    fn reset(&self, tat: u64) {
        let mut inner = lock(&self.inner);
        inner.state = State::cold(tat, inner.warm_up);
        // What was granted before is no longer the last grant.
        inner.undo = None;
    }

    fn give_back(&self, grant: Grant) -> bool {
        let mut inner = lock(&self.inner);
        match inner.undo {
            // Every update that moves the state replaces `undo` (a
            // change of parameters clears it), so the last grant's state is
            // still the state.
            Some((last, prev)) if last == grant => {
                inner.state = prev;
                inner.undo = None;
                true
            }
            _ => false,
        }
    }

    /// Settles `tat` as a plain store does and leaves the coldness as it
    /// is: an excess is charged at the plain rate and a refund gives back
    /// plain time. Both are sound here, since a warming limiter admits no
    /// more than a plain one (spending coldness costs extra: a booking
    /// holds at least the plain span a refund reckons with), and the
    /// coldness a settle leaves is what the limiter's idle time made it.
    fn settle(&self, now: impl Fn() -> u64, went: u64, booked: u64, actual: u64) -> (u64, u64) {
        let mut inner = lock(&self.inner);
        let found = inner.state.tat;
        let next = schedule::settle(found, now(), went, booked, actual, inner.params);
        if next != found {
            inner.state.tat = next;
            // The last grant's state is no longer the state.
            inner.undo = None;
        }
        (found, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::schedule::{FRESH, ORIGIN};

    /// A give-back restores both words of the grant it undoes, once, and
    /// only while that grant is still the last.
    #[test]
    fn a_give_back_restores_tat_and_coldness() {
        let p = Params::new(1_000, 5).unwrap();
        let store = WarmStore::new(FRESH, p, 100_000);
        let first = store.update(ORIGIN, 1, Admit::Always).unwrap().0;
        let cold_before = lock(&store.inner).state;
        let second = store.update(ORIGIN, 2, Admit::Always).unwrap().0;
        assert_ne!(lock(&store.inner).state, cold_before);
        assert!(!store.give_back(first), "not the last grant");
        assert!(store.give_back(second));
        assert_eq!(lock(&store.inner).state, cold_before);
        assert!(!store.give_back(second), "already given back");
        // A refusal, or a cost of 0, is not a grant and leaves the undo
        // alone.
        let third = store.update(ORIGIN, 1, Admit::Always).unwrap().0;
        assert!(store.update(ORIGIN, 6, Admit::Within(0)).is_err());
        assert!(store.update(ORIGIN, 0, Admit::Within(0)).is_ok());
        assert!(store.give_back(third));
        assert_eq!(lock(&store.inner).state, cold_before);
        // A change of parameters ends what can be given back.
        let fourth = store.update(ORIGIN, 1, Admit::Always).unwrap().0;
        store.set_params(ORIGIN, Params::new(2_000, 5).unwrap());
        assert!(!store.give_back(fourth));
        // So does a reset, which makes the store cold again.
        let fifth = store.update(ORIGIN, 3, Admit::Always).unwrap().0;
        store.reset(FRESH);
        assert_eq!(lock(&store.inner).state, State::cold(FRESH, 100_000));
        assert!(!store.give_back(fifth));
    }
}
