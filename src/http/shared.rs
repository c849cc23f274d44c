//! The layer's state, shared by every clone of [`LimitLayer`] and every
//! service it makes: the limiter behind one interface, the configuration
//! `builder.rs` checked, the counts; and what the layer writes itself:
//! a refusal (status, `Retry-After`, the `RateLimit` fields, a body by the
//! request's `Accept`), the answer to a request without a key, and the
//! fields of an admitted response. How a request is decided is
//! `layer.rs`'.
//!
//! [`LimitLayer`]: super::LimitLayer

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{HeaderMap, Response, StatusCode};

use super::accept;
use super::client_ip::{Cidr, Forwarding};
use super::fields;
use super::future::{AddedFields, BoxFuture};
use super::json::{response, Json};
use super::terms::{Answered, Body, ClientKey, CostFn, Fields, KeySource, MissingKey, Mode};
use crate::limiter::take::{AsyncTake, Error, Taken};
use crate::tokio::AsyncKeyedLimiter;
use crate::values::limit::Limit;

/// The limiter requests take from, whatever its kind: the take interface
/// with its futures boxed, so that the layer holds any limiter behind one
/// pointer. Implemented for every [`AsyncTake<ClientKey>`].
pub(super) trait Limiter: Send + Sync + 'static {
    /// A try decided without awaiting, when the limiter decides in process.
    fn try_now(&self, key: &ClientKey, cost: u64) -> Option<Result<Taken, Error>>;
    /// [`try_now`](Self::try_now) for the answer alone, when nothing
    /// reports what the take found: the same call, inlined here so that
    /// the state is never built, and a small answer returned through the
    /// pointer.
    fn try_now_bare(&self, key: &ClientKey, cost: u64) -> Option<Result<(), Error>>;
    /// Takes `cost` from `key`'s limit as `mode` says: waiting up to its
    /// bound, or a try.
    fn take<'a>(
        &'a self,
        key: &'a ClientKey,
        cost: u64,
        mode: Mode,
    ) -> BoxFuture<'a, Result<Taken, Error>>;
    /// The limit `key` is held to.
    fn limit_for(&self, key: &ClientKey) -> Option<Limit>;
}

impl<L: AsyncTake<ClientKey> + 'static> Limiter for L {
    fn try_now(&self, key: &ClientKey, cost: u64) -> Option<Result<Taken, Error>> {
        self.try_take_n_now(key, cost)
    }

    fn try_now_bare(&self, key: &ClientKey, cost: u64) -> Option<Result<(), Error>> {
        self.try_take_n_now(key, cost).map(|taken| taken.map(drop))
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

    fn limit_for(&self, key: &ClientKey) -> Option<Limit> {
        AsyncTake::limit_for(self, key)
    }
}

/// What every clone of a layer, and every service it makes, shares.
pub(super) struct Shared {
    pub(super) limiter: Box<dyn Limiter>,
    /// The keyed limiter the builder made as `limiter`, if it made one
    /// ([`LimitLayer::keyed_limiter`](super::LimitLayer::keyed_limiter)).
    pub(super) made: Option<AsyncKeyedLimiter<ClientKey>>,
    pub(super) settings: Settings,
    pub(super) trusted: Vec<Cidr>,
    pub(super) refused: AtomicU64,
    pub(super) would_refuse: AtomicU64,
    pub(super) missing_key: AtomicU64,
}

/// What the layer is set to that [`LimitBuilder`](super::LimitBuilder)
/// holds as given and the layer as built.
pub(super) struct Settings {
    pub(super) source: KeySource,
    pub(super) forwarding: Forwarding,
    pub(super) v4_prefix: u8,
    pub(super) v6_prefix: u8,
    pub(super) missing: MissingKey,
    pub(super) cost: Option<Box<CostFn>>,
    pub(super) fields: Fields,
    pub(super) body: Body,
    pub(super) status: StatusCode,
    pub(super) name: String,
    pub(super) mode: Mode,
    /// Costs by path ([`path_cost`](super::LimitBuilder::path_cost)).
    pub(super) costs: Vec<(Box<str>, u64)>,
    /// Refusals as gRPC statuses (only with feature `tonic`).
    pub(super) grpc: bool,
}

