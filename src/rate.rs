//! [`Rate`]: how many permits per period, and the interval between them.
//!
//! A rate of `count` permits per `period` schedules one permit every
//! `period / count`. paceline keeps time in whole nanoseconds, so that interval
//! is rounded to the nearest nanosecond; a rate whose rounding would change it
//! by more than [`Rate::MAX_ROUNDING`] is rejected rather than silently paced
//! at another rate. [`Rate::every`] states an exact interval instead.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::RateError;
use crate::schedule::MAX_SPAN;

/// A pacing rate: `count` permits per `period`.
///
/// ```
/// use paceline::Rate;
/// use std::time::Duration;
///
/// let r: Rate = "7/min".parse()?;
/// assert_eq!(r, Rate::per_minute(7));
/// assert_eq!(Rate::per_second(100).interval(), Duration::from_millis(10));
/// assert_eq!("5/250ms".parse::<Rate>()?.interval(), Duration::from_millis(50));
/// assert!(Rate::new(0, Duration::from_secs(1)).is_err());
/// # Ok::<(), paceline::RateError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u64,
    period: Duration,
    /// `period / count` in nanoseconds, rounded to nearest; `1..=MAX_SPAN`.
    interval: u64,
}

impl Rate {
    /// The largest relative difference between the requested rate and the one
    /// a whole-nanosecond interval gives that [`Rate::new`] accepts: 0.1 %.
    /// Only rates above about 500 000 per second whose interval is not a whole
    /// number of nanoseconds come near it (3 000 000/s paces at 3 003 003/s).
    pub const MAX_ROUNDING: f64 = 1e-3;

    /// `count` permits per `period`.
    ///
    /// # Errors
    /// A zero `count` or `period`, an interval under 1 ns or over
    /// about 146 years, or an interval that whole nanoseconds can only
    /// approximate to worse than [`Rate::MAX_ROUNDING`].
    pub fn new(count: u64, period: Duration) -> Result<Rate, RateError> {
        if count == 0 {
            return Err(RateError::ZeroCount);
        }
        if period.is_zero() {
            return Err(RateError::ZeroPeriod);
        }
        let period_ns = period.as_nanos();
        let count128 = u128::from(count);
        // Faster than 1/ns is too short even where it would round up to 1 ns.
        if period_ns < count128 {
            return Err(RateError::IntervalTooShort { count, period });
        }
        // Round to nearest: (p + c/2) / c.
        let interval = (period_ns + count128 / 2) / count128;
        if interval > u128::from(MAX_SPAN) {
            return Err(RateError::IntervalTooLong { count, period });
        }
        let achieved = interval * count128;
        let error = achieved.abs_diff(period_ns) as f64 / period_ns as f64;
        if error > Self::MAX_ROUNDING {
            return Err(RateError::Imprecise {
                count,
                period,
                interval_ns: interval as u64,
            });
        }
        Ok(Rate {
            count,
            period,
            interval: interval as u64,
        })
    }

    /// One permit every `interval`, exactly.
    ///
    /// # Errors
    /// An interval under 1 ns or over about 146 years.
    pub fn every(interval: Duration) -> Result<Rate, RateError> {
        Rate::new(1, interval)
    }

    /// `n` permits per second.
    ///
    /// # Panics
    /// If `n` is 0, or over 1 000 000 000 (an interval under 1 ns), or imprecise
    /// as [`Rate::new`] explains. Use [`Rate::new`] to handle these as errors.
    pub fn per_second(n: u64) -> Rate {
        Self::expect(n, Duration::from_secs(1))
    }

    /// `n` permits per minute.
    ///
    /// # Panics
    /// As [`Rate::per_second`].
    pub fn per_minute(n: u64) -> Rate {
        Self::expect(n, Duration::from_secs(60))
    }

    /// `n` permits per hour.
    ///
    /// # Panics
    /// As [`Rate::per_second`].
    pub fn per_hour(n: u64) -> Rate {
        Self::expect(n, Duration::from_secs(3600))
    }

