//! The three answers as text: the JSON document, the HTML page around it,
//! and the Prometheus text. Written by hand, without serde: the shapes are
//! small and fixed, and every string goes through one escape.

use std::fmt::{self, Write as _};
use std::sync::OnceLock;

use http::HeaderValue;
use sha2::{Digest, Sha256};

use super::query::Query;
use super::select::Listing;
use super::{Kind, Registered};
use crate::http::json::Json;
use crate::keyed::KeyedStats;
use crate::observe::stats::{self, Stats};
use crate::values::limit::Limits;

/// The page's script, run once it has loaded: renders the embedded rows.
const SCRIPT: &str = include_str!("page.js");
/// The page's style sheet.
const STYLE: &str = include_str!("page.css");
/// The page, each value it is filled with marked `{{name}}` where it goes
/// (filled by `write_html`).
const PAGE: &str = include_str!("page.html");

/// The policy the page is served with: nothing but its own inline script
/// and style sheet (named by their SHA-256, the `sha2` crate's, which the
/// layer's long keys and the remote limiters' keys digest with too), no
/// connection, no frame, forms only to itself.
pub(super) fn csp() -> HeaderValue {
    static CSP: OnceLock<HeaderValue> = OnceLock::new();
    CSP.get_or_init(|| {
        let policy = format!(
            "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; \
             form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
            base64(&Sha256::digest(SCRIPT)),
            base64(&Sha256::digest(STYLE)),
        );
        // Base64 and ASCII only: always a valid header value.
        HeaderValue::from_str(&policy).unwrap_or(HeaderValue::from_static("default-src 'none'"))
    })
    .clone()
}

/// `bytes` in standard base64, padded (RFC 4648, 4), as CSP hash sources are.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        // The chunk's bytes, big-endian, in the top 24 bits (zeros after).
        let n = chunk.iter().fold(0, |n, b| n << 8 | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            let sextet = char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]);
            out.push(if i <= chunk.len() { sextet } else { '=' });
        }
    }
    out
}

/// The `/json` document:
///
/// ```text
/// {"query": {"prefix": .., "limiter": .., "fill_gt": .., "fill_lt": .., "at_rest": false, "sort": .., "order": .., "limit": ..},
///  "matched": N, "shown": n, "at_rest": R,
///  "limiters": [{"name": .., "kind": "keyed", "rate": "5/s", "burst": 11, "keys": .., "max_keys": .., "bytes": ..,
///                "admitted": .., "refused": .., "pruned": .., "evicted": ..},
///               {"name": .., "kind": "counted", "admitted": .. | null, "refused": .. | null}],
///  "buckets": [{"limiter": .., "key": .., "rate": "5/s", "per_second": 5.0, "burst": 11, "fill": 0.5,
///               "next_free": 0.0, "idle": 0.25, "refused": 0, "window": null}]}
/// ```
///
/// A key counted by window has its window, the count in it and the
/// seconds until it ends instead of `null`: `"window": {"window": "day",
/// "count": 3, "ends": 12.5}` (its `rate` the quota over the window's
/// nominal length, its `burst` the quota, its `fill` the count over it).
///
/// A keyed limiter's entry also lists the limits in force, the default
/// first (`"key": null`), then at most [`LIMITS_SHOWN`] overrides, each
/// with the layer it came from (`null`: none, as built or set by a call), and `"overrides"`,
/// how many there are: `"limits": [{"key": null, "rate": "5/s", "burst":
/// 11, "layer": "global"}, ..], "overrides": N`.
///
/// `matched` counts the buckets the query selects, `shown` those listed
/// (at most its `limit`), and `at_rest` those its filters select at rest
/// (fill 0), which only `"at_rest": true` lists (and counts in `matched`).
/// Durations in seconds. `<`, `>` and `&` are escaped wherever they occur,
/// so the document can sit inside a `<script>` element.
pub(super) fn json(
    limiters: &[Registered],
    query: &Query,
    listing: &Listing,
) -> Result<String, fmt::Error> {
    let mut out = String::with_capacity(256 + listing.rows.len() * 200);
    write!(
        out,
        "{{\"query\":{{\"prefix\":{},\"limiter\":{},\"fill_gt\":{},\"fill_lt\":{},\
         \"at_rest\":{},\"sort\":\"{}\",\"order\":\"{}\",\"limit\":{}}}",
        Json(&query.prefix),
        OrNull(query.limiter.as_deref().map(Json)),
        OrNull(query.fill_gt),
        OrNull(query.fill_lt),
        query.at_rest,
        query.sort.name(),
        if query.descending { "desc" } else { "asc" },
        query.limit
    )?;
    write!(
        out,
        ",\"matched\":{},\"shown\":{},\"at_rest\":{},\"limiters\":[",
        listing.matched,
        listing.rows.len(),
        listing.at_rest
    )?;
    for (i, registered) in limiters.iter().enumerate() {
        write!(out, "{}{{\"name\":{}", comma(i), Json(&registered.name))?;
        match &registered.kind {
            Kind::Keyed(limiter) => {
                let limiter = limiter.tracking();
                // The default first, then the overrides.
                let (limits, overrides) = limiter.limits_shown(LIMITS_SHOWN);
                let (totals, max_keys) = limiter.totals();
                write!(
                    out,
                    ",\"kind\":\"keyed\",\"rate\":{},\"burst\":{},\"keys\":{},\"max_keys\":{},\
                     \"bytes\":{},\"admitted\":{},\"refused\":{},\"pruned\":{},\"evicted\":{}",
                    Json(&limits.default_limit().rate().to_string()),
                    limits.default_limit().burst(),
                    totals.keys,
                    max_keys,
                    totals.bytes,
                    totals.admitted,
                    totals.refused,
                    totals.pruned,
                    totals.evicted
                )?;
                write_limits(&mut out, &limits, overrides)?;
            }
            Kind::Counted(limiter) => {
                let stats = limiter.stats();
                write!(
                    out,
                    ",\"kind\":\"counted\",\"admitted\":{},\"refused\":{}}}",
                    OrNull(stats.map(|s| s.admitted)),
                    OrNull(stats.map(|s| s.refused))
                )?;
            }
        }
    }
    out.push_str("],\"buckets\":[");
    for (i, (key, row)) in listing.rows.iter().enumerate() {
        write!(
            out,
            "{}{{\"limiter\":{},\"key\":{},\"rate\":{},\"per_second\":{},\"burst\":{},\"fill\":{},\
             \"next_free\":{},\"idle\":{},\"refused\":{},\"window\":",
            comma(i),
            Json(&limiters[row.limiter].name),
            Json(key),
            Json(&row.rate.to_string()),
            number(row.rate.per_second_f64()),
            row.burst,
            number(row.state.fill),
            number(row.state.next_free.as_secs_f64()),
            number(row.state.idle.as_secs_f64()),
            row.state.refused
        )?;
        match row.state.window {
            Some(w) => write!(
                out,
                "{{\"window\":{},\"count\":{},\"ends\":{}}}}}",
                Json(&w.window.to_string()),
                w.count,
                number(w.ends.as_secs_f64())
            )?,
            None => out.push_str("null}"),
        }
    }
    out.push_str("]}");
    Ok(out)
}

