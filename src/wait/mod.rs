//! Waiting for a slot, once for every limiter kind: [`Wait`] (how), the
//! blocking wait, and with the `tokio` feature the async wait and the
//! give-back guard of a cancelled async take (`wait/tokio.rs`).
//!
//! A limiter decides first (one step, in its store or on its server) and
//! then waits here, holding nothing: no lock, no connection. The slot comes
//! from the schedule, never from when the caller woke, so a late wake-up
//! costs that caller latency, not the limiter its rate (up to the slack:
//! see [`Wait`]).

#[cfg(feature = "tokio")]
pub(crate) mod held;
#[cfg(feature = "tokio")]
pub(crate) mod tokio;

use std::time::Duration;

use crate::clock::{Clock, SPIN_YIELD_ABOVE};
use crate::model::schedule::ORIGIN;
use crate::values::error::Error;

// The default precise wait spins without yielding (see `SPIN_YIELD_ABOVE`).
const _: () = assert!(SPIN_YIELD_ABOVE as u128 >= Wait::DEFAULT_SPIN.as_nanos());

/// How a take waits for its slot: sleep, or sleep and then spin.
///
/// Either keeps the long-run rate exact as long as the slack covers the
/// waiter's lateness: slots come from the schedule, not from when the
/// caller woke. What differs is how late each permit is and what waiting
/// costs.
///
/// # Which to choose
///
/// - A late wake-up is absorbed by the banked window `slack * interval`. A
///   caller that paces itself alone (take, work, take) and wakes later than
///   that loses the difference for good. Many threads or tasks sharing a
///   limiter keep slots booked ahead of the clock, so lateness costs them
///   nothing.
/// - [`Wait::Sleep`] (the default) costs nothing while waiting. A thread's
///   `thread::sleep` wakes 60–100 µs late on a typical Linux machine and
///   Tokio's timer fires in whole milliseconds (about 1.1 ms late at the
///   median; permits due within one millisecond are released together at
///   its end). The default slack banks 10 ms at every rate from 1000/s up
///   ([`Slack::DEFAULT`](crate::Slack::DEFAULT)), which covers both.
/// - [`Wait::Precise`] sleeps until `spin` before the slot and then spins
///   (a thread) or yields in a loop (a task): permits leave within about a
///   microsecond of their slots, at the price of a core kept busy for up to
///   `spin` per wait. Use [`Wait::PRECISE`] for threads and
///   `paceline::tokio::PRECISE` (a 2 ms spin, above the timer's granularity)
///   for tasks. It smooths the flow only when a core is free: where every
///   core is busy the OS preempts the spinner for milliseconds at a time.
/// - Where the machine stalls threads for longer than 10 ms, give the slack
///   more time: `.slack(Duration::from_millis(50))`.
///
/// `docs/PERFORMANCE.md` has the measured error per configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Wait {
    /// Sleep until the slot. Cheap; wakes as late as the OS timer (tens of
    /// microseconds for a thread) or Tokio's timer (about a millisecond for
    /// a task).
    #[default]
    Sleep,
    /// Sleep until `spin` before the slot, then spin: permits leave within a
    /// microsecond of their slot, at the price of up to `spin` of CPU per wait.
    Precise {
        /// How long before the slot to stop sleeping and start spinning; set
        /// it above the sleep's overshoot.
        spin: Duration,
    },
}

impl Wait {
    /// [`Wait::Precise`] with a spin of [`Wait::DEFAULT_SPIN`].
    pub const PRECISE: Wait = Wait::Precise {
        spin: Wait::DEFAULT_SPIN,
    };

    /// 150 µs: above `thread::sleep`'s overshoot on Linux with the default
    /// 50 µs timer slack (about 80 µs typical, rarely past 120 µs).
    pub const DEFAULT_SPIN: Duration = Duration::from_micros(150);

    /// Blocks the thread on `clock` until `deadline` (clock nanoseconds)
    /// this way. Never returns early.
    pub fn wait_until<C: Clock + ?Sized>(self, clock: &C, deadline: u64) {
        match self {
            Wait::Sleep => clock.sleep_until(deadline),
            Wait::Precise { spin } => {
                let spin = nanos(spin);
                if deadline > spin {
                    clock.sleep_until(deadline - spin);
                }
                clock.spin_until(deadline);
            }
        }
    }
}

/// The blocking wait every blocking take ends in: waits with `wait` on
/// `clock` from `now` until `slot` (internal times), and returns the clock
/// time the permit went at: its slot, or `now` if the slot had passed.
/// `async_call` names the call to use instead on a Tokio runtime thread.
#[inline]
pub(crate) fn block<C: Clock + ?Sized>(
    wait: Wait,
    clock: &C,
    now: u64,
    slot: u64,
    async_call: &'static str,
) -> Duration {
    if slot > now {
        on_runtime_check(async_call);
        wait.wait_until(clock, slot - ORIGIN);
    }
    Duration::from_nanos(slot.max(now) - ORIGIN)
}

/// Why a take asks its limiter for a decision, which says whether a
/// refusal is counted (in [`Stats`](crate::observe::stats::Stats) and a keyed
/// limiter's per-key totals): counts equal what callers saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "tokio"), allow(dead_code))] // only async takes ask otherwise
pub(crate) enum Ask {
    /// For the caller's answer: every refusal is one, and counts.
    Answer,
    /// Whether an async take's slot is within the horizon yet
    /// (`wait/tokio.rs`): a slot too far (`QueueFull`) or a cost above the
    /// burst (`ExceedsBurst`) only means "not yet", and the take asks again
    /// (its answer counts then); any other refusal is the caller's answer.
    Horizon,
}

impl Ask {
    /// Whether `refusal` counts as a refused request.
    #[inline]
    pub(crate) fn counts(self, refusal: &Error) -> bool {
        match self {
            Ask::Answer => true,
            Ask::Horizon => !matches!(
                refusal,
                Error::QueueFull { .. } | Error::ExceedsBurst { .. }
            ),
        }
    }
}

pub(crate) use crate::clock::nanos;

/// In debug builds with the `tokio` feature: a blocking wait on a thread
/// inside a Tokio runtime stalls every task of that thread. Tokio gives no
/// public way to tell a runtime worker from a `spawn_blocking` thread (where
/// blocking is right), so this warns once per process (a `tracing` event
/// with feature `tracing`; nothing without it), naming the async call to
/// use instead, rather than panicking.
#[cfg(all(feature = "tokio", debug_assertions))]
pub(crate) use self::tokio::warn_if_on_runtime as on_runtime_check;

/// Elsewhere (a release build, or no `tokio`): nothing to warn about.
#[cfg(not(all(feature = "tokio", debug_assertions)))]
pub(crate) fn on_runtime_check(_async_call: &'static str) {}
