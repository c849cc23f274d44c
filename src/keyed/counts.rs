//! A keyed limiter's totals of calls on tracked keys, admitted and refused:
//! striped by thread (`crate::observe::stripes`), so that the threads of one hot
//! key, which already meet on its state word, do not meet again on a
//! counter, and a thread owning its stripe adds without a locked
//! instruction. Statistics, outside the loom models, as the meter's are.
//!
//! A read sums the stripes. A sum is exact once the calls it counts have
//! returned; while calls run it may miss those in flight, as any read of
//! counters that are not one word would.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::observe::stripes::{self, Stripes};

/// One stripe's share of the totals.
struct Stripe {
    admitted: AtomicU64,
    refused: AtomicU64,
}

/// Calls admitted and refused on tracked keys, all keys together.
pub(super) struct Counts {
    stripes: Stripes<Stripe>,
}

impl Counts {
    pub(super) fn new() -> Counts {
        Counts {
            stripes: Stripes::new(stripes::owned_stripes(), || Stripe {
                admitted: AtomicU64::new(0),
                refused: AtomicU64::new(0),
            }),
        }
    }

    /// Counts one admitted call.
    #[inline]
    pub(super) fn admitted(&self) {
        let (s, owns) = self.stripes.mine();
        stripes::add(&s.admitted, owns, 1);
    }

    /// Counts one refused call.
    #[inline]
    pub(super) fn refused(&self) {
        let (s, owns) = self.stripes.mine();
        stripes::add(&s.refused, owns, 1);
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
