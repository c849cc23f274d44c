//! Pacing to the far side's budget: [`Pace::follow_budget`] learns the
//! far side's quota and window from its answers (`budget.rs` reads them)
//! and sets the limiter's rate to the quota per window, never above the
//! rate the user set; [`Pace::tokens`] does the same for a second limiter
//! paced in tokens.
//!
//! # The window
//!
//! The draft's `RateLimit-Policy` states it (`w`). The `X-RateLimit-*`
//! family does not, so it is estimated from two readings, each an upper
//! bound on a fixed window's length (so the rate learned is never above
//! the quota per window):
//!
//! - an answer that left `quota - 1` opened its window (the window began
//!   at or after the request was sent): the window is at most the reset
//!   plus the request's round trip;
//! - when what is left goes up, a new window began: the window is at most
//!   the distance from the last window's reset to this one's.
//!
//! The smallest reading so far is the estimate. The per-requests and
//! per-tokens variants say when a refilling budget is whole again (as
//! OpenAI documents them), so their window is that reset scaled to the
//! whole quota: `reset * quota / (quota - remaining)`, the latest reading.
//!
//! The rate set is the quota per window less [`MARGIN`]: the far side
//! counts arrivals, which the network and the client's wake-ups jitter.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ::reqwest::Response;
use ::tokio::time::Instant;
use http::Extensions;

use super::budget::{read, Budget, Reset, NAMES};
use super::pushback::pushback;
use super::{start, Inner, Pace};
use crate::clock::Clock;
use crate::limiter::take::AsyncTake;
use crate::primitive::{lock, Mutex};
use crate::tokio::AsyncLimiter;
use crate::values::error::BuildError;
use crate::values::rate::Rate;

/// How far under the learned quota per window the rate is set: 3 %, so
/// that arrivals a few milliseconds late or early at the far side, and a
/// permit or two of the limiter's burst, still fit its window (a 1 s
/// window of 100 is paced at 97 a second: 3 permits, 30 ms, of room).
pub const MARGIN: f64 = 0.03;

/// A limiter whose rate [`Pace`] may set to what the far side allows:
/// [`AsyncLimiter`], or a limiter of your own. Others (a key of a keyed or
/// remote limiter, [`Unlimited`](crate::Unlimited)) keep their rate: for
/// them `Pace` reads the far side's budget only to hold requests when
/// nothing is left ([`honour_retry_after`](Pace::honour_retry_after)).
pub trait Follow: Send + Sync {
    /// The rate in force.
    fn rate(&self) -> Rate;

    /// Sets the rate from now on, the slack as it stands.
    ///
    /// # Errors
    /// The limiter's own (an [`AsyncLimiter`]'s
    /// [`BuildError::SlackTooLarge`]); `Pace` then leaves the rate as it was.
    fn set_rate(&self, rate: Rate) -> Result<(), BuildError>;
}

impl<C: Clock> Follow for AsyncLimiter<C> {
    fn rate(&self) -> Rate {
        self.limiter().rate()
    }

    fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        self.limiter().set_rate(rate)
    }
}

/// A request's cost in tokens, for a `Pace` with a [tokens
/// limiter](Pace::tokens): set it on the request
/// (`client.post(url).with_extension(Tokens(500))`). A request without it
/// takes no tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens(pub u64);

/// Sets a limiter's rate: [`Follow::set_rate`] on a type `Pace` has
/// forgotten.
pub(super) type Relimit<L> = fn(&L, &Mutex<Learner>, &Budget, Instant, Instant);

/// What the far side's answers have taught a `Pace`; clones share it.
pub(super) struct FarSide<L> {
    /// Sets the requests limiter's rate; `None`: not asked to follow.
    pub relimit: Option<Relimit<L>>,
    pub requests: Arc<Mutex<Learner>>,
    /// The tokens limiter and what its budget taught.
    pub tokens: Option<(AsyncLimiter, Arc<Mutex<Learner>>)>,
    /// The fields already reported unreadable: bit `i` for [`NAMES`]`[i]`.
    pub reported: Arc<AtomicU16>,
}

impl<L> Clone for FarSide<L> {
    fn clone(&self) -> Self {
        FarSide {
            relimit: self.relimit,
            requests: Arc::clone(&self.requests),
            tokens: self.tokens.clone(),
            reported: Arc::clone(&self.reported),
        }
    }
}

impl<L> Default for FarSide<L> {
    fn default() -> Self {
        FarSide {
            relimit: None,
            requests: Arc::default(),
            tokens: None,
            reported: Arc::default(),
        }
    }
}

