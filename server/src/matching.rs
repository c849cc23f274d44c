//! Which rule a request's descriptor falls under, as envoyproxy/ratelimit's
//! `GetLimit` finds it: level by level, each entry's `key_value` first,
//! then the level's wildcards in file order, then its `key` alone; never
//! going back; the rule of the node the last entry lands on.

use crate::config::{Config, Counting, Level, Rule, Unit};

/// One entry of a request's descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its key.
    pub key: String,
    /// Its value (may be empty).
    pub value: String,
}

/// The limit a descriptor falls under.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// The rule (an override's, for a descriptor carrying its own limit).
    pub rule: Rule,
    /// `shadow_mode`.
    pub shadow_mode: bool,
    /// `quota_mode`.
    pub quota_mode: bool,
    /// The stat key (`domain.key_value...`).
    pub stat_key: String,
    /// For each entry, the wildcard value that stands for it in the
    /// counter's key (`share_threshold`), if any.
    pub shared: Vec<Option<String>>,
}

/// Why a descriptor cannot be looked up: its override's unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadUnit(pub i32);

/// The limit `entries` fall under in `domain`, or `None`: an unknown
/// domain, no node, a node without a rule, or more entries than the
/// configuration goes deep. A descriptor's own limit (`limit_override`:
/// requests per unit and the unit's number) stands in for the
/// configuration's, on a known domain only.
pub fn find(
    config: &Config,
    domain: &str,
    entries: &[Entry],
    limit_override: Option<(u32, i32)>,
) -> Result<Option<Found>, BadUnit> {
    let Some(mut level) = config.domains.get(domain) else {
        return Ok(None);
    };
    if let Some((requests_per_unit, number)) = limit_override {
        let unit = Unit::from_number(number).ok_or(BadUnit(number))?;
        let parts: Vec<String> = entries.iter().map(key_value).collect();
        return Ok(Some(Found {
            rule: Rule {
                requests_per_unit,
                unit: Some(unit),
                unlimited: false,
                name: String::new(),
                replaces: Vec::new(),
                counting: Counting::Fixed,
                leased: false,
            },
            shadow_mode: false,
            quota_mode: false,
            stat_key: format!("{domain}.{}", parts.join(".")),
            shared: vec![None; entries.len()],
        }));
    }
    let mut found: Option<(&crate::config::Node, Vec<Option<String>>)> = None;
    let mut shared: Vec<Option<String>> = vec![None; entries.len()];
    // The stat key as value_to_metric and wildcards write it, and as
    // detailed_metric does (every level's key_value).
    let mut metric = domain.to_owned();
    let mut detailed = domain.to_owned();
    for (i, entry) in entries.iter().enumerate() {
        let final_key = format!("{}_{}", entry.key, entry.value);
        detailed.push('.');
        detailed.push_str(&final_key);
        let (node, how) = lookup(level, entry, &final_key);
        metric.push('.');
        match node {
            Some(node) => {
                let value = match &how {
                    How::Wildcard(pattern) => {
                        let pattern_value = pattern
                            .strip_prefix(&format!("{}_", entry.key))
                            .unwrap_or(pattern)
                            .to_owned();
                        if node.share_threshold {
                            shared[i] = Some(pattern_value.clone());
                            pattern_value
                        } else if node.value_to_metric {
                            entry.value.clone()
                        } else {
                            pattern_value
                        }
                    }
                    How::Value => entry.value.clone(),
                    How::Key if node.value_to_metric => entry.value.clone(),
                    How::Key => String::new(),
                };
                metric.push_str(&entry.key);
                if !value.is_empty() {
                    metric.push('_');
                    metric.push_str(&value);
                }
                if node.rule.is_some() && i == entries.len() - 1 {
                    found = Some((node, shared.clone()));
                }
                if node.children.nodes.is_empty() {
                    break;
                }
                level = &node.children;
            }
            None => break,
        }
    }
    let Some((node, shared)) = found else {
        return Ok(None);
    };
    let rule = node.rule.clone().expect("a node found for its rule");
    let detailed_on = node.detailed_metric;
    let stat_key = if detailed_on {
        if shared.iter().any(Option::is_some) {
            let parts: Vec<String> = entries
                .iter()
                .zip(&shared)
                .map(|(e, s)| match s {
                    Some(pattern) => format!("{}_{pattern}", e.key),
                    None => key_value(e),
                })
                .collect();
            format!("{domain}.{}", parts.join("."))
        } else {
            detailed
        }
    } else {
        metric
    };
    Ok(Some(Found {
        rule,
        shadow_mode: node.shadow_mode,
        quota_mode: node.quota_mode,
        stat_key,
        shared,
    }))
}

