//! `Rate`: parsing, display, and the interval it paces at.

use std::time::Duration;

use paceline::{BuildError, Rate};
use proptest::prelude::*;

const SEC: Duration = Duration::from_secs(1);

#[test]
fn parses_count_per_unit_and_per_n_units() {
    let table: &[(&str, u64, Duration, Duration)] = &[
        // input, count, period, interval
        ("100/s", 100, SEC, Duration::from_millis(10)),
        (
            "7/min",
            7,
            Duration::from_secs(60),
            Duration::from_nanos(8_571_428_571),
        ),
        (
            "1500/h",
            1500,
            Duration::from_secs(3600),
            Duration::from_millis(2400),
        ),
        (
            "5/250ms",
            5,
            Duration::from_millis(250),
            Duration::from_millis(50),
        ),
        ("1/ns", 1, Duration::from_nanos(1), Duration::from_nanos(1)),
        (
            "1/us",
            1,
            Duration::from_micros(1),
            Duration::from_micros(1),
        ),
        (
            "1/µs",
            1,
            Duration::from_micros(1),
            Duration::from_micros(1),
        ),
        // The Greek small letter mu (U+03BC), which many keyboards and input
        // methods type for "micro" instead of the micro sign (U+00B5).
        (
            "1/\u{3bc}s",
            1,
            Duration::from_micros(1),
            Duration::from_micros(1),
        ),
        ("3/m", 3, Duration::from_secs(60), Duration::from_secs(20)),
        ("2/sec", 2, SEC, Duration::from_millis(500)),
        (
            "24/d",
            24,
            Duration::from_secs(86_400),
            Duration::from_secs(3600),
        ),
        (
            "1/day",
            1,
            Duration::from_secs(86_400),
            Duration::from_secs(86_400),
        ),
        (
            "1/hr",
            1,
            Duration::from_secs(3600),
            Duration::from_secs(3600),
        ),
        (
            "10/90s",
            10,
            Duration::from_secs(90),
            Duration::from_secs(9),
        ),
        ("1000000000/s", 1_000_000_000, SEC, Duration::from_nanos(1)),
    ];
    for &(input, count, period, interval) in table {
        let rate: Rate = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(rate.count(), count, "{input}");
        assert_eq!(rate.period(), period, "{input}");
        assert_eq!(rate.interval(), interval, "{input}");
        assert_eq!(rate, Rate::new(count, period).unwrap(), "{input}");
    }
}

#[test]
fn parsing_ignores_whitespace_around_the_parts() {
    for input in [
        " 100/s",
        "100/s ",
        "100 / s",
        "\t100/\ts\n",
        "100/ 1 s",
        "100/1 s",
    ] {
        assert_eq!(
            input.parse::<Rate>(),
            Ok(Rate::per_second(100)),
            "{input:?}"
        );
    }
}

#[test]
fn the_named_constructors_match_the_strings() {
    assert_eq!("100/s".parse::<Rate>().unwrap(), Rate::per_second(100));
    assert_eq!("7/min".parse::<Rate>().unwrap(), Rate::per_minute(7));
    assert_eq!("1500/h".parse::<Rate>().unwrap(), Rate::per_hour(1500));
    assert_eq!(
        Rate::every(Duration::from_millis(3)).unwrap().interval(),
        Duration::from_millis(3)
    );
}

/// Every malformed string names what is wrong with it.
#[test]
fn bad_strings_are_errors_that_say_what_is_wrong() {
    let table: &[(&str, &str)] = &[
        ("", "expected COUNT/PERIOD"),
        ("100", "expected COUNT/PERIOD"),
        ("100 per second", "expected COUNT/PERIOD"),
        ("/s", "the count must be a whole number"),
        ("abc/s", "the count must be a whole number"),
        ("-5/s", "the count must be a whole number"),
        ("+5/s", "the count must be a whole number"),
        ("+ 5/s", "the count must be a whole number"),
        ("1.5/s", "the count must be a whole number"),
        ("1_000/s", "the count must be a whole number"),
        ("99999999999999999999/s", "the count must be a whole number"),
        ("100/", "the period needs a unit"),
        ("100/5", "the period needs a unit"),
        ("100/x", "unknown unit"),
        ("100/S", "unknown unit"),
        ("100/seconds", "unknown unit"),
        ("100/s/s", "unknown unit"),
        (
            "1/999999999999999999999999999999999999999s",
            "the period's number is too large",
        ),
        // Past what a `Duration` holds (about 5.8 * 10^11 years).
        ("1/99999999999999999999s", "the period is too long"),
        (
            "1/999999999999999999999999999999999999ns",
            "the period is too long",
        ),
        (
            "1/9999999999999999999999999999999999h",
            "the period is too long",
        ),
    ];
    for &(input, reason) in table {
        match input.parse::<Rate>() {
            Err(e @ BuildError::ParseRate { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(reason), "{input:?}: {msg}");
                assert!(
                    msg.contains(&format!("{input:?}")),
                    "{input:?}: {msg} names the input"
                );
            }
            other => panic!("{input:?}: expected a parse error, got {other:?}"),
        }
    }
}

