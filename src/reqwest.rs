//! Outbound pacing for reqwest (feature `reqwest`): [`Pace`], a
//! [reqwest-middleware](https://docs.rs/reqwest-middleware) middleware that
//! waits for the limiter's slot before each request, and, when asked,
//! holds the next request back for as long as the far side's `429` /
//! `503` says (`Retry-After`, or the IETF draft's `RateLimit` fields).
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
//! The guide's [outbound HTTP](crate::guide::grpc#outbound-reqwest) section.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::reqwest::header::{HeaderMap, RETRY_AFTER};
use ::reqwest::{Request, Response, StatusCode};
use ::tokio::time::Instant;
use http::Extensions;
use reqwest_middleware::{Middleware, Next};

use crate::take::AsyncTake;
use crate::tokio::AsyncLimiter;

/// A reqwest-middleware middleware that paces a client's requests through
/// one limiter: each request waits for its slot (`take().await`), then
/// goes. Any limiter that answers [`AsyncTake`] with the unit key: an
/// [`AsyncLimiter`], one key of a keyed or remote limiter through
/// [`OnKey`](crate::OnKey) (a limit shared by every process calling the
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
/// # Cancel safety
/// A request dropped while it waits for its slot gives the slot back (see
/// [cancel safety](crate::guide::waiting#cancel-safety)).
pub struct Pace<L = AsyncLimiter> {
    inner: Arc<Inner<L>>,
    /// The longest the far side may hold requests back; `None`: not
    /// listened to.
    honour: Option<Duration>,
}

/// What clones share.
struct Inner<L> {
    limiter: L,
    /// No request leaves before this: what the far side last asked.
    hold: Mutex<Option<Instant>>,
}

impl<L> Clone for Pace<L> {
    fn clone(&self) -> Self {
        Pace {
            inner: Arc::clone(&self.inner),
            honour: self.honour,
        }
    }
}

impl<L> fmt::Debug for Pace<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pace")
            .field("honour_retry_after", &self.honour)
            .finish_non_exhaustive()
    }
}

impl<L: AsyncTake + 'static> Pace<L> {
    /// Paces requests through `limiter`.
    pub fn new(limiter: L) -> Pace<L> {
        Pace {
            inner: Arc::new(Inner {
                limiter,
                hold: Mutex::new(None),
            }),
            honour: None,
        }
    }

    /// Listens to the far side, up to `max` (a server's word is input too:
    /// a `Retry-After` of a year holds requests for `max`, not a year).
    ///
    /// - a `429` or `503` with `Retry-After` (seconds, or an HTTP date)
    ///   holds every later request back until then;
    /// - one without it, but with the draft's `RateLimit` field saying
    ///   nothing is left (`"name";r=0;t=5`), until its reset `t`;
    /// - any other response whose `RateLimit` says `r=0`, the same: the
    ///   next request would be refused.
    ///
    /// A hold only ever delays: it is waited out before the take, so it
    /// never refills the limiter, and the limiter's own pace still applies
    /// after it. (The hold is this middleware's, shared by its clones: other
    /// users of a shared limiter are not held.)
    #[must_use]
    pub fn honour_retry_after(mut self, max: Duration) -> Pace<L> {
        self.honour = Some(max);
        self
    }

    /// The limiter.
    pub fn limiter(&self) -> &L {
        &self.inner.limiter
    }

    /// How long from now requests are held back by what the far side said
    /// (zero: not held).
    pub fn held_for(&self) -> Duration {
        let hold = *self
            .inner
            .hold
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        hold.map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        })
    }
}

impl<L> Inner<L> {
    /// Waits out the hold, if any (it may be pushed while waiting).
    async fn wait_hold(&self) {
        loop {
            let until = *self.hold.lock().unwrap_or_else(PoisonError::into_inner);
            match until {
                Some(until) if until > Instant::now() => ::tokio::time::sleep_until(until).await,
                _ => return,
            }
        }
    }

    /// Holds requests back for what `response` says, up to `max`.
    fn listen(&self, response: &Response, max: Duration) {
        let Some(wait) = pushback(response.status(), response.headers(), SystemTime::now()) else {
            return;
        };
        let wait = wait.min(max);
        crate::event::debug!(
            status = response.status().as_u16(),
            wait_ms = wait.as_millis() as u64,
            url = %response.url(),
            "paceline: the far side pushes the next request out"
        );
        let until = Instant::now() + wait;
        let mut hold = self.hold.lock().unwrap_or_else(PoisonError::into_inner);
        // Only ever later: a shorter word does not cut an earlier one.
        if hold.is_none_or(|h| h < until) {
            *hold = Some(until);
        }
    }
}

