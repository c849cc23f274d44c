//! Limits as configuration (feature `serde`): `Rate`, `Slack`, `Limit` and
//! `Limits` read the same from TOML, YAML and JSON, write back to what they
//! read, and refuse bad values with the value and its place in the file.
#![cfg(feature = "serde")]

use std::time::Duration;

use paceline::{Limit, Limits, Rate, Slack};

const TOML: &str = r#"
[default]
rate = "100/s"
burst = 20

[overrides]
"tenant:acme" = "1000/s"
"tenant:acme/user:7" = { rate = "10/s", burst = 5 }
"tenant:slow" = { rate = "20r/m", slack = 19 }
"tenant:timed" = { rate = "5/250ms", slack = "10ms" }
"tenant:both" = { rate = "1r/s", slack = { permits = 3, time = "2s" } }
"tenant:text" = { rate = "1/s", slack = "max(3 permits, 2s)" }
"#;

const YAML: &str = r#"
default:
  rate: 100/s
  burst: 20
overrides:
  "tenant:acme": 1000/s
  "tenant:acme/user:7": { rate: 10/s, burst: 5 }
  "tenant:slow":
    rate: 20r/m
    slack: 19
  "tenant:timed": { rate: 5/250ms, slack: 10ms }
  "tenant:both": { rate: 1r/s, slack: { permits: 3, time: 2s } }
  "tenant:text": { rate: 1/s, slack: "max(3 permits, 2s)" }
"#;

const JSON: &str = r#"{
  "default": { "rate": "100/s", "burst": 20 },
  "overrides": {
    "tenant:acme": "1000/s",
    "tenant:acme/user:7": { "rate": "10/s", "burst": 5 },
    "tenant:slow": { "rate": "20r/m", "slack": 19 },
    "tenant:timed": { "rate": "5/250ms", "slack": "10ms" },
    "tenant:both": { "rate": "1r/s", "slack": { "permits": 3, "time": "2s" } },
    "tenant:text": { "rate": "1/s", "slack": "max(3 permits, 2s)" }
  }
}"#;

fn expected() -> Limits {
    let ms = Duration::from_millis;
    Limits::new(Limit::new(Rate::per_second(100), 19))
        .with_override("tenant:acme", Rate::per_second(1000))
        .with_override("tenant:acme/user:7", Limit::new(Rate::per_second(10), 4))
        .with_override("tenant:slow", Limit::new(Rate::per_minute(20), 19))
        .with_override(
            "tenant:timed",
            Limit::new(Rate::new(5, ms(250)).unwrap(), ms(10)),
        )
        .with_override(
            "tenant:both",
            Limit::new(Rate::per_second(1), Slack::at_least(3, ms(2000))),
        )
        .with_override(
            "tenant:text",
            Limit::new(Rate::per_second(1), Slack::at_least(3, ms(2000))),
        )
}

fn from_toml(s: &str) -> Result<Limits, String> {
    toml::from_str(s).map_err(|e| e.to_string())
}

fn from_yaml(s: &str) -> Result<Limits, String> {
    serde_norway::from_str(s).map_err(|e| e.to_string())
}

fn from_json(s: &str) -> Result<Limits, String> {
    serde_json::from_str(s).map_err(|e| e.to_string())
}

#[test]
fn the_same_document_reads_the_same_from_toml_yaml_and_json() {
    let want = expected();
    assert_eq!(from_toml(TOML).unwrap(), want);
    assert_eq!(from_yaml(YAML).unwrap(), want);
    assert_eq!(from_json(JSON).unwrap(), want);
    let keys: Vec<&str> = want.overrides().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "tenant:acme",
            "tenant:acme/user:7",
            "tenant:slow",
            "tenant:timed",
            "tenant:both",
            "tenant:text"
        ],
        "overrides keep the file's order"
    );
    assert_eq!(
        want.get("tenant:acme/user:7").unwrap().slack(),
        Slack::permits(4)
    );
    assert_eq!(want.get("tenant:acme").unwrap().slack(), Slack::DEFAULT);
    assert_eq!(want.get("tenant:nobody"), None);
}

