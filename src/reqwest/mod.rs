//! Outbound pacing for reqwest (feature `reqwest`): [`Pace`], a
//! [reqwest-middleware](https://docs.rs/reqwest-middleware) middleware that
//! waits for the limiter's slot before each request, and, when asked,
//! pushes the limiter's schedule out for as long as the far side's `429` /
//! `503` says (`Retry-After`, or the IETF draft's `RateLimit` fields): the
//! push takes the limiter's own slots, so every user of a shared or remote
//! limiter is slowed, and no burst is banked meanwhile.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use paceline::reqwest::Pace;
//! use paceline::tokio::AsyncLimiter;
//! use std::time::Duration;
//!
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(Pace::new(AsyncLimiter::new("10/s".parse()?)).honour_retry_after(Duration::from_secs(60)))
//!     .build();
//! let page = client.get("http://127.0.0.1:8080/").send().await?; // at most 10 a second
//! # let _ = page;
//! # Ok(())
//! # }
//! ```
//!
//! paceline builds reqwest without its default features: no TLS library
//! comes with this feature. Turn on the TLS of your choice in your own
//! `reqwest` dependency (`rustls`, `native-tls`); features unify.
//!
//! The guide's [outbound HTTP](crate::guide::grpc#outbound-reqwest)
//! section tells how a push works and what it guarantees; its chapter
//! [Outbound calls to a metered API](crate::guide::outbound) what is read
//! of the far side's budget (`budget.rs`), how the rate follows it
//! (`follow.rs`) and when a refused request is sent again (`retry.rs`).

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use ::reqwest::{Request, Response};
use ::tokio::sync::Notify;
use ::tokio::time::Instant;
use http::Extensions;
use reqwest_middleware::{Middleware, Next};

use crate::limiter::take::AsyncTake;
use crate::primitive::{lock, Mutex};
use crate::tokio::AsyncLimiter;
use crate::values::error::Error;

mod adapt;
mod budget;
mod follow;
mod pushback;
mod retry;
use adapt::Feedback;
use follow::FarSide;
pub use follow::{Follow, Tokens, MARGIN};
pub use retry::DEFAULT_RETRIES;
use retry::{Retry, RETRY_WAIT_CAP};

/// A reqwest-middleware middleware that paces a client's requests through
/// one limiter: each request waits for its slot (`take().await`), then
/// goes. Any limiter that answers [`AsyncTake`] with the unit key: an
/// [`AsyncLimiter`], one key of a keyed or remote limiter through
/// [`OnKey`](crate::take::OnKey) (a limit shared by every process calling the
/// same API), [`Unlimited`](crate::Unlimited).
///
/// `Clone`: clones share the limiter and what the far side said (set
/// [`honour_retry_after`](Self::honour_retry_after) before cloning).
///
/// A take that fails (a remote limiter whose server is down under
/// [`FailPolicy::Closed`](crate::remote::FailPolicy::Closed)) fails the
/// request with [`reqwest_middleware::Error::Middleware`], holding the
/// [`paceline::Error`](crate::Error); the request is not sent.
///
/// What the far side says: [`honour_retry_after`](Self::honour_retry_after)
/// holds requests while it refuses or says nothing is left;
/// [`follow_budget`](Self::follow_budget) paces to its quota per window;
/// [`tokens`](Self::tokens) paces a second budget, in tokens. A refused
/// request (429 or 503) is handed back as it came, unless
/// [`retry`](Self::retry) is asked: then an idempotent one whose body can
/// be cloned is sent again after the far side's wait. The
/// [guide](crate::guide::outbound) tells what is read, in which order.
///
/// # Cancel safety
/// A request dropped while it waits for its slot gives the slot back (see
/// [cancel safety](crate::guide::waiting#cancel-safety)). One dropped while
/// it waits for a pushback has booked nothing: the push is a task of its
/// own, which takes the slots the far side asked for and no more.
pub struct Pace<L = AsyncLimiter> {
    inner: Arc<Inner<L>>,
    /// The longest the far side may hold requests back; `None`: not
    /// listened to.
    honour: Option<Duration>,
    /// Its budget, followed when asked ([`follow_budget`](Self::follow_budget)).
    far: FarSide<L>,
    /// Refused requests sent again ([`retry`](Self::retry)).
    retry: Retry,
    /// The adaptive rate told of every answer, if any.
    adapt: Option<Arc<dyn Feedback>>,
}

/// What clones share.
struct Inner<L> {
    limiter: L,
    /// What the far side asked, and the pushes that answer it.
    pushed: Mutex<Pushed>,
    /// Told when a push ends.
    ended: Notify,
}

