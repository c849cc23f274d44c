//! What the far side asks a paced client to wait: `Retry-After` on a 429
//! or 503 (seconds, or an HTTP date), else the draft's `RateLimit` field
//! when it says nothing is left. Input from another server: anything this
//! cannot read asks nothing.

use std::time::{Duration, SystemTime};

use ::reqwest::header::{HeaderMap, RETRY_AFTER};
use ::reqwest::StatusCode;

/// How long the far side asks the next request to wait: `Retry-After` on
/// a 429 or 503, else the `RateLimit` field's reset when it says nothing is
/// left. `None`: it asks nothing (or nothing this can read).
pub(super) fn pushback(
    status: StatusCode,
    headers: &HeaderMap,
    now: SystemTime,
) -> Option<Duration> {
    let refused =
        status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE;
    let asked = headers.get(RETRY_AFTER).filter(|_| refused);
    asked
        .and_then(|v| retry_after(v.to_str().ok()?.trim(), now))
        .or_else(|| {
            headers
                .get_all("ratelimit")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .filter_map(exhausted_reset)
                .max()
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
