//! Held takes: a bounded async take (`take_timeout`) on an in-process
//! limiter waits for its slot to come within the horizon before booking
//! it, behind the cost [`Line`] says is promised to takes held ahead of it
//! on the same limit; so a take that goes away while held gives its place
//! back whatever order takes leave in. See `tokio.rs` for the wait itself.

use std::collections::HashMap;
#[cfg(feature = "keyed")]
use std::hash::{BuildHasher, Hash, RandomState};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ::tokio::sync::Notify;

use super::tokio::{sleep_until_or, take_within, wait_reserved, Reserve, Reserved, HORIZON};
use super::{nanos, Ask};
use crate::clock::internal_now;
use crate::model::schedule::Admit;
use crate::values::error::Error;

/// What an in-process limit answers a held take beyond [`Reserve`]: a look
/// that books nothing, and the count of a refusal decided without a step.
pub(crate) trait Peek: Reserve {
    /// How long a request of `cost` would wait now (ns), storing nothing
    /// and counting nothing: the step's answer under `admit`.
    fn wait_for(&self, cost: u64, admit: Admit) -> Result<u64, Error>;

    /// Counts one refusal that the line decided (counts equal what callers
    /// saw).
    fn count_refused(&self);
}

/// The held takes of one limiter (see the module docs): for each of its
/// limits (a key's, by the key's hash; the one limit of a direct limiter),
/// the cost promised to takes that wait for their slot to come within the
/// horizon and have not booked it yet. Only takes that wait past the
/// horizon touch it; one whose slot is near books as before, without a
/// lock while nobody is held.
#[derive(Default)]
pub(crate) struct Line {
    /// Cost promised on every limit together: zero, read without the lock,
    /// means that no one is held.
    total: AtomicU64,
    /// Cost promised, per limit; a limit leaves the map when it is back to
    /// zero, so it holds only limits with held takes.
    held: Mutex<HashMap<u64, u64>>,
    /// Hashes a key to its limit's place here: seeded per line, so that no
    /// client can aim its key at another's place.
    #[cfg(feature = "keyed")]
    hasher: RandomState,
}

impl Line {
    /// The place of `key`'s limit (a direct limiter has one: 0).
    #[cfg(feature = "keyed")]
    pub(crate) fn place<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, u64>> {
        // Every section below stores whole values: a poisoned map is valid.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A place in a [`Line`]: leaves it when dropped (booked, refused, or
/// cancelled while it slept).
struct Promise<'a> {
    line: &'a Line,
    place: u64,
    cost: u64,
}

impl Drop for Promise<'_> {
    /// Takes its cost off its place (a held take booked, or left).
    fn drop(&mut self) {
        let mut held = self.line.lock();
        if let Some(ahead) = held.get_mut(&self.place) {
            *ahead = ahead.saturating_sub(self.cost);
            if *ahead == 0 {
                held.remove(&self.place);
            }
        }
        self.line.total.fetch_sub(self.cost, Ordering::Release);
    }
}

/// A bounded take that may be held (`take_timeout` on an in-process
/// limiter): refused at once when its slot, behind the cost held ahead of
/// it on `line`, is further than `max_wait`; otherwise it books once its
/// slot is within [`HORIZON`] (at once if it already is and no one is held
/// ahead), then waits for it. See the module docs.
pub(crate) async fn take_held<R: Peek>(
    limiter: &R,
    cost: u64,
    max_wait: Duration,
    line: &Line,
    place: u64,
    changed: &Notify,
) -> Result<Reserved, Error> {
    let max = nanos(max_wait);
    if max <= HORIZON {
        // Never booked further than the horizon anyway.
        return take_within(limiter, cost, max_wait).await;
    }
    // The common case: nobody held here, and the slot is near.
    if line.total.load(Ordering::Acquire) == 0 || !line.lock().contains_key(&place) {
        match limiter
            .reserve(cost, Admit::Within(HORIZON), Ask::Horizon)
            .await
        {
            Ok(reserved) => return Ok(wait_reserved(limiter, reserved).await),
            Err(Error::QueueFull { .. } | Error::ExceedsBurst { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    // Too far yet: join the line, or be refused at once.
    let start = internal_now(limiter.clock());
    let deadline = start.saturating_add(max);
    let full = |wait: u64| Error::QueueFull {
        wait: Duration::from_nanos(wait),
        max_wait,
    };
    // Watched from before the wait is computed: a change after that wakes
    // the take.
    let mut change = pin!(changed.notified());
    let (promise, wait) = {
        let mut held = line.lock();
        let ahead = held.get(&place).copied().unwrap_or(0);
        // Its own cost first: the refusals that name it (a cost above the
        // burst, too large) are as a booking's.
        let own = limiter.wait_for(cost, Admit::Within(max));
        let wait = match own {
            Ok(wait) if ahead == 0 => Ok(wait),
            Ok(_) => match limiter.wait_for(ahead.saturating_add(cost), Admit::Always) {
                Ok(wait) if wait <= max => Ok(wait),
                Ok(wait) => Err(full(wait)),
                Err(_) => Err(full(u64::MAX)),
            },
            Err(e) => Err(e.timed_out(max_wait)),
        };
        match wait {
            Ok(wait) => {
                *held.entry(place).or_insert(0) += cost;
                line.total.fetch_add(cost, Ordering::Release);
                let promise = Promise { line, place, cost };
                (promise, wait)
            }
            Err(e) => {
                drop(held);
                limiter.count_refused();
                return Err(e);
            }
        }
    };
    let mut until = start.saturating_add(wait.saturating_sub(HORIZON));
    loop {
        if sleep_until_or(limiter.clock(), until, change.as_mut()).await {
            // The limit changed: ask again, watching for the next change.
            change.set(changed.notified());
        }
        let e = match limiter
            .reserve(cost, Admit::Within(HORIZON), Ask::Horizon)
            .await
        {
            Ok(reserved) => {
                // Booked: the promise is kept (it leaves after the booking,
                // so a take asking in between counts this cost twice rather
                // than not at all).
                drop(promise);
                return Ok(wait_reserved(limiter, reserved).await);
            }
            Err(e) => e,
        };
        let now = internal_now(limiter.clock());
        match e {
            // Others booked ahead (takes that do not join the line): wait
            // on, as long as the caller allowed.
            Error::QueueFull { wait, .. } if now.saturating_add(nanos(wait)) <= deadline => {
                until = now.saturating_add(nanos(wait).saturating_sub(HORIZON));
            }
            Error::QueueFull { wait, .. } => {
                drop(promise);
                limiter.count_refused();
                return Err(full(nanos(wait)));
            }
            // A cost above the burst waits its extra intervals anyway: book
            // it now, within what is left of the caller's wait.
            Error::ExceedsBurst { .. } => {
                drop(promise);
                let left = Duration::from_nanos(deadline.saturating_sub(now));
                let reserved = limiter
                    .reserve(cost, Admit::Within(nanos(left)), Ask::Answer)
                    .await
                    .map_err(|e| e.timed_out(max_wait))?;
                return Ok(wait_reserved(limiter, reserved).await);
            }
            e => return Err(e),
        }
    }
}
