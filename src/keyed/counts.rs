//! A keyed limiter's totals of calls on tracked keys, admitted and refused:
//! striped by thread, so that the threads of one hot key, which already
//! meet on its state word, do not meet again on a counter.
//!
//! Each thread adds to its own stripe (`stats::thread_index`, as the
//! meter's stripes); a read sums them. A sum is exact once the calls it
//! counts have returned; while calls run it may miss those in flight, as
//! any read of counters that are not one word would.

use crossbeam_utils::CachePadded;

use crate::primitive::{AtomicU64, Ordering};

/// At most this many stripes: four per core up to 16 cores, so that
/// threads made one after another (consecutive indices) rarely share one;
/// 8 KiB per limiter at most (128-byte lines).
const MAX_STRIPES: usize = 64;

/// One thread's share of the totals, on its own cache line.
struct Stripe {
    admitted: AtomicU64,
    refused: AtomicU64,
}

/// Calls admitted and refused on tracked keys, all keys together.
pub(super) struct Counts {
    stripes: Box<[CachePadded<Stripe>]>,
}

impl Counts {
    /// Four stripes per core (a power of two, at most [`MAX_STRIPES`]);
    /// one under loom, whose models must replay the same atomics.
    pub(super) fn new() -> Counts {
        let stripes = if cfg!(paceline_loom) {
            1
        } else {
            std::thread::available_parallelism()
                .map_or(1, usize::from)
                .saturating_mul(4)
                .clamp(1, MAX_STRIPES)
                .next_power_of_two()
        };
        Counts {
            stripes: (0..stripes)
                .map(|_| {
                    CachePadded::new(Stripe {
                        admitted: AtomicU64::new(0),
                        refused: AtomicU64::new(0),
                    })
                })
                .collect(),
        }
    }

    /// This thread's stripe.
    #[inline]
    fn stripe(&self) -> &Stripe {
        &self.stripes[crate::stats::thread_index() & (self.stripes.len() - 1)]
    }

    /// Counts one admitted call. Relaxed: a count, ordered with nothing.
    #[inline]
    pub(super) fn admitted(&self) {
        self.stripe().admitted.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one refused call.
    #[inline]
    pub(super) fn refused(&self) {
        self.stripe().refused.fetch_add(1, Ordering::Relaxed);
    }

    /// The totals so far: (admitted, refused).
    pub(super) fn read(&self) -> (u64, u64) {
        self.stripes.iter().fold((0u64, 0u64), |(a, r), s| {
            (
                a.wrapping_add(s.admitted.load(Ordering::Relaxed)),
                r.wrapping_add(s.refused.load(Ordering::Relaxed)),
            )
        })
    }
}