impl<L> FarSide<L> {
    /// Reports each field in `unread` that was not reported before, once
    /// per header name.
    pub fn report(&self, unread: u16) {
        let new = unread & !self.reported.fetch_or(unread, Ordering::Relaxed);
        for (bit, name) in NAMES.iter().enumerate() {
            if new & (1 << bit) != 0 {
                crate::observe::event::warning!(
                    header = *name,
                    "paceline: a far side's rate-limit field could not be read; it changes nothing (reported once)"
                );
                let _ = name;
            }
        }
    }
}

/// What the answers have taught of one budget.
#[derive(Debug, Default)]
pub(super) struct Learner {
    /// The window's length: stated, or the smallest reading so far.
    window: Option<Duration>,
    /// The latest window end seen, and what was left then.
    last: Option<(Instant, u64)>,
    /// When the answer that opened the current fixed window came: the
    /// window ends by then and a window.
    opened: Option<Instant>,
    /// The rate the user set: the ceiling (taken again when the limiter's
    /// rate is found changed by someone else).
    ceiling: Option<Rate>,
    /// The rate this set last.
    ours: Option<Rate>,
}

impl Learner {
    /// Learns from `budget`, read from the answer to a request sent at
    /// `sent` and received at `received`: the quota and window, when both
    /// are known.
    pub fn learn(
        &mut self,
        budget: &Budget,
        sent: Instant,
        received: Instant,
    ) -> Option<(u64, Duration)> {
        let quota = budget.quota?;
        let reading = match (budget.window, budget.kind) {
            (Some(stated), _) => {
                self.window = Some(stated);
                None
            }
            (None, Some(Reset::Refilled)) => {
                // When whole again, scaled to the whole quota; the latest.
                let (left, reset) = (budget.remaining?, budget.reset?);
                if left < quota && !reset.is_zero() {
                    let spent = u128::from(quota - left);
                    let ns = reset.as_nanos().saturating_mul(u128::from(quota)) / spent;
                    self.window = Some(nanos(ns));
                }
                None
            }
            (None, _) => self.window_end(budget, quota, sent, received),
        };
        if let Some(reading) = reading {
            self.window = Some(self.window.map_or(reading, |w| w.min(reading)));
        }
        Some((quota, self.window?)).filter(|(_, w)| !w.is_zero())
    }

    /// A fixed window's reading (the module docs): `None` when this answer
    /// bounds nothing.
    fn window_end(
        &mut self,
        budget: &Budget,
        quota: u64,
        sent: Instant,
        received: Instant,
    ) -> Option<Duration> {
        let (left, reset) = (budget.remaining?, budget.reset?);
        if left >= quota {
            // The request itself not counted: a window read as it expired
            // (slowapi answers so now and then, its reset then a few
            // milliseconds past the last). It bounds nothing.
            return None;
        }
        let end = received.checked_add(reset)?;
        let opening = left.checked_add(1) == Some(quota);
        if opening {
            self.opened = Some(received);
        }
        let opened = opening.then(|| end.saturating_duration_since(sent));
        let moved = match self.last {
            Some((last_end, last_left)) if left > last_left && end > last_end => {
                Some(end - last_end)
            }
            _ => None,
        };
        self.last = Some((end, left));
        match (opened, moved) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// How long from `now` the current fixed window ends at the latest: it
    /// opened while the answer that left all but one was on its way, so
    /// it ends by that answer's arrival and a window. `None` while the
    /// opening or the window is unknown.
    pub fn window_ends_in(&self, now: Instant) -> Option<Duration> {
        let end = self.opened?.checked_add(self.window?)?;
        Some(end.saturating_duration_since(now))
    }

    /// The rate to set a limiter at `current` to, if any: the quota per
    /// window less the margin, never above the ceiling.
    pub fn target(&mut self, current: Rate, quota: u64, window: Duration) -> Option<Rate> {
        if self.ours != Some(current) {
            // Set by its owner (or never by this): that is the ceiling now.
            self.ceiling = Some(current);
        }
        let ceiling = self.ceiling.unwrap_or(current);
        let interval = window.as_nanos() as f64 * (1.0 + MARGIN) / quota as f64;
        let learned = Rate::every(nanos(interval.round() as u128)).ok()?;
        let target = if learned.interval() < ceiling.interval() {
            ceiling
        } else {
            learned
        };
        (target != current).then_some(target)
    }

    /// Notes that the limiter was set to `rate`.
    pub fn set(&mut self, rate: Rate) {
        self.ours = Some(rate);
    }
}

/// Nanoseconds as a `Duration`, saturating.
fn nanos(ns: u128) -> Duration {
    let secs = u64::try_from(ns / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(secs, (ns % 1_000_000_000) as u32)
}

/// Learns from `budget` and sets `limiter`'s rate to what it taught.
pub(super) fn relimit<F: Follow>(
    limiter: &F,
    learner: &Mutex<Learner>,
    budget: &Budget,
    sent: Instant,
    received: Instant,
) {
    let mut learner = lock(learner);
    let Some((quota, window)) = learner.learn(budget, sent, received) else {
        return;
    };
    let current = limiter.rate();
    if let Some(rate) = learner.target(current, quota, window) {
        if limiter.set_rate(rate).is_ok() {
            learner.set(rate);
            crate::observe::event::debug!(
                quota,
                window_ms = window.as_millis() as u64,
                per_second = rate.per_second_f64(),
                "paceline: paced to the far side's budget"
            );
        }
    }
}

impl<L: AsyncTake + Follow + 'static> Pace<L> {
    /// Paces to the far side's budget: reads each answer's quota and window
    /// (the draft's `RateLimit-Policy`, else the `X-RateLimit-*` family or
    /// its per-requests variant, the window estimated when not stated: see
    /// the [guide](crate::guide::outbound)) and sets the limiter's rate to
    /// the quota per window less [`MARGIN`], never above the rate it had
    /// (a rate its owner sets later is the new ceiling). So the client paces
    /// to what the far side allows instead of finding it by refusals.
    ///
    /// Only a limiter this can set ([`Follow`]: an [`AsyncLimiter`]); with
    /// another, [`honour_retry_after`](Self::honour_retry_after) still holds
    /// requests while the far side says nothing is left. Pair the two:
    /// this sets the pace, that holds until a reset when the quota is spent
    /// anyway (by other clients of the same far side, say).
    #[must_use]
    pub fn follow_budget(mut self) -> Self {
        self.far.relimit = Some(relimit::<L>);
        self
    }
}

impl<L: AsyncTake + 'static> Pace<L> {
    /// A second limiter, paced in tokens: a request carrying a
    /// [`Tokens`] cost takes that many of its permits before it goes, and
    /// the far side's per-tokens fields (`x-ratelimit-limit-tokens`,
    /// `-remaining-tokens`, `-reset-tokens`) set its rate as
    /// [`follow_budget`](Self::follow_budget) sets the requests limiter's,
    /// never above the rate it had. With
    /// [`honour_retry_after`](Self::honour_retry_after), tokens exhausted
    /// hold every request until their reset, as requests exhausted do.
    #[must_use]
    pub fn tokens(mut self, tokens: AsyncLimiter) -> Self {
        self.far.tokens = Some((tokens, Arc::default()));
        self
    }

