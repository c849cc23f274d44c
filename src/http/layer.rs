//! [`LimitLayer`]: the inbound layer. Keys a request (client address,
//! header, one global key, or a function), takes its cost from a paceline
//! limiter, and forwards it, or answers 429 with `Retry-After` and the
//! draft's `RateLimit` fields. What it is configured with, and the checks
//! that build it, are `builder.rs`'; what it shares and writes itself
//! (the refusals, the fields), `shared.rs`'.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::request::Parts;
use http::{Extensions, HeaderMap, Request, Response, StatusCode, Uri};
use tower_layer::Layer;
use tower_service::Service;

use super::client_ip;
use super::future::{forwarded, AddedFields, AnswerBody, ResponseFuture};
use super::shared::Shared;
use super::terms::{ClientKey, Fields, KeySource, LayerStats, MissingKey, Mode};
use crate::limiter::take::{Error, Taken};
use crate::tokio::AsyncKeyedLimiter;

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

    /// The keyed limiter the layer's builder made, if it made one (no
    /// [`limiter`](super::LimitBuilder::limiter) of your own was given, and
    /// the key is not global): for its overrides (`apply`), `snapshot`,
    /// `stats`, and the look inside ([`Inspect::layer`](super::Inspect::layer)).
    pub fn keyed_limiter(&self) -> Option<&AsyncKeyedLimiter<ClientKey>> {
        self.shared.made.as_ref()
    }
}

impl<S> Layer<S> for LimitLayer {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`LimitLayer`] wraps around another. `Clone`: clones share
/// the layer's limiter.
#[derive(Clone)]
pub struct Limited<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// What a decision leaves for the response: forward it, with the fields to
/// add when asked for on every response; or why not (refused by the limit,
/// or failed by its server).
type Decision = Result<AddedFields, Error>;

impl<S, B, ResB> Service<Request<B>> for Limited<S>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    ResB: AnswerBody + Send + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if self.shared.wants_head() {
            return self.call_with_head(request);
        }
        // The request stays where it is until the inner service takes it:
        // a request is a few hundred bytes, each move is a copy, and passed
        // through a helper function, even one inlined, it is copied once
        // more on the way (so `call_with_head` writes this match again).
        let decided =
            self.shared
                .decide(request.headers(), request.extensions(), request.uri(), None);
        match decided {
            Ok(None) => ResponseFuture::inner(self.inner.call(request)),
            Ok(Some(fields)) => ResponseFuture::with_fields(self.inner.call(request), fields),
            Err(NotNow::Answer(answer)) => ResponseFuture::answer(answer),
            Err(NotNow::Later(later)) => self.later(*later, request),
        }
    }
}

impl<S> Limited<S> {
    /// [`call`](Service::call) for a key or cost function, which needs the
    /// request's head: split off, and put back after the decision.
    #[inline(never)]
    fn call_with_head<B, ResB>(
        &mut self,
        request: Request<B>,
    ) -> ResponseFuture<S::Future, ResB, S::Error>
    where
        S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        B: Send + 'static,
        ResB: AnswerBody + Send + 'static,
    {
        let (head, body) = request.into_parts();
        let decided = self
            .shared
            .decide(&head.headers, &head.extensions, &head.uri, Some(&head));
        let request = Request::from_parts(head, body);
        // As in `call`.
        match decided {
            Ok(None) => ResponseFuture::inner(self.inner.call(request)),
            Ok(Some(fields)) => ResponseFuture::with_fields(self.inner.call(request), fields),
            Err(NotNow::Answer(answer)) => ResponseFuture::answer(answer),
            Err(NotNow::Later(later)) => self.later(*later, request),
        }
    }

    /// A decision that waits (a bounded wait, a remote limiter): boxed,
    /// with the request and a ready inner service.
    #[inline(never)]
    fn later<B, ResB>(
        &mut self,
        (key, cost): (ClientKey, u64),
        request: Request<B>,
    ) -> ResponseFuture<S::Future, ResB, S::Error>
    where
        S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        B: Send + 'static,
        ResB: AnswerBody + Send + 'static,
    {
        // The ready service goes with the request; a clone stays.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        ResponseFuture::boxed(Box::pin(async move {
            if !shared.also.is_empty() {
                // Several limits, all or nothing.
                let decided = match shared.take_all(&key, cost).await {
                    Ok(booked) => Ok(match shared.settings.fields {
                        Fields::Always => shared.fields_of_all(&key, &booked),
                        _ => None,
                    }),
                    Err((part, e)) => shared.failed(e).map_err(|e| (part, e)),
                };
                return Ok(match decided {
                    Ok(fields) => forwarded(inner.call(request).await?, fields),
                    Err((part, failure)) => shared
                        .refuse_by(&key, failure, request.headers(), part)
                        .map(ResB::answer),
                });
            }
            // A bounded wait, or a remote limiter's round trip, whose answer
            // carries the fields too.
            let taken = shared.limiter.take(&key, cost, shared.settings.mode).await;
            Ok(match shared.settle(&key, taken) {
                Ok(fields) => forwarded(inner.call(request).await?, fields),
                Err(failure) => shared
                    .refuse(&key, failure, request.headers())
                    .map(ResB::answer),
            })
        }))
    }
}

/// A request the layer does not forward at once.
enum NotNow {
    /// Answer it with this: a refusal, or the answer to a request without
    /// a key.
    Answer(Box<Response<Bytes>>),
    /// Decide after a wait or a round trip: its key and cost.
    Later(Box<(ClientKey, u64)>),
}

