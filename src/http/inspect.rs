//! [`Inspect`]: a look inside the limiters over HTTP, for operators. One
//! tower service answers GET at three paths below wherever it is mounted:
//!
//! | path | what | type |
//! |---|---|---|
//! | (the mount itself, or `/`) | a page listing the tracked buckets, sorted and filtered | `text/html` |
//! | `/json` | the same buckets and the limiters' totals | `application/json` |
//! | `/metrics` | every registered limiter's counts | Prometheus text, version 0.0.4 |
//!
//! ```
//! use std::sync::Arc;
//! use paceline::http::Inspect;
//! use paceline::{AtomicLimiter, KeyedLimiter, Rate};
//! use tower_service::Service;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let actions = Arc::new(KeyedLimiter::<String>::builder(Rate::per_minute(10)).slack(9).build()?);
//! let global = Arc::new(AtomicLimiter::builder(Rate::per_second(1000)).stats(true).build()?);
//! actions.try_take_n("message_send/alice", 7)?; // 7 of a burst of 10
//! actions.try_take_n("message_send/bob", 2)?;
//! actions.try_take_n("upload/alice", 9)?;
//!
//! let mut inspect = Inspect::new()
//!     .keyed("actions", Arc::clone(&actions))
//!     .counted("global", Arc::clone(&global))
//!     .service();
//!
//! // "Show all buckets whose key begins with message_send where the
//! // budget fraction is under 50 %": less than half left is fill > 0.5.
//! let request = http::Request::get("/json?prefix=message_send&fill_gt=0.5").body(())?;
//! let response = inspect.call(request).await?;
//! assert_eq!(response.status(), 200);
//! let json = String::from_utf8(http_body_util::BodyExt::collect(response.into_body()).await?.to_bytes().to_vec())?;
//! assert!(json.contains(r#""key":"message_send/alice""#));
//! assert!(!json.contains("message_send/bob") && !json.contains("upload/alice"));
//!
//! let bad = inspect.call(http::Request::get("/?fill_gt=half").body(())?).await?;
//! assert_eq!(bad.status(), 400); // "fill_gt must be a fill fraction from 0 up, such as 0.5; got \"half\""
//! # Ok(())
//! # }
//! ```
//!
//! Mounted in axum (with `nest_service`, no `Buffer`: the service is
//! `Clone`, and every clone shares one `Arc`), behind the application's own
//! authentication: the page shows every tracked key, and keys are often
//! client addresses or user names.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use paceline::{http::Inspect, KeyedLimiter, Rate};
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! # let per_ip = Arc::new(KeyedLimiter::<std::net::IpAddr>::new(Rate::per_second(5)));
//! let inspect = Inspect::new().keyed("per_ip", Arc::clone(&per_ip));
//! let app = axum::Router::new().nest_service("/limits", inspect.service());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```
//!
//! The query (`prefix`, `limiter`, `fill_gt`, `fill_lt`, `sort`, `order`,
//! `limit`; a value that does not read is a 400 naming it), what a bucket's
//! fill means, the page (offline, keys rendered as text, a CSP by hash),
//! its cost and row cap, and the `/metrics` series: the guide's
//! [HTTP](crate::guide::http#the-look-inside) chapter. The invariants: a
//! request decides nothing; it walks the keys one shard's read lock at a
//! time and copies at most twice its row `limit`, so its memory is bounded
//! by the rows it returns, not by the keys; no key reaches the page as
//! markup; no series is labelled by key.

mod query;
mod render;

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;

use crate::stats::Counted;
use query::{BadQuery, Column, Query, Row};

/// How many rows a page or `/json` lists at most, unless
/// [`Inspect::max_rows`] says otherwise: enough for an operator to scroll,
/// few enough that the page stays quick (about 200 bytes a row).
pub const DEFAULT_MAX_ROWS: usize = 1000;

/// Registers limiters by name, then makes the [service](InspectService)
/// that shows them. See the [module](self) for what it serves.
///
/// A name registered again replaces the limiter registered before under it
/// (names label the metrics, so they must be unique).
#[derive(Clone, Default)]
pub struct Inspect {
    limiters: Vec<Registered>,
    max_rows: Option<usize>,
}

