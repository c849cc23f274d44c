//! envoyproxy/ratelimit's configuration files, read as its loader reads
//! them: one domain per file, descriptors nested by `key` and an optional
//! `value` (a `*` in it a wildcard), each with an optional `rate_limit`.
//! Every key is checked (an unknown one is an error naming it, as there),
//! and the errors are its own: an empty domain or key, a duplicate
//! composite key, an invalid unit, a unit beside `unlimited`, an empty or
//! self-naming `replaces`, `share_threshold` without a wildcard, a domain
//! in two files without `MERGE_DOMAIN_CONFIG`.
//!
//! paceline's extensions: `rate_limit` may say `smooth: true` (and
//! `burst: N`), and its descriptor is then paced; or `leased: true`, and
//! its fixed windows are counted in leased batches on a remote store (see
//! the crate's README).

use std::collections::HashMap;
use std::fmt;

use yaml_rust2::{Yaml, YamlLoader};

/// A unit of `rate_limit`, numbered as the RLS proto numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 s.
    Second,
    /// 60 s.
    Minute,
    /// 3 600 s.
    Hour,
    /// 86 400 s.
    Day,
    /// 7 days.
    Week,
    /// 30 days, as envoyproxy/ratelimit counts a month.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// Its length in seconds: its fixed windows, from the Unix epoch.
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The proto's number (`RateLimitResponse.RateLimit.Unit`).
    pub fn number(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit the proto numbers `n`, if any (0 is `UNKNOWN`).
    pub fn from_number(n: i32) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.number() == n)
    }

    /// The proto's name, `SECOND` ... `YEAR`.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// The unit named `s`, any case.
    pub fn parse(s: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(s))
    }
}

/// How a limit counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counting {
    /// envoyproxy/ratelimit's: fixed windows of the unit from the Unix
    /// epoch, every hit counted, over once the window's count passes the
    /// limit.
    Fixed,
    /// paceline's: the limit per unit paced evenly, `burst` at once at most;
    /// a refused hit is not counted.
    Smooth {
        /// The most hits at once (at least 1).
        burst: u64,
    },
}

/// A `rate_limit`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// `unit` (`None` only when `unlimited`).
    pub unit: Option<Unit>,
    /// `unlimited`: never refused, never counted.
    pub unlimited: bool,
    /// `name`, which another rule's `replaces` may name.
    pub name: String,
    /// `replaces`: the names of the rules this one stands in for.
    pub replaces: Vec<String>,
    /// How it counts.
    pub counting: Counting,
    /// paceline's `leased: true`: a fixed window counted in leased batches
    /// on a remote store (see `lease.rs`).
    pub leased: bool,
}

/// One descriptor of a level: its limit and the level below.
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// Its `rate_limit`.
    pub rule: Option<Rule>,
    /// `shadow_mode`: never refuses.
    pub shadow_mode: bool,
    /// `quota_mode`: over, it refuses the request only when every quota
    /// descriptor of it is over.
    pub quota_mode: bool,
    /// `detailed_metric`: stats named by the request's values.
    pub detailed_metric: bool,
    /// `value_to_metric`: this level's stat named by the request's value.
    pub value_to_metric: bool,
    /// `share_threshold`: every value the wildcard matches shares one
    /// counter.
    pub share_threshold: bool,
    /// The level below.
    pub children: Level,
    /// The stat key envoyproxy/ratelimit gives it: the domain, then each
    /// level's `key` or `key_value`, joined by dots.
    pub full_key: String,
}

/// One level of descriptors.
#[derive(Clone, Debug, Default)]
pub struct Level {
    /// By `key` or `key_value`.
    pub nodes: HashMap<String, Node>,
    /// The `key_value`s holding a `*`, in file order, each split on its
    /// `*`s.
    pub wildcards: Vec<(String, Vec<String>)>,
}

/// Every domain's descriptors.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// By domain.
    pub domains: HashMap<String, Level>,
    /// The files it was read from, and their domains (for the debug page).
    pub files: Vec<(String, String)>,
}

/// A file the loader refused: its name and why, in envoyproxy/ratelimit's
/// words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// Why.
    pub error: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.error)
    }
}

impl std::error::Error for ConfigError {}

/// The keys a configuration file may hold, anywhere in it.
const VALID_KEYS: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    // paceline's
    "smooth",
    "burst",
    "leased",
];

