//! An adaptive rate: for a far side that keeps its limit to itself and
//! answers `429` or `503` once it is passed. [`Adaptive`] drives one
//! limit (an [`AtomicLimiter`](crate::AtomicLimiter), a
//! [`MutexLimiter`](crate::MutexLimiter), a
//! [`WarmUpLimiter`](crate::WarmUpLimiter), an
//! [`AsyncLimiter`](crate::tokio::AsyncLimiter), or one key of a keyed
//! limiter through [`OnKey`](crate::take::OnKey)) between a floor and a ceiling: it raises the
//! rate a little while answers succeed and cuts it by a share when the far
//! side refuses, as TCP's congestion control (AIMD), Netflix's
//! concurrency-limits and Vector's adaptive request concurrency do for a
//! window of requests in flight, here for a rate.
//!
//! ```
//! use paceline::adapt::{Adaptive, Answer};
//! use paceline::{AtomicLimiter, Rate};
//!
//! let limiter = AtomicLimiter::new(Rate::per_second(200));
//! let adaptive = Adaptive::new(&limiter, Rate::per_second(1), Rate::per_second(1000))?;
//! limiter.take();
//! let ticket = adaptive.send(); // as the request leaves
//! adaptive.answer(ticket, Answer::Refused); // it came back 429
//! assert_eq!(adaptive.stats().rate, 180.0); // 200 * 0.9
//! assert_eq!(limiter.rate(), adaptive.rate()); // one permit every 5.56 ms
//! # Ok::<(), paceline::BuildError>(())
//! ```
//!
//! With reqwest, [`Pace::adapt`](crate::reqwest::Pace::adapt) feeds it
//! every answer; the guide's [adaptive chapter](crate::guide::adaptive)
//! has the whole story and the figures against a real nginx.
//!
//! # How the rate moves
//!
//! Each request takes a [`Ticket`] as it leaves ([`send`](Adaptive::send))
//! and hands it back with its [`Answer`] ([`answer`](Adaptive::answer)):
//!
//! - **served**: the rate grows by [`increase`](AdaptiveBuilder::increase)
//!   permits a second for every second's worth of successes (each success
//!   adds `increase / rate`), so the growth per second is the same at any
//!   rate: 1/s per second by default;
//! - **refused** (`429`, `503`): the rate is cut to
//!   [`backoff`](AdaptiveBuilder::backoff) times itself, 0.9 by default;
//! - **slow**, if asked ([`latency`](AdaptiveBuilder::latency)): a success
//!   that took longer than that many times the fastest one seen counts as
//!   a refusal;
//! - anything else (an error of the request's own, a broken connection)
//!   changes nothing.
//!
//! The rate changes **at most once per window**: only the answer to a
//! request sent after the last change can change it again. A burst of
//! refusals for requests that were all in flight when the first came back
//! is one overload, and cuts the rate once, as TCP cuts its window once per
//! window of lost segments; the successes of such a window still add
//! their increase (but for those sent before a cut), applied at once by
//! the next change. The arithmetic is the pure step
//! [`model::aimd::step`](crate::model::aimd::step), in nano-permits per
//! second, saturating: it never sets a rate outside the bounds and never
//! panics.
//!
//! # What it promises, and what not
//!
//! - The limit's rate is always within `[floor, ceiling]`, and the limit
//!   paces every take by it as by any rate set by hand (the change is
//!   [`set_limit`](crate::limiter::Pacer::set_limit)'s: booked slots stand,
//!   credit is never refilled), so the limiter's `state()`,
//!   [`limit_for`](crate::Take::limit_for) and the look inside show the
//!   rate in force. A keyed key's rate is its override
//!   ([`KeyedLimiter::set_override`](crate::KeyedLimiter::set_override), with
//!   the key's slack kept), so it applies to the keys under it too when
//!   the limiter has a parent function, and each change passes over the
//!   keyed limiter's tracked keys as any change of overrides does.
//! - The controller owns the rate: a rate set by hand meanwhile is
//!   replaced at its next change.
//! - It finds a limit by passing it: a far side that refuses past its
//!   limit sees a refusal every few seconds in the steady state (each
//!   after the rate has grown past the limit and spent the far side's
//!   burst), then a cut. How many depends on the increase, the backoff
//!   and the far side's burst; against nginx's `limit_req` at 50/s with a
//!   burst of 2, about one request in two hundred (the
//!   [guide](crate::guide::adaptive#what-it-promises-and-what-it-does-not)
//!   has the figures).
//! - It cannot tell a refusal for the rate from one for another reason
//!   (a `503` of a server down): each cuts the rate, down to the floor.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::model::aimd::{self, Params, State, MILLION, NANO};
use crate::primitive::{lock, Mutex};
use crate::values::error::BuildError;
use crate::values::rate::Rate;

