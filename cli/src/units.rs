//! Byte sizes and byte rates as text: `64KiB`, `1MiB/s`, `500K/250ms`.
//!
//! A size is whole digits and an optional suffix: `B` (or none) bytes;
//! `K`, `KiB` = 1024 (pv's `-L` reads `k` that way too); `KB`, `kB` = 1000;
//! likewise `M`/`MiB`/`MB`, `G`/`GiB`/`GB`, `T`/`TiB`/`TB`. A byte rate is a
//! size, `/`, and a period as [`Rate`] reads one (`s`, `250ms`, `min`).
//!
//! paceline's interval is whole nanoseconds, and a byte every nanosecond is
//! 1 GB/s; so a byte rate is paced in *units* of a power of two bytes,
//! chosen so that one unit takes at least [`MIN_UNIT_INTERVAL_NS`]: 1 byte
//! up to 1 MB/s, 2 bytes at 1 MiB/s, 1 KiB near 1 GB/s.

use std::fmt;
use std::time::Duration;

use paceline::Rate;

/// The shortest interval a unit of bytes is paced at: 1 µs keeps the
/// whole-nanosecond rounding of the interval under 0.05 %, and the
/// limiter's permits under a million a second.
pub const MIN_UNIT_INTERVAL_NS: u128 = 1_000;

/// A byte rate, resolved to the limiter's rate of units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRate {
    /// Bytes per `period`, as written.
    pub bytes: u64,
    /// The period, as written.
    pub period: Duration,
    /// Bytes per permit: a power of two.
    pub unit: u64,
    /// Units per period: what the limiter paces.
    pub rate: Rate,
}

impl fmt::Display for ByteRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `Rate`'s display writes the period ("1/s" -> "/s").
        let per = Rate::new(1, self.period)
            .map(|r| r.to_string())
            .unwrap_or_default();
        let per = per.strip_prefix('1').unwrap_or(&per);
        write!(f, "{}{per}", human_bytes(self.bytes as f64))
    }
}

/// Parses a byte size such as `64KiB`, `1M`, `1500`.
///
/// # Errors
/// A message naming `s` and what is wrong with it.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = |why: &str| format!("bad size {s:?}: {why}");
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(digits_end);
    if digits.is_empty() {
        return Err(bad(
            "expected a whole number of bytes, such as 4096, 64KiB or 1MB",
        ));
    }
    if suffix.starts_with('.') {
        return Err(bad(
            "decimals are not supported: use a smaller unit (1536KiB, not 1.5MiB)",
        ));
    }
    let n: u64 = digits.parse().map_err(|_| bad("the number is too large"))?;
    let mult: u64 =
        match suffix.trim() {
            "" | "B" | "b" => 1,
            "K" | "k" | "KiB" | "kiB" => 1 << 10,
            "KB" | "kB" => 1_000,
            "M" | "m" | "MiB" => 1 << 20,
            "MB" => 1_000_000,
            "G" | "g" | "GiB" => 1 << 30,
            "GB" => 1_000_000_000,
            "T" | "t" | "TiB" => 1 << 40,
            "TB" => 1_000_000_000_000,
            _ => return Err(bad(
                "unknown unit: use B, K/KiB (1024), KB (1000), M/MiB, MB, G/GiB, GB, T/TiB or TB",
            )),
        };
    n.checked_mul(mult)
        .ok_or_else(|| bad("more than 2^64 bytes"))
}

/// Parses a byte rate such as `1MiB/s`, `500K/250ms`, `64KB/min`.
///
/// # Errors
/// A message naming `s` and what is wrong with it.
pub fn parse_byte_rate(s: &str) -> Result<ByteRate, String> {
    let Some((size, per)) = s.split_once('/') else {
        return Err(format!(
            "bad byte rate {s:?}: expected SIZE/PERIOD, such as \"1MiB/s\" or \"64KiB/250ms\""
        ));
    };
    let bytes = parse_size(size).map_err(|e| format!("bad byte rate {s:?}: {e}"))?;
    if bytes == 0 {
        return Err(format!(
            "bad byte rate {s:?}: the size must be at least 1 byte"
        ));
    }
    // The period as `Rate` reads it, so both kinds of rate spell it alike.
    let period = format!("1/{per}")
        .parse::<Rate>()
        .map_err(|e| format!("bad byte rate {s:?}: the period {per:?}: {e}"))?
        .period();
    byte_rate(bytes, period).map_err(|e| format!("bad byte rate {s:?}: {e}"))
}

/// `bytes` per `period` in the smallest power-of-two unit whose interval is
/// at least [`MIN_UNIT_INTERVAL_NS`].
fn byte_rate(bytes: u64, period: Duration) -> Result<ByteRate, String> {
    let period_ns = period.as_nanos();
    let mut unit: u64 = 1;
    loop {
        // interval = period * unit / bytes
        if period_ns * u128::from(unit) >= MIN_UNIT_INTERVAL_NS * u128::from(bytes) {
            break;
        }
        unit = unit
            .checked_mul(2)
            .ok_or_else(|| "faster than any limiter can pace".to_owned())?;
    }
    let unit_period = period
        .checked_mul(u32::try_from(unit).map_err(|_| "too fast".to_owned())?)
        .ok_or_else(|| "the period is too long".to_owned())?;
    let rate = Rate::new(bytes, unit_period).map_err(|e| e.to_string())?;
    Ok(ByteRate {
        bytes,
        period,
        unit,
        rate,
    })
}

/// `1.5 MiB`, `512 B`: a byte count for people.
pub fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_binary_and_decimal_suffixes() {
        assert_eq!(parse_size("1500"), Ok(1500));
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert_eq!(parse_size("64K"), Ok(65_536));
        assert_eq!(parse_size("64KB"), Ok(64_000));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert!(parse_size("1.5MiB").unwrap_err().contains("\"1.5MiB\""));
        assert!(parse_size("12XB").unwrap_err().contains("unknown unit"));
        assert!(parse_size("").is_err());
        assert!(parse_size("-4").is_err());
        assert!(parse_size("99999999999T").unwrap_err().contains("2^64"));
    }

    #[test]
    fn byte_rates_pick_a_unit_with_at_least_a_microsecond() {
        let r = parse_byte_rate("1000000/s").unwrap();
        assert_eq!((r.unit, r.rate.interval()), (1, Duration::from_micros(1)));
        let r = parse_byte_rate("1MiB/s").unwrap();
        assert_eq!(r.unit, 2);
        assert!(r.rate.interval() >= Duration::from_micros(1));
        let r = parse_byte_rate("10GiB/s").unwrap();
        assert_eq!(r.unit, 16_384);
        let r = parse_byte_rate("100/s").unwrap();
        assert_eq!((r.unit, r.rate), (1, Rate::per_second(100)));
        assert_eq!(
            parse_byte_rate("500K/250ms").unwrap().period,
            Duration::from_millis(250)
        );
    }

    #[test]
    fn bad_byte_rates_are_named() {
        for bad in ["1MiB", "1MiB/x", "0/s", "1.5M/s", "x/s", "1MiB/0s"] {
            let e = parse_byte_rate(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn byte_rates_display_as_written() {
        assert_eq!(parse_byte_rate("1MiB/s").unwrap().to_string(), "1.00 MiB/s");
        assert_eq!(
            parse_byte_rate("500/250ms").unwrap().to_string(),
            "500 B/250ms"
        );
    }
}