/// How an entry found its node.
enum How {
    Value,
    Wildcard(String),
    Key,
}

fn lookup<'a>(
    level: &'a Level,
    entry: &Entry,
    final_key: &str,
) -> (Option<&'a crate::config::Node>, How) {
    if let Some(node) = level.nodes.get(final_key) {
        return (Some(node), How::Value);
    }
    for (pattern, parts) in &level.wildcards {
        if wildcard_match(parts, final_key) {
            return (level.nodes.get(pattern), How::Wildcard(pattern.clone()));
        }
    }
    (level.nodes.get(&entry.key), How::Key)
}

/// `key` or `key_value`.
fn key_value(e: &Entry) -> String {
    if e.value.is_empty() {
        e.key.clone()
    } else {
        format!("{}_{}", e.key, e.value)
    }
}

/// Whether `value` matches the pattern split on its `*`s (each `*` any
/// run of characters, the empty one too).
pub fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|p| p == value);
    };
    if !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
        return false;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in middle {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
        pairs
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect()
    }

    fn config(yaml: &str) -> Config {
        Config::load(&[("f.yaml".into(), yaml.into())], false).unwrap()
    }

    #[test]
    fn wildcards_match_runs_anywhere() {
        let split = |p: &str| p.split('*').map(str::to_owned).collect::<Vec<_>>();
        assert!(wildcard_match(&split("path_/api/*"), "path_/api/u"));
        assert!(wildcard_match(&split("path_/api/*"), "path_/api/"));
        assert!(!wildcard_match(&split("path_/api/*"), "path_/apx"));
        assert!(wildcard_match(&split("r_/a/*/b/*/c"), "r_/a/1/b/2/c"));
        assert!(!wildcard_match(&split("r_/a/*/b/*/c"), "r_/a/1/c"));
        assert!(!wildcard_match(&split("k_ab*ba"), "k_aba"));
    }

    #[test]
    fn a_value_entry_without_a_rule_allows_that_value() {
        let c = config(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: k\n    value: free\n",
        );
        assert!(find(&c, "d", &entries(&[("k", "free")]), None)
            .unwrap()
            .is_none());
        let f = find(&c, "d", &entries(&[("k", "other")]), None)
            .unwrap()
            .unwrap();
        assert_eq!((f.rule.requests_per_unit, f.stat_key.as_str()), (1, "d.k"));
    }

    #[test]
    fn more_entries_than_levels_find_nothing_and_an_unknown_domain_nothing() {
        let c = config(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        );
        assert!(find(&c, "d", &entries(&[("a", "x"), ("b", "y")]), None)
            .unwrap()
            .is_none());
        assert!(find(&c, "other", &entries(&[("a", "x")]), None)
            .unwrap()
            .is_none());
        assert!(find(&c, "other", &entries(&[("a", "x")]), Some((5, 1)))
            .unwrap()
            .is_none());
    }

    #[test]
    fn an_override_stands_in_on_a_known_domain_and_a_bad_unit_is_named() {
        let c = config("domain: d\ndescriptors:\n  - key: a\n");
        let f = find(&c, "d", &entries(&[("a", "x")]), Some((7, 2)))
            .unwrap()
            .unwrap();
        assert_eq!(f.rule.unit, Some(Unit::Minute));
        assert_eq!(f.stat_key, "d.a_x");
        assert_eq!(
            find(&c, "d", &entries(&[("a", "x")]), Some((7, 0))),
            Err(BadUnit(0))
        );
    }
}
