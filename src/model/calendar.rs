//! The calendar the windows of [`window`](super::window) are cut on: a
//! [`Window`] (fixed seconds from the Unix epoch, or a day, week, month or
//! year at a fixed offset from UTC), and the civil-date arithmetic that
//! numbers calendar windows, written here after Howard Hinnant's
//! `days_from_civil` and `civil_from_days` (proleptic Gregorian, any year
//! an `i128` holds; no time zone data, no summer time).

/// Seconds in a day.
pub(super) const DAY: i64 = 86_400;

/// The farthest a calendar window's offset may be from UTC, seconds: 26
/// hours (the time zones in use span −12 h to +14 h).
pub const MAX_OFFSET: i32 = 26 * 3_600;

/// Nanoseconds in a second.
const NANOS: u64 = 1_000_000_000;

/// Windows of one length in ns (a fixed window whose length fits a `u64`
/// of ns, a day, a week), numbered and bounded by a quotient and a product
/// on `u64`, where a month's or a year's need the calendar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Uniform {
    /// The length, ns.
    width: u64,
    /// Where windows start: the remainder of every start's Unix time (ns)
    /// by `width`.
    phase: u64,
}

impl Uniform {
    /// `window`'s, if its windows have one length.
    pub(super) fn of(window: Window) -> Option<Uniform> {
        // Local midnight at an offset `o` east is `-o` UTC: starts fall at
        // `k * length - o` (for a week, from its first day's midnight).
        let at = |length: u64, first_day: i64, offset: i32| {
            let start = (first_day * DAY - i64::from(offset)).rem_euclid(length as i64);
            Some(Uniform {
                width: length * NANOS,
                phase: start as u64 * NANOS,
            })
        };
        match window {
            Window::Fixed { seconds } => match seconds.checked_mul(NANOS) {
                Some(width) if width > 0 => Some(Uniform { width, phase: 0 }),
                _ => None,
            },
            Window::Day { offset } => at(DAY as u64, 0, offset),
            // 1970-01-01 was a Thursday (Monday + 3): the first day of a
            // week from `starts` is `starts - 3` days from the epoch,
            // modulo 7.
            Window::Week { starts, offset } => at(7 * DAY as u64, starts as i64 - 3, offset),
            Window::Month { .. } | Window::Year { .. } => None,
        }
    }

    /// The index of the window holding `t`: the one holding the epoch
    /// started at `phase - width` (or at 0, when `phase` is 0), and each
    /// later one `width` after the last. Nothing here overflows.
    #[inline]
    pub(super) fn index_at(self, t: u64) -> u64 {
        let since = t.checked_sub(self.phase);
        let whole = since.and_then(|since| since.checked_div(self.width));
        whole.map_or(0, |n| n + u64::from(self.phase > 0))
    }

    /// When window `index` starts: 0 at the earliest, `u64::MAX` past the
    /// clock's end.
    #[inline]
    pub(super) fn start(self, index: u64) -> u64 {
        if self.phase == 0 {
            return index.saturating_mul(self.width);
        }
        match index.checked_sub(1) {
            None => 0,
            Some(after) => after
                .checked_mul(self.width)
                .and_then(|ns| ns.checked_add(self.phase))
                .unwrap_or(u64::MAX),
        }
    }

    /// Where window `index` starts and ends: `(start(index),
    /// start(index + 1))`, the index saturating, from one product (the end
    /// is the start plus the width, but for the window holding the epoch
    /// when starts have a phase).
    #[inline(always)]
    pub(super) fn bounds(self, index: u64) -> (u64, u64) {
        let start = self.start(index);
        let end = if index == 0 && self.phase > 0 {
            self.phase
        } else {
            start.saturating_add(self.width)
        };
        (start, end)
    }
}

/// A day of the week, where a [`Window::Week`] starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Weekday {
    Monday = 0,
    Tuesday,
    Wednesday,
    Thursday,
    Friday,
    Saturday,
    Sunday,
}

