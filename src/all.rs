//! All or nothing over several limits: a request goes only if every limit
//! admits it, and then it has taken from each (a per-user limit and a
//! global one, say).
//!
//! ```
//! # #[cfg(feature = "keyed")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use paceline::{all, AtomicLimiter, KeyedLimiter, Rate};
//!
//! let global = AtomicLimiter::builder(Rate::per_second(1))
//!     .slack(2)
//!     .full_credit(true) // a burst of 3 at once
//!     .build()?;
//! let per_user = KeyedLimiter::<String>::builder(Rate::per_second(1))
//!     .slack(1) // a burst of 2 per user
//!     .build()?;
//!
//! all::try_take(&[&per_user.bucket("alice"), &global])?;
//! all::try_take(&[&per_user.bucket("alice"), &global])?;
//! // alice's burst of 2 is spent: refused, and the global limit keeps its permit.
//! assert!(all::try_take(&[&per_user.bucket("alice"), &global]).is_err());
//! assert_eq!(global.available(), 1);
//! all::try_take(&[&per_user.bucket("bob"), &global])?; // the global permit left
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "keyed"))]
//! # fn main() {}
//! ```
//!
//! The parts ([`Part`]) are any direct limiter ([`AtomicLimiter`],
//! [`MutexLimiter`], [`WarmUpLimiter`]) and one key of a
//! [`KeyedLimiter`](crate::KeyedLimiter), from its `bucket(&key)`; their
//! clocks may differ.
//!
//! # How it decides
//!
//! The parts are asked in order, each with its own step, as a lone call
//! would. If one refuses, the parts before it are given back what they
//! granted, in reverse order, and the call fails with that part's refusal.
//! So nothing is ever admitted that any one limit would not have admitted
//! alone: each limit's [window
//! bound](crate::guide::model#slack-and-burst-the-window-bound) holds,
//! whatever runs beside.
//!
//! # What a race costs
//!
//! A give-back undoes a grant only if nobody has taken from that limit
//! since (the same exact undo as a cancelled async take, never a
//! subtraction, which could let a later caller exceed the bound). If
//! another caller took from it between this call's grant and its
//! give-back, the permits stay spent: that limit loses at most the
//! request's cost in capacity for that one refusal, and is never over its
//! bound. Such a loss needs a refusal by a later part while another caller
//! takes from an earlier one in the few nanoseconds between.
//!
//! So **put the most contended limit last**: a refusal by the last part
//! has nothing after it to undo, and a refusal by a later part gives back
//! an earlier, quieter one (one user's bucket), which nobody else is
//! likely to have touched. A part's refusal is counted in its `stats()`
//! as usual, and a give-back as [`Stats::cancelled`](crate::observe::stats::Stats::cancelled).
//!
//! Blocking [`take`] books every part first, then waits for the latest of
//! the slots: a part whose slot came earlier sees its permit used late,
//! which never breaks its bound.
//!
//! [`AtomicLimiter`]: crate::AtomicLimiter
//! [`MutexLimiter`]: crate::MutexLimiter
//! [`WarmUpLimiter`]: crate::WarmUpLimiter

use std::time::Duration;

use crate::model::schedule::Admit;
use crate::values::error::Error;
use crate::wait::nanos;

use crate::store::Booking;

pub use crate::limiter::part::Part;

/// Takes a permit from every part if each has one free now; otherwise
/// takes from none (but see [what a race costs](self#what-a-race-costs)).
/// Never blocks.
///
/// # Errors
/// The first refusal, as that part would return it alone
/// ([`Error::RetryAfter`], [`Error::TooManyKeys`], ...).
pub fn try_take(parts: &[&dyn Part]) -> Result<(), Error> {
    try_take_n(parts, 1)
}

/// [`try_take`] for `cost` permits from each part.
///
/// # Errors
/// As [`try_take`]; also [`Error::ExceedsBurst`] when a part's burst
/// is below `cost`, and [`Error::CostTooLarge`].
pub fn try_take_n(parts: &[&dyn Part], cost: u64) -> Result<(), Error> {
    book(parts, cost, Admit::Within(0)).map(drop)
}

/// Takes a permit from every part and waits for the latest of their slots,
/// if every slot is at most `max_wait` away; otherwise fails at once and
/// takes from none.
///
/// # Errors
/// [`Error::QueueFull`] with the first refusing part's wait, and as
/// [`try_take_n`].
pub fn take_timeout(parts: &[&dyn Part], max_wait: Duration) -> Result<(), Error> {
    take_n_timeout(parts, 1, max_wait)
}

/// [`take_timeout`] for `cost` permits from each part.
///
/// # Errors
/// As [`take_timeout`].
pub fn take_n_timeout(parts: &[&dyn Part], cost: u64, max_wait: Duration) -> Result<(), Error> {
    let held =
        book(parts, cost, Admit::Within(nanos(max_wait))).map_err(|e| e.timed_out(max_wait))?;
    wait_all(parts, &held);
    Ok(())
}

/// Books a permit on every part, then blocks until the latest of their
/// slots.
///
/// # Errors
/// Only what no wait helps: [`Error::TooManyKeys`] from a full keyed
/// limiter under `WhenFull::Refuse`; the parts booked before it are given
/// back.
pub fn take(parts: &[&dyn Part]) -> Result<(), Error> {
    take_n(parts, 1)
}

/// [`take`] for `cost` permits from each part.
///
/// # Errors
/// As [`take`]; also [`Error::CostTooLarge`].
pub fn take_n(parts: &[&dyn Part], cost: u64) -> Result<(), Error> {
    let held = book(parts, cost, Admit::Always)?;
    wait_all(parts, &held);
    Ok(())
}

/// Books `cost` on each part in order; on a refusal, undoes the ones
/// booked, last first, and returns the refusal.
fn book(parts: &[&dyn Part], cost: u64, admit: Admit) -> Result<Vec<Booking>, Error> {
    let mut booked = Vec::with_capacity(parts.len());
    for part in parts {
        match part.book(cost, admit) {
            Ok(b) => booked.push(b),
            Err(refusal) => {
                for (part, b) in parts.iter().zip(&booked).rev() {
                    part.undo(b);
                }
                return Err(refusal);
            }
        }
    }
    Ok(booked)
}

/// Waits out every part's slot, each on its own clock: in all, until the
/// latest.
fn wait_all(parts: &[&dyn Part], booked: &[Booking]) {
    for (part, b) in parts.iter().zip(booked) {
        part.wait(b);
    }
}
