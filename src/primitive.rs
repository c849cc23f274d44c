//! The one place paceline takes its synchronization primitives from.
//!
//! Under `--cfg paceline_loom` they come from loom, so the model tests in
//! `loom-tests/` explore every interleaving of the real CAS loops. The cfg is
//! paceline's own: a user's `--cfg loom` never changes this crate.

#[cfg(all(paceline_loom, not(feature = "loom")))]
compile_error!("`--cfg paceline_loom` needs paceline's `loom` feature; loom-tests/ enables it");

#[cfg(not(paceline_loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicU64, Ordering},
    Condvar, Mutex, MutexGuard,
};

#[cfg(paceline_loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicU64, Ordering},
    Condvar, Mutex, MutexGuard,
};

/// Locks `m`, carrying on through poisoning: every critical section in
/// paceline leaves its data valid even if a panic unwinds out of it (they
/// only store whole words computed beforehand), so a poisoned lock is safe.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
