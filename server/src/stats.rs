//! The service's stats, named as envoyproxy/ratelimit names them: per
//! limit (its stat key, `domain.key_value...`), hits in total, over the
//! limit, near it, within it and let through by shadow mode; and how many
//! configurations loaded or failed. Shown as Prometheus text in the form
//! envoyproxy/ratelimit's default statsd mapping gives them
//! (`ratelimit_service_rate_limit_total_hits{domain, key1[, key2]}`), and
//! as its statsd names on the debug port.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// One limit's hits in one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hits {
    /// Every hit counted.
    pub total: u64,
    /// Those past the limit.
    pub over: u64,
    /// Those in `(floor(ratio * limit), limit]`.
    pub near: u64,
    /// Those within the limit.
    pub within: u64,
    /// Those over, let through by shadow mode.
    pub shadow: u64,
    /// Those over by the local cache (`LOCAL_CACHE_SIZE_IN_BYTES`), also
    /// in `over`.
    pub over_local: u64,
}

/// A metric's name and its value among a limit's hits.
type Series = (&'static str, fn(&Hits) -> u64);

/// The upper bounds of `response_time`'s buckets, seconds.
const BUCKETS: [f64; 14] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Every limit's stats, the loads', and the calls'.
#[derive(Default)]
pub struct Stats {
    limits: Mutex<BTreeMap<String, Hits>>,
    /// `config_load_success`.
    pub loads: AtomicU64,
    /// `config_load_error`.
    pub load_errors: AtomicU64,
    /// `ratelimit_server.ShouldRateLimit.total_requests`: gRPC calls.
    pub requests: AtomicU64,
    /// `ratelimit.service.call.should_rate_limit.redis_error`: a Redis
    /// store's failures.
    pub redis_errors: AtomicU64,
    /// `ratelimit.service.call.should_rate_limit.service_error`: requests
    /// the service could not answer, and the other stores' failures.
    pub service_errors: AtomicU64,
    /// `ratelimit.service.global_shadow_mode`: answers `SHADOW_MODE` turned
    /// from over to OK.
    pub global_shadow: AtomicU64,
    /// `ratelimit.service.rate_limit.<domain>.domain_not_found`, by domain.
    not_found: Mutex<BTreeMap<String, u64>>,
    /// `ratelimit_server.ShouldRateLimit.response_time`: per bucket of
    /// [`BUCKETS`] (and one past them), the calls that took at most its
    /// bound; their sum in nanoseconds.
    times: [AtomicU64; 15],
    time_ns: AtomicU64,
}

/// The statsd names' sanitizing, as envoyproxy/ratelimit's
/// (`SanitizeStatName` in src/utils/utilities.go): `:` and `|` would cut
/// a statsd line, and the dots of an IPv4 address would split the name,
/// so each becomes `_`.
fn sanitized(key: &str) -> std::borrow::Cow<'_, str> {
    // Most keys hold none of it: nothing to copy.
    let dotted_digit = key
        .as_bytes()
        .windows(2)
        .any(|w| w[0].is_ascii_digit() && w[1] == b'.');
    if !dotted_digit && !key.contains([':', '|']) {
        return std::borrow::Cow::Borrowed(key);
    }
    let key = key.replace([':', '|'], "_");
    let mut out = key.into_bytes();
    let mut i = 0;
    while i < out.len() {
        match ipv4_at(&out, i) {
            Some(end) => {
                for b in &mut out[i..end] {
                    if *b == b'.' {
                        *b = b'_';
                    }
                }
                i = end;
            }
            None => i += 1,
        }
    }
    // Only ASCII dots became ASCII underscores: still UTF-8.
    std::borrow::Cow::Owned(String::from_utf8(out).unwrap_or_default())
}

/// The end of the match of `\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`
/// starting at `i`, as Go's regexp finds it (the last part greedy).
fn ipv4_at(s: &[u8], i: usize) -> Option<usize> {
    let mut pos = i;
    for part in 0..4 {
        let run = s[pos..].iter().take_while(|b| b.is_ascii_digit()).count();
        if run == 0 {
            return None;
        }
        if part == 3 {
            return Some(pos + run.min(3));
        }
        if run > 3 || s.get(pos + run) != Some(&b'.') {
            return None;
        }
        pos += run + 1;
    }
    None
}

