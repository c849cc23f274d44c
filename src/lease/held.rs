//! [`Held`]: the permits a process holds from its current lease, in one
//! word, spent lock-free.
//!
//! # Implementation details
//!
//! The word packs the batch's expiry and the count left:
//!
//! | bits | meaning |
//! |---|---|
//! | 63..18 | the expiry, in ticks of [`TICK`] ns of the lease's clock since the lease was made, rounded down |
//! | 17..0 | permits left, at most [`MAX_BATCH`] |
//!
//! `0` holds nothing. A spend is a CAS loop: load the word, go on only if
//! it holds `cost`, store the word less `cost`. Then it reads the clock,
//! and the spend counts only if that reading is before the expiry; one
//! read after the CAS is too late to count.
//!
//! Why the clock is read after the CAS and not before: the bound needs each
//! spend's reported time between the batch's decision in the server and
//! its expiry. A reading after a successful CAS is after the word was
//! installed, hence after the reply, hence after the decision; and the
//! check against the expiry in the very word the CAS consumed bounds it
//! above. So it holds even when the word was spent out, refilled and came
//! back to the same value (ABA): whatever batch the CAS took from, its
//! expiry is the one checked. A reading before the CAS would not bound
//! anything: a thread can stall between the two for any time.
//!
//! Only the lease's refill (under its lock) installs or withdraws a word
//! ([`swap`](Held::swap)); spends only lower the count.

use crossbeam_utils::CachePadded;

use crate::clock::Clock;
use crate::primitive::{AtomicU64, Ordering};

/// Bits of the word that hold the count.
const COUNT_BITS: u32 = 18;

/// The largest batch a lease holds: 262 143 permits. Larger batches would
/// save nothing worth a wider word (one round trip per quarter million
/// permits), and the expiry keeps 46 bits.
pub const MAX_BATCH: u64 = (1 << COUNT_BITS) - 1;

/// The expiry's unit, ns: 4 096 ns, so that 46 bits reach 9.1 years from
/// the lease's making. A lease's expiry is rounded down to it (it expires up to
/// 4 µs early, never late).
pub const TICK: u64 = 1 << 12;

/// The last tick the word holds; a lease whose expiry falls past it (9
/// years after the lease was made) is never installed: every take then goes
/// to the limiter underneath.
const MAX_TICK: u64 = (1 << (64 - COUNT_BITS)) - 1;

/// What a spend found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spend {
    /// Spent, at this clock reading, leaving this many.
    Spent { at: u64, left: u64 },
    /// Fewer than the cost held (or none): nothing spent.
    Short,
    /// Taken from a batch whose expiry had passed by the clock's reading
    /// after the CAS: the permits are lost (expired), nothing is admitted.
    Late,
}

/// One word: the current batch's expiry and what is left of it.
#[derive(Debug)]
pub(crate) struct Held {
    word: CachePadded<AtomicU64>,
    /// The clock reading ticks count from: the lease's making.
    origin: u64,
}

impl Held {
    /// Nothing held; expiries counted from clock reading `origin`.
    pub(crate) fn new(origin: u64) -> Held {
        Held {
            word: CachePadded::new(AtomicU64::new(0)),
            origin,
        }
    }

    /// The word for `left` permits expiring at clock reading `expiry` (ns),
    /// or `None` when the expiry is past what the word holds.
    pub(crate) fn word(&self, expiry: u64, left: u64) -> Option<u64> {
        let tick = expiry.saturating_sub(self.origin) / TICK;
        (tick <= MAX_TICK && left <= MAX_BATCH).then_some((tick << COUNT_BITS) | left)
    }

    /// A word's (expiry as a clock reading, permits left).
    pub(crate) fn split(&self, word: u64) -> (u64, u64) {
        (
            self.origin.saturating_add((word >> COUNT_BITS) * TICK),
            word & MAX_BATCH,
        )
    }

    /// Spends `cost` (`1..=MAX_BATCH`) permits if held, reading `clock`
    /// after the CAS. Lock-free: a failed CAS means another spend or a
    /// refill went through.
    #[inline]
    pub(crate) fn spend<C: Clock + ?Sized>(&self, cost: u64, clock: &C) -> Spend {
        // Relaxed here: a stale word only fails the CAS below.
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            // Is enough held? (An empty word holds 0.)
            if w & MAX_BATCH < cost {
                return Spend::Short;
            }
            match self
                .word
                // Acquire on success: it reads the refill's `swap` (Release)
                // or a later spend of the same release sequence, so the
                // clock read below comes after the refill's reading of it
                // even for a clock kept in memory (`ManualClock`); a
                // hardware clock is ordered by time itself.
                .compare_exchange_weak(w, w - cost, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                // Another spend or a refill: decide again on what it left.
                Err(found) => w = found,
            }
        }
        // After the CAS, so after the batch was installed (see the module
        // docs); checked against the expiry of the word consumed.
        let at = clock.now();
        let (expiry, left) = self.split(w - cost);
        if at < expiry {
            Spend::Spent { at, left }
        } else {
            Spend::Late
        }
    }

    /// The word now (a look: it may change at once).
    pub(crate) fn load(&self) -> u64 {
        self.word.load(Ordering::Relaxed)
    }

    /// Installs `new` and returns what was held: only the refill does it.
    /// Release: a spend that takes from `new` reads the clock after the
    /// refill did (see `spend`); Acquire: what was held is final.
    pub(crate) fn swap(&self, new: u64) -> u64 {
        self.word.swap(new, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::time::Duration;

    #[test]
    fn spends_what_it_holds_until_the_expiry_and_not_at_it() {
        let clock = ManualClock::new();
        let held = Held::new(0);
        assert_eq!(held.spend(1, &clock), Spend::Short);
        let expiry = 3 * TICK;
        held.swap(held.word(expiry, 3).unwrap());
        assert_eq!(held.spend(2, &clock), Spend::Spent { at: 0, left: 1 });
        assert_eq!(held.spend(2, &clock), Spend::Short);
        clock.advance(Duration::from_nanos(expiry));
        assert_eq!(held.spend(1, &clock), Spend::Late);
        assert_eq!(held.load() & MAX_BATCH, 0);
    }

    #[test]
    fn the_expiry_rounds_down_from_the_origin_and_saturation_installs_nothing() {
        let origin = 1_764_000_000_000_000_000; // a Unix time, ns
        let held = Held::new(origin);
        let word = |e, l| held.word(e, l);
        assert_eq!(
            held.split(word(origin + TICK + 5, 7).unwrap()),
            (origin + TICK, 7)
        );
        assert_eq!(word(u64::MAX, 1), None);
        assert_eq!(word(origin, MAX_BATCH + 1), None);
        let last = origin + MAX_TICK * TICK;
        assert_eq!(
            held.split(word(last, MAX_BATCH).unwrap()),
            (last, MAX_BATCH)
        );
    }
}
