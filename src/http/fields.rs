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
use sha2::{Digest, Sha256};

use crate::clock::{Clock, UnixClock};
use crate::model::window::{self, Window};
use crate::values::limit::Limit;
use crate::values::rate::Rate;
use crate::values::window::nominal_seconds;

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

/// `text` as an SF String (printable ASCII, checked when it was set).
fn string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// An item: `name` as an SF String, with `parameters`.
fn item(name: &str, parameters: fmt::Arguments<'_>) -> String {
    let mut out = String::new();
    string(&mut out, name);
    let _ = out.write_fmt(parameters);
    out
}

/// A list of `items` as a field's value.
pub(crate) fn list(items: impl IntoIterator<Item = String>) -> HeaderValue {
    // One item (one limit) is its own value: no list is built, no copy made.
    let mut items = items.into_iter();
    let mut value = items.next().unwrap_or_default();
    for item in items {
        value.push_str(", ");
        value.push_str(&item);
    }
    // Printable ASCII only (checked when the names were set).
    HeaderValue::try_from(value).unwrap_or_else(|_| HeaderValue::from_static("\"default\""))
}

/// The length in whole seconds of the window of `window` that holds the
/// Unix time `now()` (ns): a fixed window's own, a day's or a week's (all
/// one length: the clock is not read), a month's or a year's from its start
/// to its end (28 to 31 days, a leap year's 366).
pub(crate) fn window_seconds(window: Window, now: impl FnOnce() -> u64) -> u64 {
    if !matches!(window, Window::Month { .. } | Window::Year { .. }) {
        return nominal_seconds(window).min(SF_MAX);
    }
    // Any quota of 1 is valid for any calendar window at a valid offset;
    // a limit's window was checked when it was made.
    let Ok(p) = window::Params::new(1, window) else {
        return 0;
    };
    let i = p.index_at(now());
    sf_integer(u128::from(p.end(i) - p.start(i)).div_ceil(SECOND))
}

/// What a policy announces beside its quota: the unit of its quota
/// (`qu`, where it is not requests) and the client's partition key (`pk`,
/// a digest).
#[derive(Clone, Copy, Default)]
pub(crate) struct Extra<'a> {
    pub(crate) unit: Option<&'a str>,
    pub(crate) pk: Option<&'a PartitionKey>,
}

/// A partition key as announced: the first 12 bytes of the SHA-256 of the
/// layer's secret and the key, never the key itself.
pub(crate) struct PartitionKey([u8; 12]);

impl PartitionKey {
    /// The digest of `key` under `secret`. The secret comes first and its
    /// length is hashed with it, so no choice of key can reproduce
    /// another secret's digests.
    pub(crate) fn of(secret: &[u8], key: &str) -> PartitionKey {
        let mut h = Sha256::new();
        h.update((secret.len() as u64).to_be_bytes());
        h.update(secret);
        h.update(key.as_bytes());
        let digest = h.finalize();
        let mut out = [0; 12];
        out.copy_from_slice(&digest[..12]);
        PartitionKey(out)
    }
}

impl fmt::Display for PartitionKey {
    /// An SF Byte Sequence: `:` base64 `:` (12 bytes: 16 characters, no
    /// padding).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        f.write_char(':')?;
        for chunk in self.0.chunks(3) {
            let n = u32::from(chunk[0]) << 16 | u32::from(chunk[1]) << 8 | u32::from(chunk[2]);
            for shift in [18, 12, 6, 0] {
                f.write_char(char::from(B64[(n >> shift & 63) as usize]))?;
            }
        }
        f.write_char(':')
    }
}

/// `RateLimit-Policy` for `limit`: its rate and its burst; for a quota per
/// window, the quota and the window's length in seconds (the burst is the
/// quota: not repeated). Then what `extra` carries.
pub(crate) fn policy(name: &str, limit: Limit, extra: Extra<'_>) -> String {
    let mut params = match limit.window() {
        Some(window) => {
            let w = window_seconds(window, || UnixClock.now());
            format!(";q={};w={w}", limit.burst().min(SF_MAX))
        }
        None => {
            let ((q, w), burst) = (quota(limit.rate()), limit.burst().min(SF_MAX));
            format!(";q={q};w={w};paceline-burst={burst}")
        }
    };
    if let Some(unit) = extra.unit {
        params.push_str(";qu=");
        string(&mut params, unit);
    }
    if let Some(pk) = extra.pk {
        let _ = write!(params, ";pk={pk}");
    }
    item(name, format_args!("{params}"))
}

