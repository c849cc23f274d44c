//! `ShouldRateLimit`, decided as envoyproxy/ratelimit decides it: each
//! descriptor's limit found ([`matching`]), `replaces` and `unlimited`
//! applied across the request, the hits counted before the decision (a
//! refused hit stays counted), over once a window's count passes the
//! limit, `shadow_mode` never refusing, quota descriptors (`quota_mode`,
//! `QUOTA_MODE`) refusing only all together, the stats counted in hits,
//! and the response headers taken from the descriptor with the least
//! remaining (or the last rate limit descriptor over).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration;

use crate::config::{Config, Counting, Unit};
use crate::counts::{Counted, Counts};
use crate::matching::{self, Entry, Found};
use crate::overs::Overs;
use crate::stats::{Hits, Stats};
use crate::store::{windowed, FailPolicy, Hit, Store};

/// A request the service cannot answer: the message envoyproxy/ratelimit
/// gives, and whether the request itself is malformed (gRPC
/// `INVALID_ARGUMENT`, else `UNKNOWN` as there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The message.
    pub message: String,
    /// The request's fault (an override's unknown unit).
    pub invalid: bool,
    /// The store's failure (counted apart from the service's own).
    pub store: bool,
}

impl Failure {
    fn unknown(message: &str) -> Failure {
        Failure {
            message: message.to_owned(),
            invalid: false,
            store: false,
        }
    }
}

/// The response headers (`LIMIT_RESPONSE_HEADERS_ENABLED`).
#[derive(Clone, Debug)]
pub struct Headers {
    /// `LIMIT_LIMIT_HEADER`.
    pub limit: String,
    /// `LIMIT_REMAINING_HEADER`.
    pub remaining: String,
    /// `LIMIT_RESET_HEADER`.
    pub reset: String,
    /// `PACELINE_HEADERS=draft-11`: the IETF draft's two fields,
    /// `RateLimit-Policy` and `RateLimit`, instead of the three.
    pub draft: bool,
}

/// How the service decides, from the environment.
#[derive(Clone, Debug)]
pub struct Decide {
    /// `NEAR_LIMIT_RATIO`.
    pub near_limit_ratio: f32,
    /// `CACHE_KEY_PREFIX`.
    pub prefix: String,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    pub stop_increment_when_over: bool,
    /// `SHADOW_MODE`: the overall answer is never over.
    pub shadow_mode: bool,
    /// `QUOTA_MODE`: every descriptor but the unlimited is a quota
    /// descriptor (`quota_mode`).
    pub quota_mode: bool,
    /// The response headers, when on.
    pub headers: Option<Headers>,
    /// `LOCAL_CACHE_SIZE_IN_BYTES`: how much to keep of the counters seen
    /// over their limit, to refuse the rest of their window here (0:
    /// none).
    pub local_cache: usize,
}

/// The service: the configuration in force, the counters, the stats.
pub struct Service {
    config: RwLock<Option<Arc<Config>>>,
    store: Store,
    decide: Decide,
    stats: Stats,
    /// The counters seen over their limit (`LOCAL_CACHE_SIZE_IN_BYTES`,
    /// with a remote store).
    overs: Option<Overs>,
}