/// The far side's pushback, as it stands.
#[derive(Default)]
struct Pushed {
    /// No request of this middleware leaves before this, and the limiter's
    /// schedule is being pushed out to here: a later pushback takes only
    /// the slots beyond it.
    until: Option<Instant>,
    /// Pushes still taking the limiter's slots.
    running: usize,
    /// What a push that failed met, for a request waiting on it.
    failed: Option<crate::Error>,
}

/// Which of the limiter's slots a push takes.
#[derive(Clone, Copy, Debug)]
enum Reach {
    /// The credit the limiter has banked, then its slots for this long.
    Fresh(Duration),
    /// This much more of its slots, beyond a push still under way.
    Beyond(Duration),
}

/// A push, before it is started ([`start`]).
type Push = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How long past its reach a push may take to get its slots (when others
/// keep taking them) before it gives up: a push never runs unbounded.
const PUSH_GRACE: Duration = Duration::from_millis(100);

/// The furthest a pushback reaches (a `max` of [`Duration::MAX`] with a
/// far side asking for ever): thirty years, which no clock overflows.
const FURTHEST: Duration = Duration::from_secs(30 * 365 * 86_400);

impl<L> Clone for Pace<L> {
    fn clone(&self) -> Self {
        Pace {
            inner: Arc::clone(&self.inner),
            honour: self.honour,
            far: self.far.clone(),
            retry: self.retry,
            adapt: self.adapt.clone(),
        }
    }
}

impl<L> fmt::Debug for Pace<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pace")
            .field("honour_retry_after", &self.honour)
            .field("follow_budget", &self.far.relimit.is_some())
            .field("retry", &self.retry)
            .field("adapt", &self.adapt.is_some())
            .finish_non_exhaustive()
    }
}

impl<L: AsyncTake + 'static> Pace<L> {
    /// Paces requests through `limiter`.
    pub fn new(limiter: L) -> Pace<L> {
        Pace {
            inner: Arc::new(Inner {
                limiter,
                pushed: Mutex::new(Pushed::default()),
                ended: Notify::new(),
            }),
            honour: None,
            far: FarSide::default(),
            retry: Retry::default(),
            adapt: None,
        }
    }

    /// Tells `adaptive` of every answer: a `429` or `503` cuts its rate, a
    /// success raises it, each at most once per window of requests in
    /// flight (see [`adapt`](crate::adapt)); an error on the way (no
    /// answer) or another `5xx` changes nothing. `adaptive` should drive
    /// this middleware's own limit: a clone of its
    /// [`AsyncLimiter`], or the same key.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use paceline::adapt::Adaptive;
    /// use paceline::reqwest::Pace;
    /// use paceline::tokio::AsyncLimiter;
    /// use paceline::Rate;
    ///
    /// let limiter = AsyncLimiter::builder(Rate::per_second(200)).slack(0).build()?;
    /// let adaptive = Adaptive::new(limiter.clone(), Rate::per_second(1), Rate::per_second(1000))?;
    /// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
    ///     .with(Pace::new(limiter).adapt(adaptive.clone()))
    ///     .build();
    /// client.get("http://127.0.0.1:8080/").send().await?;
    /// println!("now at {}", adaptive.rate());
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn adapt<A: crate::adapt::Adjust + 'static>(
        mut self,
        adaptive: crate::adapt::Adaptive<A>,
    ) -> Self {
        self.adapt = Some(Arc::new(adaptive));
        self
    }

    crate::values::setters! {
        /// Listens to the far side, up to `max` (a server's word is input too:
        /// a `Retry-After` of a year pushes for `max`, not a year).
        ///
        /// - a `429` or `503` with `Retry-After` (seconds, or an HTTP date)
        ///   pushes the limiter's schedule out until then;
        /// - one without it, but whose budget says nothing is left (the
        ///   draft's `RateLimit: "name";r=0;t=5`, `X-RateLimit-Remaining: 0`,
        ///   the per-requests or per-tokens remaining at 0), until its reset;
        /// - any other response whose budget says nothing is left, the same:
        ///   the next request would be refused.
        ///
        /// A push of `wait` takes the limiter's own slots up to `wait` from
        /// now: the credit it has banked, then `wait / T` more (rounded up),
        /// as one take booked at once (in parts of at most the burst from a
        /// limiter of your own that refuses more), waiting for its slot, as a
        /// task of its own. So everyone who takes from the limiter (another `Pace` on
        /// it, another process on the same Redis, PostgreSQL or memcached key)
        /// is slowed too, and nothing is banked meanwhile: afterwards requests
        /// leave at the limiter's pace, the first at about `wait` from now, not
        /// in a burst. Nothing is ever refilled. This middleware's own requests
        /// also wait until then; a second pushback while one is under way takes
        /// only the slots beyond it. A limiter with no limit
        /// ([`Unlimited`](crate::Unlimited)) has no slots to take: then only
        /// this middleware's requests are held. A push whose take fails (a
        /// remote server down under a closed policy) fails a request waiting
        /// on it with the take's error.
        ///
        /// The [guide](crate::guide::grpc#outbound-reqwest) has the details.
        #[must_use]
        honour_retry_after(max: Duration) => honour;
    }

    /// The limiter.
    pub fn limiter(&self) -> &L {
        &self.inner.limiter
    }

    /// How long from now requests are held back by what the far side said
    /// (zero: not held).
    pub fn held_for(&self) -> Duration {
        let until = lock(&self.inner.pushed).until;
        until.map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        })
    }
}