/// What goes before the `i`th item of a JSON array.
fn comma(i: usize) -> &'static str {
    if i > 0 {
        ","
    } else {
        ""
    }
}

/// A JSON number: finite, or `null` (JSON has no infinity). Written in
/// full (the shortest text that reads back to the same `f64`), so the
/// page's script sorts exactly the values the server sorted.
fn number(x: f64) -> OrNull<f64> {
    OrNull(x.is_finite().then_some(x))
}

/// A JSON value, or `null`.
struct OrNull<T>(Option<T>);

impl<T: fmt::Display> fmt::Display for OrNull<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(value) => value.fmt(f),
            None => f.write_str("null"),
        }
    }
}

/// Text for HTML, `<`, `>`, `&`, `"` and `'` escaped: safe in content and
/// in a quoted attribute.
struct Html<'a>(&'a str);

impl fmt::Display for Html<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '&' => f.write_str("&amp;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&#39;")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// The page: the filter form with the query's values, an empty table the
/// script fills from `json` (embedded as it is: [`json`] escapes `<`).
pub(super) fn html(
    limiters: &[Registered],
    query: &Query,
    json: &str,
) -> Result<String, fmt::Error> {
    let mut out = String::with_capacity(json.len() + STYLE.len() + SCRIPT.len() + 4096);
    let bound = |b: Option<f64>| b.map(|f| f.to_string()).unwrap_or_default();
    // One pass over the page: what fills a mark is never read for marks.
    let mut rest = PAGE;
    while let Some((text, after)) = rest.split_once("{{") {
        out.push_str(text);
        let (mark, after) = after.split_once("}}").unwrap_or((after, ""));
        rest = after;
        match mark {
            "style" => out.push_str(STYLE),
            "script" => out.push_str(SCRIPT),
            "json" => out.push_str(json),
            "prefix" => write!(out, "{}", Html(&query.prefix))?,
            "fill_gt" => write!(out, "{}", Html(&bound(query.fill_gt)))?,
            "fill_lt" => write!(out, "{}", Html(&bound(query.fill_lt)))?,
            "sort" => out.push_str(query.sort.name()),
            "order" => out.push_str(if query.descending { "desc" } else { "asc" }),
            "limit" => write!(out, "{}", query.limit)?,
            "at_rest" if query.at_rest => out.push_str(" checked"),
            "at_rest" => {}
            "limiters" => {
                for registered in limiters.iter().filter(|r| matches!(r.kind, Kind::Keyed(_))) {
                    let selected = if query.limiter.as_deref() == Some(&registered.name) {
                        " selected"
                    } else {
                        ""
                    };
                    let name = Html(&registered.name);
                    write!(out, "<option value=\"{name}\"{selected}>{name}</option>")?;
                }
            }
            mark => unreachable!("page.html has no mark {mark:?}"),
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// `/metrics`: [`stats::prometheus`] over every limiter, a keyed one that
/// does not count requests in its admitted and refused families all the
/// same (it always counts those, as `/json` shows), then the keyed
/// limiters' gauges and counters.
pub(super) fn metrics(limiters: &[Registered]) -> String {
    let (mut read, mut tallied, mut keyed) = (Vec::new(), Vec::new(), Vec::new());
    for r in limiters {
        let name = r.name.as_str();
        match &r.kind {
            Kind::Keyed(l) => {
                let totals = l.tracking().totals();
                match totals.0.requests {
                    Some(stats) => read.push((name, stats)),
                    None => tallied.push((name, tally(&totals.0))),
                }
                keyed.push((name, totals));
            }
            Kind::Counted(l) => read.extend(l.stats().map(|stats| (name, stats))),
        }
    }
    let mut out = stats::prometheus_read(&read, &tallied);
    // The keyed limiters' families only where a limiter is keyed.
    if !keyed.is_empty() {
        stats::write_families(&mut out, &KEYED_FAMILIES, &keyed);
    }
    out
}

/// A keyed limiter's own counts of calls admitted and refused, as stats.
fn tally(totals: &KeyedStats) -> Stats {
    Stats {
        admitted: totals.admitted,
        refused: totals.refused,
        ..Stats::default()
    }
}

/// A keyed limiter's gauges and counters: of its totals and its ceiling.
const KEYED_FAMILIES: [stats::Family<(KeyedStats, usize)>; 5] = [
    ("paceline_keys", "Keys tracked now.", |k| k.0.keys as u64),
    ("paceline_keys_max", "The ceiling on tracked keys.", |k| {
        k.1 as u64
    }),
    (
        "paceline_keys_bytes",
        "Bytes the key map holds (its slots as allocated).",
        |k| k.0.bytes as u64,
    ),
    (
        "paceline_pruned_total",
        "Keys dropped because they came to rest.",
        |k| k.0.pruned,
    ),
    (
        "paceline_evicted_total",
        "Busy keys evicted to make room for new ones.",
        |k| k.0.evicted,
    ),
];

/// The most overrides a limiter's entry lists.
pub(super) const LIMITS_SHOWN: usize = 100;

/// `,"limits":[..],"overrides":N}`: the rest of a keyed limiter's entry.
fn write_limits(out: &mut String, limits: &Limits, overrides: usize) -> fmt::Result {
    out.push_str(",\"limits\":[");
    let keyed = limits
        .overrides()
        .iter()
        .map(|(key, l)| (Some(key.as_str()), l));
    let all = std::iter::once((None, limits.default_limit())).chain(keyed);
    for (i, ((key, l), layer)) in all.zip(limits.layers()).enumerate() {
        write!(
            out,
            "{}{{\"key\":{},\"rate\":{},\"burst\":{},\"layer\":{}}}",
            comma(i),
            OrNull(key.map(Json)),
            Json(&l.rate().to_string()),
            l.burst(),
            OrNull(layer.as_deref().map(Json))
        )?;
    }
    write!(out, "],\"overrides\":{overrides}}}")
}

#[cfg(test)]
mod tests {
    use super::{base64, number, Digest, Html, Json, Sha256};

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn sha256_matches_the_standard_vectors() {
        // FIPS 180-4's examples (one block, two blocks) and the empty text.
        assert_eq!(
            hex(&Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(&Sha256::digest(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        assert_eq!(
            hex(&Sha256::digest(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        // A million 'a's: many blocks.
        assert_eq!(
            hex(&Sha256::digest(vec![b'a'; 1_000_000])),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
    }

    #[test]
    fn base64_pads_as_rfc_4648() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want, "{input:?}");
        }
    }

    #[test]
    fn json_strings_read_back_and_never_hold_markup() {
        for s in [
            "plain",
            "quote \" backslash \\ slash /",
            "</script><!-- & -->",
            "tab\tnew\nline\rcr \u{0} \u{1f} \u{7f}",
            "line\u{2028}para\u{2029}",
            "ünïcødé 🦀",
        ] {
            let text = Json(s).to_string();
            assert!(
                !text.contains(['<', '>', '&', '\u{2028}', '\u{2029}']),
                "{text}"
            );
            assert!(!text.chars().any(|c| c.is_control()), "{text:?}");
            let back: String = serde_json::from_str(&text).unwrap();
            assert_eq!(back, s);
        }
    }

    #[test]
    fn numbers_read_back_exactly_and_infinity_is_null() {
        for x in [0.0, 0.1 + 0.2, 1.0 / 3.0, 1e-9, 123456.789, 5.0] {
            let back: f64 = serde_json::from_str(&number(x).to_string()).unwrap();
            assert_eq!(back, x);
        }
        assert_eq!(number(f64::INFINITY).to_string(), "null");
        assert_eq!(number(f64::NAN).to_string(), "null");
    }

    #[test]
    fn html_text_is_escaped_for_content_and_attributes() {
        assert_eq!(
            Html("<a href='x' title=\"y\">&</a>").to_string(),
            "&lt;a href=&#39;x&#39; title=&quot;y&quot;&gt;&amp;&lt;/a&gt;"
        );
    }
}
