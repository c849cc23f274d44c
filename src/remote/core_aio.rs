//! The async calls: through the crate's one async wait, with this
//! limit's decisions as its [`Reserve`].

use std::sync::Arc;

use super::core::{went_at, Core};
use super::Error;
use crate::clock::{internal_now, DefaultClock};
use crate::limiter::booked::Booked;
use crate::limiter::take::{State, Taken, Within};
use crate::model::schedule::Admit;
use crate::primitive::{lock, Mutex};
use crate::remote::{AsyncBackend, Done, Op};
use crate::store::Booking;
use crate::wait::tokio::{self as wait, Reserve, Reserved};
use crate::wait::{Ask, Wait};

/// One key of a limit, as the async wait asks it for decisions; keeps
/// what the last decision found, for the take's report.
struct Keyed<'a, B> {
    core: &'a Core<B>,
    key: &'a str,
    found: Mutex<Option<Option<Booking>>>,
}

/// A remote limit's decisions for the async wait. The undo is by the
/// grant's [`Booking`] (the states before and after it), which the server
/// applies only while the key still holds the grant's state.
impl<B: AsyncBackend> Reserve for Keyed<'_, B> {
    type Clock = DefaultClock;

    fn clock(&self) -> &DefaultClock {
        &self.core.shared.clock
    }

    fn wait(&self) -> Wait {
        self.core.shared.wait
    }

    async fn reserve(&self, cost: u64, admit: Admit, ask: Ask) -> Result<Reserved, Error> {
        // Asked as `ask` says (see `Ask`).
        let (op, asked) = self.core.step_op(cost, admit, ask)?;
        let decision = self.core.call_async(self.key, op);
        let granted = self
            .core
            .settle(decision.await.and_then(Done::decision), &asked)?;
        *lock(&self.found) = Some(granted);
        // The server's wait, counted from the reply's arrival.
        let now = internal_now(&self.core.shared.clock);
        let slot = now.saturating_add(granted.map_or(0, |g| g.wait()));
        Ok(Reserved {
            now,
            slot,
            went_at: went_at(granted),
            booking: granted.filter(Booking::wrote),
        })
    }

    /// Undoes the grant in the server, if no one has taken since: a
    /// round trip, so it runs as a task of its own (a drop cannot wait
    /// for it), on the Tokio runtime current where the future is
    /// dropped; dropped outside any runtime, nothing is given back. Best
    /// effort: an error leaves the slot spent, as if it had not been
    /// given back.
    fn undo(&self, booking: Booking) {
        self.core.shared.meter.cancelled();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let backend = Arc::clone(&self.core.backend);
        let key = self.key.to_owned();
        let undo = self.core.undo_op(booking);
        runtime.spawn(async move {
            let _ = backend.call(&key, undo).await;
        });
    }
}

impl<B: AsyncBackend> Core<B> {
    /// Runs `op` on `key` in the server; a failure names the server.
    pub(crate) async fn call_async(&self, key: &str, op: Op) -> Result<Done, Error> {
        (self.backend.call(key, op).await).map_err(|e| e.at(&self.shared.server))
    }

    /// A take: an unbounded one books once the slot is within the
    /// horizon; a bounded one books at once if within its bound; a try
    /// takes if the slot is now. Each reports what it found.
    pub(crate) async fn take_async(
        &self,
        key: &str,
        cost: u64,
        within: Within,
    ) -> Result<Taken, Error> {
        Ok(self.reserve_async(key, cost, within).await?.0)
    }

    /// [`take_async`](Self::take_async) as a booking, to settle.
    pub(crate) async fn book_async(
        &self,
        key: &str,
        cost: u64,
        within: Within,
    ) -> Result<Booked, Error> {
        let (taken, booking) = self.reserve_async(key, cost, within).await?;
        Ok(self.booked(key, taken, cost, booking))
    }

    /// Settles `booked` on `key` with its `actual` cost, as the blocking
    /// [`settle_booked`](Core::settle_booked).
    pub(crate) async fn settle_async(
        &self,
        key: &str,
        booked: Booked,
        actual: u64,
    ) -> Result<(), Error> {
        match self.settle_op(key, booked, actual)? {
            Some(op) => self.settled(self.call_async(key, op).await),
            None => Ok(()),
        }
    }

    /// A take, and the booking it waited for (`None`: admitted by the
    /// fail-open policy, or a cost of 0, which books nothing).
    async fn reserve_async(
        &self,
        key: &str,
        cost: u64,
        within: Within,
    ) -> Result<(Taken, Option<Booking>), Error> {
        let keyed = Keyed {
            core: self,
            key,
            found: Mutex::new(None),
        };
        // (Each answers when the permit went; the report says more.)
        let reserved = match within {
            Within::Now => keyed.reserve(cost, Admit::Within(0), Ask::Answer).await?,
            // A remote limiter's limit is fixed per limiter object
            // (`with_limit` makes another): no change to wake for.
            Within::Any => wait::take(&keyed, cost, None, None).await?,
            Within::Max(max_wait) => wait::take_within(&keyed, cost, max_wait)
                .await
                .map_err(|e| e.timed_out(max_wait))?,
        };
        // The report of the take, from its last decision.
        let found = lock(&keyed.found).take().flatten();
        Ok((self.taken(found), reserved.booking))
    }

    /// `key`'s state, one peek.
    pub(crate) async fn state_async(&self, key: &str) -> Result<State, Error> {
        let (tat, now) = self.call_async(key, self.peek_op()).await?.peeked()?;
        Ok(self.state_of(tat, now))
    }
}