/// One descriptor on its way to its status.
struct Limited {
    found: Found,
    key: String,
    hits: u64,
    /// The hits added to the counter: `hits`, or 0 where
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` spares the counter (the
    /// decision and the stats still read `hits`, as envoyproxy/ratelimit's
    /// do).
    added: u64,
    /// Its window seen over its limit here before (the local cache): over,
    /// without asking the store.
    cached: bool,
}

impl Service {
    /// A service with no configuration yet.
    pub fn new(store: Store, decide: Decide) -> Service {
        let overs = if store.is_remote() {
            Overs::new(decide.local_cache)
        } else {
            None
        };
        Service {
            config: RwLock::new(None),
            store,
            decide,
            stats: Stats::default(),
            overs,
        }
    }

    /// Puts `config` in force: each request decides on one configuration,
    /// the one in force when it arrived.
    pub fn set_config(&self, config: Config) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(config));
    }

    /// The configuration in force.
    pub fn config(&self) -> Option<Arc<Config>> {
        self.config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The stats.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The counters in process.
    pub fn counts(&self) -> &Counts {
        &self.store.local
    }

    /// The answer to `request`.
    pub async fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Failure> {
        let answer = self.decide(request).await;
        if answer.as_ref().is_err_and(|f| !f.store) {
            self.stats.service_errors.fetch_add(1, Ordering::Relaxed);
        }
        answer
    }

    async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Failure> {
        if request.domain.is_empty() {
            return Err(Failure::unknown("rate limit domain must not be empty"));
        }
        if request.descriptors.is_empty() {
            return Err(Failure::unknown(
                "rate limit descriptor list must not be empty",
            ));
        }
        let config = self
            .config()
            .ok_or_else(|| Failure::unknown("no rate limit configuration loaded"))?;
        let domain = &request.domain;
        if !config.domains.contains_key(domain) {
            for _ in &request.descriptors {
                self.stats.domain_not_found(domain);
            }
        }
        let request_hits = u64::from(request.hits_addend.max(1));

        // Each descriptor's limit.
        let mut found = Vec::with_capacity(request.descriptors.len());
        for (i, d) in request.descriptors.iter().enumerate() {
            let entries: Vec<Entry> = d
                .entries
                .iter()
                .map(|e| Entry {
                    key: e.key.clone(),
                    value: e.value.clone(),
                })
                .collect();
            let over = d.limit.as_ref().map(|l| (l.requests_per_unit, l.unit));
            let f = matching::find(&config, domain, &entries, over).map_err(|bad| Failure {
                message: format!(
                    "descriptor {i}'s limit has unit {}, which names no unit (SECOND 1, MINUTE 2, HOUR 3, DAY 4, MONTH 5, YEAR 6)",
                    bad.0
                ),
                invalid: true,
                store: false,
            })?;
            let hits = d.hits_addend.as_ref().map_or(request_hits, |h| h.value);
            found.push((f, entries, hits));
        }
        let replaced: HashSet<String> = found
            .iter()
            .filter_map(|(f, _, _)| f.as_ref())
            .flat_map(|f| f.rule.replaces.iter().cloned())
            .collect();

        // The statuses of those no counter decides, and the rest to count;
        // which are quota descriptors (the unlimited are neither kind).
        let mut statuses: Vec<Option<DescriptorStatus>> = Vec::new();
        let mut limited: Vec<(usize, Limited)> = Vec::new();
        let global_quota = self.decide.quota_mode;
        let quota: Vec<Option<bool>> = found
            .iter()
            .map(|(f, _, _)| match f {
                Some(f) if f.rule.unlimited => None,
                Some(f) if !f.rule.name.is_empty() && replaced.contains(&f.rule.name) => {
                    Some(global_quota)
                }
                Some(f) => Some(global_quota || f.quota_mode),
                None => Some(global_quota),
            })
            .collect();
        for (i, (f, entries, hits)) in found.into_iter().enumerate() {
            let status = match f {
                None => Some(status(Code::Ok, None, 0, None)),
                Some(f) if f.rule.unlimited => Some(status(Code::Ok, None, u32::MAX, None)),
                Some(f) if !f.rule.name.is_empty() && replaced.contains(&f.rule.name) => {
                    Some(status(Code::Ok, None, 0, None))
                }
                Some(f) => {
                    let key = self.cache_key(domain, &entries, &f.shared);
                    limited.push((
                        i,
                        Limited {
                            found: f,
                            key,
                            hits,
                            added: hits,
                            cached: false,
                        },
                    ));
                    None
                }
            };
            statuses.push(status);
        }

        // With STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, a request one of
        // whose fixed windows would pass its limit counts on those only.
        let now_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // The fixed windows' counters, in `limited`'s order.
        let fixed: Vec<(usize, Unit)> = limited
            .iter()
            .enumerate()
            .filter_map(
                |(j, (_, l))| match (l.found.rule.counting, l.found.rule.unit) {
                    (Counting::Fixed, Some(unit)) => Some((j, unit)),
                    _ => None,
                },
            )
            .collect();
        // The local cache's counters: over, asked of no store; under
        // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, the rest count nothing.
        let mut any_cached = false;
        if let Some(overs) = &self.overs {
            let cached: Vec<usize> = fixed
                .iter()
                .filter(|(j, unit)| {
                    overs.holds(&windowed(&limited[*j].1.key, *unit, now_s).0, now_s)
                })
                .map(|(j, _)| *j)
                .collect();
            for j in cached {
                limited[j].1.cached = true;
                any_cached = true;
            }
            if any_cached && self.decide.stop_increment_when_over {
                for (_, l) in &mut limited {
                    l.added = 0;
                }
            }
        }
        let fixed: Vec<(usize, Unit)> = fixed
            .into_iter()
            .filter(|(j, _)| !limited[*j].1.cached)
            .collect();
        let mut failed: Option<String> = None;
        if self.decide.stop_increment_when_over && !any_cached && !fixed.is_empty() {
            let asked: Vec<(Unit, &str)> = fixed
                .iter()
                .map(|(j, unit)| (*unit, limited[*j].1.key.as_str()))
                .collect();
            let counts = match self.store.count(&asked, now_s).await {
                Ok(c) => c,
                Err(e) => {
                    failed = Some(e);
                    Vec::new()
                }
            };
            let mut over = vec![false; limited.len()];
            for ((j, _), count) in fixed.iter().zip(counts) {
                let l = &limited[*j].1;
                over[*j] = count + l.hits > u64::from(l.found.rule.requests_per_unit);
            }
            if over.iter().any(|o| *o) {
                for ((_, l), over) in limited.iter_mut().zip(over) {
                    if !over && l.found.rule.counting == Counting::Fixed {
                        l.added = 0;
                    }
                }
            }
        }

        let mut afters: Vec<Option<u64>> = vec![None; limited.len()];
        if failed.is_none() && !fixed.is_empty() {
            let items: Vec<Hit<'_>> = fixed
                .iter()
                .map(|(j, unit)| {
                    let l = &limited[*j].1;
                    Hit {
                        unit: *unit,
                        key: l.key.as_str(),
                        hits: l.added,
                        limit: u64::from(l.found.rule.requests_per_unit),
                        leased: l.found.rule.leased,
                    }
                })
                .collect();
            match self.store.take(&items, now_s).await {
                Ok(counts) => {
                    for ((j, _), after) in fixed.iter().zip(counts) {
                        afters[*j] = Some(after);
                    }
                }
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = &failed {
            tracing::error!(error = %e, policy = ?self.store.fail, "the store failed a request");
            let errors = if self.store.is_redis() {
                &self.stats.redis_errors
            } else {
                &self.stats.service_errors
            };
            errors.fetch_add(1, Ordering::Relaxed);
            if self.store.fail == FailPolicy::Error {
                return Err(Failure {
                    store: true,
                    ..Failure::unknown(e)
                });
            }
        }
        if let Some(overs) = &self.overs {
            for (j, unit) in &fixed {
                let l = &limited[*j].1;
                if afters[*j].is_some_and(|a| a > u64::from(l.found.rule.requests_per_unit)) {
                    let (name, start) = windowed(&l.key, *unit, now_s);
                    overs.mark(&name, start + unit.seconds(), now_s);
                }
            }
        }
        let mut hits_seen = Vec::with_capacity(limited.len());
        for ((i, l), after) in limited.into_iter().zip(afters) {
            let (s, counted) = self.decide_one(&l, now_s, after);
            hits_seen.push((l.found.stat_key, counted));
            statuses[i] = Some(s);
        }
        self.stats.add(domain, hits_seen);

        let statuses: Vec<DescriptorStatus> = statuses.into_iter().flatten().collect();
        // Over when a rate limit descriptor is over, or every quota
        // descriptor (if any) is.
        let is_over = |s: &DescriptorStatus| s.code == Code::OverLimit as i32;
        let kinds = || statuses.iter().zip(&quota);
        let over = kinds().any(|(s, q)| *q == Some(false) && is_over(s)) || {
            let mut quotas = kinds().filter(|(_, q)| **q == Some(true)).peekable();
            quotas.peek().is_some() && quotas.all(|(s, _)| is_over(s))
        };
        let overall = if over && !self.decide.shadow_mode {
            Code::OverLimit
        } else {
            if over {
                self.stats.global_shadow.fetch_add(1, Ordering::Relaxed);
            }
            Code::Ok
        };
        let headers = self
            .decide
            .headers
            .as_ref()
            .map(|h| response_headers(h, &statuses, &quota))
            .unwrap_or_default();
        Ok(RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            response_headers_to_add: headers,
            ..Default::default()
        })
    }

    /// The counter's name: the prefix, the domain, then each entry's key
    /// and value (or the wildcard standing for it), as envoyproxy/ratelimit
    /// names its cache keys before their window.
    fn cache_key(&self, domain: &str, entries: &[Entry], shared: &[Option<String>]) -> String {
        let mut key = format!("{}{domain}_", self.decide.prefix);
        for (e, s) in entries.iter().zip(shared) {
            key.push_str(&e.key);
            key.push('_');
            key.push_str(s.as_deref().unwrap_or(&e.value));
            key.push('_');
        }
        key
    }

    /// One counted descriptor's status, and its hits for the stats.
    fn decide_one(&self, l: &Limited, now_s: u64, after: Option<u64>) -> (DescriptorStatus, Hits) {
        let rule = &l.found.rule;
        let unit = rule.unit.unwrap_or(Unit::Second);
        let limit = u64::from(rule.requests_per_unit);
        let current = Some(RateLimit {
            name: rule.name.clone(),
            requests_per_unit: rule.requests_per_unit,
            unit: unit.number(),
        });
        let hits = l.hits;
        let mut h = Hits {
            total: hits,
            ..Hits::default()
        };
        let (code, remaining, reset) = match rule.counting {
            // Over before, in this window (the local cache).
            Counting::Fixed if l.cached => {
                h.over = hits;
                h.over_local = hits;
                let div = unit.seconds();
                (Code::OverLimit, 0, div - now_s % div)
            }
            // The store failed it: as the fail policy says, counted nowhere.
            Counting::Fixed if after.is_none() => {
                h = Hits::default();
                let div = unit.seconds();
                match self.store.fail {
                    FailPolicy::Closed => (Code::OverLimit, 0, div - now_s % div),
                    _ => (Code::Ok, limit, div - now_s % div),
                }
            }
            Counting::Fixed => {
                let after = after.unwrap_or(0);
                let c = Counted {
                    before: after.saturating_sub(hits),
                    after,
                };
                let div = unit.seconds();
                let reset = div - now_s % div;
                let near = (f64::from(limit as f32 * self.decide.near_limit_ratio)).floor() as u64;
                if c.after > limit {
                    if c.before >= limit {
                        h.over = hits;
                    } else {
                        h.over = c.after - limit;
                        h.near = limit - near.max(c.before);
                    }
                    (Code::OverLimit, 0, reset)
                } else {
                    if c.after > near {
                        h.near = if c.before >= near {
                            hits
                        } else {
                            c.after - near
                        };
                    }
                    h.within = hits;
                    (Code::Ok, limit - c.after, reset)
                }
            }
            Counting::Smooth { burst } => {
                let paced = if limit == 0 {
                    None
                } else {
                    self.store
                        .local
                        .smooth(rule.requests_per_unit, unit, burst)
                        .ok()
                        .map(|lim| Counts::pace(&lim, &l.key, hits))
                };
                match paced {
                    Some(p) if p.admitted => {
                        h.within = hits;
                        (Code::Ok, p.available, p.reset_s)
                    }
                    Some(p) => {
                        h.over = hits;
                        (Code::OverLimit, 0, p.reset_s)
                    }
                    None => {
                        h.over = hits;
                        (Code::OverLimit, 0, unit.seconds())
                    }
                }
            }
        };
        let mut code = code;
        if code == Code::OverLimit && l.found.shadow_mode {
            code = Code::Ok;
            h.shadow = h.over;
        }
        let remaining = u32::try_from(remaining).unwrap_or(u32::MAX);
        (status(code, current, remaining, Some(reset)), h)
    }
}

fn status(
    code: Code,
    limit: Option<RateLimit>,
    remaining: u32,
    reset_s: Option<u64>,
) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        current_limit: limit,
        limit_remaining: remaining,
        duration_until_reset: reset_s.map(|s| Duration {
            seconds: i64::try_from(s).unwrap_or(i64::MAX),
            nanos: 0,
        }),
        ..Default::default()
    }
}

/// The headers of the descriptor with the least remaining among those with
/// a limit (the first of equals), or of the last one over that is not a
/// quota descriptor.
fn response_headers(
    names: &Headers,
    statuses: &[DescriptorStatus],
    quota: &[Option<bool>],
) -> Vec<HeaderValue> {
    let mut chosen: Option<&DescriptorStatus> = None;
    for s in statuses.iter().filter(|s| s.current_limit.is_some()) {
        if chosen.is_none_or(|c| s.limit_remaining < c.limit_remaining) {
            chosen = Some(s);
        }
    }
    if let Some((last_over, _)) = statuses.iter().zip(quota).rfind(|(s, q)| {
        s.current_limit.is_some() && s.code == Code::OverLimit as i32 && **q != Some(true)
    }) {
        chosen = Some(last_over);
    }
    let Some(s) = chosen else {
        return Vec::new();
    };
    let limit = s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
    let reset = s.duration_until_reset.as_ref().map_or(0, |d| d.seconds);
    let fields = if names.draft {
        // draft-ietf-httpapi-ratelimit-headers-11: the policy (its quota
        // and window) and what is left of it, one item named for the rule.
        let (name, window) = s.current_limit.as_ref().map_or((String::new(), 0), |l| {
            let secs = Unit::from_number(l.unit).map_or(0, Unit::seconds);
            (l.name.clone(), secs)
        });
        let item = sf_string(if name.is_empty() { "default" } else { &name });
        vec![
            (
                "RateLimit-Policy".to_owned(),
                format!("{item};q={limit};w={window}"),
            ),
            (
                "RateLimit".to_owned(),
                format!("{item};r={};t={reset}", s.limit_remaining),
            ),
        ]
    } else {
        vec![
            (names.limit.clone(), limit.to_string()),
            (names.remaining.clone(), s.limit_remaining.to_string()),
            (names.reset.clone(), reset.to_string()),
        ]
    };
    fields
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key,
            value,
            ..Default::default()
        })
        .collect()
}

/// A Structured Fields string: quoted, `"` and `\` escaped, anything
/// outside printable ASCII left out.
fn sf_string(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}