/// How a quota's windows cut the clock (see [`window`](super::window)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Window {
    /// Every `seconds` whole seconds from the Unix epoch; at least 1.
    Fixed {
        /// The window's length, seconds.
        seconds: u64,
    },
    /// From local midnight to local midnight.
    Day {
        /// Local time's offset from UTC, seconds east (within
        /// ±[`MAX_OFFSET`]).
        offset: i32,
    },
    /// Seven days from local midnight on `starts`.
    Week {
        /// The first day of each week.
        starts: Weekday,
        /// Local time's offset from UTC, seconds east.
        offset: i32,
    },
    /// From local midnight on the first of a month to the next first.
    Month {
        /// Local time's offset from UTC, seconds east.
        offset: i32,
    },
    /// From local midnight on January 1st to the next.
    Year {
        /// Local time's offset from UTC, seconds east.
        offset: i32,
    },
}

impl Window {
    /// A fixed window of a second.
    pub const SECOND: Window = Window::Fixed { seconds: 1 };
    /// A fixed window of a minute.
    pub const MINUTE: Window = Window::Fixed { seconds: 60 };
    /// A fixed window of an hour.
    pub const HOUR: Window = Window::Fixed { seconds: 3_600 };

    /// The offset from UTC, seconds east (0 for a fixed window).
    pub const fn offset(self) -> i32 {
        match self {
            Window::Fixed { .. } => 0,
            Window::Day { offset }
            | Window::Week { offset, .. }
            | Window::Month { offset }
            | Window::Year { offset } => offset,
        }
    }

    /// A calendar window's number (days, weeks, months or years from the
    /// calendar's origins) for the local day `day` (days from 1970-01-01).
    pub(super) fn number(self, day: i64) -> i64 {
        match self {
            Window::Fixed { .. } => 0,
            Window::Day { .. } => day,
            // 1970-01-01 was a Thursday (Monday + 3).
            Window::Week { starts, .. } => (day + 3 - starts as i64).div_euclid(7),
            Window::Month { .. } => {
                let (year, month, _) = civil_from_days(day);
                year * 12 + month - 1
            }
            Window::Year { .. } => civil_from_days(day).0,
        }
    }

    /// The local day a calendar window's number `n` starts on.
    pub(super) fn first_day(self, n: i128) -> i128 {
        match self {
            Window::Fixed { .. } => 0,
            Window::Day { .. } => n,
            Window::Week { starts, .. } => 7 * n - 3 + starts as i128,
            Window::Month { .. } => days_from_civil(n.div_euclid(12), n.rem_euclid(12) + 1, 1),
            Window::Year { .. } => days_from_civil(n, 1, 1),
        }
    }
}

impl Window {
    /// The index of the window holding `t` (Unix time, ns) by the
    /// calendar's numbering, for any window; `first` is the calendar's
    /// number of the window holding the epoch.
    pub(super) fn index_by_calendar(self, t: u64, first: i64) -> u64 {
        match self {
            Window::Fixed { seconds } => {
                // The quotient is at most `t`: it fits.
                let width = u128::from(seconds) * u128::from(NANOS);
                u64::try_from(u128::from(t) / width).unwrap_or(u64::MAX)
            }
            _ => {
                // `t / NANOS < 2^35`: no overflow in i64.
                let local = (t / NANOS) as i64 + i64::from(self.offset());
                // Window numbers grow with time, and `first` is the number
                // at `t = 0`: the difference is never negative.
                self.number(local.div_euclid(DAY)).abs_diff(first)
            }
        }
    }

    /// When the window `index` starts (Unix time, ns, saturated at both
    /// ends) by the calendar's numbering, for any window; `first` as for
    /// [`index_by_calendar`](Self::index_by_calendar).
    pub(super) fn start_by_calendar(self, index: u64, first: i64) -> u64 {
        let ns = match self {
            Window::Fixed { seconds } => u128::from(index)
                .checked_mul(u128::from(seconds) * u128::from(NANOS))
                .map_or(i128::MAX, |ns| i128::try_from(ns).unwrap_or(i128::MAX)),
            _ => {
                // `|day| < 2^73` for any index: these products fit i128.
                let day = self.first_day(i128::from(index) + i128::from(first));
                (day * i128::from(DAY) - i128::from(self.offset())) * i128::from(NANOS)
            }
        };
        u64::try_from(ns.max(0)).unwrap_or(u64::MAX)
    }
}

