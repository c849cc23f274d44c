//! The async wait, for every limiter kind (feature `tokio`): reserve, then
//! sleep on Tokio's timer until the limiter's own clock reads the slot, and
//! give the slot back if the future is dropped before it. What users see of
//! it (the horizon, the line of held takes, wake-ups on a change, cancel
//! safety) is told in the guide's [waiting](crate::guide::waiting) chapter.
//!
//! # Implementation details
//!
//! A limiter kind gives this module one thing, a [`Reserve`]: "decide this
//! request now, and tell me the slot on my clock". The invariants:
//!
//! - A take never returns before its clock reads the slot: it loops on the
//!   clock, sleeping at most a day at a time (a deadline Tokio can hold).
//! - An unbounded take books only within [`HORIZON`] of its slot; asking
//!   again before that is no refusal ([`Ask::Horizon`]), and it is counted
//!   once, when it books. A held `take_timeout` promises its cost in its
//!   limit's [`Line`] instead of booking; a promise can always be withdrawn,
//!   a booked slot only while it is the newest.
//! - An unbooked waiter watches the limiter's `Notify` only after its first
//!   "not yet", and then asks once more, so a change between is not missed.
//! - On one in-process limiter, horizon waiters queue behind a Tokio mutex
//!   (only the head asks again); keyed and remote kinds have no such queue.
//! - A future dropped after booking and before its slot hands its
//!   [`Booking`] to [`Reserve::undo`], which undoes it by the one rule:
//!   only if no one has booked since and the generation has not moved.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::Duration;

use ::tokio::sync::futures::Notified;
use ::tokio::sync::Mutex as Gate;
use ::tokio::sync::Notify;
use ::tokio::time::Instant;

use super::{nanos, Ask, Wait};
use crate::clock::{internal_now, Clock};
use crate::model::schedule::{Admit, ORIGIN};
use crate::store::Booking;
use crate::values::error::Error;

/// How far ahead of the clock an unbounded async take books its slot:
/// 10 ms. Long enough that tasks sharing a limiter keep slots booked across
/// the timer's millisecond ticks and the stalls of a busy machine (with a
/// 2 ms horizon, 1 000 tasks at 10 000/s lost 1.5–3.5 % of the rate on a
/// shared 2-vCPU machine), short enough that a take cancelled by a timeout
/// of tens of milliseconds has rarely booked anything yet.
pub(crate) const HORIZON: u64 = 10_000_000;

/// The longest single timer sleep (one day): a longer wait sleeps again.
const MAX_SLEEP_NS: u64 = 86_400 * 1_000_000_000;

/// A slot booked for an async waiter.
pub(crate) struct Reserved {
    /// The decision's time on the limiter's clock (internal ns).
    pub(crate) now: u64,
    /// The slot on the limiter's clock (internal ns).
    pub(crate) slot: u64,
    /// What the take returns: when the permit went, as the limiter reports
    /// it (its clock's time, or a server's).
    pub(crate) went_at: Duration,
    /// What undoes it; `None` when nothing can be given back.
    pub(crate) booking: Option<Booking>,
}

impl Reserved {
    /// An in-process limiter's `booking`, on its own clock: the permit
    /// goes at its slot, or at the decision when credit was banked.
    pub(crate) fn booked(booking: Booking) -> Reserved {
        let (now, slot) = (booking.now, booking.slot);
        Reserved {
            now,
            slot,
            went_at: Duration::from_nanos(slot.max(now) - ORIGIN),
            booking: Some(booking),
        }
    }
}

/// What a limiter kind gives the async wait: a decision, and a way to undo
/// one.
pub(crate) trait Reserve: Sync {
    /// The clock the slots are on.
    type Clock: Clock;

    /// The limiter's clock.
    fn clock(&self) -> &Self::Clock;

    /// How the limiter waits.
    fn wait(&self) -> Wait;

    /// Decides a request of `cost` under `admit`, booking it if admitted,
    /// and counts the decision as `ask` says (a horizon's "not yet" is no
    /// refusal).
    fn reserve(
        &self,
        cost: u64,
        admit: Admit,
        ask: Ask,
    ) -> impl Future<Output = Result<Reserved, Error>> + Send;

    /// Undoes `booking` by the one rule ([`Booking`]).
    fn undo(&self, booking: Booking);
}