/// One registered limiter.
#[derive(Clone)]
struct Registered {
    name: String,
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    /// Its buckets are listed, and its totals measured.
    Keyed(Arc<dyn tracked::Tracking>),
    /// Its counts only.
    Counted(Arc<dyn Counted + Send + Sync>),
}

impl Kind {
    fn is_keyed(&self) -> bool {
        match self {
            Kind::Keyed(_) => true,
            Kind::Counted(_) => false,
        }
    }
}

impl Inspect {
    /// No limiter yet.
    pub fn new() -> Inspect {
        Inspect::default()
    }

    /// Lists `limiter`'s buckets under `name`, and counts it in the metrics:
    /// an `Arc<KeyedLimiter<K, C>>` (or the limiter itself) or an
    /// `AsyncKeyedLimiter<K, C>`, whose keys show as their
    /// [`Display`](fmt::Display) text.
    pub fn keyed(self, name: impl Into<String>, limiter: impl Tracked) -> Inspect {
        self.register(name.into(), Kind::Keyed(Arc::new(limiter)))
    }

    /// Counts `limiter` in the metrics under `name`: any limiter kind (an
    /// `Arc` of one shares it). Its series appear only if its builder asked
    /// for counting (`.stats(true)`).
    pub fn counted(
        self,
        name: impl Into<String>,
        limiter: impl Counted + Send + Sync + 'static,
    ) -> Inspect {
        self.register(name.into(), Kind::Counted(Arc::new(limiter)))
    }

    /// Lists at most `rows` buckets per request (at least 1; default
    /// [`DEFAULT_MAX_ROWS`]); a request's `limit` may ask for fewer.
    pub fn max_rows(mut self, rows: usize) -> Inspect {
        self.max_rows = Some(rows.max(1));
        self
    }

    /// The service, to mount where operators reach it (e.g. axum's
    /// `nest_service("/limits", ...)`).
    pub fn service(self) -> InspectService {
        InspectService {
            inner: Arc::new(self),
        }
    }

    fn register(mut self, name: String, kind: Kind) -> Inspect {
        match self.limiters.iter_mut().find(|r| r.name == name) {
            Some(existing) => existing.kind = kind,
            None => self.limiters.push(Registered { name, kind }),
        }
        self
    }

    fn rows_cap(&self) -> usize {
        self.max_rows.unwrap_or(DEFAULT_MAX_ROWS)
    }
}

impl fmt::Debug for Inspect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inspect")
            .field(
                "limiters",
                &self.limiters.iter().map(|r| &r.name).collect::<Vec<_>>(),
            )
            .field("max_rows", &self.rows_cap())
            .finish()
    }
}

/// The tower service [`Inspect::service`] makes: `Clone` (every clone
/// shares one `Arc`), `Send`, `Sync`, always ready, never failing (its
/// error type is [`Infallible`]; a bad request is a 4xx response). Its
/// response body is [`Full<Bytes>`](http_body_util::Full), which axum and
/// hyper take as it is. It does its work when called, on the calling task
/// (for what that costs, see the [module](self)): it never sleeps and
/// needs no runtime.
#[derive(Clone, Debug)]
pub struct InspectService {
    inner: Arc<Inspect>,
}

impl<B> tower_service::Service<Request<B>> for InspectService {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Full<Bytes>>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (parts, body) = self.respond(request.method(), request.uri()).into_parts();
        std::future::ready(Ok(Response::from_parts(parts, Full::new(body))))
    }
}

