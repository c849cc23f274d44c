//! What the far side says of its budget, read from one answer's headers:
//! pure, no clock but the `now` it is handed.
//!
//! Three families, read in this order (the first that speaks wins, for
//! the requests limit):
//!
//! 1. `Retry-After` on a 429 or 503 (seconds, or an HTTP date): read in
//!    `pushback.rs`, and first there;
//! 2. the IETF draft's `RateLimit-Policy: "name";q=100;w=60` (a quota `q`
//!    per window `w` seconds) and `RateLimit: "name";r=5;t=30` (`r` left,
//!    the window's reset `t` seconds from now);
//! 3. the `X-RateLimit-Limit` / `-Remaining` / `-Reset` family (GitHub's,
//!    slowapi's, express-rate-limit's), else its per-requests variant
//!    (`x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests`,
//!    `x-ratelimit-reset-requests`). The per-tokens variant
//!    (`x-ratelimit-*-tokens`) is a second budget, in tokens.
//!
//! A reset is read by [`reset`]: seconds from now (`30`, `1.5`), a Unix
//! time when past 10^9 (`1764403200`, `1764403200.25`), or a duration
//! (`6m0s`, `1.5s`, `20ms`, `1h2m3.5s`). A value this cannot read is
//! named in [`Said::unread`] and changes nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::reqwest::header::HeaderMap;

/// A number past this is a Unix time, not seconds from now (10^9 s is
/// 2001-09-09: no window lasts 31 years, and every Unix time since is
/// past it).
const UNIX_TIME_FROM: u64 = 1_000_000_000;

/// The header names this reads, lower case (as `http` keeps them); a
/// name's index is its bit in [`Said::unread`].
pub(crate) const NAMES: [&str; 11] = [
    "ratelimit",
    "ratelimit-policy",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
];

/// What a reset's reading means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reset {
    /// The window's end: the whole quota is back then (the draft's `t`,
    /// `X-RateLimit-Reset`).
    WindowEnd,
    /// When a refilling budget is whole again (the per-requests and
    /// per-tokens variants, as OpenAI documents them: "the time until the
    /// rate limit resets to its initial state").
    Refilled,
}

/// One limit's budget as one answer states it; `None` where it is silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Budget {
    /// The quota per window (`q`, `-Limit`).
    pub quota: Option<u64>,
    /// The window, when stated (only the draft's policy `w` states it).
    pub window: Option<Duration>,
    /// What is left (`r`, `-Remaining`).
    pub remaining: Option<u64>,
    /// When it resets, from now (`t`, `-Reset`).
    pub reset: Option<Duration>,
    /// What the reset means; `None` when nothing was said.
    pub kind: Option<Reset>,
}

impl Budget {
    /// Whether the answer said anything of this budget.
    pub fn said(&self) -> bool {
        self.quota.is_some() || self.remaining.is_some() || self.reset.is_some()
    }

    /// The reset, when nothing is left: how long the far side will refuse.
    pub fn exhausted_for(&self) -> Option<Duration> {
        (self.remaining? == 0).then_some(self.reset?)
    }
}

/// What one answer says: the requests budget (the first family that
/// speaks), the tokens budget, and the names of fields it could not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Said {
    pub requests: Budget,
    pub tokens: Budget,
    /// Bit `i` set: [`NAMES`]`[i]` was present and unreadable.
    pub unread: u16,
}

/// Reads `headers` (see the module docs), `now` the time the answer came.
pub(crate) fn read(headers: &HeaderMap, now: SystemTime) -> Said {
    let mut said = Said::default();
    let ietf = ietf(headers, &mut said.unread);
    let x = family(headers, now, [2, 3, 4], Reset::WindowEnd, &mut said.unread);
    let requests = family(headers, now, [5, 6, 7], Reset::Refilled, &mut said.unread);
    said.requests = [ietf, x, requests]
        .into_iter()
        .find(Budget::said)
        .unwrap_or_default();
    said.tokens = family(headers, now, [8, 9, 10], Reset::Refilled, &mut said.unread);
    said
}

/// A header's text, `Err` (and its bit in `unread`) when it is there but
/// not text.
fn text<'h>(headers: &'h HeaderMap, name: usize, unread: &mut u16) -> Option<&'h str> {
    let value = headers.get(NAMES[name])?;
    match value.to_str() {
        Ok(text) => Some(text.trim()),
        Err(_) => {
            *unread |= 1 << name;
            None
        }
    }
}

