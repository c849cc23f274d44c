//! [`LimitLayer`]: the inbound layer. Keys a request (client address,
//! header, one global key, or a function), takes its cost from a paceline
//! limiter, and forwards it, or answers 429 with `Retry-After` and the
//! draft's `RateLimit` fields. What it is configured with, and the checks
//! that build it, are `builder.rs`'.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::request::Parts;
use http::{Extensions, HeaderMap, Request, Response, StatusCode};
use http_body_util::{Either, Full};
use tower_layer::Layer;
use tower_service::Service;

use super::builder::{Body, ClientKey, Fields, LayerStats, MissingKey, Mode};
use super::client_ip::{self, Cidr, Forwarding};
use super::fields;
use super::json::Json;
use crate::error::TakeError;
use crate::rate::Rate;
use crate::tokio::{AsyncKeyedLimiter, AsyncLimiter};

/// The response body of a limited service: the inner service's, or the
/// layer's own (a refusal).
pub type LimitBody<B> = Either<B, Full<Bytes>>;

/// A boxed response future, for the paths that wait (a bounded wait, a
/// remote limiter).
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Picks a request's key from its head.
pub(super) type KeyFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// Picks a request's cost from its head.
pub(super) type CostFn = dyn Fn(&Parts) -> u64 + Send + Sync;

/// Where the key comes from.
pub(super) enum KeySource {
    /// The client address (see `client_ip`).
    Ip,
    Header(HeaderName),
    Global,
    Function(Box<KeyFn>),
}

/// The limiter requests take from.
pub(super) enum Backend {
    Keyed(AsyncKeyedLimiter<ClientKey>),
    Global(AsyncLimiter),
    #[cfg(any(feature = "redis", feature = "postgres"))]
    Remote(Remote),
}

/// A limit kept in a server, shared by every process that uses it.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(super) enum Remote {
    #[cfg(feature = "redis")]
    Redis(crate::redis::AsyncRedisLimiter),
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::AsyncPostgresLimiter),
}

/// `$body` with `$l` bound to whichever remote limiter `$remote` holds:
/// both have the same calls.
#[cfg(any(feature = "redis", feature = "postgres"))]
macro_rules! on_remote {
    ($remote:expr, $l:ident => $body:expr) => {
        match $remote {
            #[cfg(feature = "redis")]
            Remote::Redis($l) => $body,
            #[cfg(feature = "postgres")]
            Remote::Postgres($l) => $body,
        }
    };
}

#[cfg(any(feature = "redis", feature = "postgres"))]
impl Remote {
    /// Takes `cost` from `key`'s limit as `mode` says.
    async fn take(&self, key: &str, cost: u64, mode: Mode) -> Result<(), crate::remote::Error> {
        on_remote!(self, l => match mode {
            Mode::Wait(max) => l.take_n_timeout(key, cost, max).await.map(drop),
            _ => l.try_take_n(key, cost).await,
        })
    }

    async fn available(&self, key: &str) -> Result<u64, crate::remote::Error> {
        on_remote!(self, l => l.available(key).await)
    }

    /// The rate and the burst.
    fn limit(&self) -> (Rate, u64) {
        on_remote!(self, l => (l.rate(), l.slack().saturating_add(1)))
    }
}

/// A tower [`Layer`] that limits requests per client (or per header, per
/// key function, or globally): the layer of `paceline::http`'s module doc.
///
/// `Clone`, and every clone, and every service it makes, shares one
/// limiter: it works in axum's `.layer` and `.route_layer` as it is, with
/// no `Buffer` in front.
#[derive(Clone)]
pub struct LimitLayer {
    pub(super) shared: Arc<Shared>,
}

pub(super) struct Shared {
    pub(super) backend: Backend,
    pub(super) source: KeySource,
    pub(super) trusted: Vec<Cidr>,
    pub(super) forwarding: Forwarding,
    pub(super) v4_prefix: u8,
    pub(super) v6_prefix: u8,
    pub(super) missing: MissingKey,
    pub(super) cost: Option<Box<CostFn>>,
    pub(super) mode: Mode,
    pub(super) fields: Fields,
    pub(super) body: Body,
    pub(super) status: StatusCode,
    pub(super) name: String,
    pub(super) refused: AtomicU64,
    pub(super) would_refuse: AtomicU64,
    pub(super) missing_key: AtomicU64,
}

impl LimitLayer {
    /// What the layer counted.
    pub fn stats(&self) -> LayerStats {
        let s = &self.shared;
        LayerStats {
            refused: s.refused.load(Relaxed),
            would_refuse: s.would_refuse.load(Relaxed),
            missing_key: s.missing_key.load(Relaxed),
        }
    }

