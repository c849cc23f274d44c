//! Quotas per window as configuration (feature `serde`): `{ quota, window }`
//! reads the same from TOML, YAML and JSON beside pacing limits, writes back
//! to what it read, and a bad quota, window or mix of fields is refused with
//! the value named; and a limiter that paces only refuses one by name.
#![cfg(feature = "serde")]

use paceline::model::window::{Weekday, Window};
use paceline::{AtomicLimiter, BuildError, Limit, Limits, Rate};

const TOML: &str = r#"
[default]
rate = "10/s"

[overrides]
"acme" = { quota = 10000, window = "day" }
"tenant:monthly" = { quota = 1000000, window = "month" }
"tenant:envoy" = { quota = 500, window = "30d" }
"tenant:tokyo" = { quota = 7, window = "week:sunday UTC+09:00" }
"#;

fn expected() -> Limits {
    let w = |q, w: &str| Limit::per_window(q, w.parse().unwrap()).unwrap();
    Limits::new(Rate::per_second(10))
        .with_override("acme", w(10_000, "day"))
        .with_override("tenant:monthly", w(1_000_000, "month"))
        .with_override("tenant:envoy", w(500, "30d"))
        .with_override("tenant:tokyo", w(7, "week:sunday UTC+09:00"))
}

#[test]
fn windows_read_alike_from_every_format_and_write_back() {
    let toml_read: Limits = toml::from_str(TOML).unwrap();
    assert_eq!(toml_read, expected());
    let tokyo = toml_read.get("tenant:tokyo").unwrap();
    assert_eq!(
        tokyo.window(),
        Some(Window::Week {
            starts: Weekday::Sunday,
            offset: 9 * 3_600
        })
    );
    assert_eq!(tokyo.burst(), 7);
    let envoy = toml_read.get("tenant:envoy").unwrap();
    assert_eq!(envoy.window(), Some(Window::Fixed { seconds: 2_592_000 }));

    let json = serde_json::to_string(&expected()).unwrap();
    assert!(
        json.contains(r#""acme":{"quota":10000,"window":"day"}"#),
        "{json}"
    );
    assert_eq!(serde_json::from_str::<Limits>(&json).unwrap(), expected());
    let yaml = serde_norway::to_string(&expected()).unwrap();
    assert_eq!(serde_norway::from_str::<Limits>(&yaml).unwrap(), expected());
    let toml_text = toml::to_string(&expected()).unwrap();
    assert_eq!(toml::from_str::<Limits>(&toml_text).unwrap(), expected());
}

#[test]
fn bad_windows_are_named_where_they_stand() {
    for (doc, says) in [
        (
            r#"default = { quota = 10, window = "fortnight" }"#,
            r#"not a window: "fortnight""#,
        ),
        (
            r#"default = { quota = 0, window = "day" }"#,
            "at least 1 per window",
        ),
        (
            r#"default = { quota = 600000000, window = "1s" }"#,
            "at most 536870911",
        ),
        (r#"default = { quota = 10 }"#, "missing field `window`"),
        (r#"default = { window = "day" }"#, "missing field `quota`"),
        (
            r#"default = { rate = "10/s", quota = 10, window = "day" }"#,
            "{ quota, window } alone",
        ),
        (
            r#"default = { quota = 10, window = "day UTC+30:00" }"#,
            "beyond ±26 hours",
        ),
        (r#"default = { quota = -1, window = "day" }"#, "-1"),
    ] {
        let e = toml::from_str::<Limits>(doc).unwrap_err().to_string();
        assert!(e.contains(says), "{doc}: {e}");
        assert!(e.contains("line 1"), "{doc}: {e}");
    }
}

#[test]
fn a_pacing_limiter_refuses_a_window_by_name() {
    let limiter = AtomicLimiter::new(Rate::per_second(10));
    let daily = Limit::per_window(100, Window::Day { offset: 0 }).unwrap();
    let e = limiter.apply(daily).unwrap_err();
    assert_eq!(
        e,
        BuildError::WindowNotPaced {
            limit: "100 per day".into(),
            by: "AtomicLimiter"
        }
    );
    assert!(e.to_string().contains("\"100 per day\""), "{e}");
    // Nothing changed.
    assert_eq!(limiter.limit().rate(), Rate::per_second(10));
}
