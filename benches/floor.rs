//! The floor of an admitted take, shared by `throughput.rs` and
//! `examples/fast_path.rs` so that both measure the same one.

use std::sync::atomic::{AtomicU64, Ordering};

/// The floor of an admitted take: read the clock, then a CAS loop moving a
/// word forward (the least a limiter's state update can be).
#[inline]
pub fn clock_cas(clock: &quanta::Clock, cell: &AtomicU64) -> u64 {
    cas_past(cell, clock.raw())
}

/// The floor's CAS loop: moves `cell` past `now`, and answers the word it
/// stored.
#[inline]
pub fn cas_past(cell: &AtomicU64, now: u64) -> u64 {
    let mut cur = cell.load(Ordering::Relaxed);
    loop {
        let next = cur.max(now) + 1;
        match cell.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(actual) => cur = actual,
        }
    }
}
