//! Limits as configuration (feature `serde`): [`Rate`], [`Slack`], [`Limit`]
//! and [`Limits`] read and write through serde, the same from any format.
//!
//! The shapes each reads from, and the errors: the guide's
//! [configuration](crate::guide::config) chapter. Each is one visitor, not
//! `#[serde(untagged)]`, so that an error says what was wrong with the value
//! instead of "did not match any variant"; the format adds where the value
//! is.

use std::fmt;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Unexpected, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::model::window::Window;
use crate::values::duration::{self, Shown};
use crate::values::limit::{Limit, Limits};
use crate::values::rate::Rate;
use crate::values::slack::Slack;

impl Serialize for Rate {
    /// As its string: `"100/s"`, `"5/250ms"`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    /// From a string, as [`FromStr`](std::str::FromStr) parses it.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Rate, D::Error> {
        deserializer.deserialize_str(RATE)
    }
}

/// A value read from a string by `.1`, `.0` saying what it should be: a
/// visitor, and a seed of its own for a map's value.
struct Text<T>(&'static str, fn(&str) -> Result<T, String>);

impl<T> Visitor<'_> for Text<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        (self.1)(s).map_err(E::custom)
    }
}

impl<'de, T> DeserializeSeed<'de> for Text<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        deserializer.deserialize_str(self)
    }
}

const RATE: Text<Rate> = Text("a rate such as \"100/s\" or \"5/250ms\"", |s| {
    s.parse()
        .map_err(|e: crate::values::error::BuildError| e.to_string())
});

const WINDOW: Text<Window> = Text(
    "a window: \"day\", \"week\", \"month\", \"year\", \"30d\", \"1h\", ...",
    |s| {
        s.parse()
            .map_err(|e: crate::values::error::BuildError| e.to_string())
    },
);

const TIME: Text<Duration> = Text("a time such as \"10ms\" or \"1s\"", |s| {
    duration::parse_duration(s).map_err(|reason| format!("invalid time {s:?}: {reason}"))
});

impl Serialize for Slack {
    /// Permits alone as an integer, a time alone as a string (`"10ms"`),
    /// both as `{ permits, time }`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (permits, time) = (self.min_permits(), self.min_time());
        if time.is_zero() {
            serializer.serialize_u64(permits)
        } else if permits == 0 {
            serializer.collect_str(&Shown(time))
        } else {
            let mut map = serializer.serialize_map(Some(2))?;
            map.serialize_entry("permits", &permits)?;
            map.serialize_entry("time", &Shown(time).to_string())?;
            map.end()
        }
    }
}

impl<'de> Deserialize<'de> for Slack {
    /// An integer (permits), a string (`"10ms"`, `"max(10 permits, 10ms)"`),
    /// or `{ permits, time }` (either may be left out).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Slack, D::Error> {
        deserializer.deserialize_any(SlackVisitor)
    }
}

struct SlackVisitor;