    #[track_caller]
    fn expect(n: u64, period: Duration) -> Rate {
        match Rate::new(n, period) {
            Ok(rate) => rate,
            Err(e) => panic!("invalid rate: {e}"),
        }
    }

    /// The number of permits per [`period`](Rate::period), as given.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period the count is spread over, as given.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The time between two permits: `period / count`, in whole nanoseconds.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval)
    }

    pub(crate) fn interval_ns(&self) -> u64 {
        self.interval
    }

    /// The rate in permits per second, as paced (from the rounded interval).
    pub fn per_second_f64(&self) -> f64 {
        1e9 / self.interval as f64
    }
}

impl fmt::Debug for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rate({self}, interval {:?})", self.interval())
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 6] = [
            (3_600_000_000_000, "h"),
            (60_000_000_000, "min"),
            (1_000_000_000, "s"),
            (1_000_000, "ms"),
            (1_000, "us"),
            (1, "ns"),
        ];
        let ns = self.period.as_nanos();
        for (unit, name) in UNITS {
            if ns.is_multiple_of(u128::from(unit)) {
                let k = ns / u128::from(unit);
                return if k == 1 {
                    write!(f, "{}/{name}", self.count)
                } else {
                    write!(f, "{}/{k}{name}", self.count)
                };
            }
        }
        unreachable!("every period is a whole number of nanoseconds")
    }
}

impl FromStr for Rate {
    type Err = RateError;

    /// Parses `COUNT/[N]UNIT`: `"100/s"`, `"7/min"`, `"1500/h"`, `"5/250ms"`.
    /// Units: `ns`, `us` (or `µs`, with the micro sign or the Greek mu), `ms`,
    /// `s`, `min` (or `m`), `h`, `d`. Numbers are plain digits, without a sign.
    ///
    /// Every `Rate`'s [`Display`](fmt::Display) parses back to an equal `Rate`.
    fn from_str(s: &str) -> Result<Rate, RateError> {
        let bad = |reason: &'static str| RateError::Parse {
            input: s.to_owned(),
            reason,
        };
        let (count, per) = s
            .split_once('/')
            .ok_or_else(|| bad("expected COUNT/PERIOD, such as \"100/s\" or \"5/250ms\""))?;
        // Digits first: `u64::from_str` alone would take a leading `+`.
        let count: u64 = Some(count.trim())
            .filter(|c| is_digits(c))
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| {
                bad("the count must be a whole number up to 18446744073709551615, without a sign")
            })?;
        let per = per.trim();
        let digits = per.find(|c: char| !c.is_ascii_digit()).unwrap_or(per.len());
        let (n, unit) = per.split_at(digits);
        // In u128, as the period's nanoseconds: a valid rate's period can be
        // as long as `Duration::MAX` (about 1.8 * 10^28 ns) when its count is
        // large enough, and its display must parse back.
        let n: u128 = if n.is_empty() {
            1
        } else {
            n.parse()
                .map_err(|_| bad("the period's number is too large"))?
        };
        let unit_ns: u128 = match unit.trim() {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" | "sec" => 1_000_000_000,
            "m" | "min" => 60_000_000_000,
            "h" | "hr" => 3_600_000_000_000,
            "d" | "day" => 86_400_000_000_000,
            "" => return Err(bad("the period needs a unit: ns, us, ms, s, min, h or d")),
            _ => return Err(bad("unknown unit; use ns, us, ms, s, min, h or d")),
        };
        let too_long = || bad("the period is too long: more than a Duration holds");
        let period_ns = n.checked_mul(unit_ns).ok_or_else(too_long)?;
        let secs = u64::try_from(period_ns / 1_000_000_000).map_err(|_| too_long())?;
        let nanos = (period_ns % 1_000_000_000) as u32;
        Rate::new(count, Duration::new(secs, nanos))
    }
}

/// Non-empty and ASCII digits only.
fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}