mod adjust;
mod stats;

pub use self::adjust::Adjust;
#[cfg(feature = "metrics")]
use self::stats::facade;
pub use self::stats::{prometheus, AdaptStats};
pub use crate::model::aimd::{Answer, Change};

/// The increase by default: 1 permit a second, per second's worth of
/// successes (TCP's one segment per round trip, for a rate).
const INCREASE: f64 = 1.0;

/// The share of the rate a refusal keeps by default: 0.9, as Vector's
/// adaptive concurrency and Netflix's AIMD limit cut theirs (TCP's 0.5
/// halves a rate that a pacing limiter already holds steady).
const BACKOFF: f64 = 0.9;

/// A request's place in the order requests were sent, from
/// [`Adaptive::send`]: its answer is weighed against the changes made
/// since.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

/// Configures an [`Adaptive`] ([`Adaptive::builder`]).
#[derive(Clone, Debug)]
pub struct AdaptiveBuilder {
    floor: Rate,
    ceiling: Rate,
    increase: f64,
    backoff: f64,
    latency: Option<f64>,
    #[cfg(feature = "metrics")]
    metrics: Option<String>,
}

impl AdaptiveBuilder {
    crate::values::setters! {
        /// What a second's worth of successes adds to the rate, in permits
        /// per second (1 by default; fractions allowed): the rate climbs
        /// by this much a second while the far side serves everything.
        increase(per_second: f64) => increase;
        /// The share of the rate a refusal keeps: above 0, below 1 (0.9
        /// by default).
        backoff(share: f64) => backoff;
        /// Also counts a success that took more than `tolerance` times the
        /// fastest answer seen as a refusal (the far side's queue growing
        /// before it refuses); `tolerance` above 1. Off by default.
        latency(tolerance: f64) => latency = Some(tolerance);
    }

    /// Sends the rate and the counts to the `metrics` facade under the
    /// label `limiter="name"` (feature `metrics`): the gauge
    /// `paceline_adaptive_rate` and the counters `prometheus` writes.
    #[cfg(feature = "metrics")]
    pub fn metrics(mut self, name: impl Into<String>) -> Self {
        self.metrics = Some(name.into());
        self
    }

    /// The adaptive rate of `limit`, from its rate now (brought within the
    /// bounds: a limit outside them is set to the nearest).
    ///
    /// # Errors
    /// [`BuildError::AdaptiveBounds`] for a floor above the ceiling;
    /// [`BuildError::AdaptiveStep`] for an increase that is negative or not
    /// a number, a backoff not strictly between 0 and 1, or a latency
    /// tolerance not above 1. A change of the limit's rate failing as its
    /// own `set_rate` does. [`BuildError::WindowNotPaced`] for a key
    /// counted by window, whose rate is not an adaptive rate's to set.
    pub fn build<L: Adjust>(self, limit: L) -> Result<Adaptive<L>, BuildError> {
        limit.paced()?;
        let step = |what, value: f64| BuildError::AdaptiveStep {
            what,
            value: value.to_string(),
        };
        if !(self.increase >= 0.0 && self.increase.is_finite()) {
            return Err(step("increase", self.increase));
        }
        if !(self.backoff > 0.0 && self.backoff < 1.0) {
            return Err(step("backoff", self.backoff));
        }
        let (floor, ceiling) = (rate_of(self.floor), rate_of(self.ceiling));
        let increase = (self.increase * NANO as f64) as u64; // saturates
        let keep = (self.backoff * f64::from(MILLION)) as u32;
        let params = Params::new(floor, ceiling, increase, keep.min(MILLION - 1)).ok_or(
            BuildError::AdaptiveBounds {
                floor: self.floor.to_string(),
                ceiling: self.ceiling.to_string(),
            },
        )?;
        let params = match self.latency {
            None => params,
            Some(tolerance) => {
                let millionths = tolerance * f64::from(MILLION);
                match params.with_latency(millionths as u64) {
                    Some(params) if tolerance.is_finite() => params,
                    _ => return Err(step("latency tolerance", tolerance)),
                }
            }
        };
        let state = State::new(&params, rate_of(limit.rate()));
        let interval = aimd::interval_ns(state.rate);
        if interval != limit.rate().interval_ns() {
            limit.set_rate(every(interval))?;
        }
        Ok(Adaptive {
            shared: Arc::new(Shared {
                limit,
                params,
                ledger: Mutex::new(Ledger {
                    state,
                    sent: 0,
                    interval,
                    served: 0,
                    refused: 0,
                    increases: 0,
                    decreases: 0,
                }),
                #[cfg(feature = "metrics")]
                facade: self.metrics.map(|name| facade::Series::new(&name)),
            }),
        })
    }
}

