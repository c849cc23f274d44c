//! [`Core`]: a remote limiter's logic, once for every backend and both
//! faces: check what needs no round trip, ask the backend, apply the fail
//! policy, map the decision to the caller's answer and to what the take
//! found, and wait (blocking, or as a Tokio task).
//!
//! The server's slot is turned into a local deadline by the wait the server
//! reported (`slot - server_now`), counted from the reply's arrival on the
//! local clock: the return leg of the round trip is added to the wait, so a
//! permit is never early by the server's clock, and client and server clocks
//! need not agree.

use std::sync::Arc;
use std::time::Duration;

use super::seam::Recount;
use super::{Backend, Decision, Done, Error, FailPolicy, Op, Request, Settle};
use super::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT};
use crate::clock::{internal_now, Clock, DefaultClock, UnixClock};
use crate::limiter::booked::{owner, owner_of, Booked};
use crate::limiter::pacer;
use crate::limiter::take::{State, Taken};
use crate::model::schedule::{self, Admit, Params, ORIGIN};
use crate::model::window::{self, Window};
use crate::observe::stats::{Counting, Meter};
use crate::store::Booking;
use crate::values::error::BuildError;
use crate::values::limit::Limit;
use crate::values::rate::Rate;
use crate::values::slack::Slack;
use crate::wait::{self, Ask, Wait};

/// What every limit of one limiter (its [`with_limit`](Core::with_limit)
/// siblings and its other face too) shares besides the backend: how calls
/// fail and wait, and what they decided.
pub(crate) struct Shared {
    pub(crate) policy: FailPolicy,
    pub(crate) wait: Wait,
    /// The local clock waits are measured on.
    pub(crate) clock: DefaultClock,
    /// What the limiter decided, if its builder asked.
    pub(crate) meter: Meter,
    /// Where its server is, for its failures and events: the address
    /// (never a password), and the limiter's name where it has one.
    pub(crate) server: Arc<str>,
    /// Whether the last call found the server unable to answer: the
    /// `tracing` events say when it is lost and when it is back, once each.
    #[cfg(feature = "tracing")]
    pub(crate) lost: std::sync::atomic::AtomicBool,
}

/// The settings every remote limiter has: as its builder sets them (a
/// backend's `build` takes them), or as `with_backend` gives them.
#[derive(Debug)]
#[cfg_attr(
    not(any(feature = "redis", feature = "postgres", feature = "memcached")),
    allow(dead_code)
)]
pub(crate) struct Common {
    pub(crate) rate: Rate,
    pub(crate) slack: Slack,
    /// A limit counted by window: its quota and window (`rate` and
    /// `slack` then the quota's, as [`Limit::per_window`] sets them).
    pub(crate) window: Option<(u64, Window)>,
    pub(crate) policy: FailPolicy,
    pub(crate) wait: Wait,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) counting: Counting,
}

impl Common {
    /// Sets `limit`: a rate and its slack, or a quota per window.
    pub(crate) fn set_limit(&mut self, limit: Limit) {
        (self.rate, self.slack) = (limit.rate(), limit.slack());
        self.window = limit.window().map(|w| (limit.burst(), w));
    }

    /// The settings at `rate`, every other one at its default.
    pub(crate) fn new(rate: Rate) -> Common {
        Common {
            rate,
            slack: Slack::DEFAULT,
            window: None,
            policy: FailPolicy::default(),
            wait: Wait::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            counting: Counting::default(),
        }
    }
}

/// What a take asked, for the mapping of its answer: the cost, which
/// requests are admitted, and why it asks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked {
    pub(crate) cost: u64,
    pub(crate) admit: Admit,
    pub(crate) ask: Ask,
}

/// The window parameters of a limit `common` counts by window, checked:
/// `None` for a paced one. A slack set beside a quota is refused by name:
/// the quota is the burst.
pub(super) fn counted(common: &Common) -> Result<Option<window::Params>, BuildError> {
    let Some((quota, w)) = common.window else {
        return Ok(None);
    };
    let limit = Limit::per_window(quota, w)?;
    if common.slack != limit.slack() {
        return Err(BuildError::WindowNotPaced {
            limit: limit.to_string(),
            by: "a slack",
        });
    }
    Ok(Some(window::Params::new(quota, w)?))
}

