//! A [`Window`] as text, the way a limits file states one: `"day"`,
//! `"month"`, `"week:sunday"`, `"30d"`, `"90s"`, `"day UTC+02:00"`; and the
//! window's nominal length, which a quota's long-run rate is reckoned on.
//!
//! The forms are in [`Window::from_str`]'s table.
//!
//! [`Display`](fmt::Display) writes what [`FromStr`] reads back, the
//! shortest form: `Fixed { seconds: 86_400 }` is `1d`, which decides as
//! `day` (Unix time has no leap seconds) but is Envoy's spelling.

use std::fmt;
use std::str::FromStr;

use crate::model::window::{Weekday, Window, MAX_OFFSET};
use crate::values::error::BuildError;

const DAYS: [(&str, Weekday); 7] = [
    ("monday", Weekday::Monday),
    ("tuesday", Weekday::Tuesday),
    ("wednesday", Weekday::Wednesday),
    ("thursday", Weekday::Thursday),
    ("friday", Weekday::Friday),
    ("saturday", Weekday::Saturday),
    ("sunday", Weekday::Sunday),
];

/// Seconds in a day.
const DAY: u64 = 86_400;

/// A window's nominal length, seconds: a fixed window's own, a day's
/// 86 400, a week's 604 800, an average Gregorian month's 2 629 746 and
/// year's 31 556 952 (the 400-year cycle's 146 097 days divided evenly).
pub(crate) fn nominal_seconds(window: Window) -> u64 {
    match window {
        Window::Fixed { seconds } => seconds,
        Window::Day { .. } => DAY,
        Window::Week { .. } => 7 * DAY,
        Window::Month { .. } => 146_097 * DAY / 4_800,
        Window::Year { .. } => 146_097 * DAY / 400,
    }
}

fn parse_error(input: &str, reason: impl Into<String>) -> BuildError {
    BuildError::ParseWindow {
        input: input.to_owned(),
        reason: reason.into(),
    }
}

/// `+hh:mm` or `-hh:mm` (after `UTC`), seconds east.
fn parse_offset(input: &str, text: &str) -> Result<i32, BuildError> {
    let bad = || parse_error(input, "an offset is written UTC+hh:mm or UTC-hh:mm");
    let (sign, rest) = match text.as_bytes().first() {
        Some(b'+') => (1, &text[1..]),
        Some(b'-') => (-1, &text[1..]),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').ok_or_else(bad)?;
    let digits = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(h) || !digits(m) {
        return Err(bad());
    }
    let (h, m): (i32, i32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if m >= 60 {
        return Err(parse_error(input, format!("{m} minutes in an offset")));
    }
    let offset = sign * (h * 3_600 + m * 60);
    if offset.abs() > MAX_OFFSET {
        return Err(BuildError::WindowOffset { offset });
    }
    Ok(offset)
}

/// `N` and a unit: a fixed window.
fn parse_fixed(input: &str, text: &str) -> Result<Window, BuildError> {
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(parse_error(
            input,
            "expected second, minute, hour, day, week, month, year, or a length such as 30d",
        ));
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| parse_error(input, "a fixed window needs a unit: s, m, h or d"))?;
    let (n, unit) = text.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| parse_error(input, "the length does not fit 64 bits"))?;
    let scale = match unit {
        "s" => 1,
        "m" | "min" => 60,
        "h" => 3_600,
        "d" => DAY,
        _ => {
            return Err(parse_error(
                input,
                format!("unknown unit {unit:?} (s, m, h or d)"),
            ))
        }
    };
    let seconds = n
        .checked_mul(scale)
        .ok_or_else(|| parse_error(input, "the length does not fit 64 bits of seconds"))?;
    if seconds == 0 {
        return Err(BuildError::ZeroWindow);
    }
    Ok(Window::Fixed { seconds })
}

impl FromStr for Window {
    type Err = BuildError;