impl<'de> Visitor<'de> for SlackVisitor {
    type Value = Slack;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a slack: a permit count (10), a time (\"10ms\"), or { permits, time }")
    }

    fn visit_u64<E: de::Error>(self, permits: u64) -> Result<Slack, E> {
        Ok(Slack::permits(permits))
    }

    fn visit_i64<E: de::Error>(self, permits: i64) -> Result<Slack, E> {
        u64::try_from(permits).map(Slack::permits).map_err(|_| {
            E::invalid_value(Unexpected::Signed(permits), &"a permit count of 0 or more")
        })
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Slack, E> {
        s.parse().map_err(E::custom)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Slack, A::Error> {
        let (mut permits, mut time) = (None, None);
        while let Some(key) = map.next_key_seed(Key(&["permits", "time"]))? {
            match key {
                "permits" => set(&mut permits, map.next_value()?, key)?,
                "time" => set(&mut time, map.next_value_seed(TIME)?, key)?,
                _ => unreachable!("a Key is one of its names"),
            }
        }
        if permits.is_none() && time.is_none() {
            return Err(de::Error::custom(
                "a slack map needs `permits`, `time`, or both",
            ));
        }
        Ok(Slack::at_least(
            permits.unwrap_or(0),
            time.unwrap_or(Duration::ZERO),
        ))
    }
}

impl Serialize for Limit {
    /// Always as a map, `{ rate }` with the default slack, `{ rate, burst }`
    /// with a slack in permits, `{ rate, slack }` with one in time: the bare
    /// rate is for people to write, and a map in every place keeps a TOML
    /// writer from moving the bare values of a table ahead of its subtables.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if let Some(window) = self.window() {
            let mut map = serializer.serialize_map(Some(2))?;
            map.serialize_entry("quota", &self.burst())?;
            map.serialize_entry("window", &window.to_string())?;
            return map.end();
        }
        let slack = self.slack();
        let fields = 1 + usize::from(slack != Slack::DEFAULT);
        let mut map = serializer.serialize_map(Some(fields))?;
        map.serialize_entry("rate", &self.rate())?;
        if slack != Slack::DEFAULT {
            match slack.min_permits().checked_add(1) {
                Some(burst) if slack.min_time().is_zero() => {
                    map.serialize_entry("burst", &burst)?;
                }
                _ => map.serialize_entry("slack", &slack)?,
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Limit {
    /// `"100/s"` (the default slack), or `{ rate, burst }` / `{ rate, slack }`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Limit, D::Error> {
        deserializer.deserialize_any(LimitVisitor)
    }
}

struct LimitVisitor;

impl<'de> Visitor<'de> for LimitVisitor {
    type Value = Limit;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a limit: a rate (\"100/s\") or { rate, burst } or { rate, slack }, or a quota per \
             window { quota, window }",
        )
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Limit, E> {
        RATE.visit_str(s).map(Limit::from)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Limit, A::Error> {
        let (mut rate, mut burst, mut slack) = (None, None, None::<Slack>);
        let (mut quota, mut window) = (None::<u64>, None::<Window>);
        let names = &["rate", "burst", "slack", "quota", "window"];
        while let Some(key) = map.next_key_seed(Key(names))? {
            match key {
                "rate" => set(&mut rate, map.next_value::<Rate>()?, key)?,
                "burst" => set(&mut burst, map.next_value::<Burst>()?.0, key)?,
                "slack" => set(&mut slack, map.next_value()?, key)?,
                "quota" => set(&mut quota, map.next_value()?, key)?,
                "window" => set(&mut window, map.next_value_seed(WINDOW)?, key)?,
                _ => unreachable!("a Key is one of its names"),
            }
        }
        if quota.is_some() || window.is_some() {
            if rate.is_some() || burst.is_some() || slack.is_some() {
                return Err(de::Error::custom(
                    "a quota per window is { quota, window } alone: a rate, burst or slack \
                     is pacing's (for both on one key, give two limits to all-or-nothing)",
                ));
            }
            let window = window.ok_or_else(|| de::Error::missing_field("window"))?;
            let quota = quota.ok_or_else(|| de::Error::missing_field("quota"))?;
            return Limit::per_window(quota, window).map_err(de::Error::custom);
        }
        let rate = rate.ok_or_else(|| de::Error::missing_field("rate"))?;
        let slack = match (burst, slack) {
            (Some(_), Some(_)) => {
                return Err(de::Error::custom(
                    "give `burst` or `slack`, not both (a burst of N is a slack of N - 1)",
                ))
            }
            (Some(burst), None) => Slack::permits(burst - 1),
            (None, Some(slack)) => slack,
            (None, None) => Slack::DEFAULT,
        };
        Ok(Limit::new(rate, slack))
    }
}

/// A burst: a permit count of at least 1, refused where it stands.
struct Burst(u64);

impl<'de> Deserialize<'de> for Burst {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Burst, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Burst;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a burst of at least 1 permit (a burst of 1 is no slack)")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Burst, E> {
                match n {
                    0 => Err(E::invalid_value(Unexpected::Unsigned(0), &self)),
                    n => Ok(Burst(n)),
                }
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Burst, E> {
                match u64::try_from(n) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::invalid_value(Unexpected::Signed(n), &self)),
                }
            }
        }
        deserializer.deserialize_u64(V)
    }
}

