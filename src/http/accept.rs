//! [`Body::Accept`]: the refusal's body chosen by the request's `Accept`
//! (RFC 9110 §12.5.1): the acceptable type of the highest `q` among the
//! three the layer writes, a more specific range winning over a wider one
//! for the same type, ties going to the first of problem+json, JSON, text.
//! No `Accept`, or one that accepts none of them: text (a refusal is
//! answered whatever the client accepts; RFC 9110 allows that rather than
//! a 406).

use http::HeaderValue;

use super::terms::Body;

/// The bodies the layer can write, each with its media type, in the order
/// ties go.
const OFFERED: [(Body, &str, &str); 3] = [
    (Body::Problem, "application", "problem+json"),
    (Body::Json, "application", "json"),
    (Body::Text, "text", "plain"),
];

/// The body for a request that sent `accept` (every `Accept` field line).
pub(super) fn choose<'a>(accept: impl Iterator<Item = &'a HeaderValue>) -> Body {
    // Per offered type: the quality of the most specific range that
    // matches it (specificity 3: type/subtype, 2: type/*, 1: */*).
    let mut best = [(0u8, 0u16); 3];
    for value in accept {
        let Ok(value) = value.to_str() else { continue };
        for range in value.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim();
            let Some((ty, sub)) = media.split_once('/') else {
                continue;
            };
            let q = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .map_or(1000, |(_, v)| quality(v.trim()));
            for (i, (_, oty, osub)) in OFFERED.iter().enumerate() {
                let specificity = match (ty.trim(), sub.trim()) {
                    ("*", "*") => 1,
                    (t, "*") if t.eq_ignore_ascii_case(oty) => 2,
                    (t, s) if t.eq_ignore_ascii_case(oty) && s.eq_ignore_ascii_case(osub) => 3,
                    _ => continue,
                };
                if specificity > best[i].0 {
                    best[i] = (specificity, q);
                }
            }
        }
    }
    // The highest q (set only where a range matched), the first of equals
    // (`max_by_key` keeps the last); none above 0, or no range: text.
    let first_best = (0..OFFERED.len()).rev().max_by_key(|&i| best[i].1);
    first_best
        .filter(|&i| best[i].1 > 0)
        .map_or(Body::Text, |i| OFFERED[i].0)
}

/// A `qvalue` in thousandths (`0.5` is 500); what is not one counts as 0.
fn quality(v: &str) -> u16 {
    let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return 0;
    }
    match whole {
        "1" => 1000,
        "0" => format!("{frac:0<3}").parse().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(accept: &str) -> Body {
        choose([HeaderValue::from_str(accept).unwrap()].iter())
    }

    #[test]
    fn each_type_asked_for_is_written() {
        assert_eq!(pick("application/problem+json"), Body::Problem);
        assert_eq!(pick("application/json"), Body::Json);
        assert_eq!(pick("text/plain"), Body::Text);
        assert_eq!(pick("text/html, application/json;q=0.9"), Body::Json);
    }

    #[test]
    fn quality_then_order_decides() {
        assert_eq!(pick("application/json;q=0.5, text/plain;q=0.8"), Body::Text);
        assert_eq!(
            pick("application/json, application/problem+json"),
            Body::Problem
        );
        assert_eq!(pick("*/*"), Body::Problem);
        assert_eq!(pick("application/*;q=0.2, text/*;q=0.3"), Body::Text);
        // The specific range's q=0 excludes it, whatever the wider one says.
        assert_eq!(
            pick("application/*, application/problem+json;q=0"),
            Body::Json
        );
    }

    #[test]
    fn nothing_acceptable_or_garbage_is_text() {
        assert_eq!(choose(std::iter::empty()), Body::Text);
        assert_eq!(pick("image/png"), Body::Text);
        assert_eq!(pick("application/json;q=2"), Body::Text);
        assert_eq!(pick(",,;;=q"), Body::Text);
        assert_eq!(pick(&"a/b,".repeat(10_000)), Body::Text);
    }
}