/// An unbounded take (`take`, `take_n`): books once the slot is within
/// [`HORIZON`] (behind `gate`, when the limiter has one), then waits for it.
pub(crate) async fn take<R: Reserve>(
    limiter: &R,
    cost: u64,
    gate: Option<&Gate<()>>,
    changed: Option<&Notify>,
) -> Result<Reserved, Error> {
    let reserved = {
        // Held until this take has booked: the next in line asks only then.
        let _turn = match gate {
            Some(gate) => Some(gate.lock().await),
            None => None,
        };
        // Set once the take has to wait (see the module docs).
        let mut change: Pin<&mut Option<Notified<'_>>> = pin!(None);
        loop {
            // Not counted as refused while only too far: the caller sees
            // one answer, the booking (or the error) at the end.
            let e = match limiter
                .reserve(cost, Admit::Within(HORIZON), Ask::Horizon)
                .await
            {
                Ok(reserved) => break reserved,
                Err(e) => e,
            };
            match &e {
                // Too far yet: sleep until it is within the horizon.
                Error::QueueFull { wait, .. } => {
                    let now = internal_now(limiter.clock());
                    let until = now.saturating_add(nanos(*wait).saturating_sub(HORIZON));
                    let Some(changed) = changed else {
                        sleep_until(limiter.clock(), until).await;
                        continue;
                    };
                    let fired = match change.as_mut().as_pin_mut() {
                        Some(watch) => sleep_until_or(limiter.clock(), until, watch).await,
                        // The first "not yet": watch for a change from
                        // here on, and ask once more before sleeping.
                        None => true,
                    };
                    if fired {
                        change.set(Some(changed.notified()));
                    }
                }
                // A cost above the burst is further than the horizon even at
                // rest: book it at once (it waits its extra intervals anyway).
                Error::ExceedsBurst { .. } => {
                    break limiter.reserve(cost, Admit::Always, Ask::Answer).await?;
                }
                _ => return Err(e),
            }
        }
    };
    Ok(wait_reserved(limiter, reserved).await)
}

/// A bounded take (`take_timeout`): books at once if the slot is within
/// `max_wait` (refused at once otherwise), then waits for it.
pub(crate) async fn take_within<R: Reserve>(
    limiter: &R,
    cost: u64,
    max_wait: Duration,
) -> Result<Reserved, Error> {
    let reserved = limiter
        .reserve(cost, Admit::Within(nanos(max_wait)), Ask::Answer)
        .await?;
    Ok(wait_reserved(limiter, reserved).await)
}

/// Waits until `reserved`'s slot on the limiter's clock, and hands it back,
/// its booking now the caller's; dropped before it, gives the slot back
/// (see the module docs).
pub(crate) async fn wait_reserved<R: Reserve>(limiter: &R, mut reserved: Reserved) -> Reserved {
    let slot = reserved.slot;
    if slot > reserved.now {
        let mut guard = GiveBack {
            limiter,
            slot,
            booking: reserved.booking.take(),
        };
        let clock = limiter.clock();
        match limiter.wait() {
            Wait::Sleep => sleep_until(clock, slot).await,
            Wait::Precise { spin } => {
                sleep_until(clock, slot.saturating_sub(nanos(spin))).await;
                spin_until(clock, slot).await;
            }
        }
        // The slot is reached: the permit is spent.
        reserved.booking = guard.booking.take();
    }
    reserved
}

/// Sleeps on Tokio's timer until `clock` reads at least `target` (internal
/// time). Never returns early; returns late by the timer's lateness (about
/// a millisecond in real time; none under paused time on a `TokioClock`).
pub(crate) async fn sleep_until<C: Clock + ?Sized>(clock: &C, target: u64) {
    loop {
        let now = internal_now(clock);
        if now >= target {
            return;
        }
        let left = Duration::from_nanos((target - now).min(MAX_SLEEP_NS));
        ::tokio::time::sleep_until(Instant::now() + left).await;
    }
}

/// [`sleep_until`], or until `change` fires, whichever comes first; `true`
/// when the change came first (the caller then watches anew: a fired
/// `Notified` stays ready).
pub(super) async fn sleep_until_or<C: Clock + ?Sized>(
    clock: &C,
    target: u64,
    mut change: Pin<&mut Notified<'_>>,
) -> bool {
    let mut sleep = pin!(sleep_until(clock, target));
    poll_fn(|cx| {
        if change.as_mut().poll(cx).is_ready() {
            return Poll::Ready(true);
        }
        sleep.as_mut().poll(cx).map(|()| false)
    })
    .await
}

