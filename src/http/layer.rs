//! [`LimitLayer`]: the inbound layer. Keys a request (client address,
//! header, one global key, or a function), takes its cost from a paceline
//! limiter, and forwards it, or answers 429 with `Retry-After` and the
//! draft's `RateLimit` fields.

use std::fmt;
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

use super::client_ip::{self, Cidr, CidrError, Forwarding};
use super::fields;
use super::json::Json;
use crate::error::{BuildError, TakeError};
use crate::keyed::{KeyedLimiter, WhenFull};
use crate::rate::Rate;
use crate::slack::Slack;
use crate::tokio::{AsyncKeyedLimiter, AsyncLimiter};

/// The response body of a limited service: the inner service's, or the
/// layer's own (a refusal).
pub type LimitBody<B> = Either<B, Full<Bytes>>;

/// A boxed response future, for the paths that wait (a bounded wait, a
/// remote limiter).
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Picks a request's key from its head.
type KeyFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// Picks a request's cost from its head.
type CostFn = dyn Fn(&Parts) -> u64 + Send + Sync;

/// A request's key in the layer's keyed limiter: a client address (masked
/// to its group) or a text (a header's value, a function's answer).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientKey {
    /// A client address, masked to the layer's prefix (`2001:db8:1:2::`
    /// for a /64).
    Ip(IpAddr),
    /// A key of text.
    Text(Box<str>),
    /// The one key of a global limit.
    Global,
}

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientKey::Ip(ip) => ip.fmt(f),
            ClientKey::Text(text) => f.write_str(text),
            ClientKey::Global => f.write_str("global"),
        }
    }
}

/// An address reads as [`ClientKey::Ip`], anything else as text: so
/// [`Limits`](crate::Limits) overrides name clients as `"10.0.0.7"` or
/// `"api-key-123"`.
impl From<&str> for ClientKey {
    fn from(s: &str) -> ClientKey {
        s.parse()
            .map(ClientKey::Ip)
            .unwrap_or_else(|_| ClientKey::Text(s.into()))
    }
}

/// What happens to a request whose key cannot be found (no peer address
/// in its extensions, an unreadable forwarding chain, a missing header, a
/// key function's `None`). Never a silent pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MissingKey {
    /// Answer with this status and a text body saying why (default: 400).
    Refuse(StatusCode),
    /// Take from this one shared key instead: every such request shares
    /// one bucket.
    Shared(String),
}

impl Default for MissingKey {
    fn default() -> Self {
        MissingKey::Refuse(StatusCode::BAD_REQUEST)
    }
}

/// What the layer does with a request over the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Refuse it at once (the default).
    #[default]
    Refuse,
    /// Hold it until its slot if that is at most this far away, then
    /// forward it; refuse it otherwise (`take_timeout`). A client that
    /// goes away while held gives its slot back.
    Wait(Duration),
    /// Forward it anyway, counting it in [`LayerStats::would_refuse`]: to
    /// try a limit on live traffic before enforcing it.
    DryRun,
}

/// When the `RateLimit-Policy` and `RateLimit` fields are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fields {
    /// On refusals only (the default): they cost nothing on the admitted
    /// path.
    #[default]
    OnRefusal,
    /// On every response: an admitted one costs a second look at the
    /// key's bucket (a round trip, for a remote limiter).
    Always,
    /// Never (`Retry-After` is still sent on a refusal).
    Off,
}

/// The body of a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Body {
    /// `text/plain`: `Too Many Requests: retry in 2 s` (the default).
    #[default]
    Text,
    /// `application/json`: `{"error":"rate_limited","retry_after":2,"policy":"name"}`.
    Json,
    /// `application/problem+json` (RFC 9457) with the draft's problem type
    /// `https://iana.org/assignments/http-problem-types#quota-exceeded`
    /// and `violated-policies`.
    Problem,
}

/// What the layer counted since it was built: what it did on its own.
/// (Admitted requests are the limiter's to count: a keyed limiter of your
/// own built with `.stats(true)`, handed in with
/// [`keyed`](LimitBuilder::keyed), counts them at no cost to others.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerStats {
    /// Requests refused (429, or 503 for a failure of the limiter's server).
    pub refused: u64,
    /// Requests over the limit that [`Mode::DryRun`] forwarded.
    pub would_refuse: u64,
    /// Requests without a key (counted whatever [`MissingKey`] did).
    pub missing_key: u64,
}

/// Why a layer could not be built: the bad value, named.
#[derive(Debug)]
#[non_exhaustive]
pub enum LayerError {
    /// A trusted proxy that is not an address block.
    Proxy(CidrError),
    /// A header name that is not one.
    Header(String),
    /// A policy name with a character a Structured Field String cannot hold
    /// (only printable ASCII).
    Name(String),
    /// A prefix longer than the address (IPv4 up to 32, IPv6 up to 128).
    Prefix(u8),
    /// The limit itself.
    Limit(BuildError),
}

