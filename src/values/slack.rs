//! [`Slack`]: how much unused time a limiter banks for a later burst, in
//! permits, in time, or the larger of the two (the default).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::values::duration::{self, is_digits, Shown};
use crate::values::error::BuildError;
use crate::values::rate::Rate;

/// How much unused time a limiter may bank for a later burst: at least
/// [`permits`](Slack::permits) permits, and at least
/// [`time`](Slack::time) worth of permits at the rate in force, whichever
/// is more. A limiter at rest lets `slack + 1` permits go at once, then
/// paces them one interval apart.
///
/// Slack sized in permits is uber-go/ratelimit's (`WithSlack(10)`); slack
/// sized in time keeps the rate exact at any rate: a thread or task that
/// wakes late by less than the banked window loses nothing, because the
/// slots it missed are still banked when it runs. Ten permits are 100 ms
/// at 100/s but 10 µs at 1 M/s, shorter than the stalls a busy machine
/// gives a thread; 10 ms is 10 ms at every rate.
///
/// The **default**, [`Slack::DEFAULT`], is the larger of 10 permits and
/// 10 ms: exactly uber's 10 permits at rates up to 1000/s (so uber's own
/// test cases, at 100/s and 7/min, pass unchanged), and 10 ms of permits
/// above (100 at 10 k/s, 10 000 at 1 M/s). The burst after idle is then at
/// most `max(11, rate × 10 ms + 1)` permits. Choose a permit count when
/// the burst matters more than the long-run rate, and a longer time when
/// the machine's stalls are longer (see `docs/PERFORMANCE.md`).
///
/// Anything that takes a slack takes `impl Into<Slack>`: a `u64` is a
/// permit count, a [`Duration`] a time.
///
/// ```
/// use paceline::{AtomicLimiter, Rate, Slack};
/// use std::time::Duration;
///
/// let at = |rate, slack| {
///     AtomicLimiter::builder(Rate::per_second(rate)).slack(slack).build().map(|l| l.slack())
/// };
/// assert_eq!(at(100, Slack::DEFAULT)?, 10); // uber's 10 at uber's rates
/// assert_eq!(at(1_000_000, Slack::DEFAULT)?, 10_000); // 10 ms at 1 M/s
/// assert_eq!(at(1_000_000, Slack::from(20))?, 20); // exactly 20 permits
/// assert_eq!(at(1_000, Slack::from(Duration::from_millis(50)))?, 50);
/// assert_eq!(at(1_000, Slack::from(Duration::from_micros(1500)))?, 1); // rounded down
/// # Ok::<(), paceline::BuildError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slack {
    permits: u64,
    time: Duration,
}

impl Slack {
    /// The larger of 10 permits (uber's default) and 10 ms of permits.
    pub const DEFAULT: Slack = Slack {
        permits: 10,
        time: Duration::from_millis(10),
    };

    /// No slack: permits strictly one interval apart (uber's `WithoutSlack`).
    pub const NONE: Slack = Slack::permits(0);

    /// Exactly `permits` permits, at every rate.
    pub const fn permits(permits: u64) -> Slack {
        Slack {
            permits,
            time: Duration::ZERO,
        }
    }

    /// As many whole permits as fit in `time` at the rate in force (rounded
    /// down, so the banked window never exceeds `time`); recomputed when the
    /// rate changes.
    pub const fn time(time: Duration) -> Slack {
        Slack { permits: 0, time }
    }

    /// Whichever is more at the rate in force: `permits` permits, or the
    /// permits that fit in `time`.
    pub const fn at_least(permits: u64, time: Duration) -> Slack {
        Slack { permits, time }
    }

    /// The permit count part (0 if none).
    pub const fn min_permits(self) -> u64 {
        self.permits
    }

    /// The time part ([`Duration::ZERO`] if none).
    pub const fn min_time(self) -> Duration {
        self.time
    }

