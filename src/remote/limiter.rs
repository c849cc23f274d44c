//! [`Core`]: a remote limiter's calls, once for every backend: check what
//! needs no round trip, ask the backend, apply the fail policy, map the
//! decision to the caller's answer, and wait (blocking, or as a Tokio task).
//!
//! The server's slot is turned into a local deadline by the wait the server
//! reported (`slot - server_now`), counted from the reply's arrival on the
//! local clock: the return leg of the round trip is added to the wait, so a
//! permit is never early by the server's clock, and client and server clocks
//! need not agree.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Decision, Error, FailPolicy, Remote, Request, Undo};
use crate::clock::{internal_now, DefaultClock};
use crate::error::{BuildError, TakeError};
use crate::pacer;
use crate::rate::Rate;
use crate::schedule::{self, Admit, Params, ORIGIN};
use crate::slack::Slack;
use crate::stats::{Counting, Meter};
use crate::wait::{self, Ask, Wait};

/// What every limit of one limiter (and of its [`with_limit`](Core::with_limit)
/// siblings) shares: the backend and how calls fail and wait.
pub(crate) struct Shared<B> {
    pub(crate) backend: B,
    pub(crate) policy: FailPolicy,
    pub(crate) wait: Wait,
    /// The local clock waits are measured on.
    pub(crate) clock: DefaultClock,
    /// What the limiter decided, if its builder asked.
    pub(crate) meter: Meter,
}

/// One limit (rate and slack) over a backend.
pub(crate) struct Core<B> {
    pub(crate) shared: Arc<Shared<B>>,
    pub(crate) rate: Rate,
    /// The slack in permits at `rate`.
    pub(crate) slack: u64,
    pub(crate) params: Params,
}

impl<B> Clone for Core<B> {
    fn clone(&self) -> Self {
        Core {
            shared: Arc::clone(&self.shared),
            rate: self.rate,
            slack: self.slack,
            params: self.params,
        }
    }
}

/// A grant, as the caller's waits need it: the server's slot and now.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Granted {
    slot: u64,
    now: u64,
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    undo: Option<Undo>,
}

impl Granted {
    /// When the permit went: its slot (or, if that had passed, when it was
    /// granted) as the server's Unix time.
    fn went_at(self) -> Duration {
        Duration::from_nanos(self.slot.max(self.now).saturating_sub(ORIGIN))
    }

    /// How long after the reply the permit may go, ns.
    fn wait(self) -> u64 {
        self.slot.saturating_sub(self.now)
    }
}

/// When a permit the fail-open policy admitted went: the local Unix time.
fn admitted_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

impl<B> Core<B> {
    /// A limit at `rate` with `slack` over `backend`.
    pub(crate) fn new(
        backend: B,
        rate: Rate,
        slack: Slack,
        policy: FailPolicy,
        wait: Wait,
        counting: &Counting,
    ) -> Result<Core<B>, BuildError> {
        let params = pacer::params(rate, slack)?;
        Ok(Core {
            params,
            shared: Arc::new(Shared {
                backend,
                policy,
                wait,
                clock: DefaultClock::new(),
                meter: Meter::new(counting),
            }),
            rate,
            slack: params.slack(),
        })
    }

    /// The same backend at another rate and slack.
    pub(crate) fn with_limit(&self, rate: Rate, slack: Slack) -> Result<Core<B>, BuildError> {
        let params = pacer::params(rate, slack)?;
        Ok(Core {
            shared: Arc::clone(&self.shared),
            rate,
            slack: params.slack(),
            params,
        })
    }

    pub(crate) fn backend(&self) -> &B {
        &self.shared.backend
    }

    pub(crate) fn fail_policy(&self) -> FailPolicy {
        self.shared.policy
    }

    pub(crate) fn wait_strategy(&self) -> Wait {
        self.shared.wait
    }

    /// The request a backend sends for `cost` under `admit`, or the refusal
    /// that needs no round trip.
    pub(crate) fn request(&self, cost: u64, admit: Admit) -> Result<Request, Error> {
        let p = self.params;
        let span = schedule::span(cost, p).map_err(|deny| {
            self.shared.meter.refused();
            Error::Refused(TakeError::refused(deny, cost, admit, self.slack))
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
            admit,
            exceeds_burst,
            brief: false,
            ask: Ask::Answer,
        })
    }

