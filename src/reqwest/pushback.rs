//! What the far side asks a paced client to wait: `Retry-After` on a 429
//! or 503 (seconds, or an HTTP date), else the draft's `RateLimit` field
//! when it says nothing is left. Input from another server: anything this
//! cannot read asks nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