/// Limit, remaining and reset from the headers at `names`.
fn family(
    headers: &HeaderMap,
    now: SystemTime,
    names: [usize; 3],
    kind: Reset,
    unread: &mut u16,
) -> Budget {
    let [limit, left, at] = names;
    let mut number = |name: usize| {
        let value = text(headers, name, unread)?;
        let n = whole(value);
        if n.is_none() {
            *unread |= 1 << name;
        }
        n
    };
    let quota = number(limit).filter(|&q| q > 0);
    let remaining = number(left);
    let reset = text(headers, at, unread).and_then(|value| {
        let r = reset(value, now);
        if r.is_none() {
            *unread |= 1 << at;
        }
        r
    });
    let mut budget = Budget {
        quota,
        window: None,
        remaining,
        reset,
        kind: None,
    };
    if budget.said() {
        budget.kind = Some(kind);
    }
    budget
}

/// The draft's fields: the tightest policy (least quota per second) and
/// the item with least left (ties: the latest reset).
fn ietf(headers: &HeaderMap, unread: &mut u16) -> Budget {
    let mut budget = Budget::default();
    if let Some(policy) = text(headers, 1, unread) {
        let mut best: Option<(u64, u64)> = None;
        for item in policy.split(',') {
            let (q, w) = (param(item, "q"), param(item, "w"));
            match (q, w) {
                (Some(q), Some(w)) if q > 0 && w > 0 => {
                    // q / w < bq / bw, without dividing.
                    let tighter = best.is_none_or(|(bq, bw)| {
                        u128::from(q) * u128::from(bw) < u128::from(bq) * u128::from(w)
                    });
                    if tighter {
                        best = Some((q, w));
                    }
                }
                _ => *unread |= 1 << 1,
            }
        }
        if let Some((q, w)) = best {
            budget.quota = Some(q);
            budget.window = Some(Duration::from_secs(w));
        }
    }
    if let Some(field) = text(headers, 0, unread) {
        let mut least: Option<(u64, u64)> = None;
        for item in field.split(',') {
            match (param(item, "r"), param(item, "t")) {
                (Some(r), Some(t)) => {
                    if least.is_none_or(|(lr, lt)| r < lr || (r == lr && t > lt)) {
                        least = Some((r, t));
                    }
                }
                _ => *unread |= 1,
            }
        }
        if let Some((r, t)) = least {
            budget.remaining = Some(r);
            budget.reset = Some(Duration::from_secs(t));
        }
    }
    if budget.said() {
        budget.kind = Some(Reset::WindowEnd);
    }
    budget
}

/// A Structured Field item's integer parameter `key` (`"name";key=5`).
fn param(item: &str, key: &str) -> Option<u64> {
    item.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        (k.trim() == key).then(|| whole(v.trim())).flatten()
    })
}

/// A non-negative integer of ASCII digits only (no sign, no exponent),
/// `None` past `u64::MAX`.
fn whole(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// A reset, as a wait from `now`: seconds (`30`, `1.5`), a Unix time when
/// the whole seconds are past 10^9 (a time already past is zero), or a
/// duration of `h`, `m`, `s`, `ms`, `us` / `µs` and `ns` parts, each a
/// number with an optional fraction (`6m0s`, `1h2m3.5s`, `20ms`). `None`
/// for anything else: empty, signed, an exponent, an unknown unit, a
/// number or a sum past what a `Duration` holds. Never panics.
pub(crate) fn reset(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Some(seconds) = decimal(value, 1_000_000_000) {
        let whole_seconds = seconds.as_secs();
        if whole_seconds <= UNIX_TIME_FROM {
            return Some(seconds);
        }
        let at = UNIX_EPOCH.checked_add(seconds)?;
        return Some(at.duration_since(now).unwrap_or(Duration::ZERO));
    }
    go_duration(value)
}

/// A number with an optional fraction (`12`, `1.5`, `.5` is refused) in a
/// unit of `unit_ns` nanoseconds; `None` if not exactly that or too large.
fn decimal(text: &str, unit_ns: u64) -> Option<Duration> {
    let (int, frac) = match text.split_once('.') {
        Some((int, frac)) => (int, Some(frac)),
        None => (text, None),
    };
    let int = whole(int)?;
    let mut total = u128::from(int) * u128::from(unit_ns);
    if let Some(frac) = frac {
        if frac.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // Digits past the nanosecond change nothing.
        let mut scale = u128::from(unit_ns);
        for digit in frac.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            total += u128::from(digit - b'0') * scale;
        }
    }
    let secs = u64::try_from(total / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (total % 1_000_000_000) as u32))
}

