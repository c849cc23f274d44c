//! [`LimitLayer`]: the inbound layer. Keys a request (client address,
//! header, one global key, or a function), takes its cost from a paceline
//! limiter, and forwards it, or answers 429 with `Retry-After` and the
//! draft's `RateLimit` fields. What it is configured with, and the checks
//! that build it, are `builder.rs`'.

use std::any::Any;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::request::Parts;
use http::{Extensions, HeaderMap, Request, Response, StatusCode, Uri};
use tower_layer::Layer;
use tower_service::Service;

use super::accept;
use super::client_ip::{self, Cidr, Forwarding};
use super::fields;
use super::future::{answered, forwarded, AddedFields, BoxFuture, LimitBody, ResponseFuture};
use super::json::Json;
use super::terms::{Body, ClientKey, CostFn, Fields, KeySource, LayerStats, MissingKey, Mode};
use crate::error::TakeError;
use crate::limit::Limit as Quota;
use crate::take::{AsyncTake, Error, State as Found, Taken};
use crate::tokio::AsyncKeyedLimiter;

/// The limiter requests take from, whatever its kind: the take interface
/// with its futures boxed, so that the layer holds any limiter behind one
/// pointer. Implemented for every [`AsyncTake<ClientKey>`].
pub(super) trait Limiter: Send + Sync + 'static {
    /// A try decided without awaiting, when the limiter decides in process.
    fn try_now(&self, key: &ClientKey, cost: u64) -> Option<Result<Taken, Error>>;
    /// Takes `cost` from `key`'s limit as `mode` says: waiting up to its
    /// bound, or a try.
    fn take<'a>(
        &'a self,
        key: &'a ClientKey,
        cost: u64,
        mode: Mode,
    ) -> BoxFuture<'a, Result<Taken, Error>>;
    /// The limit `key` is held to.
    fn limit_for(&self, key: &ClientKey) -> Option<Quota>;
    /// The limiter itself, for [`LimitLayer::keyed_limiter`].
    fn as_any(&self) -> &dyn Any;
}

