//! A lease's slow path, under its lock: settle the batch held (give back
//! what is left, or count it expired), size the next from the demand the
//! last one met, ask the lender, and apply its refusal or failure.

use super::{Leased, Lender};
use crate::clock::Clock;
use crate::lease::MAX_BATCH;
use crate::limiter::take::{Delay, Taken};
use crate::observe::lease_stats::{EXPIRED, GIVEN_BACK, LEASED, ROUND_TRIPS};
use crate::primitive::lock;
use crate::remote::{Error, FailPolicy};
use crate::store::Booking;

/// What only a refill touches, under the lock.
pub(super) struct Slow<L> {
    pub(super) lender: L,
    /// The batch held (its size, when it was asked for, what gives it
    /// back), if any.
    pub(super) batch: Option<Batch>,
    /// Clock reading until which the server's last refusal stands (0: none).
    pub(super) refused_until: u64,
    /// The size the next batch asks for.
    pub(super) next: u64,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Batch {
    /// What gives its unspent permits back; `None`: nothing can.
    pub(super) booking: Option<Booking>,
    pub(super) size: u64,
    pub(super) sent: u64,
}

impl<L: Lender, C: Clock> Leased<L, C> {
    /// The slow path, under the lock: spend what another refill brought,
    /// or settle the batch held and ask for the next.
    #[cold]
    #[inline(never)]
    pub(super) fn refill(&self, cost: u64) -> Result<Taken, Error> {
        let mut slow = lock(&self.slow);
        // Did a refill go through while this take waited for the lock?
        if let Some(taken) = self.spend_held(cost) {
            return Ok(taken);
        }
        let config = *lock(&self.config);
        let now = self.clock.now();
        // A refusal the server answered stands until its retry-after.
        if slow.refused_until > now {
            self.meter.refused();
            return Err(Error::RetryAfter(Delay(slow.refused_until - now)));
        }
        self.settle(&mut slow, now);
        let burst = config.reduced.saturating_add(1);
        if cost > burst {
            self.meter.refused();
            return Err(Error::ExceedsBurst { cost, burst });
        }
        // Follow demand, never past the reduced burst or the word.
        let size = slow.next.clamp(cost, burst.min(MAX_BATCH).max(cost));
        // A reply that comes back after its batch expired (a cold
        // connection, a stall) is asked once more: the second is warm.
        let mut late = false;
        loop {
            let sent = self.clock.now();
            self.count(ROUND_TRIPS, 1);
            let booking = match slow.lender.lend(size) {
                Ok(booking) => booking,
                Err(refusal) if refusal.is_refusal() => {
                    if let Some(wait) = refusal.retry_after() {
                        let wait = crate::wait::nanos(wait);
                        slow.refused_until = self.clock.now().saturating_add(wait);
                    }
                    // The retry-after is for this size: ask it again then.
                    self.meter.refused();
                    return Err(refusal);
                }
                Err(e) => {
                    slow.next = cost;
                    return self.fail(&slow, e, cost, self.clock.now());
                }
            };
            self.count(LEASED, size);
            let at = self.clock.now();
            let expiry = sent.saturating_add(self.expiry);
            let batch = Batch {
                booking,
                size,
                sent,
            };
            if at >= expiry {
                // None of it may be spent (nothing is held: `settle` took it).
                self.settle_batch(&mut slow, batch, size);
                if late {
                    return self.fail(&slow, Error::Timeout, cost, at);
                }
                late = true;
                continue;
            }
            let left = size - cost;
            match self.held.word(expiry, left) {
                Some(word) => {
                    self.held.swap(word);
                    slow.batch = Some(batch);
                }
                // Past the word's range: nothing is held.
                None => self.settle_batch(&mut slow, batch, left),
            }
            self.spent(cost);
            return Ok(self.taken(at, left));
        }
    }

    /// A failure of the lender, once nothing is held: its policy decides.
    fn fail(&self, slow: &Slow<L>, e: Error, cost: u64, now: u64) -> Result<Taken, Error> {
        match (&e, slow.lender.fail_policy()) {
            (Error::Unavailable(_) | Error::Timeout, FailPolicy::Open) => {
                // Spent unpaid: counted in `spent`, leased by no one.
                self.spent(cost);
                Ok(self.taken(now, 0))
            }
            _ => {
                self.meter.refused();
                Err(e)
            }
        }
    }

    /// Withdraws the batch held, gives back what is left of it (or counts
    /// it expired), and sizes the next batch from how fast it was spent.
    pub(super) fn settle(&self, slow: &mut Slow<L>, now: u64) {
        let (_, left) = self.held.split(self.held.swap(0));
        let Some(batch) = slow.batch.take() else {
            return;
        };
        // Permits taken from the batch, late ones included: its demand.
        let used = batch.size - left;
        let elapsed = now.saturating_sub(batch.sent).max(1);
        // At that rate, a batch lasts half its lease.
        let next = u128::from(used) * u128::from(self.expiry / 2) / u128::from(elapsed);
        slow.next = u64::try_from(next).unwrap_or(u64::MAX).max(1);
        self.settle_batch(slow, batch, left);
    }

    /// Gives back `left` of `batch` if the server still holds its state;
    /// else counts them expired.
    fn settle_batch(&self, slow: &mut Slow<L>, batch: Batch, left: u64) {
        if left == 0 {
            return;
        }
        let given = match &batch.booking {
            Some(booking) => {
                self.count(ROUND_TRIPS, 1);
                slow.lender.give_back(booking, left)
            }
            None => Ok(false),
        };
        match given {
            Ok(true) => {
                self.count(GIVEN_BACK, left);
                crate::observe::event::debug!(
                    permits = left,
                    "paceline: a lease's unspent permits given back"
                );
            }
            _ => self.count(EXPIRED, left),
        }
    }
}
