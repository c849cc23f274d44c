//! The response fields a limit announces: `Retry-After` (RFC 9110) and the
//! IETF httpapi draft's `RateLimit-Policy` and `RateLimit`
//! (draft-ietf-httpapi-ratelimit-headers, -08 and later: Structured Field
//! Lists of named items, RFC 9651), written by hand.
//!
//! How a paceline limit maps to them (the policy's `q`, `w` and
//! `paceline-burst`, the `r` and `t` of `RateLimit`, `Retry-After` rounded
//! up, never early): the guide's [HTTP](crate::guide::http#fields-and-bodies)
//! chapter. The invariant: no field promises more than the limit.

use std::fmt::{self, Write as _};
use std::time::Duration;

use http::{HeaderName, HeaderValue};

use crate::values::limit::Limit;
use crate::values::rate::Rate;

/// The `RateLimit-Policy` field's name.
pub(crate) const POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The `RateLimit` field's name.
pub(crate) const STATE: HeaderName = HeaderName::from_static("ratelimit");

/// One second, ns.
const SECOND: u128 = 1_000_000_000;

/// The largest Integer a Structured Field holds (15 digits).
const SF_MAX: u64 = 999_999_999_999_999;

/// `x` as a Structured Field's Integer: at most [`SF_MAX`].
fn sf_integer(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX).min(SF_MAX)
}

/// `d` in whole seconds, rounded up; at least 1 when `d > 0`.
pub(crate) fn seconds_up(d: Duration) -> u64 {
    sf_integer(d.as_nanos().div_ceil(SECOND))
}

/// `Retry-After` for a wait of `d`.
pub(crate) fn retry_after(d: Duration) -> HeaderValue {
    HeaderValue::from(seconds_up(d).max(1))
}

/// The policy's `q` and `w` for `rate`: `q` permits in `w` whole seconds,
/// never more than the rate allows.
pub(crate) fn quota(rate: Rate) -> (u64, u64) {
    let period = rate.period().as_nanos();
    let w = period.div_ceil(SECOND).max(1);
    let q = u128::from(rate.count()) * w * SECOND / period;
    (sf_integer(q), sf_integer(w))
}

/// Whether `name` can be a policy name: an SF String of printable ASCII.
pub(crate) fn valid_name(name: &str) -> bool {
    name.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

/// A list of one item: `name` as an SF String, with `parameters`.
fn item(name: &str, parameters: fmt::Arguments<'_>) -> HeaderValue {
    let mut out = String::new();
    out.push('"');
    for c in name.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    let _ = out.write_fmt(parameters);
    // Printable ASCII only (checked when the name was set).
    HeaderValue::try_from(out).unwrap_or_else(|_| HeaderValue::from_static("\"default\""))
}

/// `RateLimit-Policy` for `limit`: its rate, and its burst.
pub(crate) fn policy(name: &str, limit: Limit) -> HeaderValue {
    let ((q, w), burst) = (quota(limit.rate()), limit.burst().min(SF_MAX));
    item(name, format_args!(";q={q};w={w};paceline-burst={burst}"))
}

/// `RateLimit`: `remaining` may go now; whole again within `reset`.
pub(crate) fn state(name: &str, remaining: u64, reset: Duration) -> HeaderValue {
    let (r, t) = (remaining.min(SF_MAX), seconds_up(reset));
    item(name, format_args!(";r={r};t={t}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        let cases = [
            (Duration::from_nanos(1), "1"),
            (Duration::from_millis(300), "1"),
            (Duration::from_secs(1), "1"),
            (Duration::from_millis(1001), "2"),
            (Duration::from_secs(59), "59"),
            (Duration::ZERO, "1"),
        ];
        for (d, s) in cases {
            assert_eq!(retry_after(d), s, "{d:?}");
        }
    }

    #[test]
    fn the_quota_never_promises_more_than_the_rate() {
        let cases = [
            ("5/s", (5, 1)),
            ("100/min", (100, 60)),
            ("7/2s", (7, 2)),
            ("5/250ms", (20, 1)),
            ("3/1500ms", (4, 2)),
            ("1/h", (1, 3600)),
        ];
        for (rate, qw) in cases {
            assert_eq!(quota(rate.parse().unwrap()), qw, "{rate}");
        }
    }

    #[test]
    fn fields_are_structured_field_lists() {
        let rate: Rate = "100/min".parse().unwrap();
        assert_eq!(
            policy("api", Limit::new(rate, 10)),
            "\"api\";q=100;w=60;paceline-burst=11"
        );
        assert_eq!(
            state("a \"b\\", 0, Duration::from_millis(1500)),
            "\"a \\\"b\\\\\";r=0;t=2"
        );
        assert!(valid_name("per-ip v1"));
        assert!(!valid_name("naïve"));
        assert!(!valid_name("tab\t"));
    }
}