/// A decimal period is refused as a decimal, not as an unknown unit, with
/// the whole-number spelling of the same rate where there is one.
#[test]
fn decimals_are_refused_with_the_whole_number_spelling() {
    let table: &[(&str, Option<&str>)] = &[
        ("10/1.5s", Some("20/3s")),
        ("100/0.5s", Some("200/s")),
        ("1/2.25min", Some("4/9min")),
        ("3/.5ms", Some("6/ms")),
        ("10/1.5x", None),
    ];
    for &(input, instead) in table {
        let err = input.parse::<Rate>().unwrap_err();
        assert_eq!(
            err,
            BuildError::RateDecimals {
                input: input.to_owned(),
                instead: instead.map(str::to_owned),
            },
            "{input}"
        );
        let msg = err.to_string();
        assert!(msg.contains(&format!("{input:?}")), "{msg}");
        assert!(msg.contains("decimals are not supported"), "{msg}");
        if let Some(instead) = instead {
            assert!(msg.contains(&format!("(write {instead:?})")), "{msg}");
            let whole: Rate = instead.parse().unwrap();
            assert!(whole.count() > 0, "{instead} is a valid rate");
        }
    }
    assert_eq!(
        "10/1.5s".parse::<Rate>().unwrap_err().to_string(),
        r#"cannot parse rate "10/1.5s": decimals are not supported (write "20/3s")"#
    );
}

/// nginx's `limit_req` spelling: an `r` (requests) before the `/`.
#[test]
fn nginx_spelling_parses_as_the_same_rate() {
    assert_eq!("20r/m".parse::<Rate>(), Ok(Rate::per_minute(20)));
    assert_eq!("1r/s".parse::<Rate>(), Ok(Rate::per_second(1)));
    assert_eq!("5r/250ms".parse::<Rate>(), "5/250ms".parse::<Rate>());
    for bad in ["r/s", "5rr/s", "5 r/s", "5R/s"] {
        assert!(bad.parse::<Rate>().is_err(), "{bad}");
    }
}

/// A string that parses but whose rate is invalid gets the rate's own error.
#[test]
fn well_formed_but_invalid_rates_get_the_rate_error() {
    // The rate's own error, inside one that names the string.
    let refused = |input: &str| match input.parse::<Rate>() {
        Err(BuildError::InvalidRate {
            input: named,
            error,
        }) => {
            assert_eq!(named, input);
            *error
        }
        other => panic!("{input:?}: {other:?}"),
    };
    assert_eq!(refused("0/s"), BuildError::ZeroCount);
    assert_eq!(refused("1/0s"), BuildError::ZeroPeriod);
    assert!(matches!(
        refused("5/1ns"),
        BuildError::IntervalTooShort { .. }
    ));
    for input in ["1/200000d", "1/9999999999999d"] {
        assert!(
            matches!(refused(input), BuildError::IntervalTooLong { .. }),
            "{input}"
        );
    }
}

/// Every string `Rate` refuses is named in the error, whether it failed to
/// parse or parsed to a rate that is not valid (`"0/s"`): a message from a
/// configuration file or a command line says which value was wrong.
#[test]
fn every_rate_parse_error_names_the_input() {
    for (input, reason) in [
        ("0/s", "at least 1 per period, got 0"),
        ("0/0s", "at least 1 per period, got 0"),
        ("1/0s", "period must be longer than 0"),
        ("5/1ns", "faster than 1 per nanosecond"),
        ("1/200000d", "more than 146 years"),
        ("2/3ns", "fractional-nanosecond"),
        ("5/x", "unknown unit"),
        ("10/1.5s", "decimals"),
    ] {
        let msg = input.parse::<Rate>().unwrap_err().to_string();
        assert!(msg.contains(&format!("{input:?}")), "{input:?}: {msg}");
        assert!(msg.contains(reason), "{input:?}: {msg}");
    }
}

#[test]
fn the_micro_sign_the_greek_mu_and_us_are_the_same_unit() {
    let us: Rate = "3/7us".parse().unwrap();
    assert_eq!("3/7\u{b5}s".parse::<Rate>(), Ok(us), "micro sign U+00B5");
    assert_eq!("3/7\u{3bc}s".parse::<Rate>(), Ok(us), "Greek mu U+03BC");
    assert_eq!(us.period(), Duration::from_micros(7));
}

/// Rates whose period is longer than `u64::MAX` nanoseconds (about 584
/// years) are valid when the count is large enough; their display used to
/// overflow the parser's `u64` of nanoseconds.
#[test]
fn rates_with_periods_past_u64_nanoseconds_display_and_parse_back() {
    for (count, period) in [
        (u64::MAX, Duration::from_secs(u64::MAX)),
        (u64::MAX, Duration::MAX),
        (1 << 40, Duration::from_secs(1 << 40)),
        (u64::MAX / 3, Duration::new(u64::MAX / 2, 1)),
    ] {
        let rate = Rate::new(count, period).unwrap_or_else(|e| panic!("{count}/{period:?}: {e}"));
        let shown = rate.to_string();
        assert_eq!(shown.parse::<Rate>(), Ok(rate), "{shown}");
    }
}