#[async_trait::async_trait]
impl<L: AsyncTake + 'static> Middleware for Pace<L> {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let inner = &*self.inner;
        if self.honour.is_some() {
            inner.wait_hold().await;
        }
        inner
            .limiter
            .take(&())
            .await
            .map_err(reqwest_middleware::Error::middleware)?;
        let response = next.run(request, extensions).await?;
        if let Some(max) = self.honour {
            inner.listen(&response, max);
        }
        Ok(response)
    }
}

/// How long the far side asks the next request to wait: `Retry-After` on
/// a 429 or 503, else the `RateLimit` field's reset when it says nothing is
/// left. `None`: it asks nothing (or nothing this can read).
fn pushback(status: StatusCode, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let refused =
        status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE;
    if refused {
        if let Some(wait) = headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v.trim(), now))
        {
            return Some(wait);
        }
    }
    headers
        .get_all("ratelimit")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(exhausted_reset)
        .max()
}

/// `Retry-After`'s value: delay-seconds, or an HTTP date (IMF-fixdate,
/// the form RFC 9110 requires senders to use) less `now`.
fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = UNIX_EPOCH + Duration::from_secs(imf_fixdate(value)?);
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Seconds since the Unix epoch of `Sun, 06 Nov 1994 08:49:37 GMT`.
fn imf_fixdate(value: &str) -> Option<u64> {
    let rest = value.split_once(", ")?.1;
    let mut parts = rest.split(' ');
    let day: u64 = parts.next()?.parse().ok()?;
    let month = parts.next()?;
    let year: u64 = parts.next()?.parse().ok()?;
    let time = parts.next()?;
    if parts.next()? != "GMT" || parts.next().is_some() {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == month)? as u64 + 1;
    let mut hms = time.split(':').map(|n| n.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=31).contains(&day) || !(1970..=9999).contains(&year) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm), from 1970.
    let (y, mo) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * 86_400 + h * 3600 + m * 60 + s)
}

/// A `RateLimit` field (the draft's Structured Field list,
/// `"name";r=0;t=5`): the largest reset `t` among the items with nothing
/// left (`r=0`).
fn exhausted_reset(field: &str) -> Option<Duration> {
    field
        .split(',')
        .filter_map(|item| {
            let mut r = None;
            let mut t = None;
            for param in item.split(';').skip(1) {
                match param.trim().split_once('=') {
                    Some(("r", v)) => r = v.trim().parse::<u64>().ok(),
                    Some(("t", v)) => t = v.trim().parse::<u64>().ok(),
                    _ => {}
                }
            }
            (r? == 0).then_some(Duration::from_secs(t?))
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_770); // 08:49:30
        assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(imf_fixdate("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            imf_fixdate("Tue, 29 Feb 2028 12:00:00 GMT"),
            Some(1_835_438_400)
        );
        // A date already past: go now.
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
            Some(Duration::ZERO)
        );
        for bad in [
            "-1",
            "soon",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "",
        ] {
            assert_eq!(retry_after(bad, now), None, "{bad}");
        }
    }

    #[test]
    fn what_pushes_and_what_does_not() {
        let now = SystemTime::now();
        let too_many = StatusCode::TOO_MANY_REQUESTS;
        assert_eq!(
            pushback(too_many, &headers(&[("retry-after", "3")]), now),
            Some(Duration::from_secs(3))
        );
        // A 200's Retry-After means nothing here.
        assert_eq!(
            pushback(StatusCode::OK, &headers(&[("retry-after", "3")]), now),
            None
        );
        // The draft's fields: only an item with nothing left.
        let exhausted = headers(&[("ratelimit", "\"a\";r=5;t=9, \"b\";r=0;t=4")]);
        assert_eq!(
            pushback(too_many, &exhausted, now),
            Some(Duration::from_secs(4))
        );
        assert_eq!(
            pushback(StatusCode::OK, &exhausted, now),
            Some(Duration::from_secs(4))
        );
        let left = headers(&[("ratelimit", "\"a\";r=1;t=9")]);
        assert_eq!(pushback(too_many, &left, now), None);
        assert_eq!(pushback(too_many, &HeaderMap::new(), now), None);
    }
}
