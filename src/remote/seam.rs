//! What a backend is: the sealed traits [`Backend`] (blocking) and
//! [`AsyncBackend`] (futures), each one call, and what passes through them:
//! the [`Op`] asked and the [`Done`] answered, the [`Request`] of a step,
//! its [`Decision`], the [`Booking`] of a grant, the [`Settle`] of one.
//! (`pub` items in a private module: no user can name them.)

#[cfg(feature = "tokio")]
use std::future::Future;

use super::Error;
use crate::model::schedule::{self, Admit, Deny, Params, FULL, MAX_SPAN, ORIGIN};
use crate::model::window::{self, EMPTY};
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
    /// How long past the state it writes the key lives, ns: until at rest
    /// at this `tau` (at least the limit's).
    pub(crate) keep: u64,
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

    /// The step decided here rather than in a server (memcached's CAS
    /// loop, the in-memory backend), on the key's state `prev` (`None`:
    /// absent, at rest) at `now`: the decision, and the state to store
    /// (`None` for a refusal, and for a cost of 0, which spans nothing).
    pub(crate) fn step(&self, prev: Option<u64>, now: u64) -> (Decision, Option<u64>) {
        let p = self.params;
        match schedule::step(prev.unwrap_or(FULL), now, self.cost, p, self.admit) {
            Err(deny) => (Decision::Denied(deny), None),
            Ok(grant) => {
                let wrote = (self.cost > 0).then_some(grant.next);
                (self.granted(now, grant.slot, prev, wrote), wrote)
            }
        }
    }

    /// `(cost - 1) * T`, ns: how far after its base a request's slot is.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn lead(&self) -> u64 {
        self.span.saturating_sub(self.params.interval())
    }
}

/// One request on a limit counted by window, as a backend sends it:
/// everything [`window::step`] needs but the state and its clock.
///
/// Times at the seam are internal ns (the server's Unix time plus
/// [`ORIGIN`]), as a step's: a booking's `slot` and `now`, a peek's time;
/// the window step runs on Unix time, `now - ORIGIN`. A window's state is
/// its word ([`window::Params::pack`]); an absent key is [`EMPTY`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Count {
    /// The cost, in permits (at most the quota: a larger one is refused
    /// before the round trip).
    pub(crate) cost: u64,
    /// The quota and the window.
    pub(crate) params: window::Params,
    /// Which requests are admitted.
    pub(crate) admit: Admit,
    /// Why the caller asks (see [`Request::ask`]). Not sent.
    pub(crate) ask: Ask,
}

impl Count {
    /// This request granted: counted in window `index`, which then held
    /// `count`, decided at the server's `now` (internal ns), on the key's
    /// word `prev` (`None`: absent). `None` when the index or the count
    /// does not fit this window's word (a foreign value).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn granted(
        &self,
        now: u64,
        index: u64,
        count: u64,
        prev: Option<u64>,
    ) -> Option<Decision> {
        let p = self.params;
        let next = p.pack(window::State { index, count })?;
        let unix = now.saturating_sub(ORIGIN);
        // A cost of 0 goes now, wherever the state's window is.
        let slot = if self.cost == 0 {
            unix
        } else {
            p.start(index).max(unix)
        };
        let booking = Booking::granted(now, slot.saturating_add(ORIGIN), self.cost, prev, next);
        Some(Decision::Granted(booking))
    }

    /// The window step decided here rather than in a server (memcached's
    /// CAS loop, the in-memory backend), on the key's word `prev` (`None`:
    /// absent) at `now` (internal ns): the decision, and the word to store
    /// (`None` for a refusal, and for a cost of 0, which stores nothing).
    pub(crate) fn step(&self, prev: Option<u64>, now: u64) -> (Decision, Option<u64>) {
        let word = prev.unwrap_or(EMPTY);
        let unix = now.saturating_sub(ORIGIN);
        match window::step(word, unix, self.cost, self.params, self.admit) {
            Err(deny) => (Decision::Denied(paced(deny)), None),
            Ok(grant) => {
                let slot = grant.slot.saturating_add(ORIGIN);
                let booking = Booking::granted(now, slot, self.cost, prev, grant.next);
                (
                    Decision::Granted(booking),
                    (self.cost > 0).then_some(grant.next),
                )
            }
        }
    }
}

/// A refusal of [`window::step`] as the one mapping to the caller's error
/// reads it ([`Error::refused`](crate::Error)): a wait is a wait, a cost
/// over the quota is over the burst (a window limit's burst is its quota),
/// a window past the clock's end is saturated.
pub(crate) fn paced(deny: window::Deny) -> Deny {
    match deny {
        window::Deny::Wait(wait) => Deny::Wait(wait),
        window::Deny::ExceedsQuota => Deny::ExceedsBurst,
        window::Deny::Saturated => Deny::Saturated,
    }
}

