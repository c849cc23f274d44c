//! The one place paceline takes its synchronization primitives from.
//!
//! Under `--cfg paceline_loom` they come from loom, so the model tests in
//! `loom-tests/` explore every interleaving of the real CAS loops and of the
//! keyed map's locks. The cfg is paceline's own: a user's `--cfg loom` never
//! changes this crate.
//!
//! Locks are taken through [`lock`], [`read`] and [`write`] only, which carry
//! on through poisoning: every critical section in paceline leaves its data
//! valid even if a panic unwinds out of it (they store whole values computed
//! beforehand), so a poisoned lock is safe to use.

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

// The keyed map's locks are crossbeam's sharded reader-writer lock: a
// reader locks only the stripe of its own thread (one of eight, each on its
// own cache line), so threads reading one shard write no line in common; a
// writer locks all eight. Under loom, loom's `RwLock` (same semantics).
#[cfg(all(feature = "keyed", not(paceline_loom)))]
pub(crate) use crossbeam_utils::sync::{
    ShardedLock as RwLock, ShardedLockReadGuard as RwLockReadGuard,
    ShardedLockWriteGuard as RwLockWriteGuard,
};
#[cfg(all(feature = "keyed", not(paceline_loom)))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicUsize};

#[cfg(all(feature = "keyed", paceline_loom))]
pub(crate) use loom::sync::{
    atomic::{AtomicU32, AtomicUsize},
    RwLock, RwLockReadGuard, RwLockWriteGuard,
};

/// Locks `m`, carrying on through poisoning (see the module doc).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Read-locks `l`, carrying on through poisoning (see the module doc).
#[cfg(feature = "keyed")]
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

/// Write-locks `l`, carrying on through poisoning (see the module doc).
#[cfg(feature = "keyed")]
pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}