/// One limit (rate and slack, or a quota per window) over a backend.
pub(crate) struct Core<B> {
    pub(crate) backend: Arc<B>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) rate: Rate,
    pub(crate) params: Params,
    /// `Some` for a limit counted by window: every call then runs the
    /// window step ([`window::step`]) on the key's window word, and
    /// `rate` and `params` are the quota's nominal rate, reported only.
    pub(crate) window: Option<window::Params>,
    /// How long past its state a key this limit writes lives, ns: until it
    /// is at rest at this `tau`, the limit's own, or (a lease's lender at
    /// a reduced slack) the stated limit's, at which others may take.
    pub(crate) keep: u64,
    /// The limit's own number, which its bookings carry with their key
    /// mixed in: a booking settles only on the limit (either face) and
    /// key that made it.
    pub(crate) id: u64,
}

impl<B> Clone for Core<B> {
    fn clone(&self) -> Self {
        self.over(Arc::clone(&self.backend))
    }
}

/// When a granted permit went, on the clock that decided it: the server's
/// (internal ns are its Unix time plus `ORIGIN`); for a permit the
/// fail-open policy admitted, the local Unix time, the nearest this
/// process has to the server's.
pub(crate) fn went_at(granted: Option<Booking>) -> Duration {
    match granted {
        Some(g) => Duration::from_nanos(g.slot.max(g.now).saturating_sub(ORIGIN)),
        None => Duration::from_nanos(UnixClock.now()),
    }
}

impl<B> Core<B> {
    /// The limit `common` sets over `backend`, whose server is at `server`
    /// (an address without its password), failing, waiting and counting
    /// as it says.
    pub(crate) fn new(backend: B, server: &str, common: &Common) -> Result<Core<B>, BuildError> {
        #[cfg(feature = "metrics")]
        let server: &str = &(common.counting.facade.as_ref())
            .map_or(server.into(), |n| format!("{server} (limiter {n:?})"));
        let shared = Shared {
            policy: common.policy,
            wait: common.wait,
            clock: DefaultClock::new(),
            meter: Meter::new(&common.counting),
            server: server.into(),
            #[cfg(feature = "tracing")]
            lost: std::sync::atomic::AtomicBool::new(false),
        };
        let params = pacer::params(common.rate, common.slack)?;
        Ok(Core {
            backend: Arc::new(backend),
            shared: Arc::new(shared),
            rate: common.rate,
            params,
            window: counted(common)?,
            keep: params.tau(),
            id: owner(),
        })
    }

    /// This limit over `backend` (its other face's), sharing the rest.
    pub(crate) fn over<C>(&self, backend: Arc<C>) -> Core<C> {
        Core {
            backend,
            shared: Arc::clone(&self.shared),
            rate: self.rate,
            params: self.params,
            window: self.window,
            keep: self.keep,
            id: self.id,
        }
    }

    /// The same backend at another rate and slack.
    pub(crate) fn with_limit(&self, rate: Rate, slack: Slack) -> Result<Core<B>, BuildError> {
        self.with(Limit::new(rate, slack))
    }

    /// The same backend at another limit: a rate and its slack, or a
    /// quota per window.
    pub(crate) fn with(&self, limit: Limit) -> Result<Core<B>, BuildError> {
        let mut common = Common::new(limit.rate());
        common.set_limit(limit);
        let params = pacer::params(common.rate, common.slack)?;
        Ok(Core {
            rate: common.rate,
            params,
            window: counted(&common)?,
            keep: params.tau(),
            id: owner(),
            ..self.clone()
        })
    }

    /// The slack in permits; for a limit counted by window, its quota
    /// less one (its burst is its quota).
    pub(crate) fn slack(&self) -> u64 {
        self.window
            .map_or(self.params.slack(), |w| w.quota().saturating_sub(1))
    }

    /// The limit, its slack in permits; or its quota per window.
    pub(crate) fn limit(&self) -> Limit {
        let paced = Limit::new(self.rate, self.params.slack());
        match self.window {
            // Checked when made: a quota of at least 1 the word holds.
            Some(w) => Limit::per_window(w.quota(), w.window()).unwrap_or(paced),
            None => paced,
        }
    }