/// A booking's settle on a limit counted by window: everything
/// [`window::settle`] needs but the word and the server's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recount {
    /// When the booking's permit went, Unix ns (0 when the booking holds
    /// none, which only an excess is sent for).
    pub(crate) went: u64,
    /// The cost booked, and the actual cost.
    pub(crate) booked: u64,
    pub(crate) actual: u64,
    /// The quota and the window.
    pub(crate) params: window::Params,
}

impl Recount {
    /// The settle of a booking of `booked` permits that cost `actual`,
    /// `None` when there is nothing to send (as [`Settle::of`]).
    pub(crate) fn of(
        booking: Option<&Booking>,
        booked: u64,
        actual: u64,
        params: window::Params,
    ) -> Option<Recount> {
        let went = match (booking, actual.cmp(&booked)) {
            (_, std::cmp::Ordering::Equal) | (None, std::cmp::Ordering::Less) => return None,
            (b, _) => b.map_or(0, |b| b.went().saturating_sub(ORIGIN)),
        };
        Some(Recount {
            went,
            booked,
            actual,
            params,
        })
    }

    /// The word the settle leaves on `prev` (`None`: absent) at `now`
    /// (internal ns), if it differs: what a backend that runs the model in
    /// the client stores.
    pub(crate) fn apply(&self, prev: Option<u64>, now: u64) -> Option<u64> {
        let word = prev.unwrap_or(EMPTY);
        let unix = now.saturating_sub(ORIGIN);
        let next = window::settle(word, unix, self.went, self.booked, self.actual, self.params);
        (next != word).then_some(next)
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

/// What a backend is asked for one key: one call of the seam, the same on
/// both faces.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Decides the request in the server, storing the grant.
    Step(Request),
    /// The key's state and the server's time (internal ns), read
    /// atomically; stores nothing.
    Peek,
    /// Undoes `booking` by the one rule ([`Booking`]): puts the key back to
    /// `booking.prev` if it still holds `booking.next` (no one has taken
    /// since), atomically in the server; `false` if it does not. `tau` sets
    /// how long the restored state lives (the limit's `keep`). For a take
    /// cancelled while it waited, and a lease's unspent permits
    /// (`src/lease/`). Never retried: run twice, it could erase a booking
    /// made in between from the state the first run restored.
    Undo { tau: u64, booking: Booking },
    /// Settles a booking with its actual cost:
    /// [`schedule::settle`](crate::model::schedule::settle) on the key's
    /// state at the server's time, the result stored (and kept as a step
    /// keeps its state) when it differs; answered as a peek, by the state
    /// it left and the server's time. Never retried: run twice, a refund
    /// would be given twice and an excess charged twice.
    Settle(Settle),
    /// Forgets the key's state; `true` when it held one. The same for a
    /// limit counted by window.
    Reset,
    /// The window step ([`window::step`]) decided in the server on the
    /// key's word, storing the grant; answered by a [`Decision`].
    Count(Count),
    /// A window key's word ([`EMPTY`] when absent) and the server's time,
    /// read atomically; stores nothing. Answered as a [`Op::Peek`].
    PeekCount(window::Params),
    /// Undoes a window grant by the one rule, as [`Op::Undo`]: the key
    /// goes back to `booking.prev` (absent, for `None`) only while it
    /// still holds `booking.next`. Never retried.
    UndoCount {
        params: window::Params,
        booking: Booking,
    },
    /// Settles a window booking ([`window::settle`] on the key's word at
    /// the server's time), answered as a peek. Never retried.
    Recount(Recount),
}

/// A booking's settle, as a backend sends it: everything
/// [`schedule::settle`](crate::model::schedule::settle) needs but the
/// state and the server's clock, and the products a server without `u64`
/// arithmetic (Lua's doubles) needs made for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settle {
    /// When the booking's permit went, on the server's clock (internal ns:
    /// [`Booking::went`]; 0 when the booking holds none, which only an
    /// excess is sent for).
    pub(crate) went: u64,
    /// The cost booked, and the actual cost.
    pub(crate) booked: u64,
    pub(crate) actual: u64,
    /// The limit's parameters.
    pub(crate) params: Params,
    /// How long past the state it writes the key lives, ns (as a step's
    /// [`Request::keep`]).
    pub(crate) keep: u64,
}

impl Settle {
    /// The settle of a booking of `booked` permits that cost `actual`:
    /// `None` when there is nothing to send (as booked; a refund of a
    /// booking that holds no state of the server's: a fail-open
    /// admission's).
    pub(crate) fn of(
        booking: Option<&Booking>,
        booked: u64,
        actual: u64,
        params: Params,
        keep: u64,
    ) -> Option<Settle> {
        let went = match (booking, actual.cmp(&booked)) {
            (_, std::cmp::Ordering::Equal) | (None, std::cmp::Ordering::Less) => return None,
            (b, _) => b.map_or(0, Booking::went),
        };
        Some(Settle {
            went,
            booked,
            actual,
            params,
            keep,
        })
    }