impl Shared {
    /// Whether a key or cost function needs the request's head.
    #[inline]
    fn wants_head(&self) -> bool {
        self.settings.cost.is_some() || matches!(self.settings.source, KeySource::Function(_))
    }

    /// The decision on a request, from its head, as far as it can be made
    /// at once. Not generic, so compiled once, here, whatever the service;
    /// what comes back is two words.
    ///
    /// The key is built where it is used and lent, never moved: an address
    /// is written a byte and a word at a time, and a move reads it back in
    /// wider loads, each of which waits for the writes to drain (a
    /// store-forwarding stall, a dozen cycles a move).
    #[inline(never)]
    fn decide(
        &self,
        headers: &HeaderMap,
        extensions: &Extensions,
        uri: &Uri,
        head: Option<&Parts>,
    ) -> Result<AddedFields, NotNow> {
        let found = match &self.settings.source {
            KeySource::Global => return self.decide_on(&ClientKey::Global, headers, uri, head),
            // The client's address (see the `client_ip` module): the peer,
            // unless it is a trusted proxy; then the forwarding header's walk.
            KeySource::Ip => match peer(extensions).map(client_ip::canonical) {
                Some(peer) if !client_ip::trusts(&self.trusted, peer) => {
                    return self.decide_on(&ClientKey::Ip(self.mask(peer)), headers, uri, head);
                }
                Some(proxy) => self.key_behind_proxy(proxy, headers),
                None => None,
            },
            // A key of text.
            KeySource::Header(name) => headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(ClientKey::text),
            KeySource::Function(f) => head.and_then(f).map(|k| ClientKey::text(&k)),
            KeySource::Path => Some(ClientKey::text(uri.path())),
        };
        let key = match found.map_or_else(|| self.keyless(), Ok) {
            Ok(key) => key,
            Err(status) => return Err(NotNow::Answer(Box::new(self.missing(status)))),
        };
        self.decide_on(&key, headers, uri, head)
    }

    /// [`decide`](Self::decide) on `key`.
    #[inline(always)]
    fn decide_on(
        &self,
        key: &ClientKey,
        headers: &HeaderMap,
        uri: &Uri,
        head: Option<&Parts>,
    ) -> Result<AddedFields, NotNow> {
        let cost = self.cost_of(uri, head);
        if !self.also.is_empty() {
            return Err(NotNow::Later(Box::new((key.clone(), cost))));
        }
        let decision = match (self.settings.mode, self.settings.fields) {
            (Mode::Wait(_), _) => return Err(NotNow::Later(Box::new((key.clone(), cost)))),
            (_, Fields::OnRefusal | Fields::Off) => match self.limiter.try_now_bare(key, cost) {
                Some(Ok(())) => Ok(None),
                Some(Err(e)) => self.failed(e),
                None => return Err(NotNow::Later(Box::new((key.clone(), cost)))),
            },
            _ => match self.limiter.try_now(key, cost) {
                Some(taken) => self.settle(key, taken),
                None => return Err(NotNow::Later(Box::new((key.clone(), cost)))),
            },
        };
        decision.map_err(|failure| NotNow::Answer(self.refuse(key, failure, headers)))
    }

    /// A request's cost: its path's, else its cost function's, else 1.
    #[inline]
    fn cost_of(&self, uri: &Uri, head: Option<&Parts>) -> u64 {
        if !self.settings.costs.is_empty() {
            let path = uri.path();
            if let Some((_, cost)) = self.settings.costs.iter().find(|(p, _)| **p == *path) {
                return *cost;
            }
        }
        match (&self.settings.cost, head) {
            (Some(f), Some(head)) => f(head),
            _ => 1,
        }
    }

    /// `ip` masked to its group: the key of the clients it stands for.
    #[inline(always)]
    fn mask(&self, ip: IpAddr) -> IpAddr {
        let bits = if ip.is_ipv4() {
            self.settings.v4_prefix
        } else {
            self.settings.v6_prefix
        };
        client_ip::mask(ip, bits)
    }

    /// The key of a client whose connection comes from `proxy`, a trusted
    /// one: the address it forwarded, masked. Out of line, as the walk is.
    #[inline(never)]
    fn key_behind_proxy(&self, proxy: IpAddr, headers: &HeaderMap) -> Option<ClientKey> {
        let ip =
            client_ip::behind_proxies(proxy, headers, &self.trusted, self.settings.forwarding)?;
        Some(ClientKey::Ip(self.mask(ip)))
    }

    /// What a request without a key gets: the shared key, or a refusal.
    #[cold]
    fn keyless(&self) -> Result<ClientKey, StatusCode> {
        match &self.settings.missing {
            MissingKey::Shared(key) => {
                self.missing_key.fetch_add(1, Relaxed);
                Ok(ClientKey::from(key.as_str()))
            }
            MissingKey::Refuse(status) => Err(*status),
        }
    }

    /// What a take's answer means for the request.
    #[inline]
    fn settle(&self, key: &ClientKey, taken: Result<Taken, Error>) -> Decision {
        match taken {
            Ok(taken) => Ok(match self.settings.fields {
                Fields::Always => self.fields_for(key, &taken),
                _ => None,
            }),
            Err(e) => self.failed(e),
        }
    }

    /// A take that failed: refused by the limit (forwarded all the same in
    /// a dry run), or failed by its server.
    #[cold]
    fn failed(&self, e: Error) -> Decision {
        if e.is_refusal() && self.settings.mode == Mode::DryRun {
            self.would_refuse.fetch_add(1, Relaxed);
            return Ok(None);
        }
        Err(e)
    }
}

/// The connection's peer: axum's `ConnectInfo<SocketAddr>` (feature
/// `axum`) or a `SocketAddr` extension.
#[inline]
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