impl Config {
    /// The configuration of `files` (name, content), in order; a domain
    /// in two files is an error unless `merge` (`MERGE_DOMAIN_CONFIG`).
    pub fn load(files: &[(String, String)], merge: bool) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for (name, content) in files {
            config.load_file(name, content, merge)?;
        }
        Ok(config)
    }

    fn load_file(&mut self, file: &str, content: &str, merge: bool) -> Result<(), ConfigError> {
        let err = |error: String| ConfigError {
            file: file.to_owned(),
            error,
        };
        let docs = YamlLoader::load_from_str(content)
            .map_err(|e| err(format!("error loading config file: {e}")))?;
        let root = docs.into_iter().next().unwrap_or(Yaml::Null);
        let map = match &root {
            Yaml::Hash(_) => &root,
            Yaml::Null => return Err(err("config file cannot have empty domain".into())),
            _ => return Err(err("error loading config file: not a map".into())),
        };
        validate_keys(map).map_err(err)?;
        let domain = string(&map["domain"]).map_err(err)?;
        if domain.is_empty() {
            return Err(err("config file cannot have empty domain".into()));
        }
        let descriptors = list(&map["descriptors"]).map_err(err)?;
        let level = match self.domains.remove(&domain) {
            Some(level) if merge => level,
            Some(_) => return Err(err(format!("duplicate domain '{domain}' in config file"))),
            None => Level::default(),
        };
        let mut level = level;
        load_level(&mut level, &format!("{domain}."), descriptors).map_err(err)?;
        self.domains.insert(domain.clone(), level);
        self.files.push((file.to_owned(), domain));
        Ok(())
    }
}

/// Checks every key of `node` and below against [`VALID_KEYS`].
fn validate_keys(node: &Yaml) -> Result<(), String> {
    let Yaml::Hash(map) = node else {
        return Ok(());
    };
    for (k, v) in map {
        let Yaml::String(k) = k else {
            return Err(format!(
                "config error, key is not of type string: {}",
                shown(k)
            ));
        };
        if !VALID_KEYS.contains(&k.as_str()) {
            return Err(format!("config error, unknown key '{k}'"));
        }
        if k == "metadata" {
            continue;
        }
        match v {
            Yaml::Array(items) => {
                for item in items {
                    if !matches!(item, Yaml::Hash(_)) {
                        return Err(format!(
                            "config error, yaml file contains list of type other than map: {}",
                            shown(item)
                        ));
                    }
                    validate_keys(item)?;
                }
            }
            Yaml::Hash(_) => validate_keys(v)?,
            Yaml::String(_) | Yaml::Integer(_) | Yaml::Boolean(_) | Yaml::Null => {}
            _ => return Err("error checking config".into()),
        }
    }
    Ok(())
}

/// A YAML value as text, for an error.
fn shown(y: &Yaml) -> String {
    match y {
        Yaml::String(s) | Yaml::Real(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Boolean(b) => b.to_string(),
        Yaml::Null => "null".into(),
        other => format!("{other:?}"),
    }
}

/// A scalar read as envoyproxy/ratelimit's YAML reads it into a string
/// (absent: "").
fn string(y: &Yaml) -> Result<String, String> {
    match y {
        Yaml::BadValue | Yaml::Null => Ok(String::new()),
        Yaml::String(s) | Yaml::Real(s) => Ok(s.clone()),
        Yaml::Integer(i) => Ok(i.to_string()),
        Yaml::Boolean(b) => Ok(b.to_string()),
        other => Err(format!(
            "error loading config file: expected a string, found {other:?}"
        )),
    }
}

fn boolean(y: &Yaml, key: &str) -> Result<bool, String> {
    match y {
        Yaml::BadValue | Yaml::Null => Ok(false),
        Yaml::Boolean(b) => Ok(*b),
        other => Err(format!(
            "error loading config file: {key} must be true or false, found {}",
            shown(other)
        )),
    }
}

fn integer(y: &Yaml, key: &str, max: u64) -> Result<u64, String> {
    match y {
        Yaml::BadValue | Yaml::Null => Ok(0),
        Yaml::Integer(i) if *i >= 0 && (*i as u64) <= max => Ok(*i as u64),
        other => Err(format!(
            "error loading config file: {key} must be a whole number from 0 to {max}, found {}",
            shown(other)
        )),
    }
}

fn list(y: &Yaml) -> Result<&[Yaml], String> {
    match y {
        Yaml::BadValue | Yaml::Null => Ok(&[]),
        Yaml::Array(items) => Ok(items),
        other => Err(format!(
            "error loading config file: descriptors must be a list, found {}",
            shown(other)
        )),
    }
}

/// Loads `descriptors` into `level`, whose stat keys start `parent`.
fn load_level(level: &mut Level, parent: &str, descriptors: &[Yaml]) -> Result<(), String> {
    for d in descriptors {
        let key = string(&d["key"])?;
        if key.is_empty() {
            return Err("descriptor has empty key".into());
        }
        let value = string(&d["value"])?;
        let final_key = if value.is_empty() {
            key.clone()
        } else {
            format!("{key}_{value}")
        };
        let full_key = format!("{parent}{final_key}");
        if level.nodes.contains_key(&final_key) {
            return Err(format!("duplicate descriptor composite key '{full_key}'"));
        }
        let rule = match &d["rate_limit"] {
            Yaml::BadValue | Yaml::Null => None,
            r => Some(rule(r)?),
        };
        let share_threshold = boolean(&d["share_threshold"], "share_threshold")?;
        if share_threshold && !final_key.contains('*') {
            return Err(format!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}'"
            ));
        }
        let mut node = Node {
            rule,
            shadow_mode: boolean(&d["shadow_mode"], "shadow_mode")?,
            quota_mode: boolean(&d["quota_mode"], "quota_mode")?,
            detailed_metric: boolean(&d["detailed_metric"], "detailed_metric")?,
            value_to_metric: boolean(&d["value_to_metric"], "value_to_metric")?,
            share_threshold,
            children: Level::default(),
            full_key: full_key.clone(),
        };
        // `metadata` is accepted and not acted on.
        load_level(
            &mut node.children,
            &format!("{full_key}."),
            list(&d["descriptors"])?,
        )?;
        if final_key.contains('*') {
            let parts = final_key.split('*').map(str::to_owned).collect();
            level.wildcards.push((final_key.clone(), parts));
        }
        level.nodes.insert(final_key, node);
    }
    Ok(())
}