/// The days from 1970-01-01 to the Gregorian date `year-month-day`
/// (`month` in `1..=12`, `day` in `1..=31`), for any year an `i128` holds a
/// thousandth of: Howard Hinnant's `days_from_civil`, on eras of 400 years
/// (146 097 days) starting on March 1st, so the leap day ends a year.
fn days_from_civil(year: i128, month: i128, day: i128) -> i128 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    // Months from March: March 0, ..., February 11.
    let from_march = (month + 9) % 12;
    let day_of_year = (153 * from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The Gregorian date `(year, month, day)` `days` after 1970-01-01, for
/// `|days|` up to `2^62`: Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    // Days from 0000-03-01, the start of an era.
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * from_march + 2) / 5 + 1;
    let month = if from_march < 10 {
        from_march + 3
    } else {
        from_march - 9
    };
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Days from 1970-01-01, from Unix times of midnight UTC.
    const Y2000_01_01: i128 = 946_684_800 / 86_400;
    const Y2000_02_29: i128 = 951_782_400 / 86_400;
    const Y2024_02_29: i128 = 1_709_164_800 / 86_400;
    const Y2100_02_28: i128 = 4_107_456_000 / 86_400;
    const Y2400_02_29: i128 = 13_574_563_200 / 86_400;

    #[test]
    fn known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(days_from_civil(2000, 1, 1), Y2000_01_01);
        assert_eq!(days_from_civil(2000, 2, 29), Y2000_02_29);
        assert_eq!(days_from_civil(2024, 2, 29), Y2024_02_29);
        assert_eq!(days_from_civil(2100, 2, 28), Y2100_02_28);
        assert_eq!(days_from_civil(2100, 3, 1), Y2100_02_28 + 1);
        assert_eq!(days_from_civil(2400, 2, 29), Y2400_02_29);
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(Y2024_02_29 as i64), (2024, 2, 29));
        assert_eq!(civil_from_days(Y2100_02_28 as i64 + 1), (2100, 3, 1));
        assert_eq!(civil_from_days(Y2400_02_29 as i64), (2400, 2, 29));
    }

    #[test]
    fn february_has_a_leap_day_every_fourth_year_but_centuries_not_divisible_by_400() {
        let february = |y| days_from_civil(y, 3, 1) - days_from_civil(y, 2, 1);
        for y in [1600, 1972, 2000, 2024, 2028, 2400, 10_000, 20_000] {
            assert_eq!(february(y), 29, "{y}");
        }
        for y in [1700, 1900, 1970, 2023, 2100, 2200, 2300, 2500, 10_100] {
            assert_eq!(february(y), 28, "{y}");
        }
        let year = |y| days_from_civil(y + 1, 1, 1) - days_from_civil(y, 1, 1);
        assert_eq!(
            (year(2000), year(2024), year(2100), year(2400)),
            (366, 366, 365, 366)
        );
    }

    #[test]
    fn dates_round_trip_before_the_epoch_and_past_the_year_9999() {
        let far = 1 << 40;
        let days = (-800_000..800_000)
            .step_by(97)
            .chain((far - 1_000..far + 1_000).step_by(7))
            .chain([-(1 << 62) + 1, (1 << 62) - 1_000_000]);
        for day in days {
            let (y, m, d) = civil_from_days(day);
            assert!(
                (1..=12).contains(&m) && (1..=31).contains(&d),
                "{day}: {y}-{m}-{d}"
            );
            let back = days_from_civil(y.into(), m.into(), d.into());
            assert_eq!(back, i128::from(day), "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(2_932_897), (10_000, 1, 1));
    }

    #[test]
    fn the_epoch_was_a_thursday() {
        let week = |starts| Window::Week { starts, offset: 0 };
        // Thursday 1970-01-01 starts a week from Thursday and ends one
        // from Friday.
        assert_eq!(week(Weekday::Thursday).number(0), 0);
        assert_eq!(week(Weekday::Thursday).number(-1), -1);
        assert_eq!(week(Weekday::Friday).number(0), -1);
        assert_eq!(week(Weekday::Friday).number(1), 0);
        assert_eq!(week(Weekday::Monday).first_day(1), 4, "Monday 1970-01-05");
    }
}
