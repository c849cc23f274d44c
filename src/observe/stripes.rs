//! Counters striped by thread, where a thread that owns its stripe adds
//! with a plain load and store (no locked instruction) and the others with
//! an atomic add on one shared stripe.
//!
//! Each thread that counts claims, once, the lowest free of [`SLOTS`]
//! process-wide slots, and frees it when it exits: no two live threads hold
//! one slot, so the stripe of slot `i` has one writer at a time. A freed
//! slot's last stores happen before its next owner's first load (the
//! claim's acquire pairs with the release that freed it). A thread without
//! a slot (past [`SLOTS`] live counting threads, or in its TLS teardown)
//! and every slot past a counter's own stripes use the shared stripe.
//!
//! The counts are statistics: relaxed, ordered with nothing, outside the
//! loom models (std's atomics, and one shared stripe: `owned` is 0 there).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crossbeam_utils::CachePadded;

/// Slots a process hands out, one per live counting thread.
pub(crate) const SLOTS: usize = 64;

/// The slots claimed, one bit each.
static CLAIMED: AtomicU64 = AtomicU64::new(0);

/// A thread's claim on a slot, freed when the thread exits.
struct Claim(Option<usize>);

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            // Release: this thread's last additions before the next owner's.
            CLAIMED.fetch_and(!(1u64 << i), Release);
        }
    }
}

thread_local! {
    static SLOT: Claim = Claim(claim());
}

/// Claims the lowest free slot, if one is free.
fn claim() -> Option<usize> {
    // The lowest free slot's bit set too; none while every slot is held.
    let lowest = |held: u64| (held != u64::MAX).then(|| held | (1 << (!held).trailing_zeros()));
    // Acquire: the slot's previous owner's additions before ours.
    let before = CLAIMED.fetch_update(Acquire, Relaxed, lowest).ok()?;
    Some((!before).trailing_zeros() as usize)
}

/// The calling thread's slot, if it holds one.
#[inline]
fn slot() -> Option<usize> {
    SLOT.try_with(|c| c.0).ok().flatten()
}

/// How many owned stripes a counter gets: four per core, at most [`SLOTS`];
/// none under loom, whose models replay one shared stripe.
fn owned_stripes() -> usize {
    if cfg!(paceline_loom) {
        0
    } else {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .saturating_mul(4)
            .min(SLOTS)
    }
}

/// `N` relaxed counters in stripes of a cache line each: one for each
/// owned slot, for the thread holding it, then one shared by every other
/// thread. Each user names its counters' indices with constants.
pub(crate) struct Counters<const N: usize> {
    stripes: Box<[CachePadded<[AtomicU64; N]>]>,
}

impl<const N: usize> Counters<N> {
    /// Counters at zero, in [`owned_stripes`] stripes and the shared one.
    pub(crate) fn new() -> Counters<N> {
        Counters::with_owned(owned_stripes())
    }

    fn with_owned(owned: usize) -> Counters<N> {
        Counters {
            stripes: (0..=owned.min(SLOTS))
                .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }

    /// Adds `n` to counter `i`.
    #[inline]
    pub(crate) fn add(&self, i: usize, n: u64) {
        self.add_each([(i, n)]);
    }

    /// Adds each `(i, n)`'s `n` to counter `i`, finding the calling
    /// thread's stripe once: a plain load and store where the thread owns
    /// it (the only writer), an atomic add where it is shared. Adds of 0
    /// are skipped.
    #[inline]
    pub(crate) fn add_each<const K: usize>(&self, adds: [(usize, u64); K]) {
        let shared = self.stripes.len() - 1;
        let (stripe, owns) = match slot() {
            Some(s) if s < shared => (&self.stripes[s], true),
            _ => (&self.stripes[shared], false),
        };
        for (i, n) in adds {
            let counter = &stripe[i];
            if n == 0 {
                continue;
            }
            if owns {
                counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
            } else {
                counter.fetch_add(n, Relaxed);
            }
        }
    }

    /// The sums of the stripes, counter by counter.
    pub(crate) fn read(&self) -> [u64; N] {
        let mut sums = [0u64; N];
        for stripe in self.stripes.iter() {
            for (sum, counter) in sums.iter_mut().zip(stripe.iter()) {
                *sum = sum.wrapping_add(counter.load(Relaxed));
            }
        }
        sums
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_threads_hold_different_slots_and_exited_ones_free_theirs() {
        let barrier = std::sync::Barrier::new(8);
        let slots: Vec<Option<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        let mine = slot();
                        barrier.wait(); // all eight alive at once
                        mine
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut held: Vec<usize> = slots.iter().map(|s| s.unwrap()).collect();
        held.sort_unstable();
        held.dedup();
        assert_eq!(held.len(), 8, "two live threads shared a slot: {slots:?}");
    }

    #[test]
    fn an_exited_thread_frees_its_slot() {
        // One after another, more threads than slots: each finds one free.
        for n in 0..2 * SLOTS {
            let got = std::thread::spawn(slot).join().unwrap();
            assert!(got.is_some(), "thread {n} found no free slot");
        }
    }

    #[test]
    fn owned_and_shared_additions_lose_nothing() {
        // One stripe owned: the first claimant adds plainly, the rest share.
        let counters = Counters::<2>::with_owned(1);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        counters.add_each([(0, 1), (1, 2)]);
                    }
                });
            }
        });
        assert_eq!(counters.read(), [40_000, 80_000]);
    }
}