    /// The in-process keyed limiter the layer takes from, if it has one:
    /// for its overrides (`apply`), `snapshot`, `stats`.
    pub fn keyed_limiter(&self) -> Option<&AsyncKeyedLimiter<ClientKey>> {
        match &self.shared.backend {
            Backend::Keyed(limiter) => Some(limiter),
            _ => None,
        }
    }
}

impl<S> Layer<S> for LimitLayer {
    type Service = Limit<S>;

    fn layer(&self, inner: S) -> Limit<S> {
        Limit {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`LimitLayer`] wraps around another. `Clone`: clones share
/// the layer's limiter.
#[derive(Clone)]
pub struct Limit<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// The fields an admitted response gets, when asked for on every one
/// (boxed: the futures that carry them stay small to move).
type AddedFields = Option<Box<[(HeaderName, HeaderValue); 2]>>;

/// What a decision leaves for the response.
enum Verdict {
    /// Forward; with the fields to add, when asked for on every response.
    Forward(AddedFields),
    /// Answer this instead (boxed, for the same reason).
    Answer(Box<Response<Full<Bytes>>>),
}

impl<S, B, ResB> Service<Request<B>> for Limit<S>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    ResB: Send + 'static,
{
    type Response = Response<LimitBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let shared = &self.shared;
        // The head is split off only for a key or cost function.
        let (key, cost, request) = if shared.wants_head() {
            let (head, body) = request.into_parts();
            let key = shared.key(&head.headers, &head.extensions, Some(&head));
            let cost = shared.cost.as_ref().map_or(1, |cost| cost(&head));
            (key, cost, Request::from_parts(head, body))
        } else {
            let key = shared.key(request.headers(), request.extensions(), None);
            (key, 1, request)
        };
        let key = match key {
            Ok(key) => key,
            Err(status) => return ResponseFuture::answer(Box::new(shared.missing(status))),
        };
        match shared.decide_now(&key, cost) {
            Some(Verdict::Forward(fields)) => {
                ResponseFuture::inner(self.inner.call(request), fields)
            }
            Some(Verdict::Answer(answer)) => ResponseFuture::answer(answer),
            None => {
                // The ready service goes with the request; a clone stays.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                let shared = Arc::clone(shared);
                ResponseFuture::boxed(Box::pin(async move {
                    match shared.decide_later(&key, cost).await {
                        Verdict::Forward(fields) => {
                            let response = inner.call(request).await?;
                            Ok(with_fields(response.map(Either::Left), fields))
                        }
                        Verdict::Answer(answer) => Ok((*answer).map(Either::Right)),
                    }
                }))
            }
        }
    }
}

impl Shared {
    /// Whether a key or cost function needs the request's head.
    fn wants_head(&self) -> bool {
        self.cost.is_some() || matches!(self.source, KeySource::Function(_))
    }

    /// The request's key, or the status to refuse a request without one
    /// with.
    fn key(
        &self,
        headers: &HeaderMap,
        extensions: &Extensions,
        head: Option<&Parts>,
    ) -> Result<ClientKey, StatusCode> {
        let found = match &self.source {
            KeySource::Global => return Ok(ClientKey::Global),
            KeySource::Ip => peer(extensions).and_then(|peer| {
                let ip = client_ip::client_ip(peer, headers, &self.trusted, self.forwarding)?;
                let bits = if ip.is_ipv4() {
                    self.v4_prefix
                } else {
                    self.v6_prefix
                };
                Some(ClientKey::Ip(client_ip::mask(ip, bits)))
            }),
            KeySource::Header(name) => headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| ClientKey::Text(v.into())),
            KeySource::Function(f) => head.and_then(f).map(|k| ClientKey::Text(k.into())),
        };
        match (found, &self.missing) {
            (Some(key), _) => Ok(key),
            (None, MissingKey::Shared(key)) => {
                self.missing_key.fetch_add(1, Relaxed);
                Ok(ClientKey::from(key.as_str()))
            }
            (None, MissingKey::Refuse(status)) => Err(*status),
        }
    }

    /// The answer to a request without a key, refused with `status`.
    #[cold]
    fn missing(&self, status: StatusCode) -> Response<Full<Bytes>> {
        self.missing_key.fetch_add(1, Relaxed);
        self.refused.fetch_add(1, Relaxed);
        text(
            status,
            "paceline: no client key for this request (for the client's address: \
             serve with into_make_service_with_connect_info::<SocketAddr>(), or \
             insert the peer's SocketAddr as an extension; behind proxies, check \
             trust_proxies)\n",
        )
    }

    /// A decision on the spot, for in-process limiters that do not wait;
    /// `None` for the others.
    fn decide_now(&self, key: &ClientKey, cost: u64) -> Option<Verdict> {
        let taken = match (&self.backend, self.mode) {
            (_, Mode::Wait(_)) => return None,
            (Backend::Keyed(limiter), _) => limiter.try_take_n(key, cost),
            (Backend::Global(limiter), _) => limiter.try_take_n(cost),
            #[cfg(any(feature = "redis", feature = "postgres"))]
            (Backend::Remote(_), _) => return None,
        };
        Some(self.settle(key, taken.map_err(Failure::Limit)))
    }