#[test]
fn every_format_writes_what_it_reads_back() {
    let want = expected();
    let toml_text = toml::to_string(&want).unwrap();
    assert_eq!(from_toml(&toml_text).unwrap(), want, "{toml_text}");
    let yaml_text = serde_norway::to_string(&want).unwrap();
    assert_eq!(from_yaml(&yaml_text).unwrap(), want, "{yaml_text}");
    let json_text = serde_json::to_string_pretty(&want).unwrap();
    assert_eq!(from_json(&json_text).unwrap(), want, "{json_text}");
    // A limit writes as a map (a TOML writer would move bare values ahead
    // of tables), a permit slack as a burst.
    assert!(json_text.contains(r#""tenant:acme": {"#), "{json_text}");
    let toml_keys: Vec<&str> = toml_text
        .lines()
        .filter(|l| l.contains("tenant:"))
        .collect();
    assert!(toml_keys[0].contains("\"tenant:acme\""), "{toml_text}");
    assert!(json_text.contains(r#""burst": 5"#), "{json_text}");
    // No overrides: just the default.
    let alone = Limits::new(Rate::per_second(3));
    assert_eq!(
        serde_json::to_string(&alone).unwrap(),
        r#"{"default":{"rate":"3/s"}}"#
    );
    assert_eq!(from_json(r#"{"default":"3/s"}"#).unwrap(), alone);
}

#[test]
fn values_write_as_their_strings() {
    let json = |v: &dyn erased::Ser| v.json();
    assert_eq!(json(&Rate::per_second(100)), r#""100/s""#);
    assert_eq!(json(&"5/250ms".parse::<Rate>().unwrap()), r#""5/250ms""#);
    assert_eq!(json(&"20r/m".parse::<Rate>().unwrap()), r#""20/min""#);
    assert_eq!(json(&Slack::permits(7)), "7");
    assert_eq!(
        json(&Slack::time(Duration::from_micros(1500))),
        r#""1500us""#
    );
    assert_eq!(json(&Slack::DEFAULT), r#"{"permits":10,"time":"10ms"}"#);
    assert_eq!(json(&Limit::from(Rate::per_second(9))), r#"{"rate":"9/s"}"#);
    assert_eq!(
        json(&Limit::new(Rate::per_second(9), 0)),
        r#"{"rate":"9/s","burst":1}"#
    );
    assert_eq!(
        json(&Limit::new(Rate::per_second(9), u64::MAX)),
        r#"{"rate":"9/s","slack":18446744073709551615}"#
    );
    for slack in [
        Slack::NONE,
        Slack::DEFAULT,
        Slack::permits(u64::MAX),
        Slack::time(Duration::new(90, 1)),
        Slack::at_least(3, Duration::from_secs(7200)),
    ] {
        let text = serde_json::to_string(&slack).unwrap();
        assert_eq!(
            serde_json::from_str::<Slack>(&text).unwrap(),
            slack,
            "{text}"
        );
    }
}

/// `serde_json::to_string` through a trait object, for the table above.
mod erased {
    pub trait Ser {
        fn json(&self) -> String;
    }
    impl<T: serde::Serialize> Ser for T {
        fn json(&self) -> String {
            serde_json::to_string(self).unwrap()
        }
    }
}

/// Each refusal, in each format: the message names the bad value (or
/// field) and what is wrong, and the parser's position of it.
#[test]
fn refusals_name_the_value_and_where_it_is() {
    // (what is wrong, TOML, YAML, JSON, line of the fault, words the
    // message must hold)
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        usize,
        &'static [&'static str],
    );
    let cases: &[Case] = &[
        (
            "a decimal period",
            "[default]\nrate = \"10/1.5s\"\n",
            "default:\n  rate: 10/1.5s\n",
            "{\"default\": {\n  \"rate\": \"10/1.5s\"}}",
            2,
            &["\"10/1.5s\"", "decimals are not supported", "\"20/3s\""],
        ),
        (
            "an unknown unit",
            "[default]\nrate = \"10/fortnight\"\n",
            "default:\n  rate: 10/fortnight\n",
            "{\"default\": {\n  \"rate\": \"10/fortnight\"}}",
            2,
            &["\"10/fortnight\"", "unknown unit"],
        ),
        (
            "a misspelled field",
            "[default]\nrate = \"10/s\"\nbrust = 5\n",
            "default:\n  rate: 10/s\n  brust: 5\n",
            "{\"default\": {\"rate\": \"10/s\",\n \"brust\": 5}}",
            0,
            &["brust", "rate", "burst", "slack"],
        ),
        (
            "a burst of 0",
            "[default]\nrate = \"10/s\"\nburst = 0\n",
            "default:\n  rate: 10/s\n  burst: 0\n",
            "{\"default\": {\"rate\": \"10/s\",\n \"burst\": 0}}",
            0,
            &["integer `0`", "a burst of at least 1 permit"],
        ),
        (
            "a burst and a slack",
            "[default]\nrate = \"10/s\"\nburst = 5\nslack = 4\n",
            "default:\n  rate: 10/s\n  burst: 5\n  slack: 4\n",
            "{\"default\": {\"rate\": \"10/s\", \"burst\": 5,\n \"slack\": 4}}",
            0,
            &["`burst` or `slack`, not both"],
        ),
        (
            "no rate",
            "[default]\nburst = 5\n",
            "default:\n  burst: 5\n",
            "{\"default\":\n {\"burst\": 5}}",
            0,
            &["missing field `rate`"],
        ),
        (
            "no default",
            "[overrides]\na = \"1/s\"\n",
            "overrides:\n  a: 1/s\n",
            "{\"overrides\": {\"a\": \"1/s\"}}",
            0,
            &["missing field `default`"],
        ),
        (
            "a bad slack time",
            "[default]\nrate = \"10/s\"\nslack = \"1.5ms\"\n",
            "default:\n  rate: 10/s\n  slack: 1.5ms\n",
            "{\"default\": {\"rate\": \"10/s\",\n \"slack\": \"1.5ms\"}}",
            0,
            &["\"1.5ms\"", "decimals are not supported", "1500us"],
        ),
        (
            "a negative burst",
            "[default]\nrate = \"10/s\"\nburst = -1\n",
            "default:\n  rate: 10/s\n  burst: -1\n",
            "{\"default\": {\"rate\": \"10/s\",\n \"burst\": -1}}",
            0,
            &["integer `-1`", "a burst of at least 1 permit"],
        ),
    ];
    for &(what, toml_text, yaml_text, json_text, line, words) in cases {
        for (format, result) in [
            ("TOML", from_toml(toml_text)),
            ("YAML", from_yaml(yaml_text)),
            ("JSON", from_json(json_text)),
        ] {
            let msg = match result {
                Ok(limits) => panic!("{what} in {format}: accepted as {limits:?}"),
                Err(msg) => msg,
            };
            println!("{what} in {format}: {msg}");
            for word in words {
                assert!(
                    msg.contains(word),
                    "{what} in {format}: {msg:?} lacks {word:?}"
                );
            }
            // serde_norway places no error that comes at the end of the
            // document, as a missing top-level field does.
            let at_end = what == "no default" && format == "YAML";
            assert!(
                at_end || msg.contains("line") && msg.contains("column"),
                "{what} in {format}: {msg:?} says where"
            );
            if line > 0 {
                assert!(
                    says_line(&msg, line),
                    "{what} in {format}: {msg:?} names line {line}"
                );
            }
        }
    }
}

/// A rate that reads as `COUNT/PERIOD` but is refused (`"0/s"`, `"0/0s"`,
/// `"1/0s"`) is named in the message, in every format, as a malformed one is.
#[test]
fn a_refused_rate_is_named_in_every_format() {
    for (rate, reason) in [
        ("0/s", "at least 1 per period, got 0"),
        ("0/0s", "at least 1 per period, got 0"),
        ("1/0s", "period must be longer than 0"),
    ] {
        for (format, result) in [
            (
                "TOML",
                from_toml(&format!("[default]\nrate = \"{rate}\"\n")),
            ),
            ("YAML", from_yaml(&format!("default:\n  rate: {rate}\n"))),
            (
                "JSON",
                from_json(&format!("{{\"default\": {{\"rate\": \"{rate}\"}}}}")),
            ),
        ] {
            let msg = result.expect_err(rate);
            assert!(
                msg.contains(&format!("{rate:?}")),
                "{rate} in {format}: {msg}"
            );
            assert!(msg.contains(reason), "{rate} in {format}: {msg}");
        }
        let msg = serde_json::from_str::<Rate>(&format!("{rate:?}"))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains(&format!("{rate:?}")),
            "{rate} as a Rate: {msg}"
        );
    }
}

/// Whether an error message names `line`: `line 2` (serde_json,
/// serde_norway, toml's header) — toml 1 writes "at line 2, column 8".
fn says_line(msg: &str, line: usize) -> bool {
    msg.contains(&format!("line {line}"))
}

/// serde_json keeps the last of two equal keys; a limits file must not.
#[test]
fn a_key_given_twice_is_refused_in_every_format() {
    let json = r#"{"default": "1/s", "overrides": {"a": "2/s",
        "a": "3/s"}}"#;
    let msg = from_json(json).unwrap_err();
    assert!(msg.contains(r#"duplicate override key "a""#), "{msg}");
    assert!(msg.contains("line 2"), "{msg}");
    // YAML and TOML refuse it in their own parsers.
    assert!(from_yaml("default: 1/s\noverrides:\n  a: 2/s\n  a: 3/s\n").is_err());
    assert!(from_toml("default = \"1/s\"\n[overrides]\na = \"2/s\"\na = \"3/s\"\n").is_err());
    let msg = from_json(r#"{"default": "1/s", "default": "2/s"}"#).unwrap_err();
    assert!(msg.contains("duplicate field `default`"), "{msg}");
}

#[test]
fn a_bare_rate_is_a_limit_with_the_default_slack() {
    let limit: Limit = toml::from_str::<Limits>("default = \"7/min\"")
        .unwrap()
        .default_limit()
        .to_owned();
    assert_eq!(limit, Limit::new(Rate::per_minute(7), Slack::DEFAULT));
    let (rate, slack) = limit.into();
    assert_eq!((rate, slack), (Rate::per_minute(7), Slack::DEFAULT));
    assert_eq!(
        serde_json::from_str::<Limit>(r#""1r/s""#).unwrap(),
        Rate::per_second(1).into()
    );
    assert_eq!(
        serde_json::from_str::<Limit>(r#"{"rate": "1/s", "burst": 1}"#).unwrap(),
        Limit::new(Rate::per_second(1), Slack::NONE)
    );
    let msg = serde_json::from_str::<Limit>("42").unwrap_err().to_string();
    assert!(msg.contains("a limit: a rate"), "{msg}");
}

/// Real files in a temporary directory, read with `std::fs`, as a service
/// reads its configuration.
#[test]
fn files_on_disk_read_alike() {
    let dir = std::env::temp_dir().join(format!("paceline-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = [
        ("limits.toml", TOML),
        ("limits.yaml", YAML),
        ("limits.json", JSON),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let toml_limits: Limits = toml::from_str(&read("limits.toml")).unwrap();
    let yaml_limits: Limits =
        serde_norway::from_reader(std::fs::File::open(dir.join("limits.yaml")).unwrap()).unwrap();
    let json_limits: Limits =
        serde_json::from_reader(std::fs::File::open(dir.join("limits.json")).unwrap()).unwrap();
    assert_eq!(toml_limits, expected());
    assert_eq!(yaml_limits, expected());
    assert_eq!(json_limits, expected());

    // A bad file: the error says where, and nothing is half-read.
    std::fs::write(
        dir.join("bad.toml"),
        TOML.replace("\"10/s\"", "\"10/1.5s\""),
    )
    .unwrap();
    let msg = toml::from_str::<Limits>(&read("bad.toml"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("line 8"), "{msg}");
    assert!(
        msg.contains("decimals are not supported (write \"20/3s\")"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// TOML's integers are `i64`: a larger permit count (or burst) has no
    /// TOML spelling, so the counts stay below.
    const PERMITS: std::ops::Range<u64> = 0..i64::MAX as u64;

    fn limit() -> impl Strategy<Value = Limit> {
        let rate = (1u64..=1_000_000, 1u64..=1u64 << 50)
            .prop_filter_map("a valid rate", |(count, ns)| {
                Rate::new(count, Duration::from_nanos(ns)).ok()
            });
        let slack = prop_oneof![
            Just(Slack::DEFAULT),
            PERMITS.prop_map(Slack::permits),
            (0u64..=1u64 << 40).prop_map(|ns| Slack::time(Duration::from_nanos(ns))),
            (PERMITS, any::<u64>(), 0u32..1_000_000_000)
                .prop_map(|(p, s, n)| Slack::at_least(p, Duration::new(s, n))),
        ];
        (rate, slack).prop_map(|(rate, slack)| Limit::new(rate, slack))
    }

    fn limits() -> impl Strategy<Value = Limits> {
        (
            limit(),
            prop::collection::vec(("[a-z:/0-9]{1,12}", limit()), 0..6),
        )
            .prop_map(|(default, overrides)| {
                let mut limits = Limits::new(default);
                for (key, limit) in overrides {
                    limits.insert(key, limit);
                }
                limits
            })
    }

    proptest! {
        /// Whatever is written, in any of the three formats, reads back
        /// equal: rates, every kind of slack, keys and their order.
        #[test]
        fn every_limits_document_reads_back_from_every_format(limits in limits()) {
            let text = toml::to_string(&limits).unwrap();
            prop_assert_eq!(from_toml(&text), Ok(limits.clone()), "{}", text);
            let text = serde_norway::to_string(&limits).unwrap();
            prop_assert_eq!(from_yaml(&text), Ok(limits.clone()), "{}", text);
            let text = serde_json::to_string(&limits).unwrap();
            prop_assert_eq!(from_json(&text), Ok(limits), "{}", text);
        }
    }
}
