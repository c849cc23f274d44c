//! Durations as text, `250ms` or `1h`: the units, parsing, and the shortest
//! display. [`Rate`](crate::Rate) and [`Slack`](crate::Slack) both write
//! their periods this way.

use std::fmt;
use std::time::Duration;

/// The units, longest first, each with its spellings: `us` also with the
/// micro sign or the Greek mu. A duration displays in the first spelling of
/// a unit from the hour down.
const UNITS: [(u128, &[&str]); 7] = [
    (86_400_000_000_000, &["d", "day"]),
    (3_600_000_000_000, &["h", "hr"]),
    (60_000_000_000, &["min", "m"]),
    (1_000_000_000, &["s", "sec"]),
    (1_000_000, &["ms"]),
    (1_000, &["us", "\u{b5}s", "\u{3bc}s"]),
    (1, &["ns"]),
];

/// The units that parse, with their spellings.
pub(crate) const UNIT_LIST: &str = "ns, us, ms, s, min, h or d";

/// A unit's length in nanoseconds, by any of its spellings in [`UNITS`].
pub(crate) fn unit_ns(unit: &str) -> Option<u128> {
    let found = UNITS.iter().find(|(_, names)| names.contains(&unit));
    found.map(|&(ns, _)| ns)
}

/// `k` of the longest unit that divides `d` exactly (`None` for zero).
fn shortest(d: Duration) -> Option<(u128, &'static str)> {
    let ns = d.as_nanos();
    if ns == 0 {
        return None;
    }
    UNITS[1..]
        .iter()
        .find(|&&(unit, _)| ns.is_multiple_of(unit))
        .map(|&(unit, names)| (ns / unit, names[0]))
}

/// Writes `d` as a whole number of the longest unit that divides it:
/// `250ms`, `90s`, `1min`, `0s`. With `omit_one`, a count of one is left
/// out (`s`, not `1s`), as in a rate's `100/s`.
pub(crate) fn write(f: &mut fmt::Formatter<'_>, d: Duration, omit_one: bool) -> fmt::Result {
    match shortest(d) {
        None => f.write_str("0s"),
        Some((1, name)) if omit_one => f.write_str(name),
        Some((k, name)) => write!(f, "{k}{name}"),
    }
}

/// A [`Duration`] displayed as [`write`] does.
pub(crate) struct Shown(pub(crate) Duration);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write(f, self.0, false)
    }
}

/// A period read from text: `[N]UNIT`, the number optional (one) when
/// `number_optional`, with a decimal part reported rather than taken.
pub(crate) enum Parsed {
    /// A whole number of a unit, in nanoseconds (possibly past a `Duration`).
    Nanos(u128),
    /// `N.F UNIT`: the digits without the point, the number of digits after
    /// it, and the unit's nanoseconds (`None` if the unit is unknown).
    Decimal {
        /// All the digits, as one number (`1.5` is 15).
        mantissa: u128,
        /// How many of them follow the point (`1.5` has 1).
        scale: u32,
        /// The unit's length in nanoseconds, if it is a known unit.
        unit_ns: Option<u128>,
        /// The unit as written.
        unit: String,
    },
}

/// `s` split after its leading ASCII digits.
fn leading_digits(s: &str) -> (&str, &str) {
    s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()))
}

/// Non-empty and ASCII digits only.
pub(crate) fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Parses `[N][.F]UNIT` (whitespace allowed before the unit).
pub(crate) fn parse(s: &str, number_optional: bool) -> Result<Parsed, &'static str> {
    let (n, rest) = leading_digits(s.trim());
    if let Some(frac_and_unit) = rest.strip_prefix('.') {
        let (frac, unit) = leading_digits(frac_and_unit);
        let unit = unit.trim();
        if n.is_empty() && frac.is_empty() {
            return Err("the period's number is missing");
        }
        let mantissa = format!("{n}{frac}")
            .parse::<u128>()
            .map_err(|_| "the period's number is too large")?;
        return Ok(Parsed::Decimal {
            mantissa,
            scale: frac.len() as u32,
            unit_ns: unit_ns(unit),
            unit: unit.to_owned(),
        });
    }
    let count: u128 = if n.is_empty() {
        if !number_optional {
            return Err("expected a number and a unit, such as \"10ms\" or \"1s\"");
        }
        1
    } else {
        n.parse().map_err(|_| "the period's number is too large")?
    };
    let unit = rest.trim();
    if unit.is_empty() {
        return Err("the period needs a unit: ns, us, ms, s, min, h or d");
    }
    let unit_ns = unit_ns(unit).ok_or("unknown unit; use ns, us, ms, s, min, h or d")?;
    count
        .checked_mul(unit_ns)
        .ok_or("the period is too long: more than a Duration holds")
        .map(Parsed::Nanos)
}

/// Nanoseconds as a [`Duration`], if one holds them.
pub(crate) fn from_nanos(ns: u128) -> Option<Duration> {
    let secs = u64::try_from(ns / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (ns % 1_000_000_000) as u32))
}

/// `mantissa / 10^scale` units as whole nanoseconds, if it is whole.
pub(crate) fn decimal_nanos(mantissa: u128, scale: u32, unit_ns: u128) -> Option<u128> {
    let total = mantissa.checked_mul(unit_ns)?;
    let div = 10u128.checked_pow(scale)?;
    total.is_multiple_of(div).then(|| total / div)
}

/// Parses a duration as text: `10ms`, `1s`, `250us`, `2min`. A decimal is
/// refused with the whole-unit spelling to use instead, where there is one.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let too_long = || "the duration is too long: more than a Duration holds".to_owned();
    match parse(s, false).map_err(str::to_owned)? {
        Parsed::Nanos(ns) => from_nanos(ns).ok_or_else(too_long),
        Parsed::Decimal {
            mantissa,
            scale,
            unit_ns: Some(unit_ns),
            ..
        } => Err(
            match decimal_nanos(mantissa, scale, unit_ns).and_then(from_nanos) {
                Some(d) => format!("decimals are not supported (write \"{}\")", Shown(d)),
                None => "decimals are not supported".to_owned(),
            },
        ),
        Parsed::Decimal { .. } => Err(format!(
            "decimals are not supported, and the unit is unknown; use {UNIT_LIST}"
        )),
    }
}