    /// Turns a backend's answer into the caller's: `Some` when granted a
    /// slot, `None` when admitted with no slot to wait for (a brief grant,
    /// or a failure admitted by [`FailPolicy::Open`]).
    pub(crate) fn settle(
        &self,
        decision: Result<Decision, Error>,
        request: &Request,
    ) -> Result<Option<Granted>, Error> {
        let meter = &self.shared.meter;
        match decision {
            Ok(Decision::Granted { slot, now, undo }) => {
                meter.admitted(request.cost, slot.saturating_sub(now));
                Ok(Some(Granted { slot, now, undo }))
            }
            Ok(Decision::Admitted) => {
                meter.admitted(request.cost, 0);
                Ok(None)
            }
            Ok(Decision::Denied(deny)) => {
                let refusal = TakeError::refused(deny, request.cost, request.admit, self.slack);
                if request.ask.counts(&refusal) {
                    meter.refused();
                }
                Err(Error::Refused(refusal))
            }
            Err(e) => {
                meter.failed();
                let settled = self.fail(e, None);
                match settled {
                    Ok(_) => meter.admitted(request.cost, 0),
                    Err(_) => meter.refused(),
                }
                settled
            }
        }
    }

    /// Applies the fail policy to `e`: refusals and configuration errors
    /// pass through; failures of the server pass under `Closed` and admit
    /// (answering `admitted`) under `Open`.
    pub(crate) fn fail<T>(&self, e: Error, admitted: T) -> Result<T, Error> {
        match (&e, self.shared.policy) {
            (Error::Refused(_) | Error::Config(_), _) | (_, FailPolicy::Closed) => Err(e),
            (_, FailPolicy::Open) => Ok(admitted),
        }
    }

    /// `can_take`'s answer from a peek.
    fn can_take_from(&self, peeked: Result<(u64, u64), Error>, cost: u64) -> Result<bool, Error> {
        match peeked {
            Ok((tat, now)) => {
                Ok(schedule::step(tat, now, cost, self.params, Admit::Within(0)).is_ok())
            }
            Err(e) => self.fail(e, true),
        }
    }
}

/// The blocking calls.
impl<B: Remote> Core<B> {
    /// Decides in the server and applies the fail policy.
    fn decide(&self, key: &str, cost: u64, admit: Admit) -> Result<Option<Granted>, Error> {
        let request = self.request(cost, admit)?;
        let decision = self.shared.backend.step(key, &request);
        self.settle(decision, &request)
    }

    /// Reserves, then blocks until the slot (`take_n`, `take_n_timeout`).
    pub(crate) fn take(&self, key: &str, cost: u64, admit: Admit) -> Result<Duration, Error> {
        let Some(granted) = self.decide(key, cost, admit)? else {
            return Ok(admitted_now());
        };
        let clock = &self.shared.clock;
        // The server's wait, counted from the reply's arrival.
        let now = internal_now(clock);
        let slot = now.saturating_add(granted.wait());
        wait::block(self.shared.wait, clock, now, slot, B::ASYNC_TAKE);
        Ok(granted.went_at())
    }

    /// Takes if the slot is now; never waits.
    pub(crate) fn try_take(&self, key: &str, cost: u64) -> Result<(), Error> {
        let request = self.request(cost, Admit::Within(0))?.brief();
        let decision = self.shared.backend.step(key, &request);
        self.settle(decision, &request).map(drop)
    }

    /// `can_take`: fail-open answers `true`.
    pub(crate) fn can_take(&self, key: &str, cost: u64) -> Result<bool, Error> {
        self.can_take_from(self.shared.backend.peek(key), cost)
    }

    /// `f(tat, now, params)` from a peek; failures whatever the policy.
    pub(crate) fn peek<T>(
        &self,
        key: &str,
        f: impl FnOnce(u64, u64, Params) -> T,
    ) -> Result<T, Error> {
        let (tat, now) = self.shared.backend.peek(key)?;
        Ok(f(tat, now, self.params))
    }
}

#[cfg(feature = "tokio")]
mod asynchronous {
    //! The async calls: through the crate's one async wait, with this
    //! limit's decisions as its [`Reserve`].