impl Shared {
    /// The answer to a request without a key, refused with `status`.
    #[cold]
    pub(super) fn missing(&self, status: StatusCode) -> Response<Bytes> {
        self.missing_key.fetch_add(1, Relaxed);
        self.refused.fetch_add(1, Relaxed);
        crate::observe::event::debug!(
            status = status.as_u16(),
            "paceline: a request without a key, refused"
        );
        let why = "paceline: no client key for this request (for the client's address: \
             serve with into_make_service_with_connect_info::<SocketAddr>(), or \
             insert the peer's SocketAddr as an extension; behind proxies, check \
             trust_proxies)\n";
        let mut response = match self.settings.grpc {
            #[cfg(feature = "tonic")]
            true => super::grpc::refusal(super::grpc::code_for(status), why.trim_end(), None),
            _ => response(status, "text/plain; charset=utf-8", why),
        };
        response.extensions_mut().insert(Answered::MissingKey);
        response
    }

    /// The answer to a request over the limit (or failed by the limiter's
    /// server, `failure` not a refusal), in the body its `headers` accept
    /// when the layer asks them.
    #[cold]
    pub(super) fn refuse(
        &self,
        key: &ClientKey,
        failure: Error,
        headers: &HeaderMap,
    ) -> Box<Response<Bytes>> {
        let body = match self.settings.body {
            Body::Accept => accept::choose(headers.get_all(http::header::ACCEPT).iter()),
            body => body,
        };
        self.refused.fetch_add(1, Relaxed);
        let server = !failure.is_refusal();
        let (status, wait, why, answered) = if server {
            let why = format!("the limit's server failed: {failure}");
            let wait = Some(Duration::from_secs(1));
            let status = StatusCode::SERVICE_UNAVAILABLE;
            (status, wait, Some(why), Answered::ServerFailed)
        } else {
            // A refusal says why only when no wait admits it.
            let wait = failure.retry_after();
            let why = wait.is_none().then(|| failure.to_string());
            (self.settings.status, wait, why, Answered::Refused)
        };
        crate::observe::event::debug!(
            key = %key,
            status = status.as_u16(),
            retry_after_ms = wait.map(|w| w.as_millis() as u64),
            why = why.as_deref(),
            "paceline: request refused"
        );
        let mut response = match self.settings.grpc {
            #[cfg(feature = "tonic")]
            true => super::grpc::refused(server, why.as_deref(), wait, &self.settings.name),
            _ => self.refusal_body(status, wait, why.as_deref(), body),
        };
        response.extensions_mut().insert(answered);
        let headers = response.headers_mut();
        if let Some(wait) = wait {
            headers.insert(RETRY_AFTER, fields::retry_after(wait));
        }
        // The limit is the limiter's own knowledge: never a round trip.
        let limit = self.limiter.limit_for(key);
        if let (Some(limit), true) = (limit, self.settings.fields != Fields::Off) {
            let name = &self.settings.name;
            headers.insert(fields::POLICY, fields::policy(name, limit));
            // `t` equals Retry-After (the draft: never earlier than it).
            // A request no wait admits (a cost above the burst) has no
            // window to announce: the policy alone.
            if let Some(wait) = wait {
                let reset = Duration::from_secs(fields::seconds_up(wait).max(1));
                headers.insert(fields::STATE, fields::state(name, 0, reset));
            }
        }
        Box::new(response)
    }

    /// `RateLimit-Policy` and `RateLimit` of an admitted request, from the
    /// limit `key` is held to and what its take found: `available` free
    /// now, the bucket whole again [`Taken::reset`] later. None when
    /// nothing limits.
    pub(super) fn fields_for(&self, key: &ClientKey, taken: &Taken) -> AddedFields {
        let (name, limit) = (&self.settings.name, self.limiter.limit_for(key)?);
        Some(Box::new([
            (fields::POLICY, fields::policy(name, limit)),
            (
                fields::STATE,
                fields::state(name, taken.available(), taken.reset()),
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
        let name = Json(&self.settings.name);
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
        response(status, content_type, body)
    }
}