    /// The tokens limiter, if one was given.
    pub fn tokens_limiter(&self) -> Option<&AsyncLimiter> {
        self.far.tokens.as_ref().map(|(limiter, _)| limiter)
    }

    /// Takes a request's [`Tokens`] from the tokens limiter, if both are
    /// there.
    pub(super) async fn take_tokens(
        &self,
        extensions: &Extensions,
    ) -> reqwest_middleware::Result<()> {
        let (Some((tokens, _)), Some(&Tokens(cost))) =
            (&self.far.tokens, extensions.get::<Tokens>())
        else {
            return Ok(());
        };
        if cost > 0 {
            tokens
                .take_n(cost)
                .await
                .map_err(reqwest_middleware::Error::middleware)?;
        }
        Ok(())
    }

    /// Reads what `response` (to a request sent at `sent`) says of the far
    /// side's budget, follows it where asked, and starts the push that
    /// answers a pushback when listening: the far side's wait, if it asks
    /// one.
    pub(super) async fn answered(&self, response: &Response, sent: Instant) -> Option<Duration> {
        let far = &self.far;
        let listening = self.honour.is_some() || self.retry.times > 0;
        if !listening && far.relimit.is_none() && far.tokens.is_none() {
            return None;
        }
        let now = SystemTime::now();
        let mut said = read(response.headers(), now);
        far.report(said.unread);
        let received = Instant::now();
        if let Some(relimit) = far.relimit {
            relimit(
                &self.inner.limiter,
                &far.requests,
                &said.requests,
                sent,
                received,
            );
            // A fixed window's spent budget holds until the window's end as
            // learned, if that is sooner than the reset it states (slowapi
            // states its reset a second late).
            let requests = &mut said.requests;
            if requests.kind == Some(Reset::WindowEnd) && requests.window.is_none() {
                if let Some(ends_in) = lock(&far.requests).window_ends_in(received) {
                    requests.reset = requests.reset.map(|reset| reset.min(ends_in));
                }
            }
        }
        if let Some((tokens, learner)) = &far.tokens {
            relimit(tokens, learner, &said.tokens, sent, received);
        }
        let wait = pushback(response.status(), response.headers(), &said, now);
        if let Some(max) = self.honour {
            if let Some(push) = Inner::listen(&self.inner, response, wait, max) {
                start(push).await;
            }
        }
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn fixed(quota: u64, left: u64, reset: Duration) -> Budget {
        Budget {
            quota: Some(quota),
            window: None,
            remaining: Some(left),
            reset: Some(reset),
            kind: Some(Reset::WindowEnd),
        }
    }

    #[test]
    fn a_fixed_window_is_bounded_by_its_opening_and_by_successive_resets() {
        let mut learner = Learner::default();
        let t0 = Instant::now();
        // Mid-window: nothing bounds the window yet.
        assert_eq!(learner.learn(&fixed(100, 50, ms(400)), t0, t0), None);
        // The answer that opened a window (99 of 100 left), 2 ms round trip.
        let sent = t0 + ms(600);
        let got = learner.learn(&fixed(100, 99, ms(1998)), sent, sent + ms(2));
        assert_eq!(got, Some((100, ms(2000))));
        // An answer that did not count its own request bounds nothing, and
        // is not the last window's end.
        let at = t0 + ms(1400);
        let got = learner.learn(&fixed(100, 100, ms(1203)), at, at);
        assert_eq!(got, Some((100, ms(2000))));
        // Later in that window: no new bound.
        let at = t0 + ms(1500);
        let got = learner.learn(&fixed(100, 10, ms(1100)), at, at);
        assert_eq!(got, Some((100, ms(2000))));
        // What is left went up: a new window, ending 1010 ms after the last.
        let at = t0 + ms(2620);
        let got = learner.learn(&fixed(100, 98, ms(990)), at, at);
        assert_eq!(got, Some((100, ms(1010))));
        // A larger reading changes nothing.
        let at = t0 + ms(5000);
        let got = learner.learn(&fixed(100, 99, ms(3000)), at, at);
        assert_eq!(got, Some((100, ms(1010))));
        // That answer opened a window: it ends by its arrival and a window.
        assert_eq!(learner.window_ends_in(at + ms(10)), Some(ms(1000)));
        assert_eq!(learner.window_ends_in(at + ms(5000)), Some(Duration::ZERO));
        assert_eq!(Learner::default().window_ends_in(at), None);
    }

    #[test]
    fn a_stated_window_or_a_refilling_budget() {
        let mut learner = Learner::default();
        let now = Instant::now();
        let mut policy = fixed(100, 10, ms(100));
        policy.window = Some(Duration::from_secs(60));
        assert_eq!(
            learner.learn(&policy, now, now),
            Some((100, Duration::from_secs(60)))
        );
        // 500 a minute, 499 left, whole again in 120 ms: 500 per 60 s.
        let mut learner = Learner::default();
        let mut refill = fixed(500, 499, ms(120));
        refill.kind = Some(Reset::Refilled);
        assert_eq!(
            learner.learn(&refill, now, now),
            Some((500, Duration::from_secs(60)))
        );
        // Whole already: nothing to scale.
        refill.remaining = Some(500);
        let mut learner = Learner::default();
        assert_eq!(learner.learn(&refill, now, now), None);
        // No quota: nothing learned; never a panic at the extremes.
        let mut learner = Learner::default();
        let mut silent = refill;
        silent.quota = None;
        assert_eq!(learner.learn(&silent, now, now), None);
        let huge = Budget {
            quota: Some(u64::MAX),
            window: None,
            remaining: Some(0),
            reset: Some(Duration::MAX),
            kind: Some(Reset::Refilled),
        };
        assert!(learner.learn(&huge, now, now).is_some());
        let huge = Budget {
            kind: Some(Reset::WindowEnd),
            remaining: Some(u64::MAX - 1),
            ..huge
        };
        let _ = Learner::default().learn(&huge, now, now);
    }

    #[test]
    fn the_target_is_under_the_quota_and_never_above_the_ceiling() {
        let mut learner = Learner::default();
        let user = Rate::per_second(1000);
        let target = learner.target(user, 100, Duration::from_secs(1)).unwrap();
        // 100 a second less the margin: 97.09 a second.
        assert_eq!(target.interval(), Duration::from_micros(10_300));
        learner.set(target);
        // The far side allowing more than the user's rate: the user's.
        assert_eq!(
            learner.target(target, 5000, Duration::from_secs(1)),
            Some(user)
        );
        learner.set(user);
        // Its owner slowed the limiter to 10 a second: the new ceiling.
        let owner = Rate::per_second(10);
        assert_eq!(learner.target(owner, 100, Duration::from_secs(1)), None);
        // Nothing representable: no change.
        assert_eq!(
            learner.target(owner, u64::MAX, Duration::from_nanos(1)),
            None
        );
    }
}