    /// The state the settle leaves on `prev` (`None`: absent, at rest) at
    /// `now`, if it differs: what a backend that runs the model in the
    /// client stores.
    pub(crate) fn apply(&self, prev: Option<u64>, now: u64) -> Option<u64> {
        let tat = prev.unwrap_or(FULL);
        let (went, booked, actual) = (self.went, self.booked, self.actual);
        let next = schedule::settle(tat, now, went, booked, actual, self.params);
        (next != tat).then_some(next)
    }

    /// An excess's span, `(actual - booked) * T`, or `u64::MAX` for one
    /// over [`MAX_SPAN`] (which saturates the state, as the model's
    /// [`Deny::CostTooLarge`] does); 0 for a refund.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn excess_span(&self) -> u64 {
        let excess = self.actual.saturating_sub(self.booked);
        match excess.checked_mul(self.params.interval()) {
            Some(span) if span <= MAX_SPAN => span,
            _ => u64::MAX,
        }
    }

    /// A refund's two spans: `reach`, how much of the booking may count
    /// against the burst when its permit goes (its span, at most `tau +
    /// T`), and `give`, the refund before the time since then is taken
    /// off it, `min((booked - actual) * T, reach)`. Each at most `2^63`.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn refund_spans(&self) -> (u64, u64) {
        let p = self.params;
        let reach = if self.booked > p.slack() {
            p.tau() + p.interval()
        } else {
            self.booked * p.interval()
        };
        let give = (self.booked.saturating_sub(self.actual))
            .saturating_mul(p.interval())
            .min(reach);
        (give, reach)
    }
}

impl Op {
    /// The window a call on a limit counted by window runs in; `None` for
    /// the pacing step's calls and a reset.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn params(&self) -> Option<window::Params> {
        match *self {
            Op::Count(Count { params, .. })
            | Op::PeekCount(params)
            | Op::UndoCount { params, .. }
            | Op::Recount(Recount { params, .. }) => Some(params),
            _ => None,
        }
    }

    /// Whether the call must be sent at most once: run twice, a give-back
    /// could erase a booking made in between from the state the first run
    /// restored, and a settle would refund or charge twice. A backend
    /// sends it again only when the server is known not to have run it (a
    /// cluster's redirection, a script the server had not loaded, a CAS
    /// race lost before anything was stored).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn once(&self) -> bool {
        matches!(
            self,
            Op::Undo { .. } | Op::Settle(_) | Op::UndoCount { .. } | Op::Recount(_)
        )
    }
}

/// What a backend answered to an [`Op`].
#[derive(Clone, Copy, Debug)]
pub enum Done {
    /// A step's decision.
    Decision(Decision),
    /// A peek's state and server time.
    Peeked(u64, u64),
    /// Whether an undo or a reset changed the key.
    Flag(bool),
}

impl Done {
    /// A step's answer.
    pub(crate) fn decision(self) -> Result<Decision, Error> {
        match self {
            Done::Decision(d) => Ok(d),
            other => Err(other.mismatch()),
        }
    }

    /// A peek's answer: `(tat, now)`.
    pub(crate) fn peeked(self) -> Result<(u64, u64), Error> {
        match self {
            Done::Peeked(tat, now) => Ok((tat, now)),
            other => Err(other.mismatch()),
        }
    }

    /// An undo's or a reset's answer.
    pub(crate) fn flag(self) -> Result<bool, Error> {
        match self {
            Done::Flag(flag) => Ok(flag),
            other => Err(other.mismatch()),
        }
    }

    /// A backend answered another kind of call than asked (cannot happen).
    fn mismatch(self) -> Error {
        Error::script(format!("an answer of another call: {self:?}"))
    }
}

/// A backend of [`RemoteLimiter`](super::RemoteLimiter): a server the
/// step runs in, reached with blocking calls. Sealed: the backends are paceline's (see [the module docs](super)); the
/// types its call takes cannot be named outside the crate.
pub trait Backend: Send + Sync + 'static {
    /// The backend of the async face ([`From`] a blocking limiter).
    #[cfg(feature = "tokio")]
    type Async: AsyncBackend;

    /// The async face's backend: the same server, limit and settings.
    #[cfg(feature = "tokio")]
    fn to_async(&self) -> Self::Async;

    /// Runs `op` on `key` in the server.
    fn call(&self, key: &str, op: Op) -> Result<Done, Error>;
}

/// A backend of [`AsyncRemoteLimiter`](super::AsyncRemoteLimiter),
/// reached with futures: [`Backend`]'s call as a future. Sealed.
#[cfg(feature = "tokio")]
pub trait AsyncBackend: Send + Sync + 'static {
    /// As [`Backend::call`].
    fn call(&self, key: &str, op: Op) -> impl Future<Output = Result<Done, Error>> + Send;
}