/// Go's duration text, as `time.Duration.String` writes it (`1h2m3.5s`,
/// `6m0s`, `20ms`): one or more number-and-unit parts, no sign.
fn go_duration(text: &str) -> Option<Duration> {
    const UNITS: [(&str, u64); 7] = [
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    if text.is_empty() {
        return None;
    }
    let mut rest = text;
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        // The longest unit that starts the tail (`ms` before `m`).
        let (unit, unit_ns) = UNITS
            .iter()
            .filter(|(unit, _)| tail.starts_with(unit))
            .max_by_key(|(unit, _)| unit.len())?;
        total = total.checked_add(decimal(number, *unit_ns)?)?;
        rest = &tail[unit.len()..];
    }
    Some(total)
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

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// 2026-01-01T00:00:00Z.
    const NOW: u64 = 1_767_225_600;

    #[test]
    fn the_reset_grammar() {
        let now = UNIX_EPOCH + Duration::from_secs(NOW);
        let table: &[(&str, Option<Duration>)] = &[
            // Seconds from now, whole or with a fraction.
            ("0", Some(Duration::ZERO)),
            ("30", Some(Duration::from_secs(30))),
            (" 30 ", Some(Duration::from_secs(30))),
            ("1.5", Some(ms(1500))),
            ("0.020", Some(ms(20))),
            ("1.0000000019", Some(Duration::new(1, 1))),
            ("1000000000", Some(Duration::from_secs(1_000_000_000))),
            // A Unix time past 10^9: its distance from now.
            ("1767225630", Some(Duration::from_secs(30))),
            ("1767225600.25", Some(ms(250))),
            ("1767225601.5", Some(ms(1500))),
            // Already past: go now.
            ("1767225000", Some(Duration::ZERO)),
            ("1000000001", Some(Duration::ZERO)),
            // Durations, as Go prints them.
            ("6m0s", Some(Duration::from_secs(360))),
            ("1.5s", Some(ms(1500))),
            ("20ms", Some(ms(20))),
            ("1h2m3.5s", Some(Duration::from_secs(3723) + ms(500))),
            ("250us", Some(Duration::from_micros(250))),
            ("250µs", Some(Duration::from_micros(250))),
            ("7ns", Some(Duration::from_nanos(7))),
            ("1m1ms", Some(Duration::from_secs(60) + ms(1))),
            ("0s", Some(Duration::ZERO)),
            // Bad input: refused, never a panic.
            ("", None),
            ("   ", None),
            ("-1", None),
            ("-1s", None),
            ("+1", None),
            ("1e9", None),
            ("5x", None),
            ("5", Some(Duration::from_secs(5))),
            ("s", None),
            ("1.", None),
            (".5", None),
            ("1.5.2", None),
            ("1s2", None),
            ("1 s", None),
            ("NaN", None),
            ("inf", None),
            ("18446744073709551615", None), // u64::MAX as a Unix time
            ("18446744073709551616", None), // past u64
            ("99999999999999999999999999", None),
            ("18446744073709551615h", None),
            ("5124095576030432h", None), // more hours than a Duration holds
            ("9999999999999999999s9999999999999999999s", None),
        ];
        for (text, expected) in table {
            assert_eq!(reset(text, now), *expected, "{text:?}");
        }
        // A Unix time a century ahead is a century's wait, not a failure.
        let far = (NOW + 100 * 365 * 86_400).to_string();
        assert_eq!(
            reset(&far, now),
            Some(Duration::from_secs(100 * 365 * 86_400))
        );
    }

    #[test]
    fn the_drafts_fields() {
        let now = SystemTime::now();
        let said = read(
            &headers(&[
                (
                    "ratelimit-policy",
                    "\"burst\";q=100;w=1, \"day\";q=1000;w=86400",
                ),
                ("ratelimit", "\"burst\";r=40;t=1, \"day\";r=900;t=3600"),
            ]),
            now,
        );
        // The day's policy is the tighter one (1000 a day < 100 a second).
        assert_eq!(said.requests.quota, Some(1000));
        assert_eq!(said.requests.window, Some(Duration::from_secs(86_400)));
        assert_eq!(said.requests.remaining, Some(40));
        assert_eq!(said.requests.reset, Some(Duration::from_secs(1)));
        assert_eq!(said.requests.kind, Some(Reset::WindowEnd));
        assert_eq!(said.unread, 0);
        // Nothing left: the latest reset among the exhausted.
        let said = read(
            &headers(&[("ratelimit", "\"a\";r=0;t=4, \"b\";r=0;t=9, \"c\";r=3;t=60")]),
            now,
        );
        assert_eq!(said.requests.exhausted_for(), Some(Duration::from_secs(9)));
        // An item without its parameters is reported; the rest is read.
        let said = read(
            &headers(&[("ratelimit", "\"a\";r=zero;t=4, \"b\";r=2;t=9")]),
            now,
        );
        assert_eq!(said.requests.remaining, Some(2));
        assert_eq!(said.unread, 1);
        let said = read(&headers(&[("ratelimit-policy", "\"a\";q=0;w=1")]), now);
        assert_eq!(said.requests.quota, None);
        assert_eq!(said.unread, 1 << 1);
    }

    #[test]
    fn the_x_ratelimit_family() {
        let now = UNIX_EPOCH + Duration::from_secs(NOW);
        // slowapi's: a Unix time with a fraction.
        let said = read(
            &headers(&[
                ("x-ratelimit-limit", "100"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1767225601.5"),
            ]),
            now,
        );
        assert_eq!(
            said.requests,
            Budget {
                quota: Some(100),
                window: None,
                remaining: Some(0),
                reset: Some(ms(1500)),
                kind: Some(Reset::WindowEnd),
            }
        );
        assert_eq!(said.requests.exhausted_for(), Some(ms(1500)));
        assert!(!said.tokens.said());
        // Seconds from now; a bad remaining is reported and read as silent.
        let said = read(
            &headers(&[
                ("x-ratelimit-limit", "60"),
                ("x-ratelimit-remaining", "-3"),
                ("x-ratelimit-reset", "42"),
            ]),
            now,
        );
        assert_eq!(said.requests.quota, Some(60));
        assert_eq!(said.requests.remaining, None);
        assert_eq!(said.requests.reset, Some(Duration::from_secs(42)));
        assert_eq!(said.requests.exhausted_for(), None);
        assert_eq!(said.unread, 1 << 3);
    }

    #[test]
    fn the_per_requests_and_per_tokens_variants() {
        let now = SystemTime::now();
        let said = read(
            &headers(&[
                ("x-ratelimit-limit-requests", "500"),
                ("x-ratelimit-remaining-requests", "499"),
                ("x-ratelimit-reset-requests", "120ms"),
                ("x-ratelimit-limit-tokens", "30000"),
                ("x-ratelimit-remaining-tokens", "0"),
                ("x-ratelimit-reset-tokens", "6m0s"),
            ]),
            now,
        );
        assert_eq!(said.requests.quota, Some(500));
        assert_eq!(said.requests.remaining, Some(499));
        assert_eq!(said.requests.reset, Some(ms(120)));
        assert_eq!(said.requests.kind, Some(Reset::Refilled));
        assert_eq!(said.tokens.quota, Some(30_000));
        assert_eq!(said.tokens.exhausted_for(), Some(Duration::from_secs(360)));
        assert_eq!(said.tokens.kind, Some(Reset::Refilled));
        let said = read(&headers(&[("x-ratelimit-reset-tokens", "5x")]), now);
        assert!(!said.tokens.said());
        assert_eq!(said.unread, 1 << 10);
    }

    #[test]
    fn the_first_family_that_speaks_wins() {
        let now = SystemTime::now();
        let all = [
            ("ratelimit", "\"a\";r=7;t=3"),
            ("x-ratelimit-limit", "100"),
            ("x-ratelimit-remaining", "50"),
            ("x-ratelimit-limit-requests", "500"),
            ("x-ratelimit-remaining-requests", "1"),
        ];
        assert_eq!(read(&headers(&all), now).requests.remaining, Some(7));
        assert_eq!(read(&headers(&all[1..]), now).requests.remaining, Some(50));
        assert_eq!(read(&headers(&all[3..]), now).requests.remaining, Some(1));
        assert_eq!(read(&HeaderMap::new(), now), Said::default());
        // A value that is not text at all is reported too.
        let mut map = HeaderMap::new();
        map.insert(
            "x-ratelimit-limit",
            HeaderValue::from_bytes(b"\xff").unwrap(),
        );
        assert_eq!(read(&map, now).unread, 1 << 2);
    }
}