    /// Reads these forms:
    ///
    /// | text | window |
    /// |---|---|
    /// | `second`, `minute`, `hour` | fixed: 1, 60, 3 600 s from the Unix epoch |
    /// | `Ns`, `Nm` (or `Nmin`), `Nh`, `Nd` | fixed: `N` seconds, minutes, hours, days from the epoch (Envoy's month is `30d`, its year `365d`) |
    /// | `day` | calendar day (midnight to midnight) |
    /// | `week`, `week:sunday`, ... | calendar week, from Monday or the day named |
    /// | `month`, `year` | calendar month, year (a leap day counted) |
    /// | any calendar window, then ` UTC+hh:mm` or ` UTC-hh:mm` | at that offset from UTC (UTC when left out) |
    ///
    /// ```
    /// use paceline::model::window::{Weekday, Window};
    ///
    /// assert_eq!("30d".parse::<Window>()?, Window::Fixed { seconds: 30 * 86_400 });
    /// assert_eq!("day".parse::<Window>()?, Window::Day { offset: 0 });
    /// assert_eq!(
    ///     "week:sunday UTC-05:00".parse::<Window>()?,
    ///     Window::Week { starts: Weekday::Sunday, offset: -5 * 3_600 }
    /// );
    /// assert!("fortnight".parse::<Window>().is_err());
    /// # Ok::<(), paceline::BuildError>(())
    /// ```
    fn from_str(input: &str) -> Result<Window, BuildError> {
        let text = input.trim();
        let (name, offset) = match text.split_once(' ') {
            Some((name, zone)) => {
                let zone = zone.trim();
                let Some(rest) = zone.strip_prefix("UTC") else {
                    return Err(parse_error(
                        input,
                        "an offset is written UTC+hh:mm or UTC-hh:mm",
                    ));
                };
                let offset = if rest.is_empty() {
                    0
                } else {
                    parse_offset(input, rest)?
                };
                (name, Some(offset))
            }
            None => (text, None),
        };
        let calendar = |w: Window| Ok(w);
        let at = offset.unwrap_or(0);
        match name {
            "day" => calendar(Window::Day { offset: at }),
            "week" => calendar(Window::Week {
                starts: Weekday::Monday,
                offset: at,
            }),
            "month" => calendar(Window::Month { offset: at }),
            "year" => calendar(Window::Year { offset: at }),
            _ if name.starts_with("week:") => {
                let day = &name["week:".len()..];
                let starts = DAYS
                    .iter()
                    .find(|(n, _)| *n == day)
                    .map(|&(_, d)| d)
                    .ok_or_else(|| parse_error(input, format!("no weekday {day:?}")))?;
                calendar(Window::Week { starts, offset: at })
            }
            _ if offset.is_some() => Err(parse_error(
                input,
                "only a calendar window (day, week, month, year) has an offset",
            )),
            "second" => Ok(Window::SECOND),
            "minute" => Ok(Window::MINUTE),
            "hour" => Ok(Window::HOUR),
            _ => parse_fixed(input, name),
        }
    }
}

impl fmt::Display for Window {
    /// The shortest form [`FromStr`] reads back: `1s`, `30d`, `day`,
    /// `week:sunday UTC+09:00`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, offset) = match *self {
            Window::Fixed { seconds } => {
                return match seconds {
                    s if s % DAY == 0 => write!(f, "{}d", s / DAY),
                    s if s % 3_600 == 0 => write!(f, "{}h", s / 3_600),
                    s if s % 60 == 0 => write!(f, "{}m", s / 60),
                    s => write!(f, "{s}s"),
                }
            }
            Window::Day { offset } => ("day", offset),
            Window::Week { starts, offset } => {
                let day = DAYS.iter().find(|(_, d)| *d == starts).map_or("", |d| d.0);
                if starts == Weekday::Monday {
                    f.write_str("week")?;
                } else {
                    write!(f, "week:{day}")?;
                }
                return write_offset(f, offset);
            }
            Window::Month { offset } => ("month", offset),
            Window::Year { offset } => ("year", offset),
        };
        f.write_str(name)?;
        write_offset(f, offset)
    }
}

fn write_offset(f: &mut fmt::Formatter<'_>, offset: i32) -> fmt::Result {
    if offset == 0 {
        return Ok(());
    }
    let sign = if offset < 0 { '-' } else { '+' };
    let minutes = offset.unsigned_abs() / 60;
    write!(f, " UTC{sign}{:02}:{:02}", minutes / 60, minutes % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_reads_back() {
        let windows = [
            Window::SECOND,
            Window::MINUTE,
            Window::HOUR,
            Window::Fixed { seconds: 90 },
            Window::Fixed { seconds: 30 * DAY },
            Window::Fixed { seconds: 365 * DAY },
            Window::Day { offset: 0 },
            Window::Day { offset: 2 * 3_600 },
            Window::Week {
                starts: Weekday::Sunday,
                offset: -(5 * 3_600 + 30 * 60),
            },
            Window::Week {
                starts: Weekday::Monday,
                offset: 0,
            },
            Window::Month { offset: MAX_OFFSET },
            Window::Year {
                offset: -MAX_OFFSET,
            },
        ];
        for w in windows {
            let text = w.to_string();
            assert_eq!(text.parse::<Window>().unwrap(), w, "{text}");
        }
        assert_eq!(Window::Fixed { seconds: 30 * DAY }.to_string(), "30d");
        assert_eq!("minute".parse::<Window>().unwrap(), Window::MINUTE);
        assert_eq!(
            "15min".parse::<Window>().unwrap(),
            Window::Fixed { seconds: 900 }
        );
        assert_eq!(
            "day UTC".parse::<Window>().unwrap(),
            Window::Day { offset: 0 }
        );
    }

    #[test]
    fn bad_text_is_named() {
        for (bad, says) in [
            ("fortnight", "expected second"),
            ("30", "needs a unit"),
            ("", "expected second"),
            ("0d", "at least 1 second"),
            ("30x", "unknown unit \"x\""),
            ("99999999999999999999d", "64 bits"),
            ("99999999999999999d", "64 bits of seconds"),
            ("week:funday", "no weekday \"funday\""),
            ("day GMT+1", "UTC+hh:mm"),
            ("day UTC+1", "UTC+hh:mm"),
            ("day UTC+02:75", "75 minutes"),
            ("day UTC+27:00", "26 hours"),
            ("30d UTC+01:00", "only a calendar window"),
        ] {
            let e = bad.parse::<Window>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn nominal_lengths() {
        assert_eq!(nominal_seconds(Window::Month { offset: 0 }), 2_629_746);
        assert_eq!(nominal_seconds(Window::Year { offset: 0 }), 31_556_952);
        assert_eq!(nominal_seconds("7d".parse().unwrap()), 7 * DAY);
    }
}