    /// The state a peek found: `tat` (a window limit's word) at the
    /// server's `now`.
    pub(crate) fn state_of(&self, tat: u64, now: u64) -> State {
        match self.window {
            Some(w) => State::of_window(tat, now.saturating_sub(ORIGIN), w, self.limit()),
            None => State::of_reading(tat, now, self.params, self.rate),
        }
    }

    /// What a take found: `granted` (the server's answer), or, admitted by
    /// the fail-open policy with nothing known (`None`), no permit free and
    /// none promised.
    pub(crate) fn taken(&self, granted: Option<Booking>) -> Taken {
        let state = match granted {
            // A window's, when its permit went: a take that waited for the
            // next window finds that window's count.
            Some(g) if self.window.is_some() => self.state_of(g.next, g.went()),
            Some(g) => self.state_of(g.next, g.now),
            None => State::new(0, Duration::ZERO, Some(self.limit())),
        };
        Taken::new(went_at(granted), state)
    }

    /// The request a backend sends for `cost` under `admit`, or the refusal
    /// that needs no round trip.
    pub(crate) fn request(&self, cost: u64, admit: Admit) -> Result<Request, Error> {
        let p = self.params;
        let span = schedule::span(cost, p).map_err(|deny| {
            self.shared.meter.refused();
            Error::refused(deny, cost, admit, self.params.slack())
        })?;
        let exceeds_burst = match admit {
            Admit::Always => false,
            // (A cost of 0 spans nothing: the server admits it at once.)
            Admit::Within(max) => cost > 0 && schedule::exceeds_burst(span, p, max),
        };
        Ok(Request {
            cost,
            span,
            params: p,
            keep: self.keep,
            admit,
            exceeds_burst,
            ask: Ask::Answer,
        })
    }

    /// Turns a backend's answer into the caller's: `Some` when granted a
    /// slot, `None` when a failure was admitted by [`FailPolicy::Open`].
    pub(crate) fn settle(
        &self,
        decision: Result<Decision, Error>,
        request: &Asked,
    ) -> Result<Option<Booking>, Error> {
        let meter = &self.shared.meter;
        self.link(&decision);
        match decision {
            Ok(Decision::Granted(booking)) => {
                meter.admitted(request.cost, booking.wait());
                Ok(Some(booking))
            }
            Ok(Decision::Denied(deny)) => {
                let refusal = Error::refused(deny, request.cost, request.admit, self.slack());
                if request.ask.counts(&refusal) {
                    meter.refused();
                }
                Err(refusal)
            }
            Err(e) => {
                meter.failed();
                self.fail(e, None)
                    .inspect(|_| meter.admitted(request.cost, 0))
                    .inspect_err(|_| meter.refused())
            }
        }
    }

    /// Applies the fail policy to `e`: only a server that could not answer
    /// (unreachable, timed out) admits, and only under `Open` (answering
    /// `admitted`). Refusals, configuration errors and errors the request
    /// caused (a step the server rejected: a key it cannot hold, a foreign
    /// value) never admit: a client must not lift its limit by choosing
    /// its key.
    pub(crate) fn fail<T>(&self, e: Error, admitted: T) -> Result<T, Error> {
        match (&e, self.shared.policy) {
            (Error::Unavailable(_) | Error::Timeout, FailPolicy::Open) => Ok(admitted),
            _ => Err(e),
        }
    }

    /// The `tracing` events of a server lost (a call it could not answer)
    /// and back (the next answer, an error the request caused included).
    fn link<T>(&self, answer: &Result<T, Error>) {
        #[cfg(feature = "tracing")]
        {
            use crate::observe::event::{info, warning};
            use std::sync::atomic::Ordering::Relaxed;
            let down = matches!(answer, Err(Error::Unavailable(_) | Error::Timeout));
            let (lost, server) = (&self.shared.lost, &*self.shared.server);
            if lost.load(Relaxed) != down && lost.swap(down, Relaxed) != down {
                match answer {
                    Err(e) if down => {
                        warning!(server, error = %e, "paceline: the limit's server is lost")
                    }
                    _ => info!(server, "paceline: the limit's server is back"),
                }
            }
        }
        let _ = answer;
    }