/// An adaptive rate: drives `L`'s rate between a floor and a ceiling by
/// the answers it is told of (see the [module](self)). `Clone`: clones
/// share the limit and the rate's state, so every task sending through
/// the limit can tell it its answers.
pub struct Adaptive<L> {
    shared: Arc<Shared<L>>,
}

struct Shared<L> {
    limit: L,
    params: Params,
    /// The step's state and the counts, changed together; the limit is set
    /// under it too, so that two answers racing set their rates in the
    /// order the state took them.
    ledger: Mutex<Ledger>,
    #[cfg(feature = "metrics")]
    facade: Option<facade::Series>,
}

struct Ledger {
    state: State,
    /// Tickets handed out.
    sent: u64,
    /// The interval last set on the limit, ns.
    interval: u64,
    served: u64,
    refused: u64,
    increases: u64,
    decreases: u64,
}

impl<L> Clone for Adaptive<L> {
    fn clone(&self) -> Self {
        Adaptive {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<L> fmt::Debug for Adaptive<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ledger = lock(&self.shared.ledger);
        f.debug_struct("Adaptive")
            .field("rate", &every(ledger.interval))
            .field(
                "floor",
                &every(aimd::interval_ns(self.shared.params.floor())),
            )
            .field(
                "ceiling",
                &every(aimd::interval_ns(self.shared.params.ceiling())),
            )
            .finish_non_exhaustive()
    }
}

impl Adaptive<()> {
    /// Configures an adaptive rate between `floor` and `ceiling`; its
    /// [`build`](AdaptiveBuilder::build) takes the limit to drive.
    pub fn builder(floor: Rate, ceiling: Rate) -> AdaptiveBuilder {
        AdaptiveBuilder {
            floor,
            ceiling,
            increase: INCREASE,
            backoff: BACKOFF,
            latency: None,
            #[cfg(feature = "metrics")]
            metrics: None,
        }
    }
}

impl<L: Adjust> Adaptive<L> {
    /// Drives `limit`'s rate between `floor` and `ceiling`, from its rate
    /// now, with the default increase (1/s per second) and backoff (0.9).
    ///
    /// # Errors
    /// As [`AdaptiveBuilder::build`].
    pub fn new(limit: L, floor: Rate, ceiling: Rate) -> Result<Adaptive<L>, BuildError> {
        Adaptive::builder(floor, ceiling).build(limit)
    }

    /// A ticket for a request leaving now: call it when the request is
    /// sent (after its take), and hand it back with the answer.
    pub fn send(&self) -> Ticket {
        let mut ledger = lock(&self.shared.ledger);
        let ticket = ledger.sent;
        ledger.sent = ledger.sent.saturating_add(1);
        Ticket(ticket)
    }

    /// Tells the rate how the request of `ticket` was answered; sets the
    /// limit's rate if that changes it. Returns what changed. Never
    /// panics; a change of rate the limit refuses (a slack that would bank
    /// over 146 years at the floor) leaves the rate as it was.
    pub fn answer(&self, ticket: Ticket, answer: Answer) -> Change {
        let shared = &*self.shared;
        let mut ledger = lock(&shared.ledger);
        let (state, change) =
            aimd::step(&shared.params, ledger.state, ticket.0, ledger.sent, answer);
        match answer {
            Answer::Served { .. } => ledger.served += 1,
            Answer::Refused => ledger.refused += 1,
            Answer::Other => {}
        }
        let interval = aimd::interval_ns(state.rate);
        if interval != ledger.interval && shared.limit.set_rate(every(interval)).is_err() {
            return Change::Kept;
        }
        ledger.state = state;
        ledger.interval = interval;
        match change {
            Change::Increased => ledger.increases += 1,
            Change::Decreased => ledger.decreases += 1,
            Change::Kept => {}
        }
        #[cfg(feature = "metrics")]
        if let Some(series) = &shared.facade {
            series.record(answer, change, state.rate);
        }
        change
    }