impl<L> Inner<L> {
    /// Waits until what the far side asked is over: its time has come and
    /// no push is still taking slots. A push's failure, met before then, is
    /// this request's answer (one request's: the others go on to their
    /// own takes, which meet the failure themselves if it lasts); once it
    /// is over, a failure nobody met is forgotten.
    async fn wait_pushed(&self) -> Result<(), crate::Error> {
        loop {
            let mut ended = pin!(self.ended.notified());
            // Told of an end from here on, before the look below.
            ended.as_mut().enable();
            let until = {
                let mut pushed = lock(&self.pushed);
                let until = match pushed.until {
                    Some(until) if until > Instant::now() => Some(until),
                    _ if pushed.running > 0 => None,
                    _ => {
                        pushed.failed = None;
                        return Ok(());
                    }
                };
                if let Some(failed) = pushed.failed.take() {
                    return Err(failed);
                }
                until
            };
            // Until a push ends, or (timed out) the far side's time comes.
            match until {
                Some(until) => ::tokio::time::timeout_at(until, ended).await.unwrap_or(()),
                None => ended.await,
            }
        }
    }
}

impl<L: AsyncTake + 'static> Inner<L> {
    /// What `response` asks, up to `max`, as a push to start: `None` when
    /// it asks nothing, or nothing beyond what is pushed already.
    fn listen(
        inner: &Arc<Self>,
        response: &Response,
        wait: Option<Duration>,
        max: Duration,
    ) -> Option<Push> {
        let wait = wait?.min(max).min(FURTHEST);
        let _ = response; // read by the event below only, with `tracing`
        if wait.is_zero() {
            return None;
        }
        let now = Instant::now();
        let until = now + wait;
        let reach = {
            let mut pushed = lock(&inner.pushed);
            let reach = match pushed.until {
                // Pushed that far already (concurrent answers saying the
                // same do not add up).
                Some(old) if old >= until => return None,
                Some(old) if old > now => Reach::Beyond(until - old),
                _ => Reach::Fresh(wait),
            };
            pushed.until = Some(until);
            pushed.running += 1;
            // A failure of an earlier push is no news to the requests
            // after this one: they wait on this push.
            pushed.failed = None;
            reach
        };
        crate::observe::event::debug!(
            status = response.status().as_u16(),
            wait_ms = wait.as_millis() as u64,
            url = %response.url(),
            "paceline: the far side pushes the limiter's next slot out"
        );
        let inner = Arc::clone(inner);
        Some(Box::pin(async move {
            let running = Running(&inner);
            if let Err(e) = inner.push(reach, until).await {
                lock(&inner.pushed).failed = Some(e);
            }
            drop(running);
        }))
    }

    /// Takes the limiter's slots `reach` says, waiting for them; gives up
    /// (booking nothing more) if they are not all taken by `until` and a
    /// burst's worth of intervals.
    ///
    /// As one take: every paceline kind books a take above the burst at
    /// once, where a take within it books only once its slot is within
    /// the async wait's horizon; so the whole push is booked now, and
    /// takers elsewhere (another process on a remote key, which has no
    /// queue) line up behind it instead of between its parts. A limiter
    /// that refuses a cost above its burst is taken from in parts of at
    /// most the burst, each waiting for its slot.
    async fn push(&self, reach: Reach, until: Instant) -> Result<(), crate::Error> {
        let Some(limit) = self.limiter.limit_for(&()) else {
            return Ok(()); // no slots to take: the hold alone
        };
        let interval = limit.rate().interval();
        let burst = limit.burst().max(1);
        let mut left = match reach {
            Reach::Beyond(more) => intervals(more, interval),
            Reach::Fresh(wait) => {
                // A look that fails: take as if the whole burst were
                // banked; the take meets the failure (and the fail policy)
                // as any take would.
                let (banked, next_free) = match self.limiter.state(&()).await {
                    Ok(state) => (state.available().min(burst), state.next_free()),
                    Err(_) => (burst, Duration::ZERO),
                };
                banked.saturating_add(intervals(wait.saturating_sub(next_free), interval))
            }
        };
        let span = interval.saturating_mul(u32::try_from(burst).unwrap_or(u32::MAX));
        let deadline = until + span.min(FURTHEST) + PUSH_GRACE;
        let mut part = left;
        while left > 0 {
            let cost = left.min(part);
            match ::tokio::time::timeout_at(deadline, self.limiter.take_n(&(), cost)).await {
                Ok(Ok(_)) => left -= cost,
                Ok(Err(Error::ExceedsBurst { .. })) if cost > burst => {
                    part = burst;
                }
                Ok(Err(e)) => return Err(e),
                // Others took the slots first: what is left is theirs.
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }
}

/// A push under way; its end (or its drop, with the runtime) wakes the
/// requests waiting on it.
struct Running<'a, L>(&'a Inner<L>);