    /// A decision that may wait: a bounded wait, or a remote limiter.
    async fn decide_later(&self, key: &ClientKey, cost: u64) -> Verdict {
        let taken = match (&self.backend, self.mode) {
            (Backend::Keyed(limiter), Mode::Wait(max)) => limiter
                .take_n_timeout(key, cost, max)
                .await
                .map(drop)
                .map_err(Failure::Limit),
            (Backend::Keyed(limiter), _) => limiter.try_take_n(key, cost).map_err(Failure::Limit),
            (Backend::Global(limiter), Mode::Wait(max)) => limiter
                .take_n_timeout(cost, max)
                .await
                .map(drop)
                .map_err(Failure::Limit),
            (Backend::Global(limiter), _) => limiter.try_take_n(cost).map_err(Failure::Limit),
            #[cfg(any(feature = "redis", feature = "postgres"))]
            (Backend::Remote(remote), mode) => {
                let taken = remote.take(&key.to_string(), cost, mode).await;
                taken.map_err(|e| match e.refusal() {
                    Some(refusal) => Failure::Limit(*refusal),
                    None => Failure::Server(e.to_string()),
                })
            }
        };
        let verdict = self.settle(key, taken);
        // The fields of an admitted request: a look at the bucket after.
        match verdict {
            Verdict::Forward(None) if self.fields == Fields::Always => {
                Verdict::Forward(self.fields_after_async(key).await)
            }
            verdict => verdict,
        }
    }

    /// Counts and answers a decision.
    fn settle(&self, key: &ClientKey, taken: Result<(), Failure>) -> Verdict {
        match taken {
            Ok(()) => {
                let fields = match (&self.backend, self.fields) {
                    #[cfg(any(feature = "redis", feature = "postgres"))]
                    (Backend::Remote(_), _) => None, // looked at after, asynchronously
                    (_, Fields::Always) => self.fields_after(key),
                    _ => None,
                };
                Verdict::Forward(fields)
            }
            Err(failure) => self.refuse(key, failure),
        }
    }

    /// A request over the limit (or failed by the limiter's server).
    #[cold]
    fn refuse(&self, key: &ClientKey, failure: Failure) -> Verdict {
        if self.mode == Mode::DryRun {
            if let Failure::Limit(_) = failure {
                self.would_refuse.fetch_add(1, Relaxed);
                return Verdict::Forward(None);
            }
        }
        self.refused.fetch_add(1, Relaxed);
        let (status, wait, why) = match &failure {
            Failure::Limit(e) => match e.retry_after() {
                Some(wait) => (self.status, Some(wait), None),
                None => (self.status, None, Some(e.to_string())),
            },
            Failure::Server(e) => (
                StatusCode::SERVICE_UNAVAILABLE,
                Some(Duration::from_secs(1)),
                Some(format!("the limit's server failed: {e}")),
            ),
        };
        let mut response = self.refusal_body(status, wait, why.as_deref());
        let headers = response.headers_mut();
        if let Some(wait) = wait {
            headers.insert(RETRY_AFTER, fields::retry_after(wait));
        }
        if self.fields != Fields::Off {
            let (rate, burst) = self.limit_of(key);
            headers.insert(
                HeaderName::from_static("ratelimit-policy"),
                fields::policy(&self.name, rate, burst),
            );
            // `t` equals Retry-After (the draft: never earlier than it).
            // A request no wait admits (a cost above the burst) has no
            // window to announce: the policy alone.
            if let Some(wait) = wait {
                let reset = Duration::from_secs(fields::seconds_up(wait).max(1));
                headers.insert(
                    HeaderName::from_static("ratelimit"),
                    fields::state(&self.name, 0, reset),
                );
            }
        }
        Verdict::Answer(Box::new(response))
    }

    /// The rate and burst `key` is limited by.
    fn limit_of(&self, key: &ClientKey) -> (Rate, u64) {
        match &self.backend {
            Backend::Keyed(limiter) => {
                let (rate, slack) = limiter.limiter().rate_for(key);
                (rate, slack.saturating_add(1))
            }
            Backend::Global(limiter) => (limiter.rate(), limiter.slack().saturating_add(1)),
            #[cfg(any(feature = "redis", feature = "postgres"))]
            Backend::Remote(remote) => remote.limit(),
        }
    }