    /// The slack in permits at `rate`: the larger of the permit count and
    /// the whole permits that fit in the time (saturating at `u64::MAX`).
    pub fn permits_at(self, rate: Rate) -> u64 {
        let by_time = self.time.as_nanos() / u128::from(rate.interval_ns());
        self.permits.max(u64::try_from(by_time).unwrap_or(u64::MAX))
    }
}

impl Default for Slack {
    /// [`Slack::DEFAULT`].
    fn default() -> Slack {
        Slack::DEFAULT
    }
}

impl From<u64> for Slack {
    /// [`Slack::permits`].
    fn from(permits: u64) -> Slack {
        Slack::permits(permits)
    }
}

impl From<Duration> for Slack {
    /// [`Slack::time`].
    fn from(time: Duration) -> Slack {
        Slack::time(time)
    }
}

impl fmt::Debug for Slack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Slack {
    /// `10 permits`, `10ms`, or `max(10 permits, 10ms)`: each time in whole
    /// units (`1500us`, not `1.5ms`), so that it parses back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.permits, self.time.is_zero()) {
            (p, true) => write!(f, "{p} permits"),
            (0, false) => write!(f, "{}", Shown(self.time)),
            (p, false) => write!(f, "max({p} permits, {})", Shown(self.time)),
        }
    }
}

impl FromStr for Slack {
    type Err = BuildError;

    /// Parses what [`Display`](fmt::Display) writes: a permit count (`"10"`,
    /// `"10 permits"`), a time in whole units (`"10ms"`, `"1s"`, `"250us"`),
    /// or the larger of both (`"max(10 permits, 10ms)"`).
    ///
    /// ```
    /// use paceline::Slack;
    /// use std::time::Duration;
    ///
    /// assert_eq!("19".parse::<Slack>()?, Slack::permits(19));
    /// assert_eq!("10ms".parse::<Slack>()?, Slack::time(Duration::from_millis(10)));
    /// assert_eq!("max(10 permits, 10ms)".parse::<Slack>()?, Slack::DEFAULT);
    /// assert!("1.5ms".parse::<Slack>().unwrap_err().to_string().contains("1500us"));
    /// # Ok::<(), paceline::BuildError>(())
    /// ```
    fn from_str(s: &str) -> Result<Slack, BuildError> {
        let bad = |reason: String| BuildError::ParseSlack {
            input: s.to_owned(),
            reason,
        };
        let t = s.trim();
        if let Some(inner) = t.strip_prefix("max(").and_then(|t| t.strip_suffix(')')) {
            let (a, b) = inner
                .split_once(',')
                .ok_or_else(|| bad("expected max(N permits, TIME)".to_owned()))?;
            return match (part(a).map_err(&bad)?, part(b).map_err(&bad)?) {
                (Part::Permits(p), Part::Time(t)) | (Part::Time(t), Part::Permits(p)) => {
                    Ok(Slack::at_least(p, t))
                }
                _ => Err(bad(
                    "expected one permit count and one time, such as max(10 permits, 10ms)"
                        .to_owned(),
                )),
            };
        }
        match part(t).map_err(bad)? {
            Part::Permits(p) => Ok(Slack::permits(p)),
            Part::Time(t) => Ok(Slack::time(t)),
        }
    }
}

enum Part {
    Permits(u64),
    Time(Duration),
}