/// Overrides as a map, in order.
struct Overrides<'a>(&'a [(String, Limit)]);

impl Serialize for Overrides<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl Serialize for Limits {
    /// `{ default, overrides }`, the overrides a map in order (left out when
    /// there are none).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        limits_fields(serializer, Some(self.default_limit()), self.overrides())
    }
}

/// A limits document's fields: `default` and `overrides`, each left out
/// when there is none.
fn limits_fields<S: Serializer>(
    serializer: S,
    default: Option<&Limit>,
    overrides: &[(String, Limit)],
) -> Result<S::Ok, S::Error> {
    let fields = usize::from(default.is_some()) + usize::from(!overrides.is_empty());
    let mut map = serializer.serialize_map(Some(fields))?;
    if let Some(default) = default {
        map.serialize_entry("default", default)?;
    }
    if !overrides.is_empty() {
        map.serialize_entry("overrides", &Overrides(overrides))?;
    }
    map.end()
}

impl<'de> Deserialize<'de> for Limits {
    /// `{ default, overrides }`; see [`Limits`].
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Limits, D::Error> {
        let expecting = "limits: { default, overrides }";
        deserializer.deserialize_map(Fields(expecting, |default, overrides| {
            let mut limits = Limits::new(default?);
            for (key, limit) in overrides.0 {
                limits.insert(key, limit);
            }
            Some(limits)
        }))
    }
}

/// A limits document's fields, its default (if given) and its overrides in
/// order, made into a value by `.1` (`None`: one that needs the default
/// missing), `.0` saying what it should be.
struct Fields<T>(&'static str, fn(Option<Limit>, OverrideList) -> Option<T>);

impl<'de, T> Visitor<'de> for Fields<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let (mut default, mut overrides) = (None::<Limit>, None::<OverrideList>);
        while let Some(key) = map.next_key_seed(Key(&["default", "overrides"]))? {
            match key {
                "default" => set(&mut default, map.next_value()?, key)?,
                "overrides" => set(&mut overrides, map.next_value()?, key)?,
                _ => unreachable!("a Key is one of its names"),
            }
        }
        (self.1)(default, overrides.unwrap_or_default())
            .ok_or_else(|| de::Error::missing_field("default"))
    }
}

#[cfg(feature = "fleet")]
impl<'de> Deserialize<'de> for crate::config::fleet::Layer {
    /// `{ default, overrides }` as for [`Limits`], either left out.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let expecting = "a layer of limits: { default, overrides }, either left out";
        deserializer.deserialize_map(Fields(expecting, |default, overrides| {
            Some(Self::from_parts(default, overrides.0))
        }))
    }
}

#[cfg(feature = "fleet")]
impl Serialize for crate::config::fleet::Layer {
    /// `{ default, overrides }`, each left out when empty.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        limits_fields(serializer, self.default_limit(), self.overrides())
    }
}

/// The overrides map, in order, a key given twice refused (serde_json and
/// others would keep the last silently).
#[derive(Default)]
struct OverrideList(Vec<(String, Limit)>);

impl<'de> Deserialize<'de> for OverrideList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<OverrideList, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OverrideList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map from key to limit")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OverrideList, A::Error> {
                let mut list: Vec<(String, Limit)> = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if list.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format_args!(
                            "duplicate override key {key:?}"
                        )));
                    }
                    list.push((key, map.next_value()?));
                }
                Ok(OverrideList(list))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// Stores a field's value, refusing a second one.
fn set<T, E: de::Error>(slot: &mut Option<T>, value: T, name: &'static str) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(name));
    }
    *slot = Some(value);
    Ok(())
}

/// A map's key read as one of the given names; any other is an unknown
/// field, refused as the key is read (so the format says where it stands).
struct Key(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = &'static str;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<&'static str, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl Visitor<'_> for Key {
    type Value = &'static str;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "one of {:?}", self.0)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<&'static str, E> {
        let name = self.0.iter().find(|name| **name == s);
        name.copied().ok_or_else(|| E::unknown_field(s, self.0))
    }
}