impl Stats {
    /// A descriptor of `domain`, which no configuration names.
    pub fn domain_not_found(&self, domain: &str) {
        let domain = sanitized(domain);
        let mut seen = self
            .not_found
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match seen.get_mut(&*domain) {
            Some(n) => *n += 1,
            None => {
                seen.insert(domain.into_owned(), 1);
            }
        }
    }

    /// A gRPC call answered in `took`.
    pub fn call(&self, took: std::time::Duration) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        self.times[bucket].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.time_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Adds a request's hits, by stat key.
    pub fn add(&self, _domain: &str, hits: Vec<(String, Hits)>) {
        if hits.is_empty() {
            return;
        }
        let mut limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, h) in hits {
            let key = sanitized(&key);
            let e = match limits.get_mut(&*key) {
                Some(e) => e,
                None => limits.entry(key.into_owned()).or_default(),
            };
            e.total += h.total;
            e.over += h.over;
            e.near += h.near;
            e.within += h.within;
            e.shadow += h.shadow;
            e.over_local += h.over_local;
        }
    }

    fn each(&self) -> Vec<(String, Hits)> {
        let limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
        limits.iter().map(|(k, h)| (k.clone(), *h)).collect()
    }

    /// Prometheus text (version 0.0.4), with envoyproxy/ratelimit's
    /// default mapping: the stat key's first part is `domain`, the next
    /// `key1`, the one after `key2`; deeper parts are left out. The
    /// values only grow, but the names are the mapping's, without the
    /// `_total` Prometheus keeps for a counter's name, so they are
    /// declared `untyped`: `rate()` and `increase()` read them as they
    /// read counters, and `promtool check metrics` finds nothing to say.
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        let rows = self.each();
        let series: [Series; 5] = [
            ("total_hits", |h| h.total),
            ("over_limit", |h| h.over),
            ("near_limit", |h| h.near),
            ("within_limit", |h| h.within),
            ("shadow_mode", |h| h.shadow),
        ];
        for (name, value) in series {
            let metric = format!("ratelimit_service_rate_limit_{name}");
            let _ = writeln!(
                out,
                "# HELP {metric} Hits ({name}) per limit, as envoyproxy/ratelimit counts them."
            );
            let _ = writeln!(out, "# TYPE {metric} untyped");
            // Series whose labels coincide (deeper keys left out) add up.
            let mut merged: BTreeMap<String, u64> = BTreeMap::new();
            for (key, h) in &rows {
                *merged.entry(labels(key)).or_default() += value(h);
            }
            for (labels, v) in merged {
                let _ = writeln!(out, "{metric}{{{labels}}} {v}");
            }
        }
        for (name, counter) in [
            ("config_load_success", &self.loads),
            ("config_load_error", &self.load_errors),
        ] {
            let metric = format!("ratelimit_service_{name}");
            let _ = writeln!(out, "# HELP {metric} Configurations loaded ({name}).");
            let _ = writeln!(out, "# TYPE {metric} untyped");
            let _ = writeln!(out, "{metric} {}", counter.load(Ordering::Relaxed));
        }
        let metric = "ratelimit_service_should_rate_limit_error";
        let _ = writeln!(out, "# HELP {metric} Calls failed, by the error's kind.");
        let _ = writeln!(out, "# TYPE {metric} untyped");
        for (kind, counter) in [
            ("redis_error", &self.redis_errors),
            ("service_error", &self.service_errors),
        ] {
            let v = counter.load(Ordering::Relaxed);
            let _ = writeln!(out, "{metric}{{err_type=\"{kind}\"}} {v}");
        }
        let metric = "ratelimit_service_total_requests";
        let _ = writeln!(out, "# HELP {metric} gRPC calls, by method.");
        let _ = writeln!(out, "# TYPE {metric} untyped");
        let v = self.requests.load(Ordering::Relaxed);
        let _ = writeln!(out, "{metric}{{grpc_method=\"ShouldRateLimit\"}} {v}");
        let metric = "ratelimit_service_response_time_seconds";
        let _ = writeln!(out, "# HELP {metric} How long gRPC calls took, by method.");
        let _ = writeln!(out, "# TYPE {metric} histogram");
        let method = "grpc_method=\"ShouldRateLimit\"";
        let mut below = 0;
        for (i, n) in self.times.iter().enumerate() {
            below += n.load(Ordering::Relaxed);
            let le = BUCKETS.get(i).map_or("+Inf".to_owned(), f64::to_string);
            let _ = writeln!(out, "{metric}_bucket{{{method},le=\"{le}\"}} {below}");
        }
        let sum = self.time_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{metric}_sum{{{method}}} {sum}");
        let _ = writeln!(out, "{metric}_count{{{method}}} {below}");
        let metric = "ratelimit_service_global_shadow_mode";
        let _ = writeln!(
            out,
            "# HELP {metric} Answers SHADOW_MODE turned from over to OK."
        );
        let _ = writeln!(out, "# TYPE {metric} untyped");
        let _ = writeln!(
            out,
            "{metric} {}",
            self.global_shadow.load(Ordering::Relaxed)
        );
        out
    }

    /// The statsd names and values, one per line (the debug port's
    /// `/stats`).
    pub fn statsd(&self) -> String {
        let mut out = String::new();
        for (key, h) in self.each() {
            for (name, v) in [
                ("total_hits", h.total),
                ("over_limit", h.over),
                ("near_limit", h.near),
                ("within_limit", h.within),
                ("shadow_mode", h.shadow),
                ("over_limit_with_local_cache", h.over_local),
            ] {
                let _ = writeln!(out, "ratelimit.service.rate_limit.{key}.{name}: {v}");
            }
        }
        let _ = writeln!(
            out,
            "ratelimit.service.config_load_success: {}",
            self.loads.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "ratelimit.service.config_load_error: {}",
            self.load_errors.load(Ordering::Relaxed)
        );
        let seen = self
            .not_found
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (domain, n) in seen.iter() {
            let _ = writeln!(
                out,
                "ratelimit.service.rate_limit.{domain}.domain_not_found: {n}"
            );
        }
        for (name, counter) in [
            (
                "ratelimit.service.call.should_rate_limit.redis_error",
                &self.redis_errors,
            ),
            (
                "ratelimit.service.call.should_rate_limit.service_error",
                &self.service_errors,
            ),
            ("ratelimit.service.global_shadow_mode", &self.global_shadow),
            (
                "ratelimit_server.ShouldRateLimit.total_requests",
                &self.requests,
            ),
        ] {
            let _ = writeln!(out, "{name}: {}", counter.load(Ordering::Relaxed));
        }
        out
    }
}