impl fmt::Display for LayerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerError::Proxy(e) => write!(f, "trusted proxy: {e}"),
            LayerError::Header(h) => write!(f, "not a header name: {h:?}"),
            LayerError::Name(n) => {
                write!(f, "policy name {n:?}: only printable ASCII can be sent")
            }
            LayerError::Prefix(p) => write!(f, "prefix /{p} is longer than the address"),
            LayerError::Limit(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LayerError {}

impl From<BuildError> for LayerError {
    fn from(e: BuildError) -> Self {
        LayerError::Limit(e)
    }
}

/// Where the key comes from.
enum KeySource {
    /// The client address (see `client_ip`).
    Ip,
    Header(HeaderName),
    Global,
    Function(Box<KeyFn>),
}

/// The limiter requests take from.
enum Backend {
    Keyed(AsyncKeyedLimiter<ClientKey>),
    Global(AsyncLimiter),
    #[cfg(any(feature = "redis", feature = "postgres"))]
    Remote(Remote),
}

/// A limit kept in a server, shared by every process that uses it.
#[cfg(any(feature = "redis", feature = "postgres"))]
enum Remote {
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
    shared: Arc<Shared>,
}

struct Shared {
    backend: Backend,
    source: KeySource,
    trusted: Vec<Cidr>,
    forwarding: Forwarding,
    v4_prefix: u8,
    v6_prefix: u8,
    missing: MissingKey,
    cost: Option<Box<CostFn>>,
    mode: Mode,
    fields: Fields,
    body: Body,
    status: StatusCode,
    name: String,
    refused: AtomicU64,
    would_refuse: AtomicU64,
    missing_key: AtomicU64,
}

/// Configures a [`LimitLayer`]; made by [`LimitLayer::per_ip`] and its
/// siblings.
#[must_use = "a builder does nothing until .build()"]
pub struct LimitBuilder {
    rate: Rate,
    slack: Slack,
    max_keys: Option<usize>,
    when_full: WhenFull,
    limiter: Option<Backend>,
    source: KeySource,
    trusted: Vec<String>,
    forwarding: Forwarding,
    v4_prefix: u8,
    v6_prefix: u8,
    missing: MissingKey,
    cost: Option<Box<CostFn>>,
    mode: Mode,
    fields: Fields,
    body: Body,
    status: StatusCode,
    name: String,
    header: Option<String>,
}

impl LimitLayer {
    /// Limits each client address to `rate`: IPv4 addresses one by one,
    /// IPv6 by /64. The address is the connection's peer (axum's
    /// `ConnectInfo<SocketAddr>`, or a `SocketAddr` extension a hyper
    /// accept loop inserts); behind proxies, set
    /// [`trust_proxies`](LimitBuilder::trust_proxies).
    pub fn per_ip(rate: Rate) -> LimitBuilder {
        LimitBuilder::new(rate, KeySource::Ip)
    }

    /// Limits each value of the header `name` (an API key, a tenant) to
    /// `rate`. A request without it gets the [`MissingKey`] outcome.
    pub fn per_header(name: &str, rate: Rate) -> LimitBuilder {
        let mut b = LimitBuilder::new(rate, KeySource::Global);
        b.header = Some(name.to_owned());
        b
    }

    /// Limits all requests together to `rate`.
    pub fn global(rate: Rate) -> LimitBuilder {
        LimitBuilder::new(rate, KeySource::Global)
    }

    /// Limits each key `key(head)` returns to `rate` (`None`: the
    /// [`MissingKey`] outcome). For keys of your own: a user id from a
    /// verified token, a route and a client together.
    pub fn per_key(
        key: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static,
        rate: Rate,
    ) -> LimitBuilder {
        LimitBuilder::new(rate, KeySource::Function(Box::new(key)))
    }

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

impl LimitBuilder {
    fn new(rate: Rate, source: KeySource) -> LimitBuilder {
        LimitBuilder {
            rate,
            slack: Slack::DEFAULT,
            max_keys: None,
            when_full: WhenFull::default(),
            limiter: None,
            source,
            trusted: Vec::new(),
            forwarding: Forwarding::default(),
            v4_prefix: 32,
            v6_prefix: 64,
            missing: MissingKey::default(),
            cost: None,
            mode: Mode::default(),
            fields: Fields::default(),
            body: Body::default(),
            status: StatusCode::TOO_MANY_REQUESTS,
            name: "default".to_owned(),
            header: None,
        }
    }

    /// The slack of each key's bucket (default [`Slack::DEFAULT`]).
    pub fn slack(mut self, slack: impl Into<Slack>) -> Self {
        self.slack = slack.into();
        self
    }

    /// The most keys tracked at once (the keyed limiter's default unless
    /// set): memory stays bounded whatever clients send.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys);
        self
    }

    /// What a new key does when `max_keys` are busy (default: evict).
    pub fn when_full(mut self, when_full: WhenFull) -> Self {
        self.when_full = when_full;
        self
    }

    /// Takes from `limiter`, a keyed limiter of your own (with overrides,
    /// counting, a clock), instead of one the builder makes; the builder's
    /// rate, slack and `max_keys` are then unused.
    pub fn keyed(mut self, limiter: AsyncKeyedLimiter<ClientKey>) -> Self {
        self.limiter = Some(Backend::Keyed(limiter));
        self
    }

    /// Takes from `limiter`, one limit for every request whatever its key
    /// (the key is still found: a missing one gets its outcome).
    pub fn shared(mut self, limiter: AsyncLimiter) -> Self {
        self.limiter = Some(Backend::Global(limiter));
        self
    }

    /// Takes from a Redis limiter: one limit per key shared by every
    /// process using the same Redis. Keys are the address or text
    /// (`"10.0.0.7"`, `"2001:db8:1:2::"`). A failure of Redis that the
    /// limiter's fail policy does not admit answers 503.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis(mut self, limiter: crate::redis::AsyncRedisLimiter) -> Self {
        self.limiter = Some(Backend::Remote(Remote::Redis(limiter)));
        self
    }

    /// Takes from a PostgreSQL limiter, as [`redis`](Self::redis) does
    /// from Redis: one limit per key for every process using the same
    /// table; a failure its fail policy does not admit answers 503.
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn postgres(mut self, limiter: crate::postgres::AsyncPostgresLimiter) -> Self {
        self.limiter = Some(Backend::Remote(Remote::Postgres(limiter)));
        self
    }

    /// Reads the client from forwarding headers when the peer is one of
    /// `proxies` (address blocks: `"10.0.0.0/8"`, `"::1"`): the right-most
    /// entry that is not one of them (see [`Forwarding`]). Without it,
    /// forwarding headers are never read.
    pub fn trust_proxies<I, S>(mut self, proxies: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.trusted.extend(proxies.into_iter().map(Into::into));
        self
    }

    /// Which header trusted proxies name the client in (default
    /// `X-Forwarded-For`).
    pub fn forwarding(mut self, forwarding: Forwarding) -> Self {
        self.forwarding = forwarding;
        self
    }

    /// How many leading bits of an IPv6 client address make one client
    /// (default 64: one host or home network owns a /64).
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.v6_prefix = bits;
        self
    }

    /// How many leading bits of an IPv4 client address make one client
    /// (default 32: each address).
    pub fn ipv4_prefix(mut self, bits: u8) -> Self {
        self.v4_prefix = bits;
        self
    }

    /// What a request without a key gets (default
    /// `MissingKey::Refuse(400)`).
    pub fn on_missing_key(mut self, outcome: MissingKey) -> Self {
        self.missing = outcome;
        self
    }

    /// The cost of a request, from its head (default 1): a costly route
    /// takes more (`|head| if head.uri.path() == "/export" { 10 } else { 1 }`).
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.cost = Some(Box::new(cost));
        self
    }

    /// What happens to a request over the limit (default: refuse).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// When the `RateLimit` fields are sent (default: on refusals).
    pub fn fields(mut self, fields: Fields) -> Self {
        self.fields = fields;
        self
    }

    /// The body of a refusal (default: text).
    pub fn body(mut self, body: Body) -> Self {
        self.body = body;
        self
    }

    /// The status of a refusal (default 429).
    pub fn status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// The policy's name in the fields and bodies (default `"default"`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The layer.
    ///
    /// # Errors
    /// [`LayerError`], naming the bad proxy block, header name, policy
    /// name, prefix, or limit.
    pub fn build(self) -> Result<LimitLayer, LayerError> {
        let trusted = self
            .trusted
            .iter()
            .map(|s| s.parse())
            .collect::<Result<Vec<Cidr>, _>>()
            .map_err(LayerError::Proxy)?;
        if !fields::valid_name(&self.name) {
            return Err(LayerError::Name(self.name));
        }
        for (bits, max) in [(self.v4_prefix, 32), (self.v6_prefix, 128)] {
            if bits > max {
                return Err(LayerError::Prefix(bits));
            }
        }
        let source = match self.header {
            Some(name) => KeySource::Header(
                HeaderName::try_from(name.as_str()).map_err(|_| LayerError::Header(name))?,
            ),
            None => self.source,
        };
        let backend = match self.limiter {
            Some(backend) => backend,
            None => match source {
                KeySource::Global => Backend::Global(
                    AsyncLimiter::builder(self.rate)
                        .slack(self.slack)
                        .full_credit(true)
                        .build()?,
                ),
                _ => {
                    let mut b = KeyedLimiter::<ClientKey>::builder(self.rate)
                        .slack(self.slack)
                        .when_full(self.when_full);
                    if let Some(max) = self.max_keys {
                        b = b.max_keys(max);
                    }
                    Backend::Keyed(AsyncKeyedLimiter::from(b.build()?))
                }
            },
        };
        Ok(LimitLayer {
            shared: Arc::new(Shared {
                backend,
                source,
                trusted,
                forwarding: self.forwarding,
                v4_prefix: self.v4_prefix,
                v6_prefix: self.v6_prefix,
                missing: self.missing,
                cost: self.cost,
                mode: self.mode,
                fields: self.fields,
                body: self.body,
                status: self.status,
                name: self.name,
                refused: AtomicU64::new(0),
                would_refuse: AtomicU64::new(0),
                missing_key: AtomicU64::new(0),
            }),
        })
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