impl<L> Drop for Running<'_, L> {
    fn drop(&mut self) {
        lock(&self.0.pushed).running -= 1;
        self.0.ended.notify_waiters();
    }
}

/// How many intervals `wait` spans, rounded up.
fn intervals(wait: Duration, interval: Duration) -> u64 {
    let interval = interval.as_nanos().max(1);
    u64::try_from(wait.as_nanos().div_ceil(interval)).unwrap_or(u64::MAX)
}

/// Starts `push`: its first poll here, so that its first take is in line
/// (or on its way to the server) before the response that asked for it is
/// handed back, and the rest as a task of its own, which a request dropped
/// meanwhile does not cancel. Outside a runtime it is dropped (the hold
/// still holds this middleware's requests).
async fn start(mut push: Push) {
    let pending = poll_fn(|cx| Poll::Ready(push.as_mut().poll(cx).is_pending())).await;
    if pending {
        if let Ok(runtime) = ::tokio::runtime::Handle::try_current() {
            runtime.spawn(push);
        }
    }
}

#[async_trait::async_trait]
impl<L: AsyncTake + 'static> Middleware for Pace<L> {
    async fn handle(
        &self,
        mut request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let inner = &*self.inner;
        let mut retries = self.retry.times;
        loop {
            if self.honour.is_some() {
                inner
                    .wait_pushed()
                    .await
                    .map_err(reqwest_middleware::Error::middleware)?;
            }
            inner
                .limiter
                .take(&())
                .await
                .map_err(reqwest_middleware::Error::middleware)?;
            self.take_tokens(extensions).await?;
            // A copy to send again if this one is refused (none of a
            // streamed body, nor of a method that may not be retried).
            let again = (retries > 0 && self.retry.allows(request.method()))
                .then(|| request.try_clone())
                .flatten();
            let sent = Instant::now();
            let ticket = self.adapt.as_ref().map(|adapt| adapt.send());
            let response = next.clone().run(request, extensions).await;
            if let (Some(adapt), Some(ticket)) = (&self.adapt, ticket) {
                let status = response.as_ref().ok().map(|r| r.status().as_u16());
                adapt.answer(ticket, status, sent.elapsed());
            }
            let response = response?;
            let wait = self.answered(&response, sent).await;
            let Some(again) = again.filter(|_| pushback::refused(response.status())) else {
                return Ok(response);
            };
            retries -= 1;
            drop(response);
            if self.honour.is_none() {
                // Not pushed: this request alone waits for the far side.
                ::tokio::time::sleep(wait.unwrap_or_default().min(RETRY_WAIT_CAP)).await;
            }
            request = again;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_spans_whole_intervals_rounded_up() {
        let t = Duration::from_millis(100);
        assert_eq!(intervals(Duration::from_secs(1), t), 10);
        assert_eq!(intervals(Duration::from_millis(1001), t), 11);
        assert_eq!(intervals(Duration::ZERO, t), 0);
        // No interval divides by zero; nothing overflows.
        assert_eq!(
            intervals(Duration::from_secs(1), Duration::ZERO),
            1_000_000_000
        );
        assert_eq!(intervals(Duration::MAX, Duration::from_nanos(1)), u64::MAX);
    }
}