/// A stat key's labels: `domain`, `key1`, and `key2` when it has three
/// parts or more.
fn labels(key: &str) -> String {
    let mut parts = key.splitn(4, '.');
    let domain = parts.next().unwrap_or_default();
    let key1 = parts.next().unwrap_or_default();
    let mut out = format!("domain=\"{}\",key1=\"{}\"", escape(domain), escape(key1));
    if let Some(key2) = parts.next() {
        let _ = write!(out, ",key2=\"{}\"", escape(key2));
    }
    out
}

/// A label value, escaped as the text format asks.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_address_in_a_stat_key_loses_its_dots_as_go_s_regexp_finds_it() {
        assert_eq!(sanitized("d.ip_10.0.0.1"), "d.ip_10_0_0_1");
        assert!(matches!(
            sanitized("d.k_v.w_x1"),
            std::borrow::Cow::Borrowed("d.k_v.w_x1")
        ));
        assert_eq!(sanitized("d.ip_1234.5.6.7.8"), "d.ip_1234_5_6_7.8");
        assert_eq!(sanitized("d.v_1.2.3"), "d.v_1.2.3");
        assert_eq!(sanitized("d.a:b|c.1.2.3.4567"), "d.a_b_c.1_2_3_4567");
    }

    #[test]
    fn a_domain_not_found_counts_under_its_sanitized_name() {
        let stats = Stats::default();
        stats.domain_not_found("a:b");
        stats.domain_not_found("a:b");
        assert!(stats
            .statsd()
            .contains("ratelimit.service.rate_limit.a_b.domain_not_found: 2\n"));
    }

    #[test]
    fn labels_follow_the_default_mapping() {
        assert_eq!(labels("d.k1_v"), r#"domain="d",key1="k1_v""#);
        assert_eq!(labels("d.a.b.c"), r#"domain="d",key1="a",key2="b""#);
        let s = Stats::default();
        s.add(
            "d",
            vec![(
                "d.a_1".into(),
                Hits {
                    total: 3,
                    over: 1,
                    ..Hits::default()
                },
            )],
        );
        let text = s.prometheus();
        assert!(
            text.contains("ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"a_1\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("ratelimit_service_rate_limit_over_limit{domain=\"d\",key1=\"a_1\"} 1"),
            "{text}"
        );
    }
}
