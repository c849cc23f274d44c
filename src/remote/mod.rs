//! The seam for limits kept in a server (features `redis` and `postgres`):
//! the step runs in the server, atomically, on its clock; the client only
//! asks and then waits.
//!
//! # Implementation details
//!
//! A remote store is one backend: it sends the step for `(key, request)`
//! to its server and maps the reply to a [`Decision`] (granted at a slot,
//! with the server's now; or a refusal of
//! [`schedule::step`](crate::schedule::step)), and it
//! peeks at a key's state and the server's now without storing anything.
//! That is [`Remote`] (blocking) and [`AsyncRemote`] (a future). Everything
//! else is here, once, for every backend:
//!
//! - the checks that need no round trip
//!   ([`schedule::span`](crate::schedule::span)'s `CostTooLarge`, and
//!   whether a refusal would be
//!   [`schedule::exceeds_burst`](crate::schedule::exceeds_burst)),
//!   and the request the backend sends ([`Request`]);
//! - the [`FailPolicy`] (a failure of the server admits or errs), the
//!   timeouts' defaults, and the one [`Error`] type;
//! - turning a decision into the caller's answer, through
//!   [`TakeError::refused`](crate::TakeError), the same mapping every
//!   in-process limiter uses;
//! - waiting: a blocking take ends in the crate's one blocking wait, an async
//!   one in the crate's one async wait (with its 10 ms horizon), both on the
//!   local clock for the wait the server reported, counted from the reply's
//!   arrival, so a permit is never early by the server's clock.
//!
//! See `src/remote/limiter.rs` for the calls, and `src/remote/redis/` for the
//! first backend.

mod error;
pub(crate) mod limiter;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "tokio")]
use std::future::Future;
use std::time::Duration;

pub use error::Error;

use crate::schedule::{Admit, Deny, Params};
use crate::wait::Ask;

/// How long to wait for a connection, unless the builder sets another: a
/// local server answers in well under a millisecond; a second covers a busy
/// network without leaving callers stuck for long.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long to wait for a reply, unless the builder sets another.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

/// What a call does when its server fails it (down, too slow, or the step
/// failed). Refusals by the limit itself are not failures and never change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FailPolicy {
    /// Return the [`Error`]: the unit of work must not go. Safe for a limit
    /// that protects something (a fragile backend, a paid API's quota); an
    /// outage of the server stops the work too. The default.
    #[default]
    Closed,
    /// Admit the request at once, as if the limit had room: an outage of
    /// the server lifts the limit instead of stopping the work (a loop of
    /// blocking takes runs unpaced until the server is back). For limits
    /// that are a courtesy (smoothing, fairness) rather than a protection.
    Open,
}

/// One request, as a backend sends it: everything the server needs for
/// [`schedule::step`](crate::schedule::step) except the state and its clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    /// The cost, in permits.
    pub(crate) cost: u64,
    /// `cost * T`, ns ([`schedule::span`](crate::schedule::span)).
    pub(crate) span: u64,
    /// The limit's parameters.
    pub(crate) params: Params,
    /// Which requests are admitted.
    pub(crate) admit: Admit,
    /// Whether a refusal is [`Deny::ExceedsBurst`] rather than a wait (known
    /// before the round trip: it depends only on the request).
    pub(crate) exceeds_burst: bool,
    /// Whether the caller only needs to know that it was admitted now (a
    /// `try_take`: admitted within 0, with no slot to wait for and nothing
    /// to give back): the backend may then answer a grant with
    /// [`Decision::Admitted`], which costs the server less to say.
    pub(crate) brief: bool,
    /// Why the caller asks: whether a refusal counts as one (an async
    /// take's horizon asks again). Not sent.
    pub(crate) ask: Ask,
}

impl Request {
    /// This request, asked briefly (see [`brief`](Self::brief)): for
    /// `Admit::Within(0)` only.
    pub(crate) fn brief(self) -> Request {
        debug_assert_eq!(self.admit, Admit::Within(0));
        Request {
            brief: true,
            ..self
        }
    }

    /// This request, asked as `ask` says (see [`Ask`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn asked(self, ask: Ask) -> Request {
        Request { ask, ..self }
    }

    /// `(cost - 1) * T`, ns: how far after its base a request's slot is.
    pub(crate) fn lead(&self) -> u64 {
        self.span.saturating_sub(self.params.interval())
    }
}

/// What the server decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Admitted: may proceed at `slot`, decided at `now` (both the server's
    /// time, internal ns).
    Granted {
        /// The slot.
        slot: u64,
        /// The server's time when it decided.
        now: u64,
        /// What undoes the grant, if it stored anything.
        undo: Option<Undo>,
    },
    /// Admitted now, and nothing more said: the answer to a
    /// [`brief`](Request::brief) request.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    Admitted,
    /// Refused; nothing was stored.
    Denied(Deny),
}

/// What undoes one grant ([`AsyncRemote::give_back`]): the state it
/// replaced and the state it stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Undo {
    /// The key's state before the grant; `None` when it had none (at rest).
    pub(crate) prev: Option<u64>,
    /// The state the grant stored.
    pub(crate) next: u64,
}

/// A blocking backend: runs the step in its server.
pub(crate) trait Remote: Send + Sync {
    /// The async call to name when a blocking take waits on a Tokio thread.
    const ASYNC_TAKE: &'static str;

    /// Decides `request` for `key` in the server, storing the grant.
    fn step(&self, key: &str, request: &Request) -> Result<Decision, Error>;

    /// `key`'s state and the server's time (internal ns), read atomically;
    /// stores nothing.
    fn peek(&self, key: &str) -> Result<(u64, u64), Error>;
}

/// An async backend: [`Remote`]'s calls as futures.
#[cfg(feature = "tokio")]
pub(crate) trait AsyncRemote: Send + Sync {
    /// As [`Remote::step`].
    fn step(
        &self,
        key: &str,
        request: &Request,
    ) -> impl Future<Output = Result<Decision, Error>> + Send;

    /// As [`Remote::peek`].
    fn peek(&self, key: &str) -> impl Future<Output = Result<(u64, u64), Error>> + Send;

    /// Puts `key` back to `undo.prev` if it still holds `undo.next` (no one
    /// has taken since), atomically in the server; `Ok(false)` if it does
    /// not. `tau` sets how long the restored state lives. For a take
    /// cancelled while it waited (only async takes can be).
    fn give_back(
        &self,
        key: &str,
        tau: u64,
        undo: Undo,
    ) -> impl Future<Output = Result<bool, Error>> + Send;
}