/// `10`, `10 permits`, `1 permit`, or a time (`10ms`).
fn part(s: &str) -> Result<Part, String> {
    let s = s.trim();
    let count = s
        .strip_suffix("permits")
        .or_else(|| s.strip_suffix("permit"))
        .map(str::trim_end);
    let digits = count.unwrap_or(s);
    if is_digits(digits) {
        return digits
            .parse()
            .map(Part::Permits)
            .map_err(|_| "the permit count is over 18446744073709551615".to_owned());
    }
    if count.is_some() {
        return Err("the permit count must be a whole number, without a sign".to_owned());
    }
    duration::parse_duration(s).map(Part::Time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_to_the_larger_part() {
        let ms = Duration::from_millis;
        let every = |ns| Rate::every(Duration::from_nanos(ns)).unwrap();
        assert_eq!(Slack::DEFAULT.permits_at(every(10_000_000)), 10); // 100/s
        assert_eq!(Slack::DEFAULT.permits_at(every(1_000_000)), 10); // 1k/s
        assert_eq!(Slack::DEFAULT.permits_at(every(100_000)), 100); // 10k/s
        assert_eq!(Slack::DEFAULT.permits_at(every(1)), 10_000_000); // 1G/s
        assert_eq!(Slack::time(ms(10)).permits_at(every(3_000_000)), 3);
        assert_eq!(Slack::time(ms(9)).permits_at(every(3_000_000)), 3);
        assert_eq!(Slack::time(ms(8)).permits_at(every(3_000_000)), 2);
        assert_eq!(Slack::permits(7).permits_at(every(1)), 7);
        assert_eq!(Slack::time(Duration::MAX).permits_at(every(1)), u64::MAX);
        assert_eq!(Slack::NONE.permits_at(every(1)), 0);
        let both = Slack::at_least(3, ms(4));
        assert_eq!((both.min_permits(), both.min_time()), (3, ms(4)));
        assert_eq!(Slack::from(7).min_time(), Duration::ZERO);
        assert_eq!(Slack::from(ms(2)).min_permits(), 0);
    }

    #[test]
    fn displays_what_was_asked() {
        assert_eq!(Slack::from(3).to_string(), "3 permits");
        assert_eq!(Slack::from(Duration::from_millis(5)).to_string(), "5ms");
        assert_eq!(Slack::DEFAULT.to_string(), "max(10 permits, 10ms)");
        assert_eq!(format!("{:?}", Slack::default()), "max(10 permits, 10ms)");
        let us = Duration::from_micros(1500);
        assert_eq!(Slack::from(us).to_string(), "1500us");
        assert_eq!(Slack::at_least(0, us).to_string(), "1500us");
    }

    #[test]
    fn display_parses_back() {
        let ms = Duration::from_millis;
        for slack in [
            Slack::NONE,
            Slack::DEFAULT,
            Slack::permits(1),
            Slack::permits(u64::MAX),
            Slack::time(ms(10)),
            Slack::time(Duration::from_micros(1500)),
            Slack::time(Duration::new(90, 1)),
            Slack::time(Duration::MAX),
            Slack::at_least(3, Duration::from_secs(7200)),
        ] {
            let shown = slack.to_string();
            assert_eq!(shown.parse::<Slack>(), Ok(slack), "{shown}");
        }
    }

    #[test]
    fn parses_counts_times_and_both() {
        let ms = Duration::from_millis;
        let table = [
            ("0", Slack::NONE),
            ("19", Slack::permits(19)),
            (" 1 permit ", Slack::permits(1)),
            ("5permits", Slack::permits(5)),
            ("10ms", Slack::time(ms(10))),
            ("10 ms", Slack::time(ms(10))),
            ("250us", Slack::time(Duration::from_micros(250))),
            ("2min", Slack::time(ms(120_000))),
            ("max(10ms, 4 permits)", Slack::at_least(4, ms(10))),
        ];
        for (input, slack) in table {
            assert_eq!(input.parse::<Slack>(), Ok(slack), "{input}");
        }
    }

    #[test]
    fn bad_slack_says_what_is_wrong() {
        let table = [
            ("", "expected a number and a unit"),
            ("-1", "expected a number and a unit"),
            ("x permits", "whole number"),
            ("1.5ms", r#"decimals are not supported (write "1500us")"#),
            ("10 parsecs", "unknown unit"),
            ("99999999999999999999", "over 18446744073709551615"),
            ("max(1 permits, 2 permits)", "one permit count and one time"),
            ("max(1ms)", "expected max(N permits, TIME)"),
        ];
        for (input, reason) in table {
            let msg = input.parse::<Slack>().unwrap_err().to_string();
            assert!(msg.contains(reason), "{input:?}: {msg}");
            assert!(msg.contains(&format!("{input:?}")), "{input:?}: {msg}");
        }
    }
}
