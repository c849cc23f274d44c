//! What the far side asks a paced client to wait: `Retry-After` on a 429
//! or 503 (seconds, or an HTTP date), else the reset of a budget it says
//! is spent (`budget.rs` reads them). Input from another server: anything
//! this cannot read asks nothing.

use std::time::{Duration, SystemTime};

use ::reqwest::header::{HeaderMap, RETRY_AFTER};
use ::reqwest::StatusCode;

use super::budget::Said;

/// Whether `status` is a refusal that a wait answers: 429 or 503.
pub(super) fn refused(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE
}

/// How long the far side asks the next request to wait: `Retry-After` on
/// a 429 or 503, else the reset of a budget it says is spent (`said`: the
/// requests budget, the draft's `RateLimit` or the `X-RateLimit-*`
/// family, or the tokens budget; the later of the two). `None`: it asks
/// nothing (or nothing this can read).
pub(super) fn pushback(
    status: StatusCode,
    headers: &HeaderMap,
    said: &Said,
    now: SystemTime,
) -> Option<Duration> {
    let asked = headers.get(RETRY_AFTER).filter(|_| refused(status));
    asked
        .and_then(|v| retry_after(v.to_str().ok()?.trim(), now))
        .or_else(|| {
            let requests = said.requests.exhausted_for();
            let tokens = said.tokens.exhausted_for();
            requests.max(tokens)
        })
}

/// `Retry-After`'s value: delay-seconds, or an HTTP date less `now` (any
/// of the three forms RFC 9110 §5.6.7 has a recipient accept: IMF-fixdate,
/// RFC 850's and asctime's).
fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::super::budget::read;
    use super::*;
    use ::reqwest::header::HeaderValue;
    use std::time::UNIX_EPOCH;

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
        // The obsolete forms a recipient must read too (RFC 9110 §5.6.7).
        for obsolete in ["Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
            assert_eq!(
                retry_after(obsolete, now),
                Some(Duration::from_secs(7)),
                "{obsolete}"
            );
        }
        let leap_day = UNIX_EPOCH + Duration::from_secs(1_835_438_400 - 5);
        assert_eq!(
            retry_after("Tue, 29 Feb 2028 12:00:00 GMT", leap_day),
            Some(Duration::from_secs(5))
        );
        // A date already past: go now.
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
            Some(Duration::ZERO)
        );
        for bad in [
            "-1",
            "soon",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "",
        ] {
            assert_eq!(retry_after(bad, now), None, "{bad}");
        }
    }

    #[test]
    fn what_pushes_and_what_does_not() {
        let now = SystemTime::now();
        let push = |status, pairs: &[(&'static str, &str)]| {
            let map = headers(pairs);
            pushback(status, &map, &read(&map, now), now)
        };
        let too_many = StatusCode::TOO_MANY_REQUESTS;
        assert_eq!(
            push(too_many, &[("retry-after", "3")]),
            Some(Duration::from_secs(3))
        );
        // A 200's Retry-After means nothing here.
        assert_eq!(push(StatusCode::OK, &[("retry-after", "3")]), None);
        // Retry-After first, before the fields.
        let both = [("retry-after", "3"), ("ratelimit", "\"b\";r=0;t=4")];
        assert_eq!(push(too_many, &both), Some(Duration::from_secs(3)));
        // The draft's fields: only an item with nothing left.
        let exhausted = [("ratelimit", "\"a\";r=5;t=9, \"b\";r=0;t=4")];
        assert_eq!(push(too_many, &exhausted), Some(Duration::from_secs(4)));
        assert_eq!(
            push(StatusCode::OK, &exhausted),
            Some(Duration::from_secs(4))
        );
        assert_eq!(push(too_many, &[("ratelimit", "\"a\";r=1;t=9")]), None);
        assert_eq!(push(too_many, &[]), None);
        // The X-RateLimit family, and tokens spent: the later reset.
        let spent = [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "2")];
        assert_eq!(push(StatusCode::OK, &spent), Some(Duration::from_secs(2)));
        let tokens = [
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "6s"),
        ];
        assert_eq!(push(too_many, &tokens), Some(Duration::from_secs(6)));
        assert_eq!(
            push(StatusCode::OK, &[("x-ratelimit-remaining", "1")]),
            None
        );
    }
}
