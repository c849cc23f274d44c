//! `/json`: a `RateLimitRequest` in proto3's JSON mapping in, its
//! `RateLimitResponse` out, as envoyproxy/ratelimit's `/json` speaks them
//! (fields by their JSON names or proto names, enums by name or number,
//! 64-bit integers as numbers or strings; out: JSON names, enum names,
//! zero values left out, durations as `"37s"`). An unknown field is an
//! error naming it.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{Map, Value};

use crate::config::Unit;

/// The request `body` holds, or why not.
pub fn request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("bad JSON: {e}"))?;
    let fields = object(&value, "the request")?;
    let mut out = RateLimitRequest::default();
    for (name, v) in fields {
        match name.as_str() {
            "domain" => out.domain = text(v, name)?,
            "descriptors" => {
                for d in array(v, name)? {
                    out.descriptors.push(descriptor(d)?);
                }
            }
            "hitsAddend" | "hits_addend" => {
                out.hits_addend = u32::try_from(whole(v, name)?)
                    .map_err(|_| format!("{name} is over 4294967295"))?;
            }
            other => return Err(format!("unknown field \"{other}\" in the request")),
        }
    }
    Ok(out)
}

fn descriptor(v: &Value) -> Result<RateLimitDescriptor, String> {
    let mut out = RateLimitDescriptor::default();
    for (name, v) in object(v, "a descriptor")? {
        match name.as_str() {
            "entries" => {
                for e in array(v, name)? {
                    let mut entry = Entry::default();
                    for (name, v) in object(e, "an entry")? {
                        match name.as_str() {
                            "key" => entry.key = text(v, name)?,
                            "value" => entry.value = text(v, name)?,
                            other => return Err(format!("unknown field \"{other}\" in an entry")),
                        }
                    }
                    out.entries.push(entry);
                }
            }
            "limit" => {
                let mut limit = RateLimitOverride::default();
                for (name, v) in object(v, "a limit")? {
                    match name.as_str() {
                        "requestsPerUnit" | "requests_per_unit" => {
                            limit.requests_per_unit = u32::try_from(whole(v, name)?)
                                .map_err(|_| format!("{name} is over 4294967295"))?;
                        }
                        "unit" => limit.unit = unit(v)?,
                        other => return Err(format!("unknown field \"{other}\" in a limit")),
                    }
                }
                out.limit = Some(limit);
            }
            "hitsAddend" | "hits_addend" => {
                out.hits_addend = Some(UInt64Value {
                    value: whole(v, name)?,
                })
            }
            "isNegativeHits" | "is_negative_hits" => {
                out.is_negative_hits = v.as_bool().ok_or("isNegativeHits must be true or false")?;
            }
            other => return Err(format!("unknown field \"{other}\" in a descriptor")),
        }
    }
    Ok(out)
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{what} must be an object"))
}

fn array<'a>(v: &'a Value, name: &str) -> Result<&'a Vec<Value>, String> {
    v.as_array().ok_or_else(|| format!("{name} must be a list"))
}

fn text(v: &Value, name: &str) -> Result<String, String> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{name} must be a string"))
}

/// A whole number, as a JSON number or a decimal string.
fn whole(v: &Value, name: &str) -> Result<u64, String> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| format!("{name} must be a whole number from 0 up, got {v}"))
}

/// A unit by name (any of the proto's, `UNKNOWN` too) or number.
fn unit(v: &Value) -> Result<i32, String> {
    match v {
        Value::Number(n) => n.as_i64().and_then(|n| i32::try_from(n).ok()),
        Value::String(s) if s == "UNKNOWN" => Some(0),
        Value::String(s) => Unit::ALL
            .into_iter()
            .find(|u| u.name() == s)
            .map(Unit::number),
        _ => None,
    }
    .ok_or_else(|| format!("unit must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR, got {v}"))
}

/// The code's proto name.
fn code(n: i32) -> &'static str {
    match n {
        1 => "OK",
        2 => "OVER_LIMIT",
        _ => "UNKNOWN",
    }
}

/// A JSON object whose fields keep the order they were written in (the
/// proto's field order, as protojson writes them).
#[derive(Default)]
struct Object(Vec<(&'static str, String)>);

impl Object {
    fn field(&mut self, name: &'static str, value: impl Into<Value>) {
        self.0.push((name, value.into().to_string()));
    }

    fn raw(&mut self, name: &'static str, json: String) {
        self.0.push((name, json));
    }

    fn text(self) -> String {
        let fields: Vec<String> = self
            .0
            .into_iter()
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        format!("{{{}}}", fields.join(","))
    }
}

/// `response` in proto3's JSON mapping, its fields in the proto's order.
pub fn response(response: &RateLimitResponse) -> String {
    let mut out = Object::default();
    if response.overall_code != 0 {
        out.field("overallCode", code(response.overall_code));
    }
    let statuses: Vec<String> = response
        .statuses
        .iter()
        .map(|s| {
            let mut o = Object::default();
            if s.code != 0 {
                o.field("code", code(s.code));
            }
            if let Some(l) = &s.current_limit {
                let mut limit = Object::default();
                if !l.name.is_empty() {
                    limit.field("name", l.name.clone());
                }
                if l.requests_per_unit != 0 {
                    limit.field("requestsPerUnit", l.requests_per_unit);
                }
                if let Some(u) = Unit::from_number(l.unit) {
                    limit.field("unit", u.name());
                }
                o.raw("currentLimit", limit.text());
            }
            if s.limit_remaining != 0 {
                o.field("limitRemaining", s.limit_remaining);
            }
            if let Some(d) = &s.duration_until_reset {
                o.field("durationUntilReset", format!("{}s", d.seconds));
            }
            o.text()
        })
        .collect();
    if !statuses.is_empty() {
        out.raw("statuses", format!("[{}]", statuses.join(",")));
    }
    let headers: Vec<String> = response
        .response_headers_to_add
        .iter()
        .map(|h| {
            let mut o = Object::default();
            o.field("key", h.key.clone());
            o.field("value", h.value.clone());
            o.text()
        })
        .collect();
    if !headers.is_empty() {
        out.raw("responseHeadersToAdd", format!("[{}]", headers.join(",")));
    }
    out.text()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_either_name_and_refuses_what_it_does_not_know() {
        let r = request(
            br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":"2","limit":{"requestsPerUnit":5,"unit":"MINUTE"}}],"hitsAddend":3}"#,
        )
        .unwrap();
        assert_eq!((r.domain.as_str(), r.hits_addend), ("d", 3));
        let d = &r.descriptors[0];
        assert_eq!(d.hits_addend.as_ref().unwrap().value, 2);
        assert_eq!(d.limit.as_ref().unwrap().unit, 2);
        let e = request(br#"{"domain":"d","extra":1}"#).unwrap_err();
        assert!(e.contains("\"extra\""), "{e}");
        assert!(request(b"{").unwrap_err().starts_with("bad JSON"));
    }
}
