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

use crate::model::schedule::MAX_SPAN;
use crate::values::duration::{self, is_digits, Parsed};
use crate::values::error::BuildError;

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
/// # Ok::<(), paceline::BuildError>(())
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
    pub fn new(count: u64, period: Duration) -> Result<Rate, BuildError> {
        if count == 0 {
            return Err(BuildError::ZeroCount);
        }
        if period.is_zero() {
            return Err(BuildError::ZeroPeriod);
        }
        let period_ns = period.as_nanos();
        let count128 = u128::from(count);
        // Faster than 1/ns is too short even where it would round up to 1 ns.
        if period_ns < count128 {
            return Err(BuildError::IntervalTooShort { count, period });
        }
        // Round to nearest: (p + c/2) / c.
        let interval = (period_ns + count128 / 2) / count128;
        if interval > u128::from(MAX_SPAN) {
            return Err(BuildError::IntervalTooLong { count, period });
        }
        let achieved = interval * count128;
        let error = achieved.abs_diff(period_ns) as f64 / period_ns as f64;
        if error > Self::MAX_ROUNDING {
            return Err(BuildError::Imprecise {
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

    /// `count` (at least 1) per `period` (at least 1 ns), its interval
    /// rounded to nearest and clamped to `1..=MAX_SPAN` ns: a long-run rate
    /// stated, never one a limiter paces by (a quota per window's).
    pub(crate) fn nominal(count: u64, period: Duration) -> Rate {
        let (count, period) = (count.max(1), period.max(Duration::from_nanos(1)));
        let count128 = u128::from(count);
        let interval = (period.as_nanos() + count128 / 2) / count128;
        Rate {
            count,
            period,
            interval: interval.clamp(1, u128::from(MAX_SPAN)) as u64,
        }
    }

    /// One permit every `interval`, exactly.
    ///
    /// # Errors
    /// An interval under 1 ns or over about 146 years.
    pub fn every(interval: Duration) -> Result<Rate, BuildError> {
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

    /// One permit every `interval` ns, brought within `1..=MAX_SPAN`: what
    /// [`Rate::every`] makes, for an interval computed in the crate.
    pub(crate) fn from_interval_ns(interval: u64) -> Rate {
        let interval = interval.clamp(1, MAX_SPAN);
        Rate {
            count: 1,
            period: Duration::from_nanos(interval),
            interval,
        }
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
        write!(f, "{}/", self.count)?;
        duration::write(f, self.period, true)
    }
}

impl FromStr for Rate {
    type Err = BuildError;

    /// Parses `COUNT/[N]UNIT`: `"100/s"`, `"7/min"`, `"1500/h"`, `"5/250ms"`,
    /// and nginx's `"20r/m"` (an `r` right before the `/`).
    /// Units: `ns`, `us` (or `µs`, with the micro sign or the Greek mu), `ms`,
    /// `s`, `min` (or `m`), `h`, `d`. Numbers are plain digits, without a sign
    /// or a decimal point: `"10/1.5s"` is refused with the whole-number
    /// spelling of the same rate, `"20/3s"`.
    ///
    /// Every `Rate`'s [`Display`](fmt::Display) parses back to an equal `Rate`.
    ///
    /// # Errors
    /// Every error names the string: [`BuildError::ParseRate`] or
    /// [`BuildError::RateDecimals`] for one that does not read as a rate,
    /// [`BuildError::InvalidRate`] (with [`Rate::new`]'s error inside) for one
    /// that does but is refused, as `"0/s"` is.
    fn from_str(s: &str) -> Result<Rate, BuildError> {
        let bad = |reason: &'static str| BuildError::ParseRate {
            input: s.to_owned(),
            reason,
        };
        let (count, per) = s
            .split_once('/')
            .ok_or_else(|| bad("expected COUNT/PERIOD, such as \"100/s\" or \"5/250ms\""))?;
        // nginx writes `20r/m`: "requests" per minute.
        let count = count.trim();
        let count = count.strip_suffix('r').unwrap_or(count);
        // Digits first: `u64::from_str` alone would take a leading `+`.
        let count: u64 = Some(count)
            .filter(|c| is_digits(c))
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| {
                bad("the count must be a whole number up to 18446744073709551615, without a sign")
            })?;
        let period_ns = match duration::parse(per, true).map_err(bad)? {
            Parsed::Nanos(ns) => ns,
            Parsed::Decimal {
                mantissa,
                scale,
                unit_ns,
                unit,
            } => {
                return Err(BuildError::RateDecimals {
                    input: s.to_owned(),
                    instead: unit_ns.and_then(|_| whole_spelling(count, mantissa, scale, &unit)),
                })
            }
        };
        let period = duration::from_nanos(period_ns)
            .ok_or_else(|| bad("the period is too long: more than a Duration holds"))?;
        // The rate's own error, with the text that spelled it.
        Rate::new(count, period).map_err(|error| BuildError::InvalidRate {
            input: s.to_owned(),
            error: Box::new(error),
        })
    }
}

/// `count` per `mantissa / 10^scale` `unit`, in whole numbers of the same
/// unit (`10` per `1.5s` is `"20/3s"`), if that spelling is a valid rate.
fn whole_spelling(count: u64, mantissa: u128, scale: u32, unit: &str) -> Option<String> {
    let num = u128::from(count).checked_mul(10u128.checked_pow(scale)?)?;
    let g = gcd(num, mantissa);
    if g == 0 {
        return None;
    }
    let (count, per) = (num / g, mantissa / g);
    let spelled = if per == 1 {
        format!("{count}/{unit}")
    } else {
        format!("{count}/{per}{unit}")
    };
    spelled.parse::<Rate>().is_ok().then_some(spelled)
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