/// Below this many ns from its slot a precise async wait spins in place
/// (a bounded number of times) instead of yielding: a trip through the
/// runtime costs about a microsecond, so at 1M/s a yield per permit would
/// not keep up, while holding a worker for 2 µs is harmless.
const SPIN_IN_PLACE_NS: u64 = 2_000;

/// How many clock reads a spin in place makes at most (about 2 µs of them)
/// before it yields anyway: a clock that does not move (paused time) must
/// reach the yield path, which falls back to the timer.
const SPIN_IN_PLACE_READS: u32 = 256;

/// Yields to the runtime in a loop until `clock` reads at least `target`;
/// the last couple of microseconds are spun in place.
async fn spin_until<C: Clock + ?Sized>(clock: &C, target: u64) {
    let mut last = internal_now(clock);
    while last < target {
        if target - last <= SPIN_IN_PLACE_NS {
            for _ in 0..SPIN_IN_PLACE_READS {
                std::hint::spin_loop();
                if internal_now(clock) >= target {
                    return;
                }
            }
        }
        ::tokio::task::yield_now().await;
        let now = internal_now(clock);
        if now == last {
            // The clock did not move across a yield: Tokio's time is paused
            // (or the clock is manual). Spinning would never end, and the
            // timer is exact there.
            return sleep_until(clock, target).await;
        }
        last = now;
    }
}

/// Gives a booked slot back if dropped before it (see the module docs).
struct GiveBack<'a, R: Reserve> {
    limiter: &'a R,
    slot: u64,
    /// `None` once the slot is reached (or nothing can be given back).
    booking: Option<Booking>,
}

impl<R: Reserve> Drop for GiveBack<'_, R> {
    fn drop(&mut self) {
        if let Some(booking) = self.booking.take() {
            // Only while the slot is still ahead: a passed slot is spent.
            if internal_now(self.limiter.clock()) < self.slot {
                self.limiter.undo(booking);
            }
        }
    }
}

#[cfg(debug_assertions)]
thread_local! {
    /// How many times [`warn_if_on_runtime`] found a runtime on this thread
    /// (the unit test below reads it; per thread, so other tests' runtimes
    /// do not count).
    static RUNTIME_WARNINGS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Debug builds: warns once per process (a `warn` event with feature
/// `tracing`; nothing without it, as paceline never prints) when a
/// blocking take waits on a thread inside a Tokio runtime, naming
/// `async_call`.
#[cfg(debug_assertions)]
pub(crate) fn warn_if_on_runtime(async_call: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static WARNED: AtomicBool = AtomicBool::new(false);
    if ::tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    RUNTIME_WARNINGS.with(|n| n.set(n.get() + 1));
    let _ = async_call;
    if !WARNED.swap(true, Ordering::Relaxed) {
        crate::observe::event::warning!(
            "paceline: a blocking take is waiting on a thread inside a Tokio runtime, \
             which stalls every task on that thread: use `{async_call}` instead \
             (on a spawn_blocking thread, blocking is right: ignore this). \
             Shown once, in debug builds only."
        );
    }
}

#[cfg(test)]
#[cfg(all(debug_assertions, not(paceline_loom)))]
mod tests {
    use super::RUNTIME_WARNINGS;
    use crate::{clock::ManualClock, AtomicLimiter, Rate};

    fn warnings() -> u64 {
        RUNTIME_WARNINGS.with(|n| n.get())
    }

    /// A blocking take that waits on a thread inside a Tokio runtime is
    /// caught (and warned about once per process); one that waits outside
    /// any runtime, or does not wait, is not.
    #[test]
    fn a_blocking_wait_inside_a_runtime_is_caught() {
        let limiter = AtomicLimiter::builder(Rate::per_second(10))
            .slack(0)
            .clock(ManualClock::with_auto_advance())
            .build()
            .unwrap();
        let before = warnings();
        limiter.take();
        limiter.take(); // waits, outside any runtime
        assert_eq!(warnings(), before);
        let runtime = ::tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            limiter.take(); // waits 100 ms, on the runtime's thread
        });
        assert_eq!(warnings(), before + 1);
        runtime.block_on(async {
            assert!(limiter.try_take().is_err()); // never waits
        });
        assert_eq!(warnings(), before + 1);
    }
}