    /// The fields of an admitted request, from an in-process bucket.
    fn fields_after(&self, key: &ClientKey) -> AddedFields {
        let remaining = match &self.backend {
            Backend::Keyed(limiter) => limiter.limiter().available(key),
            Backend::Global(limiter) => limiter.available(),
            #[cfg(any(feature = "redis", feature = "postgres"))]
            Backend::Remote(_) => return None,
        };
        Some(Box::new(self.fields_for(key, remaining)))
    }

    /// The fields of an admitted request, from any bucket.
    async fn fields_after_async(&self, key: &ClientKey) -> AddedFields {
        match &self.backend {
            #[cfg(any(feature = "redis", feature = "postgres"))]
            Backend::Remote(remote) => {
                // A failed look sends no fields rather than wrong ones.
                let remaining = remote.available(&key.to_string()).await.ok()?;
                Some(Box::new(self.fields_for(key, remaining)))
            }
            _ => self.fields_after(key),
        }
    }

    /// `RateLimit-Policy` and `RateLimit` with `remaining` free now: the
    /// bucket is whole again at most `(burst - remaining) * T` later.
    fn fields_for(&self, key: &ClientKey, remaining: u64) -> [(HeaderName, HeaderValue); 2] {
        let (rate, burst) = self.limit_of(key);
        let missing = u32::try_from(burst.saturating_sub(remaining)).unwrap_or(u32::MAX);
        let reset = rate.interval().saturating_mul(missing);
        [
            (
                HeaderName::from_static("ratelimit-policy"),
                fields::policy(&self.name, rate, burst),
            ),
            (
                HeaderName::from_static("ratelimit"),
                fields::state(&self.name, remaining, reset),
            ),
        ]
    }

    /// The body of a refusal: `wait` until it may go, or `why` it cannot.
    fn refusal_body(
        &self,
        status: StatusCode,
        wait: Option<Duration>,
        why: Option<&str>,
    ) -> Response<Full<Bytes>> {
        let retry = wait.map(|w| fields::seconds_up(w).max(1));
        let detail = match (retry, why) {
            (_, Some(why)) => why.to_owned(),
            (Some(s), None) => format!("retry in {s} s"),
            (None, None) => String::new(),
        };
        let name = Json(&self.name);
        let (content_type, body) = match self.body {
            Body::Text => (
                "text/plain; charset=utf-8",
                format!("{}: {detail}\n", status.canonical_reason().unwrap_or("Refused")),
            ),
            Body::Json => (
                "application/json",
                format!(
                    "{{\"error\":\"rate_limited\",\"retry_after\":{},\"policy\":{name},\"detail\":{}}}",
                    retry.map_or("null".to_owned(), |s| s.to_string()),
                    Json(&detail)
                ),
            ),
            Body::Problem => (
                "application/problem+json",
                format!(
                    "{{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\",\
                     \"title\":\"Request quota exceeded\",\"status\":{},\"detail\":{},\
                     \"violated-policies\":[{name}]}}",
                    status.as_u16(),
                    Json(&detail)
                ),
            ),
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        response
    }
}

/// Why a request was not admitted.
enum Failure {
    /// The limit refused it.
    Limit(TakeError),
    /// The limit's server failed, and its fail policy did not admit.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    Server(String),
}

/// The connection's peer: axum's `ConnectInfo<SocketAddr>` (feature
/// `axum`) or a `SocketAddr` extension.
fn peer(extensions: &Extensions) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip());
    }
    extensions.get::<SocketAddr>().map(SocketAddr::ip)
}

/// A text response.
fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn with_fields<B>(mut response: Response<B>, fields: AddedFields) -> Response<B> {
    if let Some(fields) = fields {
        for (name, value) in *fields {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

pin_project_lite::pin_project! {
    /// The response future of [`Limit`].
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, B, E> {
        Inner { #[pin] future: F, fields: AddedFields },
        Answer { response: Option<Box<Response<Full<Bytes>>>> },
        Boxed { future: BoxFuture<Result<Response<LimitBody<B>>, E>> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    fn inner(future: F, fields: AddedFields) -> Self {
        ResponseFuture {
            state: State::Inner { future, fields },
        }
    }

    fn answer(response: Box<Response<Full<Bytes>>>) -> Self {
        ResponseFuture {
            state: State::Answer {
                response: Some(response),
            },
        }
    }

    fn boxed(future: BoxFuture<Result<Response<LimitBody<B>>, E>>) -> Self {
        ResponseFuture {
            state: State::Boxed { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<LimitBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Inner { future, fields } => {
                let response = std::task::ready!(future.poll(cx))?;
                Poll::Ready(Ok(with_fields(response.map(Either::Left), fields.take())))
            }
            StateProj::Answer { response } => Poll::Ready(Ok((*response
                .take()
                .expect("a ResponseFuture polled after it completed"))
            .map(Either::Right))),
            StateProj::Boxed { future } => future.as_mut().poll(cx),
        }
    }
}