impl InspectService {
    /// The answer to `method` on `uri` (its path below the mount point).
    fn respond(&self, method: &Method, uri: &http::Uri) -> Response<Bytes> {
        let head = *method == Method::HEAD;
        if !head && *method != Method::GET {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        let mut response = match uri.path() {
            "" | "/" => self.listing(uri.query(), Page::Html),
            "/json" => self.listing(uri.query(), Page::Json),
            "/metrics" => {
                let mut r = text(StatusCode::OK, &render::metrics(&self.inner.limiters));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                r
            }
            _ => text(
                StatusCode::NOT_FOUND,
                "not found: the look inside serves its page, json and metrics\n",
            ),
        };
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        if head {
            let length = response.body().len();
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
            *response.body_mut() = Bytes::new();
        }
        response
    }

    fn listing(&self, query: Option<&str>, page: Page) -> Response<Bytes> {
        let inspect = &*self.inner;
        let query = match Query::parse(query, inspect.rows_cap()).and_then(|q| match &q.limiter {
            Some(name) if !inspect.limiters.iter().any(|r| &r.name == name) => {
                Err(BadQuery(format!(
                    "limiter must be one of the registered names ({}); got {name:?}",
                    inspect
                        .limiters
                        .iter()
                        .map(|r| format!("{:?}", r.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
            _ => Ok(q),
        }) {
            Ok(q) => q,
            Err(bad) => return text(StatusCode::BAD_REQUEST, &format!("bad query: {bad}\n")),
        };
        let listing = collect(&inspect.limiters, &query);
        let json = render::json(&inspect.limiters, &query, &listing);
        match page {
            Page::Json => {
                let mut r = Response::new(Bytes::from(json));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                r
            }
            Page::Html => {
                let mut r =
                    Response::new(Bytes::from(render::html(&inspect.limiters, &query, &json)));
                let headers = r.headers_mut();
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                );
                headers.insert(header::CONTENT_SECURITY_POLICY, render::csp());
                headers.insert(
                    header::REFERRER_POLICY,
                    HeaderValue::from_static("no-referrer"),
                );
                r
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Page {
    Html,
    Json,
}

/// A plain-text response.
fn text(status: StatusCode, body: &str) -> Response<Bytes> {
    let mut r = Response::new(Bytes::from(body.to_owned()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The rows a query selects, sorted and capped, and how many matched.
struct Listing {
    rows: Vec<Row>,
    matched: usize,
}

/// Walks the limiters the query covers and keeps the first `limit` rows in
/// its order: only those are copied (see [`Select`]), so a request's memory
/// is bounded by the rows it returns, not by the keys it walks.
fn collect(limiters: &[Registered], query: &Query) -> Listing {
    let mut select = Select {
        limiters,
        query,
        kept: Vec::new(),
        cut: false,
        matched: 0,
    };
    for (index, registered) in limiters.iter().enumerate() {
        if query
            .limiter
            .as_ref()
            .is_some_and(|l| *l != registered.name)
        {
            continue;
        }
        if let Kind::Keyed(limiter) = &registered.kind {
            limiter.rows(query, &mut |row| {
                select.offer(Row {
                    limiter: index,
                    ..row
                })
            });
        }
    }
    select.finish()
}

/// The first `limit` rows of those offered, in the query's order, and a
/// count of all. Rows are kept in a buffer of up to `2 * limit`; when it
/// is full, the best `limit` are selected (linear time) and the rest
/// dropped, and from then on the worst of those (`kept[limit - 1]`) is a
/// bar that an offered row must beat to be copied at all. Most rows of a
/// large map are turned away by the bar, borrowed, without an allocation.
struct Select<'a> {
    limiters: &'a [Registered],
    query: &'a Query,
    kept: Vec<Row>,
    /// Whether `kept` has been cut to `limit` (then `kept[limit - 1]` is
    /// the bar).
    cut: bool,
    matched: usize,
}

impl Select<'_> {
    fn offer(&mut self, row: Row<&str>) {
        self.matched += 1;
        let limit = self.query.limit;
        if limit == 0 {
            return;
        }
        if self.cut && order(self.limiters, self.query, &row, &self.kept[limit - 1]).is_ge() {
            return;
        }
        self.kept.push(row.owned());
        if self.kept.len() >= limit.saturating_mul(2) {
            self.cut();
        }
    }

    /// Keeps only the best `limit` rows, the worst of them at `limit - 1`.
    fn cut(&mut self) {
        let (limiters, query) = (self.limiters, self.query);
        let limit = query.limit;
        if self.kept.len() > limit {
            self.kept
                .select_nth_unstable_by(limit - 1, |a, b| order(limiters, query, a, b));
            self.kept.truncate(limit);
            self.cut = true;
        }
    }

    fn finish(mut self) -> Listing {
        self.cut();
        let (limiters, query) = (self.limiters, self.query);
        self.kept
            .sort_unstable_by(|a, b| order(limiters, query, a, b));
        Listing {
            rows: self.kept,
            matched: self.matched,
        }
    }
}

/// The query's order of two rows, owned or borrowed: its column, then
/// (ties) the limiter's name and the key, always A to Z, as the page's
/// script. (A key is unique in its limiter: the order is total.)
fn order<A: AsRef<str>, B: AsRef<str>>(
    limiters: &[Registered],
    query: &Query,
    a: &Row<A>,
    b: &Row<B>,
) -> std::cmp::Ordering {
    let name = |row: usize| &limiters[row].name;
    let by = match query.sort {
        Column::Limiter => name(a.limiter).cmp(name(b.limiter)),
        Column::Key => a.key.as_ref().cmp(b.key.as_ref()),
        Column::Rate => a.rate.per_second_f64().total_cmp(&b.rate.per_second_f64()),
        Column::Burst => a.burst.cmp(&b.burst),
        Column::Fill => a.fill.total_cmp(&b.fill),
        Column::NextFree => a.next_free.cmp(&b.next_free),
        Column::Idle => a.idle.cmp(&b.idle),
        Column::Refused => a.refused.cmp(&b.refused),
    };
    let by = if query.descending { by.reverse() } else { by };
    by.then_with(|| name(a.limiter).cmp(name(b.limiter)))
        .then_with(|| a.key.as_ref().cmp(b.key.as_ref()))
}

pub use tracked::Tracked;

mod tracked {
    use std::fmt::{Display, Write as _};
    use std::hash::Hash;
    use std::sync::Arc;

    use super::{Query, Row};
    use crate::keyed::{AsyncKeyedLimiter, KeyedLimiter, KeyedStats};
    use crate::stats::Counted;
    use crate::{Clock, Rate};

    /// A keyed limiter [`Inspect::keyed`](super::Inspect::keyed) lists:
    /// [`KeyedLimiter`], `AsyncKeyedLimiter` (feature `tokio`), or an `Arc`
    /// of either, whose keys are [`Display`]. Sealed: paceline implements it.
    pub trait Tracked: Tracking {}

    /// What the service asks of a keyed limiter (sealed: this module is
    /// private).
    pub trait Tracking: Send + Sync + 'static {
        /// Offers each tracked bucket `query` selects (`limiter` unset),
        /// borrowed: the caller copies only those it keeps.
        fn rows(&self, query: &Query, offer: &mut dyn FnMut(Row<&str>));
        /// Its totals.
        fn totals(&self) -> KeyedStats;
        /// Its ceiling on tracked keys.
        fn max_keys(&self) -> usize;
        /// Its default rate and slack.
        fn default_limit(&self) -> (Rate, u64);
        /// Its counts, for `stats::prometheus`.
        fn counted(&self) -> &dyn Counted;
    }

    impl<K, C> Tracking for KeyedLimiter<K, C>
    where
        K: Display + Hash + Eq + Clone + Send + Sync + 'static,
        C: Clock + Send + Sync + 'static,
    {
        fn rows(&self, query: &Query, offer: &mut dyn FnMut(Row<&str>)) {
            // One buffer for every key's text: nothing is kept per key.
            let mut key = String::new();
            self.for_each_live(|k, state, (rate, slack)| {
                if !query.keeps_fill(state.fill) {
                    return;
                }
                key.clear();
                // Writing to a String cannot fail.
                let _ = write!(key, "{k}");
                if !key.starts_with(&query.prefix) {
                    return;
                }
                offer(Row {
                    limiter: 0,
                    key: &key,
                    rate,
                    burst: slack.saturating_add(1),
                    fill: state.fill,
                    next_free: state.next_free,
                    idle: state.idle,
                    refused: state.refused,
                });
            });
        }

        fn totals(&self) -> KeyedStats {
            self.keyed_stats()
        }

        fn max_keys(&self) -> usize {
            KeyedLimiter::max_keys(self)
        }

        fn default_limit(&self) -> (Rate, u64) {
            (self.rate(), self.slack())
        }

        fn counted(&self) -> &dyn Counted {
            self
        }
    }

    impl<K, C> Tracked for KeyedLimiter<K, C>
    where
        K: Display + Hash + Eq + Clone + Send + Sync + 'static,
        C: Clock + Send + Sync + 'static,
    {
    }

    impl<K, C> Tracking for AsyncKeyedLimiter<K, C>
    where
        K: Display + Hash + Eq + Clone + Send + Sync + 'static,
        C: Clock + Send + Sync + 'static,
    {
        fn rows(&self, query: &Query, offer: &mut dyn FnMut(Row<&str>)) {
            self.limiter().rows(query, offer)
        }

        fn totals(&self) -> KeyedStats {
            self.limiter().keyed_stats()
        }

        fn max_keys(&self) -> usize {
            self.limiter().max_keys()
        }

        fn default_limit(&self) -> (Rate, u64) {
            Tracking::default_limit(self.limiter())
        }

        fn counted(&self) -> &dyn Counted {
            self
        }
    }

    impl<K, C> Tracked for AsyncKeyedLimiter<K, C>
    where
        K: Display + Hash + Eq + Clone + Send + Sync + 'static,
        C: Clock + Send + Sync + 'static,
    {
    }

    impl<T: Tracking> Tracking for Arc<T> {
        fn rows(&self, query: &Query, offer: &mut dyn FnMut(Row<&str>)) {
            (**self).rows(query, offer)
        }

        fn totals(&self) -> KeyedStats {
            (**self).totals()
        }

        fn max_keys(&self) -> usize {
            (**self).max_keys()
        }

        fn default_limit(&self) -> (Rate, u64) {
            (**self).default_limit()
        }

        fn counted(&self) -> &dyn Counted {
            (**self).counted()
        }
    }

    impl<T: Tracked> Tracked for Arc<T> {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KeyedLimiter, ManualClock, Rate};

    /// The kept rows are the first `limit` of all the matching rows fully
    /// sorted, for every column and order, however many rows the bar turns
    /// away; the count is of all of them.
    #[test]
    fn the_rows_kept_are_the_first_of_all_in_the_querys_order() {
        let clock = ManualClock::new();
        let keyed = |rate| {
            KeyedLimiter::<String>::builder(Rate::per_hour(rate))
                .slack(9)
                .clock(clock.clone())
                .build()
                .unwrap()
        };
        let (a, b) = (keyed(10), keyed(20));
        for i in 0..300u64 {
            // Fills from 0.1 to 1, many equal: ties go by limiter and key.
            let limiter = if i % 3 == 0 { &a } else { &b };
            let key = i * 37 % 300; // each once, out of order;
            limiter.try_take_n(&format!("k{key}"), 1 + i % 10).unwrap();
        }
        let inspect = Inspect::new().keyed("b", b).keyed("a", a);
        let mut all = Vec::new();
        for (index, registered) in inspect.limiters.iter().enumerate() {
            if let Kind::Keyed(limiter) = &registered.kind {
                limiter.rows(&Query::parse(None, 1000).unwrap(), &mut |row| {
                    all.push(Row {
                        limiter: index,
                        ..row.owned()
                    })
                });
            }
        }
        assert_eq!(all.len(), 300);
        for (column, name) in Column::ALL {
            for order_by in ["asc", "desc"] {
                for limit in [1, 7, 100, 1000] {
                    let text = format!("sort={name}&order={order_by}&limit={limit}");
                    let query = Query::parse(Some(&text), 1000).unwrap();
                    assert_eq!(query.sort, column);
                    let listing = collect(&inspect.limiters, &query);
                    let mut expected = all.clone();
                    expected.sort_by(|x, y| order(&inspect.limiters, &query, x, y));
                    expected.truncate(limit);
                    let shown = |rows: &[Row]| -> Vec<(usize, String)> {
                        rows.iter().map(|r| (r.limiter, r.key.clone())).collect()
                    };
                    assert_eq!(shown(&listing.rows), shown(&expected), "{text}");
                    assert_eq!(listing.matched, 300, "{text}");
                }
            }
        }
    }
}
