//! The page's query string: which buckets to list and in what order. A
//! value that does not read is an error naming it (a 400), never a guess
//! and never a panic.

use crate::keyed::KeyState;
use crate::Rate;

/// A column the buckets sort by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Column {
    Limiter,
    #[default]
    Key,
    Rate,
    Burst,
    Fill,
    NextFree,
    Idle,
    Refused,
}

impl Column {
    /// Every column, in the order of the page's table (`page.html`), with
    /// its name in the query.
    pub(crate) const ALL: [(Column, &'static str); 8] = [
        (Column::Limiter, "limiter"),
        (Column::Key, "key"),
        (Column::Rate, "rate"),
        (Column::Burst, "burst"),
        (Column::Fill, "fill"),
        (Column::NextFree, "next_free"),
        (Column::Idle, "idle"),
        (Column::Refused, "refused"),
    ];

    pub(crate) fn name(self) -> &'static str {
        Column::ALL[self as usize].1
    }
}

/// What a request asks to see. (`pub` in a private module: the sealed
/// `Tracking` trait names it.) By default, every bucket by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Query {
    /// Keys that begin with this text (empty: all).
    pub(crate) prefix: String,
    /// Only the limiter of this name.
    pub(crate) limiter: Option<String>,
    /// Only buckets whose fill is above this.
    pub(crate) fill_gt: Option<f64>,
    /// Only buckets whose fill is below this.
    pub(crate) fill_lt: Option<f64>,
    pub(crate) sort: Column,
    pub(crate) descending: bool,
    /// At most this many rows.
    pub(crate) limit: usize,
    /// Buckets at rest (fill 0) listed too; else only counted.
    pub(crate) at_rest: bool,
}

/// One tracked bucket, as listed, but for its key, which a limiter offers
/// beside it borrowed, and the page copies only for the rows it keeps.
/// (`pub` in a private module: the sealed `Tracking` trait names it.)
#[derive(Clone, Debug)]
pub struct Row {
    /// Index of its limiter in the registration list.
    pub(crate) limiter: usize,
    pub(crate) rate: Rate,
    pub(crate) burst: u64,
    /// What the limiter's walk found: fill, next free, idle, refusals.
    pub(crate) state: KeyState<()>,
}

impl Query {
    /// Reads `query` (the part after `?`, form-encoded); `max_rows` is the
    /// most a `limit` may ask for, and the default; `limiters`, the names a
    /// `limiter` may be. An error names the value that does not read, or
    /// the parameter the page does not know.
    pub(crate) fn parse(
        query: Option<&str>,
        max_rows: usize,
        limiters: &[&str],
    ) -> Result<Query, String> {
        let mut q = Query {
            limit: max_rows,
            ..Query::default()
        };
        let mut order = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode(name)?;
            let value = decode(value)?;
            match name.as_str() {
                "prefix" => q.prefix = value,
                // An empty value is unset (a form's empty field).
                "limiter" | "fill_gt" | "fill_lt" | "at_rest" | "sort" | "order" | "limit"
                    if value.is_empty() => {}
                "limiter" => {
                    q.limiter = Some(limiters[one_of(&name, &value, limiters)?].to_owned())
                }
                "fill_gt" => q.fill_gt = Some(fill(&name, &value)?),
                "fill_lt" => q.fill_lt = Some(fill(&name, &value)?),
                "sort" => q.sort = Column::ALL[one_of(&name, &value, &Column::ALL.map(|c| c.1))?].0,
                "order" => order = Some(one_of(&name, &value, &["asc", "desc"])? == 1),
                "at_rest" => q.at_rest = one_of(&name, &value, &["0", "1"])? == 1,
                "limit" => {
                    let n = value.parse().ok().filter(|n| (1..=max_rows).contains(n));
                    let whole = format!("a whole number from 1 to {max_rows}");
                    q.limit = must(n, &name, &whole, &value)?;
                }
                _ => {
                    return Err(format!(
                        "unknown parameter {name:?}: the page reads prefix, limiter, fill_gt, \
                         fill_lt, at_rest, sort, order and limit"
                    ))
                }
            }
        }
        // Unless asked, text columns sort A to Z; numbers largest first.
        q.descending = order.unwrap_or(!matches!(q.sort, Column::Limiter | Column::Key));
        Ok(q)
    }

    /// Whether a bucket of this fill is shown.
    pub(crate) fn keeps_fill(&self, fill: f64) -> bool {
        self.fill_gt.is_none_or(|gt| fill > gt) && self.fill_lt.is_none_or(|lt| fill < lt)
    }
}

