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
//! use paceline::Take;
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
//! For a [`LimitLayer`]'s own limiter, one call: [`Inspect::layer`].
//!
//! The query (`prefix`, `limiter`, `fill_gt`, `fill_lt`, `at_rest`, `sort`,
//! `order`, `limit`; a value that does not read is a 400 naming it), what a
//! bucket's fill means, buckets at rest, how keys sort, the page (offline,
//! keys rendered as text, a CSP by hash), its cost and row cap, and the
//! `/metrics` series: the guide's
//! [HTTP](crate::guide::http#the-look-inside) chapter. The invariants: a
//! request decides nothing; it walks the keys one shard's read lock at a
//! time and copies at most twice its row `limit`, so its memory is bounded
//! by the rows it returns, not by the keys; no key reaches the page as
//! markup; no series is labelled by key.

mod query;
mod render;
mod select;
mod tracked;

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;

use super::json::response;
use super::LimitLayer;
use crate::observe::stats::Counted;
use query::Query;
use select::collect;

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
    Keyed(Arc<dyn Tracked>),
    /// Its counts only.
    Counted(Arc<dyn Counted + Send + Sync>),
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

    /// Lists the buckets of `layer`'s own keyed limiter under `name`, and
    /// counts it in the metrics: the one call that puts an HTTP layer on
    /// the page. A layer with no keyed limiter of its own (a global key,
    /// or a [`limiter`](super::LimitBuilder::limiter) you gave it) adds
    /// nothing: register that limiter with [`keyed`](Self::keyed) or
    /// [`counted`](Self::counted) instead.
    ///
    /// ```no_run
    /// # #[cfg(feature = "axum")]
    /// # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    /// use paceline::http::{Inspect, LimitLayer};
    ///
    /// let per_ip = LimitLayer::per_ip("5/s".parse()?).build()?;
    /// let inspect = Inspect::new().layer("per_ip", &per_ip);
    /// let app = axum::Router::new()
    ///     .route("/", axum::routing::get(|| async { "hello" }))
    ///     .layer(per_ip)
    ///     .nest_service("/limits", inspect.service()); // outside the layer
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    /// axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn layer(self, name: impl Into<String>, layer: &LimitLayer) -> Inspect {
        match layer.keyed_limiter() {
            Some(limiter) => self.keyed(name, limiter.clone()),
            None => self,
        }
    }

    crate::values::setters! {
        /// Lists at most `rows` buckets per request (at least 1; default
        /// [`DEFAULT_MAX_ROWS`]); a request's `limit` may ask for fewer.
        max_rows(rows: usize) => max_rows = Some(rows.max(1));
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
            path @ ("" | "/" | "/json") => self.listing(uri.query(), path == "/json"),
            "/metrics" => response(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                render::metrics(&self.inner.limiters),
            ),
            _ => text(
                StatusCode::NOT_FOUND,
                "not found: the look inside serves its page, json and metrics\n",
            ),
        };
        let length = HeaderValue::from(response.body().len());
        let headers = response.headers_mut();
        for (name, value) in [
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ] {
            headers.insert(name, HeaderValue::from_static(value));
        }
        if head {
            headers.insert(header::CONTENT_LENGTH, length);
            *response.body_mut() = Bytes::new();
        }
        response
    }

    /// The buckets `query` selects: as JSON alone (`json`), or the page.
    fn listing(&self, query: Option<&str>, json: bool) -> Response<Bytes> {
        let inspect = &*self.inner;
        let names: Vec<&str> = inspect.limiters.iter().map(|r| r.name.as_str()).collect();
        let query = match Query::parse(query, inspect.rows_cap(), &names) {
            Ok(q) => q,
            Err(bad) => return text(StatusCode::BAD_REQUEST, format!("bad query: {bad}\n")),
        };
        let listing = collect(&inspect.limiters, &query);
        // Writing to a String cannot fail.
        let data = render::json(&inspect.limiters, &query, &listing).unwrap_or_default();
        if json {
            return response(StatusCode::OK, "application/json", data);
        }
        let page = render::html(&inspect.limiters, &query, &data).unwrap_or_default();
        let mut r = response(StatusCode::OK, "text/html; charset=utf-8", page);
        let headers = r.headers_mut();
        headers.insert(header::CONTENT_SECURITY_POLICY, render::csp());
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        r
    }
}

/// A plain-text response.
fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Bytes> {
    response(status, "text/plain; charset=utf-8", body)
}

pub use tracked::Tracked;

#[cfg(test)]
mod tests {
    use super::query::{Column, Row};
    use super::select::{order, pair};
    use super::*;
    use crate::limiter::take::Take;
    use crate::{clock::ManualClock, KeyedLimiter, Rate};

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
                limiter.tracking().rows(
                    &Query::parse(None, 1000, &[]).unwrap(),
                    &mut |key, row| {
                        all.push((
                            key.to_owned(),
                            Row {
                                limiter: index,
                                ..row
                            },
                        ))
                    },
                );
            }
        }
        assert_eq!(all.len(), 300);
        for (column, name) in Column::ALL {
            for order_by in ["asc", "desc"] {
                for limit in [1, 7, 100, 1000] {
                    let text = format!("sort={name}&order={order_by}&limit={limit}");
                    let query = Query::parse(Some(&text), 1000, &[]).unwrap();
                    assert_eq!(query.sort, column);
                    let listing = collect(&inspect.limiters, &query);
                    let mut expected = all.clone();
                    expected.sort_by(|x, y| order(&inspect.limiters, &query, pair(x), pair(y)));
                    expected.truncate(limit);
                    let shown = |rows: &[(String, Row)]| -> Vec<(usize, String)> {
                        rows.iter().map(|(k, r)| (r.limiter, k.clone())).collect()
                    };
                    assert_eq!(shown(&listing.rows), shown(&expected), "{text}");
                    assert_eq!(listing.matched, 300, "{text}");
                }
            }
        }
    }
}
