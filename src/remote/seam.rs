//! What a backend is: the sealed traits [`Remote`] (blocking) and
//! [`AsyncRemote`] (futures), and what passes through them: the
//! [`Request`] sent, the [`Decision`] returned, the [`Booking`] of a grant.
//! (`pub` items in a private module: no user can name them.)

#[cfg(feature = "tokio")]
use std::future::Future;

use super::Error;
use crate::model::schedule::{Admit, Deny, Params};
use crate::store::Booking;
use crate::wait::Ask;

/// One request, as a backend sends it: everything the server needs for
/// [`schedule::step`](crate::model::schedule::step) except the state and its clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The cost, in permits.
    pub(crate) cost: u64,
    /// `cost * T`, ns ([`schedule::span`](crate::model::schedule::span)).
    pub(crate) span: u64,
    /// The limit's parameters.
    pub(crate) params: Params,
    /// Which requests are admitted.
    pub(crate) admit: Admit,
    /// Whether a refusal is [`Deny::ExceedsBurst`] rather than a wait (known
    /// before the round trip: it depends only on the request).
    pub(crate) exceeds_burst: bool,
    /// Why the caller asks: whether a refusal counts as one (an async
    /// take's horizon asks again). Not sent.
    pub(crate) ask: Ask,
}

impl Request {
    /// This request, asked as `ask` says (see [`Ask`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn asked(self, ask: Ask) -> Request {
        Request { ask, ..self }
    }

    /// This request granted at `slot`, decided at the server's `now`: the
    /// key's state `prev` (`None`: it had none) replaced by `wrote`, the
    /// state stored (`None`: a cost of 0 stores nothing, and the booking
    /// holds the state its slot implies).
    pub(crate) fn granted(
        &self,
        now: u64,
        slot: u64,
        prev: Option<u64>,
        wrote: Option<u64>,
    ) -> Decision {
        let next = wrote.unwrap_or_else(|| slot.saturating_add(self.params.interval()));
        Decision::Granted(Booking::granted(now, slot, self.cost, prev, next))
    }

    /// `(cost - 1) * T`, ns: how far after its base a request's slot is.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn lead(&self) -> u64 {
        self.span.saturating_sub(self.params.interval())
    }
}

/// What the server decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Admitted, and booked: may proceed at the booking's slot, decided at
    /// its `now` (both the server's time, internal ns).
    Granted(Booking),
    /// Refused; nothing was stored.
    Denied(Deny),
}

/// A blocking backend: runs the step in its server. (`pub` in a private
/// module: sealed.)
pub trait Remote: Send + Sync + 'static {
    /// The backend of the async face ([`From`] a blocking limiter).
    #[cfg(feature = "tokio")]
    type Async: AsyncRemote;

    /// The async face's backend: the same server, limit and settings.
    #[cfg(feature = "tokio")]
    fn to_async(&self) -> Self::Async;

    /// Decides `request` for `key` in the server, storing the grant.
    fn step(&self, key: &str, request: &Request) -> Result<Decision, Error>;

    /// `key`'s state and the server's time (internal ns), read atomically;
    /// stores nothing.
    fn peek(&self, key: &str) -> Result<(u64, u64), Error>;

    /// Forgets `key`'s state; `true` when it held one.
    fn reset(&self, key: &str) -> Result<bool, Error>;

    /// As [`AsyncRemote::undo`], blocking: puts `key` back to
    /// `booking.prev` if it still holds `booking.next`, atomically in the
    /// server. For a lease's unspent permits (`src/lease/`). Never retried.
    fn undo(&self, key: &str, tau: u64, booking: Booking) -> Result<bool, Error>;
}

/// An async backend: [`Remote`]'s calls as futures. (Sealed.)
#[cfg(feature = "tokio")]
pub trait AsyncRemote: Send + Sync + 'static {
    /// As [`Remote::step`].
    fn step(
        &self,
        key: &str,
        request: &Request,
    ) -> impl Future<Output = Result<Decision, Error>> + Send;

    /// As [`Remote::peek`].
    fn peek(&self, key: &str) -> impl Future<Output = Result<(u64, u64), Error>> + Send;

    /// Undoes `booking` by the one rule ([`Booking`]): puts `key` back to
    /// `booking.prev` if it still holds `booking.next` (no one has taken
    /// since), atomically in the server; `Ok(false)` if it does not. `tau`
    /// sets how long the restored state lives. For a take cancelled while
    /// it waited (only async takes can be).
    fn undo(
        &self,
        key: &str,
        tau: u64,
        booking: Booking,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// As [`Remote::reset`].
    fn reset(&self, key: &str) -> impl Future<Output = Result<bool, Error>> + Send;
}