/// A `rate_limit`.
fn rule(r: &Yaml) -> Result<Rule, String> {
    let unlimited = boolean(&r["unlimited"], "unlimited")?;
    let unit_name = string(&r["unit"])?;
    let unit = Unit::parse(&unit_name);
    if unlimited && unit.is_some() {
        return Err("should not specify rate limit unit when unlimited".into());
    }
    if !unlimited && unit.is_none() {
        return Err(format!("invalid rate limit unit '{unit_name}'"));
    }
    let name = string(&r["name"])?;
    let mut replaces = Vec::new();
    for e in list(&r["replaces"])? {
        let replaced = string(&e["name"])?;
        if replaced.is_empty() {
            return Err("should not have an empty replaces entry".into());
        }
        if replaced == name {
            return Err("replaces should not contain name of same descriptor".into());
        }
        replaces.push(replaced);
    }
    let requests_per_unit = integer(
        &r["requests_per_unit"],
        "requests_per_unit",
        u32::MAX.into(),
    )? as u32;
    let counting = if boolean(&r["smooth"], "smooth")? {
        let burst = integer(&r["burst"], "burst", u32::MAX.into())?.max(1);
        Counting::Smooth { burst }
    } else {
        if !matches!(&r["burst"], Yaml::BadValue | Yaml::Null) {
            return Err("burst applies to a smooth limit only (smooth: true)".into());
        }
        Counting::Fixed
    };
    let leased = boolean(&r["leased"], "leased")?;
    if leased && counting != Counting::Fixed {
        return Err("leased applies to a fixed window only, not to a smooth limit".into());
    }
    Ok(Rule {
        requests_per_unit,
        unit,
        unlimited,
        name,
        replaces,
        counting,
        leased,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<Config, ConfigError> {
        Config::load(&[("f.yaml".into(), yaml.into())], false)
    }

    #[test]
    fn a_file_s_descriptors_nest_by_key_and_value() {
        let c = load(
            "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n  - key: database\n    rate_limit:\n      unit: Second\n      requests_per_unit: 50\n",
        )
        .unwrap();
        let level = &c.domains["mongo_cps"];
        let users = &level.nodes["database_users"];
        assert_eq!(users.full_key, "mongo_cps.database_users");
        let rule = users.rule.as_ref().unwrap();
        assert_eq!(
            (rule.requests_per_unit, rule.unit),
            (500, Some(Unit::Second))
        );
        assert_eq!(
            level.nodes["database"]
                .rule
                .as_ref()
                .unwrap()
                .requests_per_unit,
            50
        );
    }

    #[test]
    fn each_error_names_what_the_loader_names() {
        for (yaml, want) in [
            ("descriptors: []\n", "config file cannot have empty domain"),
            ("domain: d\nfoo: 1\n", "config error, unknown key 'foo'"),
            ("domain: d\ndescriptors:\n  - value: x\n", "descriptor has empty key"),
            (
                "domain: d\ndescriptors:\n  - key: k\n  - key: k\n",
                "duplicate descriptor composite key 'd.k'",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
                "invalid rate limit unit 'fortnight'",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unlimited: true}\n",
                "should not specify rate limit unit when unlimited",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
                "share_threshold can only be used with wildcard values",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
                "requests_per_unit must be a whole number from 0 to 4294967295, found -1",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, smooth: true, leased: true}\n",
                "leased applies to a fixed window only",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, leased: maybe}\n",
                "leased",
            ),
        ] {
            let e = load(yaml).unwrap_err();
            assert!(e.error.contains(want), "{yaml}: {e}");
            assert_eq!(e.file, "f.yaml");
        }
    }

    #[test]
    fn a_domain_in_two_files_is_refused_unless_merged() {
        let a = (
            "a.yaml".to_owned(),
            "domain: d\ndescriptors:\n  - key: a\n".to_owned(),
        );
        let b = (
            "b.yaml".to_owned(),
            "domain: d\ndescriptors:\n  - key: b\n".to_owned(),
        );
        let e = Config::load(&[a.clone(), b.clone()], false).unwrap_err();
        assert_eq!(e.to_string(), "b.yaml: duplicate domain 'd' in config file");
        let c = Config::load(&[a, b], true).unwrap();
        assert_eq!(c.domains["d"].nodes.len(), 2);
    }
}
