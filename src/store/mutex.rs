//! [`MutexStore`]: the state word and its parameters under one `Mutex`.

use crate::model::schedule::{self, Admit, Deny, Grant, Params};
use crate::primitive::{lock, Mutex};

use super::sealed::Store;

/// The state word and its parameters under one lock, held only for the step
/// itself, never while a caller waits. The store of
/// [`MutexLimiter`](crate::MutexLimiter): the same decisions as
/// [`AtomicStore`](super::AtomicStore), for comparison and for platforms
/// without 64-bit atomics. Under contention it is slower than the CAS loop,
/// and a holder preempted mid-step stalls everyone.
pub struct MutexStore {
    inner: Mutex<(u64, Params)>,
}

impl Store for MutexStore {
    const LIMITER: &'static str = "MutexLimiter";

    fn new(tat: u64, params: Params, warm_up: u64) -> Self {
        debug_assert_eq!(warm_up, 0, "only WarmStore warms up");
        MutexStore {
            inner: Mutex::new((tat, params)),
        }
    }

    #[inline]
    fn update(&self, now: u64, cost: u64, admit: Admit) -> Result<(Grant, Params), Deny> {
        let mut state = lock(&self.inner);
        let grant = schedule::step(state.0, now, cost, state.1, admit)?;
        state.0 = grant.next;
        Ok((grant, state.1))
    }

    fn peek(&self) -> (u64, Params) {
        *lock(&self.inner)
    }

    fn set_params(&self, now: u64, params: Params) {
        let mut state = lock(&self.inner);
        state.0 = schedule::rebase(state.0, now, state.1, params);
        state.1 = params;
    }

    fn reset(&self, tat: u64) {
        lock(&self.inner).0 = tat;
    }

    fn give_back(&self, grant: Grant) -> bool {
        let mut state = lock(&self.inner);
        if state.0 == grant.next {
            state.0 = grant.prev;
            true
        } else {
            false
        }
    }

    fn settle(&self, now: impl Fn() -> u64, went: u64, booked: u64, actual: u64) -> (u64, u64) {
        let mut state = lock(&self.inner);
        let found = state.0;
        state.0 = schedule::settle(found, now(), went, booked, actual, state.1);
        (found, state.0)
    }
}