    /// `can_take`'s answer from a peek.
    pub(super) fn can_take_from(
        &self,
        peeked: Result<(u64, u64), Error>,
        cost: u64,
    ) -> Result<bool, Error> {
        self.link(&peeked);
        match peeked {
            Ok((tat, now)) => Ok(match self.window {
                Some(w) => {
                    let unix = now.saturating_sub(ORIGIN);
                    window::step(tat, unix, cost, w, Admit::Within(0)).is_ok()
                }
                None => schedule::step(tat, now, cost, self.params, Admit::Within(0)).is_ok(),
            }),
            Err(e) => self.fail(e, true),
        }
    }

    /// A take's booking of `cost` on `key`, `granted` by the server (or
    /// `None`: admitted by the fail-open policy), as the caller's.
    pub(crate) fn booked(
        &self,
        key: &str,
        taken: Taken,
        cost: u64,
        granted: Option<Booking>,
    ) -> Booked {
        Booked::new(taken, cost, granted, owner_of(self.id, key))
    }

    /// What settling `booked` on `key` with its `actual` cost sends: `None`
    /// when nothing (see [`Settle::of`]).
    ///
    /// # Errors
    /// [`Error::Config`] for a booking another limit, or this one on
    /// another key, made.
    pub(crate) fn settle_op(
        &self,
        key: &str,
        booked: Booked,
        actual: u64,
    ) -> Result<Option<Op>, Error> {
        let cost = booked.cost();
        let booking = booked.check(owner_of(self.id, key))?;
        Ok(match self.window {
            Some(w) => Recount::of(booking.as_ref(), cost, actual, w).map(Op::Recount),
            None => {
                Settle::of(booking.as_ref(), cost, actual, self.params, self.keep).map(Op::Settle)
            }
        })
    }

    /// A settle's answer to the caller: done, or failed. A failure is
    /// reported as a take's (the events, the count of failures) and under
    /// [`FailPolicy::Open`] dropped when the server could not answer: the
    /// estimate stands.
    pub(crate) fn settled(&self, done: Result<Done, Error>) -> Result<(), Error> {
        let done = done.and_then(Done::peeked);
        self.link(&done);
        done.map(drop).or_else(|e| {
            self.shared.meter.failed();
            self.fail(e, ())
        })
    }
}

/// The blocking calls.
impl<B: Backend> Core<B> {
    /// Runs `op` on `key` in the server; a failure names the server.
    pub(crate) fn call(&self, key: &str, op: Op) -> Result<Done, Error> {
        (self.backend.call(key, op)).map_err(|e| e.at(&self.shared.server))
    }

    /// Decides in the server, applies the fail policy, then blocks until
    /// the slot (`take_n`, `take_n_timeout`, and with `Admit::Within(0)` a
    /// try that reports what it found).
    pub(crate) fn take(&self, key: &str, cost: u64, admit: Admit) -> Result<Taken, Error> {
        self.take_booked(key, cost, admit).map(|(taken, _)| taken)
    }

    /// [`take`](Self::take), with the server's booking (`None`: admitted
    /// by the fail-open policy).
    pub(crate) fn take_booked(
        &self,
        key: &str,
        cost: u64,
        admit: Admit,
    ) -> Result<(Taken, Option<Booking>), Error> {
        let (op, asked) = self.step_op(cost, admit, Ask::Answer)?;
        let decision = self.call(key, op);
        let granted = self.settle(decision.and_then(Done::decision), &asked)?;
        // The server's wait, counted from the reply's arrival.
        let now = internal_now(&self.shared.clock);
        let slot = now.saturating_add(granted.map_or(0, |g| g.wait()));
        wait::block(
            self.shared.wait,
            &self.shared.clock,
            now,
            slot,
            "paceline::remote::AsyncRemoteLimiter::take(..).await",
        );
        Ok((self.taken(granted), granted))
    }

    /// Settles `booked` on `key` with its `actual` cost: one round trip
    /// (none when there is nothing to settle), never retried (see
    /// [`Op::Settle`]).
    pub(crate) fn settle_booked(
        &self,
        key: &str,
        booked: Booked,
        actual: u64,
    ) -> Result<(), Error> {
        match self.settle_op(key, booked, actual)? {
            Some(op) => self.settled(self.call(key, op)),
            None => Ok(()),
        }
    }

    /// `key`'s state, one peek.
    pub(crate) fn state(&self, key: &str) -> Result<State, Error> {
        let (tat, now) = self.call(key, self.peek_op())?.peeked()?;
        Ok(self.state_of(tat, now))
    }
}