/// A fill bound: a number from 0 up (`0.5`, `1`, `1.25`).
fn fill(name: &str, value: &str) -> Result<f64, String> {
    let read = value
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite() && *f >= 0.0);
    must(read, name, "a fill fraction from 0 up, such as 0.5", value)
}

/// Which of `options` the parameter `name` reads as (its index), or the
/// error naming its `value` and them.
fn one_of(name: &str, value: &str, options: &[&str]) -> Result<usize, String> {
    let quoted: Vec<_> = options.iter().map(|o| format!("{o:?}")).collect();
    let what = format!("one of {}", quoted.join(", "));
    must(options.iter().position(|o| *o == value), name, &what, value)
}

/// What the parameter `name` read as, or, when it did not (`None`), the
/// error naming it, what it must be, and the `value` it got.
fn must<T>(read: Option<T>, name: &str, what: &str, value: &str) -> Result<T, String> {
    read.ok_or_else(|| format!("{name} must be {what}; got {value:?}"))
}

/// Form decoding: `+` is a space, `%XX` a byte; the bytes must be UTF-8.
fn decode(s: &str) -> Result<String, String> {
    let mut bytes = s.bytes();
    let mut out = Vec::with_capacity(s.len());
    while let Some(byte) = bytes.next() {
        out.push(match byte {
            b'+' => b' ',
            b'%' => {
                // Two hex digits, no more and no less (no sign).
                let mut digit = || bytes.next().and_then(|d| char::from(d).to_digit(16));
                let (Some(high), Some(low)) = (digit(), digit()) else {
                    return Err(format!("bad percent escape in {s:?}: % must begin %XX"));
                };
                (high * 16 + low) as u8
            }
            byte => byte,
        });
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} does not decode to UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::{Column, Query};

    #[test]
    fn defaults_list_every_bucket_by_key() {
        let q = Query::parse(None, 1000, &["per_ip"]).unwrap();
        assert_eq!(q.sort, Column::Key);
        assert!(!q.descending);
        assert_eq!((q.prefix.as_str(), q.limit), ("", 1000));
        assert_eq!(q, Query::parse(Some(""), 1000, &["per_ip"]).unwrap());
    }

    #[test]
    fn reads_every_parameter() {
        let q = Query::parse(
            Some("prefix=message_send%2Fa+b&limiter=per_ip&fill_gt=0.5&fill_lt=1.5&at_rest=1&sort=fill&order=asc&limit=7"),
            1000,
            &["other", "per_ip"],
        )
        .unwrap();
        assert_eq!(q.prefix, "message_send/a b");
        assert_eq!(q.limiter.as_deref(), Some("per_ip"));
        assert_eq!((q.fill_gt, q.fill_lt), (Some(0.5), Some(1.5)));
        assert_eq!((q.sort, q.descending, q.limit), (Column::Fill, false, 7));
        assert!(q.at_rest);
        assert!(!Query::parse(Some("at_rest=0"), 9, &[]).unwrap().at_rest);
        assert!(q.keeps_fill(0.75) && !q.keeps_fill(0.5) && !q.keeps_fill(1.5));
    }

    #[test]
    fn numbers_sort_largest_first_unless_asked() {
        let q = Query::parse(Some("sort=refused"), 10, &["per_ip"]).unwrap();
        assert!(q.descending);
        let q = Query::parse(Some("sort=limiter"), 10, &["per_ip"]).unwrap();
        assert!(!q.descending);
    }

    #[test]
    fn empty_values_are_unset() {
        let q = Query::parse(
            Some("prefix=&limiter=&fill_gt=&fill_lt=&at_rest=&sort=&order=&limit="),
            10,
            &[],
        )
        .unwrap();
        assert_eq!(q, Query::parse(None, 10, &["per_ip"]).unwrap());
    }

    #[test]
    fn bad_values_are_named() {
        for (query, names) in [
            ("fill_gt=half", "\"half\""),
            ("fill_lt=-1", "\"-1\""),
            ("fill_gt=NaN", "\"NaN\""),
            ("fill_gt=inf", "\"inf\""),
            ("sort=colour", "\"colour\""),
            ("order=up", "\"up\""),
            ("at_rest=yes", "\"yes\""),
            ("limiter=nobody", "one of \"per_ip\"; got \"nobody\""),
            ("limit=0", "\"0\""),
            ("limit=1001", "\"1001\""),
            ("fill>0.5", "\"fill>0.5\""),
            ("prefix=%zz", "%zz"),
            ("prefix=%e2%82", "%e2%82"),
            ("prefix=%", "\"%\""),
            ("prefix=%+1", "%+1"),
        ] {
            let err = Query::parse(Some(query), 1000, &["per_ip"]).unwrap_err();
            assert!(err.contains(names), "{query}: {err}");
        }
    }
}