impl<L: AsyncTake<ClientKey> + 'static> Limiter for L {
    fn try_now(&self, key: &ClientKey, cost: u64) -> Option<Result<Taken, Error>> {
        self.try_take_n_now(key, cost)
    }

    fn take<'a>(
        &'a self,
        key: &'a ClientKey,
        cost: u64,
        mode: Mode,
    ) -> BoxFuture<'a, Result<Taken, Error>> {
        match mode {
            Mode::Wait(max) => Box::pin(self.take_n_timeout(key, cost, max)),
            _ => Box::pin(self.try_take_n(key, cost)),
        }
    }

    fn limit_for(&self, key: &ClientKey) -> Option<Quota> {
        AsyncTake::limit_for(self, key)
    }

    fn as_any(&self) -> &dyn Any {
        self
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
    pub(super) limiter: Box<dyn Limiter>,
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
    /// Costs by path ([`path_cost`](super::LimitBuilder::path_cost)).
    pub(super) costs: Box<[(Box<str>, u64)]>,
    /// Refusals as gRPC statuses.
    #[cfg(feature = "tonic")]
    pub(super) grpc: bool,
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
        self.shared.limiter.as_any().downcast_ref()
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

/// What a decision leaves for the response.
enum Verdict {
    /// Forward; with the fields to add, when asked for on every response.
    Forward(AddedFields),
    /// Answer this instead (boxed, for the same reason).
    Answer(Box<Response<Bytes>>),
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

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let shared = &self.shared;
        // The head is split off only for a key or cost function; otherwise
        // the request stays where it is until the inner service takes it
        // (a request is a few hundred bytes: each move is a copy).
        let (key, cost) = if shared.wants_head() {
            let (head, body) = request.into_parts();
            let key = shared.key(&head.headers, &head.extensions, &head.uri, Some(&head));
            let cost = shared.cost_of(&head.uri, || shared.cost.as_ref().map_or(1, |f| f(&head)));
            request = Request::from_parts(head, body);
            (key, cost)
        } else {
            let key = shared.key(request.headers(), request.extensions(), request.uri(), None);
            (key, shared.cost_of(request.uri(), || 1))
        };
        // The body a refusal would get: read now, while the request is here.
        let body = match shared.body {
            Body::Accept => accept::choose(request.headers().get_all(http::header::ACCEPT).iter()),
            body => body,
        };
        let key = match key {
            Ok(key) => key,
            Err(status) => return ResponseFuture::answer(Box::new(shared.missing(status))),
        };
        match shared.decide_now(&key, cost, body) {
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
                    match shared.decide_later(&key, cost, body).await {
                        Verdict::Forward(fields) => {
                            let response = inner.call(request).await?;
                            Ok(forwarded(response, fields))
                        }
                        Verdict::Answer(answer) => Ok(answered(*answer)),
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

    /// A request's cost: its path's, else `otherwise`'s.
    fn cost_of(&self, uri: &Uri, otherwise: impl FnOnce() -> u64) -> u64 {
        if !self.costs.is_empty() {
            let path = uri.path();
            if let Some((_, cost)) = self.costs.iter().find(|(p, _)| **p == *path) {
                return *cost;
            }
        }
        otherwise()
    }

    /// The request's key, or the status to refuse a request without one
    /// with.
    fn key(
        &self,
        headers: &HeaderMap,
        extensions: &Extensions,
        uri: &Uri,
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
                .map(ClientKey::text),
            KeySource::Function(f) => head.and_then(f).map(|k| ClientKey::text(&k)),
            KeySource::Path => Some(ClientKey::text(uri.path())),
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
    fn missing(&self, status: StatusCode) -> Response<Bytes> {
        self.missing_key.fetch_add(1, Relaxed);
        self.refused.fetch_add(1, Relaxed);
        crate::event::debug!(
            status = status.as_u16(),
            "paceline: a request without a key, refused"
        );
        let why = "paceline: no client key for this request (for the client's address: \
             serve with into_make_service_with_connect_info::<SocketAddr>(), or \
             insert the peer's SocketAddr as an extension; behind proxies, check \
             trust_proxies)\n";
        #[cfg(feature = "tonic")]
        if self.grpc {
            return super::grpc::refusal(super::grpc::code_for(status), why.trim_end(), None);
        }
        text(status, why)
    }

    /// A decision on the spot, for in-process limiters that do not wait;
    /// `None` for the others.
    #[inline]
    fn decide_now(&self, key: &ClientKey, cost: u64, body: Body) -> Option<Verdict> {
        if let Mode::Wait(_) = self.mode {
            return None;
        }
        let taken = self.limiter.try_now(key, cost)?;
        Some(self.settle(key, taken, body))
    }

    /// A decision that may wait: a bounded wait, or a remote limiter (one
    /// round trip, whose answer carries the fields too).
    async fn decide_later(&self, key: &ClientKey, cost: u64, body: Body) -> Verdict {
        let taken = self.limiter.take(key, cost, self.mode).await;
        self.settle(key, taken, body)
    }

    /// Counts and answers a decision; a refusal's body is `body`.
    fn settle(&self, key: &ClientKey, taken: Result<Taken, Error>, body: Body) -> Verdict {
        match taken {
            Ok(taken) => Verdict::Forward(match self.fields {
                Fields::Always => self.fields_for(taken.state()),
                _ => None,
            }),
            Err(e) => {
                let failure = match e.refusal() {
                    Some(refusal) => Failure::Limit(*refusal),
                    None => Failure::Server(e.to_string()),
                };
                self.refuse(key, failure, body)
            }
        }
    }

    /// A request over the limit (or failed by the limiter's server).
    #[cold]
    fn refuse(&self, key: &ClientKey, failure: Failure, body: Body) -> Verdict {
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
        crate::event::debug!(
            key = %key,
            status = status.as_u16(),
            retry_after_ms = wait.map(|w| w.as_millis() as u64),
            why = why.as_deref(),
            "paceline: request refused"
        );
        #[cfg(feature = "tonic")]
        let mut response = if self.grpc {
            let server = matches!(failure, Failure::Server(_));
            super::grpc::refused(server, why.as_deref(), wait, &self.name)
        } else {
            self.refusal_body(status, wait, why.as_deref(), body)
        };
        #[cfg(not(feature = "tonic"))]
        let mut response = self.refusal_body(status, wait, why.as_deref(), body);
        let headers = response.headers_mut();
        if let Some(wait) = wait {
            headers.insert(RETRY_AFTER, fields::retry_after(wait));
        }
        // The limit is the limiter's own knowledge: never a round trip.
        let limit = self.limiter.limit_for(key);
        if let (Some(limit), true) = (limit, self.fields != Fields::Off) {
            headers.insert(
                HeaderName::from_static("ratelimit-policy"),
                fields::policy(&self.name, limit.rate(), limit.burst()),
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

    /// `RateLimit-Policy` and `RateLimit` of an admitted request, from what
    /// its take found: `available` free now, the bucket whole again
    /// [`State::reset`](crate::State::reset) later. None when nothing limits.
    fn fields_for(&self, state: Found) -> AddedFields {
        let limit = state.limit()?;
        Some(Box::new([
            (
                HeaderName::from_static("ratelimit-policy"),
                fields::policy(&self.name, limit.rate(), limit.burst()),
            ),
            (
                HeaderName::from_static("ratelimit"),
                fields::state(&self.name, state.available(), state.reset()),
            ),
        ]))
    }

    /// The body of a refusal: `wait` until it may go, or `why` it cannot.
    fn refusal_body(
        &self,
        status: StatusCode,
        wait: Option<Duration>,
        why: Option<&str>,
        body: Body,
    ) -> Response<Bytes> {
        let retry = wait.map(|w| fields::seconds_up(w).max(1));
        let detail = match (retry, why) {
            (_, Some(why)) => why.to_owned(),
            (Some(s), None) => format!("retry in {s} s"),
            (None, None) => String::new(),
        };
        let name = Json(&self.name);
        let (content_type, body) = match body {
            Body::Text | Body::Accept => (
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
        let mut response = Response::new(Bytes::from(body));
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
    Server(String),
}

/// The connection's peer: axum's `ConnectInfo<SocketAddr>` (feature
/// `axum`) or a `SocketAddr` extension.
fn peer(extensions: &Extensions) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip());
    }
    #[cfg(feature = "tonic")]
    if let Some(ip) = super::grpc::peer(extensions) {
        return Some(ip);
    }
    extensions.get::<SocketAddr>().map(SocketAddr::ip)
}

/// A text response.
fn text(status: StatusCode, body: &'static str) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from_static(body.as_bytes()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