/// `RateLimit`: `remaining` may go now; whole again within `reset` (for a
/// quota per window, its window's end); the partition key when announced.
pub(crate) fn state(
    name: &str,
    remaining: u64,
    reset: Duration,
    pk: Option<&PartitionKey>,
) -> String {
    let (r, t) = (remaining.min(SF_MAX), seconds_up(reset));
    match pk {
        Some(pk) => item(name, format_args!(";r={r};t={t};pk={pk}")),
        None => item(name, format_args!(";r={r};t={t}")),
    }
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
            list([policy("api", Limit::new(rate, 10), Extra::default())]),
            "\"api\";q=100;w=60;paceline-burst=11"
        );
        assert_eq!(
            list([state("a \"b\\", 0, Duration::from_millis(1500), None)]),
            "\"a \\\"b\\\\\";r=0;t=2"
        );
        let daily = Limit::per_window(10_000, "30d".parse().unwrap()).unwrap();
        let pk = PartitionKey::of(b"secret", "10.0.0.7");
        let extra = Extra {
            unit: Some("content-bytes"),
            pk: Some(&pk),
        };
        let text = format!("{pk}");
        assert_eq!(
            policy("day", daily, extra),
            format!("\"day\";q=10000;w=2592000;qu=\"content-bytes\";pk={text}")
        );
        assert_eq!(
            state("day", 7, Duration::from_secs(60), Some(&pk)),
            format!("\"day\";r=7;t=60;pk={text}")
        );
        let both = [
            policy("api", Limit::new(rate, 10), Extra::default()),
            policy("day", daily, Extra::default()),
        ];
        assert_eq!(
            list(both),
            "\"api\";q=100;w=60;paceline-burst=11, \"day\";q=10000;w=2592000"
        );
        assert!(valid_name("per-ip v1"));
        assert!(!valid_name("naïve"));
        assert!(!valid_name("tab\t"));
    }

    #[test]
    fn a_calendar_window_announces_its_own_length() {
        let s = 1_000_000_000;
        // 2024-02-10 (a leap year's February: 29 days), 2023-02-10 (28),
        // 2024-03-10 (31); the year 2024 (366 days).
        let (feb24, feb23, mar24) = (1_707_523_200 * s, 1_675_987_200 * s, 1_710_028_800 * s);
        let month = Window::Month { offset: 0 };
        assert_eq!(window_seconds(month, || feb24), 29 * 86_400);
        assert_eq!(window_seconds(month, || feb23), 28 * 86_400);
        assert_eq!(window_seconds(month, || mar24), 31 * 86_400);
        assert_eq!(
            window_seconds(Window::Year { offset: 0 }, || feb24),
            366 * 86_400
        );
        assert_eq!(window_seconds(Window::HOUR, || feb24), 3_600);
    }

    #[test]
    fn a_partition_key_is_a_byte_sequence_of_a_keyed_digest() {
        let pk = PartitionKey::of(b"fleet secret", "203.0.113.9").to_string();
        assert_eq!(pk.len(), 18, "{pk}");
        assert!(pk.starts_with(':') && pk.ends_with(':'), "{pk}");
        assert!(!pk.contains("203"), "{pk}");
        // The same key and secret: the same digest, in any process; another
        // secret or key: another.
        assert_eq!(
            pk,
            PartitionKey::of(b"fleet secret", "203.0.113.9").to_string()
        );
        assert_ne!(pk, PartitionKey::of(b"other", "203.0.113.9").to_string());
        assert_ne!(
            pk,
            PartitionKey::of(b"fleet secret", "203.0.113.8").to_string()
        );
        // base64 of 12 known bytes.
        assert_eq!(PartitionKey([0xff; 12]).to_string(), ":////////////////:");
        assert_eq!(PartitionKey([0; 12]).to_string(), ":AAAAAAAAAAAAAAAA:");
    }
}