#[test]
fn display_is_the_shortest_unit_that_divides_the_period() {
    let table = [
        ("100/s", "100/s"),
        ("7/min", "7/min"),
        ("1500/h", "1500/h"),
        ("5/250ms", "5/250ms"),
        ("1/d", "1/24h"),
        ("3/90s", "3/90s"),
        ("1/1500ms", "1/1500ms"),
        ("1/60s", "1/min"),
        ("1/1000us", "1/ms"),
        ("7/21ns", "7/21ns"),
    ];
    for (input, shown) in table {
        let rate: Rate = input.parse().unwrap();
        assert_eq!(rate.to_string(), shown, "{input}");
        assert_eq!(shown.parse::<Rate>(), Ok(rate), "{shown} parses back");
    }
}

#[test]
fn interval_rounds_to_the_nearest_nanosecond() {
    // 1/3 s = 333_333_333.3 ns
    assert_eq!(
        Rate::per_second(3).interval(),
        Duration::from_nanos(333_333_333)
    );
    // 2/3 s = 666_666_666.7 ns
    assert_eq!(
        Rate::new(3, 2 * SEC).unwrap().interval(),
        Duration::from_nanos(666_666_667)
    );
    // 60 s / 7 = 8_571_428_571.4 ns
    assert_eq!(
        Rate::per_minute(7).interval(),
        Duration::from_nanos(8_571_428_571)
    );
    // 3_000_000/s = 333.3 ns: 333 paces 0.1 % fast, the most accepted.
    let r = Rate::per_second(3_000_000);
    assert_eq!(r.interval(), Duration::from_nanos(333));
    assert!((r.per_second_f64() - 3_003_003.0).abs() < 1.0);
}

#[test]
fn rounding_worse_than_a_tenth_of_a_percent_is_refused() {
    // 1.5 ns and 2.5 ns intervals: whole nanoseconds are 33 % / 20 % off.
    for (count, ns) in [(2, 3), (2, 5), (600_000_000, 1_000_000_000)] {
        let err = Rate::new(count, Duration::from_nanos(ns)).unwrap_err();
        assert!(
            matches!(err, BuildError::Imprecise { .. }),
            "{count}/{ns}ns: {err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains("Rate::every"), "{msg}");
    }
}

proptest! {
    #[test]
    fn display_parses_back_to_the_same_rate(count in 1u64..=1_000_000, period_ns in 1u64..=1u64 << 50) {
        if let Ok(rate) = Rate::new(count, Duration::from_nanos(period_ns)) {
            let shown = rate.to_string();
            prop_assert_eq!(shown.parse::<Rate>(), Ok(rate), "{}", shown);
        }
    }

    /// Every rate `Rate::new` accepts, over the whole range of counts and
    /// `Duration`s (most of which are longer than `u64::MAX` ns).
    #[test]
    fn every_accepted_rate_displays_as_a_string_that_parses_back(
        count in 1u64..=u64::MAX,
        secs in 0u64..=u64::MAX,
        nanos in 0u32..1_000_000_000,
    ) {
        if let Ok(rate) = Rate::new(count, Duration::new(secs, nanos)) {
            let shown = rate.to_string();
            prop_assert_eq!(shown.parse::<Rate>(), Ok(rate), "{}", shown);
        }
    }

    #[test]
    fn accepted_intervals_are_within_a_tenth_of_a_percent(count in 1u64..=u64::MAX, period_ns in 1u64..=u64::MAX) {
        if let Ok(rate) = Rate::new(count, Duration::from_nanos(period_ns)) {
            let paced = rate.interval().as_nanos() * u128::from(count);
            let err = paced.abs_diff(u128::from(period_ns)) as f64 / period_ns as f64;
            prop_assert!(err <= Rate::MAX_ROUNDING, "{:?}: {}", rate, err);
            prop_assert!(rate.interval() >= Duration::from_nanos(1));
        }
    }
}

/// Anything faster than one permit per nanosecond is "too short", even when
/// the interval would round up to 1 ns (1.5 per ns is not a precision issue
/// that `Rate::every` could fix).
#[test]
fn faster_than_one_per_nanosecond_is_too_short_not_imprecise() {
    for (count, period) in [
        (2, Duration::from_nanos(1)),
        (3, Duration::from_nanos(2)),
        (1_500_000_000, SEC),
        (u64::MAX, SEC),
    ] {
        let err = Rate::new(count, period).unwrap_err();
        assert!(
            matches!(err, BuildError::IntervalTooShort { .. }),
            "{count} per {period:?}: {err:?}"
        );
        assert!(
            err.to_string().contains("faster than 1 per nanosecond"),
            "{err}"
        );
    }
    // Exactly one per nanosecond is the fastest rate.
    assert!(Rate::new(1_000_000_000, SEC).is_ok());
}