    use std::sync::Arc;
    use std::time::Duration;

    use super::{admitted_now, Core, Error, Undo};
    use crate::clock::{internal_now, DefaultClock};
    use crate::error::TakeError;
    use crate::remote::AsyncRemote;
    use crate::schedule::{Admit, Params};
    use crate::wait::tokio::{self as wait, Reserve, Reserved};
    use crate::wait::{Ask, Wait};

    /// One key of a limit, as the async wait asks it for decisions.
    struct Keyed<'a, B> {
        core: &'a Core<B>,
        key: &'a str,
    }

    /// A remote limit's decisions for the async wait. The ticket is the
    /// grant's [`Undo`] (the states before and after it), which the server
    /// applies only while the key still holds the grant's state.
    impl<B: AsyncRemote + 'static> Reserve for Keyed<'_, B> {
        type Clock = DefaultClock;
        type Ticket = Undo;
        type Error = Error;

        fn clock(&self) -> &DefaultClock {
            &self.core.shared.clock
        }

        fn wait(&self) -> Wait {
            self.core.shared.wait
        }

        async fn reserve(
            &self,
            cost: u64,
            admit: Admit,
            ask: Ask,
        ) -> Result<Reserved<Undo>, Error> {
            let request = self.core.request(cost, admit)?.asked(ask);
            let decision = self.core.shared.backend.step(self.key, &request).await;
            let granted = self.core.settle(decision, &request)?;
            // The server's wait, counted from the reply's arrival.
            let now = internal_now(self.clock());
            Ok(match granted {
                Some(granted) => Reserved {
                    now,
                    slot: now.saturating_add(granted.wait()),
                    went_at: granted.went_at(),
                    ticket: granted.undo,
                },
                None => Reserved {
                    now,
                    slot: now,
                    went_at: admitted_now(),
                    ticket: None,
                },
            })
        }

        fn refusal(error: &Error) -> Option<&TakeError> {
            error.refusal()
        }

        /// Undoes the grant in the server, if no one has taken since: a
        /// round trip, so it runs as a task of its own (a drop cannot wait
        /// for it), on the Tokio runtime current where the future is
        /// dropped; dropped outside any runtime, nothing is given back. Best
        /// effort: an error leaves the slot spent, as if it had not been
        /// given back.
        fn give_back(&self, undo: Undo) {
            self.core.shared.meter.cancelled();
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let shared = Arc::clone(&self.core.shared);
            let key = self.key.to_owned();
            let tau = self.core.params.tau();
            runtime.spawn(async move {
                let _ = shared.backend.give_back(&key, tau, undo).await;
            });
        }
    }

    impl<B: AsyncRemote + 'static> Core<B> {
        /// An unbounded take: books once the slot is within the horizon.
        pub(crate) async fn take_async(&self, key: &str, cost: u64) -> Result<Duration, Error> {
            wait::take(&Keyed { core: self, key }, cost, None).await
        }

        /// A bounded take: books at once if within `max_wait`.
        pub(crate) async fn take_timeout_async(
            &self,
            key: &str,
            cost: u64,
            max_wait: Duration,
        ) -> Result<Duration, Error> {
            wait::take_within(&Keyed { core: self, key }, cost, max_wait)
                .await
                .map_err(|e| e.timed_out(max_wait))
        }

        /// Takes if the slot is now; never waits.
        pub(crate) async fn try_take_async(&self, key: &str, cost: u64) -> Result<(), Error> {
            let request = self.request(cost, Admit::Within(0))?.brief();
            let decision = self.shared.backend.step(key, &request).await;
            self.settle(decision, &request).map(drop)
        }

        /// `can_take`: fail-open answers `true`.
        pub(crate) async fn can_take_async(&self, key: &str, cost: u64) -> Result<bool, Error> {
            let peeked = self.shared.backend.peek(key).await;
            self.can_take_from(peeked, cost)
        }

        /// `f(tat, now, params)` from a peek; failures whatever the policy.
        pub(crate) async fn peek_async<T>(
            &self,
            key: &str,
            f: impl FnOnce(u64, u64, Params) -> T,
        ) -> Result<T, Error> {
            let (tat, now) = self.shared.backend.peek(key).await?;
            Ok(f(tat, now, self.params))
        }
    }
}