    /// [`answer`](Self::answer) from an HTTP status and the time from
    /// the send to the answer: `429` and `503` are refusals, any other
    /// status below 500 is served (a `404` is the far side's answer, at
    /// this rate), other `5xx` say nothing of the rate.
    pub fn answer_status(&self, ticket: Ticket, status: u16, latency: Duration) -> Change {
        self.answer(ticket, answer_of(status, latency))
    }

    /// The rate in force.
    pub fn rate(&self) -> Rate {
        every(lock(&self.shared.ledger).interval)
    }

    /// The limit it drives.
    pub fn limit(&self) -> &L {
        &self.shared.limit
    }

    /// What it has done so far.
    pub fn stats(&self) -> AdaptStats {
        let ledger = lock(&self.shared.ledger);
        AdaptStats {
            rate: ledger.state.rate as f64 / NANO as f64,
            sent: ledger.sent,
            served: ledger.served,
            refused: ledger.refused,
            increases: ledger.increases,
            decreases: ledger.decreases,
        }
    }
}

/// How an HTTP answer speaks of the rate: see [`Adaptive::answer_status`].
pub fn answer_of(status: u16, latency: Duration) -> Answer {
    match status {
        429 | 503 => Answer::Refused,
        0..500 => Answer::Served {
            latency: crate::clock::nanos(latency),
        },
        _ => Answer::Other,
    }
}

/// `rate` in nano-permits per second.
fn rate_of(rate: Rate) -> u64 {
    aimd::rate_of(rate.interval_ns())
}

/// One permit every `interval` ns (`1..=10^18`, which `Rate::every`
/// always takes).
fn every(interval: u64) -> Rate {
    Rate::from_interval_ns(interval)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::AtomicLimiter;

    fn limiter(per_second: u64) -> AtomicLimiter<ManualClock> {
        AtomicLimiter::builder(Rate::per_second(per_second))
            .clock(ManualClock::new())
            .build()
            .unwrap()
    }

    #[test]
    fn a_limit_outside_the_bounds_starts_at_the_nearest() {
        let l = limiter(5000);
        let a = Adaptive::new(&l, Rate::per_second(1), Rate::per_second(1000)).unwrap();
        assert_eq!(l.rate().interval(), Duration::from_millis(1));
        assert_eq!(a.rate().interval(), Duration::from_millis(1));
    }

    #[test]
    fn bad_bounds_and_steps_are_named() {
        let l = limiter(10);
        let err = Adaptive::new(&l, Rate::per_second(10), Rate::per_second(5)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "an adaptive rate's floor 10/s is above its ceiling 5/s"
        );
        let b = || Adaptive::builder(Rate::per_second(1), Rate::per_second(10));
        for (builder, what) in [
            (b().backoff(1.0), "backoff 1"),
            (b().backoff(0.0), "backoff 0"),
            (b().backoff(f64::NAN), "backoff NaN"),
            (b().increase(-1.0), "increase -1"),
            (b().increase(f64::INFINITY), "increase inf"),
            (b().latency(1.0), "latency tolerance 1"),
            (b().latency(f64::NAN), "latency tolerance NaN"),
        ] {
            let err = builder.build(&l).unwrap_err().to_string();
            assert!(err.contains(what), "{err} names {what}");
        }
    }

    #[test]
    fn the_limit_follows_the_rate_and_its_state_shows_it() {
        let l = limiter(200);
        let a = Adaptive::new(&l, Rate::per_second(1), Rate::per_second(1000)).unwrap();
        let (t1, t2) = (a.send(), a.send());
        assert_eq!(a.answer(t1, Answer::Refused), Change::Decreased);
        assert_eq!(a.stats().rate, 180.0);
        assert_eq!(l.rate(), a.rate());
        assert_eq!(l.rate().interval(), Duration::from_nanos(5_555_556));
        // Sent before the cut: the same overload, no second cut.
        assert_eq!(a.answer(t2, Answer::Refused), Change::Kept);
        let t3 = a.send();
        assert_eq!(
            a.answer(t3, Answer::Served { latency: 1 }),
            Change::Increased
        );
        assert!(l.rate().per_second_f64() > 180.0);
        assert_eq!(l.rate(), a.rate());
        assert_eq!(crate::Take::limit_for(&l, &()).unwrap().rate(), a.rate());
        let stats = a.stats();
        assert_eq!(
            (
                stats.sent,
                stats.served,
                stats.refused,
                stats.increases,
                stats.decreases
            ),
            (3, 1, 2, 1, 1)
        );
    }

    #[test]
    fn statuses_map_to_answers() {
        let ms = Duration::from_millis(1);
        assert_eq!(answer_of(429, ms), Answer::Refused);
        assert_eq!(answer_of(503, ms), Answer::Refused);
        assert_eq!(answer_of(200, ms), Answer::Served { latency: 1_000_000 });
        assert_eq!(answer_of(404, ms), Answer::Served { latency: 1_000_000 });
        assert_eq!(answer_of(500, ms), Answer::Other);
    }

    #[cfg(feature = "keyed")]
    #[test]
    fn a_keys_rate_is_its_override() {
        let keyed = crate::KeyedLimiter::<String>::builder(Rate::per_second(100))
            .slack(3)
            .build()
            .unwrap();
        let key = crate::take::OnKey::new(&keyed, "api".to_string());
        let a = Adaptive::new(key, Rate::per_second(1), Rate::per_second(1000)).unwrap();
        let t = a.send();
        a.answer(t, Answer::Refused);
        assert_eq!(a.stats().rate, 90.0);
        assert_eq!(keyed.rate_for("api").0, a.rate());
        assert_eq!(keyed.rate_for("api").1, 3, "the key's slack kept");
        assert_eq!(
            keyed.rate(),
            Rate::per_second(100),
            "other keys keep theirs"
        );
        assert_eq!(keyed.limits().get("api").map(|l| l.rate()), Some(a.rate()));
    }

    #[cfg(feature = "keyed")]
    #[test]
    fn a_key_counted_by_window_is_not_an_adaptive_rates() {
        let day = crate::Limit::per_window(100, "day".parse().unwrap()).unwrap();
        let keyed = crate::KeyedLimiter::<String>::builder(Rate::per_second(100))
            .build()
            .unwrap();
        keyed.set_override_limit("quota".to_string(), day).unwrap();
        let key = crate::take::OnKey::new(&keyed, "quota".to_string());
        let e = Adaptive::new(key, Rate::per_second(1), Rate::per_second(1000)).unwrap_err();
        assert_eq!(
            e,
            BuildError::WindowNotPaced {
                limit: "100 per day".into(),
                by: "an adaptive rate"
            }
        );
        assert_eq!(keyed.limit_of("quota"), day, "left counted by window");
        let paced = crate::take::OnKey::new(&keyed, "other".to_string());
        assert!(Adaptive::new(paced, Rate::per_second(1), Rate::per_second(1000)).is_ok());
    }

    #[test]
    fn the_text_has_every_series() {
        let l = limiter(50);
        let a = Adaptive::new(&l, Rate::per_second(1), Rate::per_second(100)).unwrap();
        let t = a.send();
        a.answer(t, Answer::Refused);
        let text = prometheus(&[("a\"b", a.stats())]);
        assert!(
            text.contains("paceline_adaptive_rate{limiter=\"a\\\"b\"} 45\n"),
            "{text}"
        );
        assert!(text.contains("paceline_adaptive_refused_total{limiter=\"a\\\"b\"} 1\n"));
        assert!(text.contains("paceline_adaptive_decreases_total{limiter=\"a\\\"b\"} 1\n"));
        assert!(text.contains("# TYPE paceline_adaptive_increases_total counter\n"));
    }

    #[cfg(feature = "metrics")]
    #[test]
    fn the_facade_has_the_rate_and_the_counts() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};

        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let l = limiter(50);
        let a = metrics::with_local_recorder(&recorder, || {
            Adaptive::builder(Rate::per_second(1), Rate::per_second(100))
                .metrics("api")
                .build(&l)
                .unwrap()
        });
        let (t1, t2) = (a.send(), a.send());
        a.answer(t1, Answer::Refused);
        a.answer(t2, Answer::Refused); // of the same window: counted, no cut
        let t3 = a.send();
        a.answer(t3, Answer::Served { latency: 1 });
        let seen: std::collections::BTreeMap<String, f64> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(key, _, _, value)| {
                let value = match value {
                    DebugValue::Counter(n) => n as f64,
                    DebugValue::Gauge(g) => g.into_inner(),
                    DebugValue::Histogram(_) => return None,
                };
                Some((key.key().name().to_owned(), value))
            })
            .collect();
        assert_eq!(seen["paceline_adaptive_rate"], a.stats().rate);
        assert!(seen["paceline_adaptive_rate"] > 45.0);
        assert_eq!(seen["paceline_adaptive_refused_total"], 2.0);
        assert_eq!(seen["paceline_adaptive_decreases_total"], 1.0);
        assert_eq!(seen["paceline_adaptive_increases_total"], 1.0);
    }
}
