//! The services `benches/http.rs` and `examples/http_turns.rs` compare,
//! and one request through one of them.

use paceline::Take;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{Request, Response};
use paceline::http::LimitLayer;
use paceline::Rate;
use tower::{Layer, Service};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

/// The handler every layer wraps: answers at once.
#[derive(Clone)]
pub struct Ok200;

impl Service<Request<Body>> for Ok200 {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<Body>) -> Self::Future {
        std::future::ready(Ok(Response::new(Body::empty())))
    }
}

/// The floor: paceline's keyed limiter with the least glue around the
/// handler (a refusal is a bare 429).
pub fn floor() -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone
{
    let limiter = paceline::KeyedLimiter::builder(Rate::per_second(1))
        .slack(BURST - 1)
        .max_keys(100_000)
        .build()
        .unwrap();
    let limiter = std::sync::Arc::new(limiter);
    tower::service_fn(move |request: Request<Body>| {
        let peer = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| paceline::http::ClientKey::Ip(c.0.ip()));
        match peer.map(|key| limiter.try_take(&key)) {
            Some(Ok(_)) => Ok200.call(request),
            _ => {
                let mut refused = Response::new(Body::empty());
                *refused.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                std::future::ready(Ok(refused))
            }
        }
    })
}

/// The burst of the admitted groups: more than any run takes.
pub const BURST: u64 = 1_000_000_000;

/// `n` client addresses, 10.0.0.0 and up.
pub fn ips(n: u32) -> Vec<IpAddr> {
    (0..n)
        .map(|i| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
        .collect()
}

/// paceline at `rate` with `slack`, around the handler.
pub fn paceline(
    rate: Rate,
    slack: u64,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone {
    LimitLayer::per_ip(rate)
        .slack(slack)
        .max_keys(100_000)
        .build()
        .unwrap()
        .layer(Ok200)
}

/// governor with period `period` and `burst`, around the handler.
pub fn governor(
    period: Duration,
    burst: u32,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone {
    let config = GovernorConfigBuilder::default()
        .period(period)
        .burst_size(burst)
        .finish()
        .unwrap();
    GovernorLayer::<_, _, Body>::new(config).layer(Ok200)
}

/// An axum `Router` with one route, `/` answering `ok`, as a server runs
/// it: `.layer(...)` wraps the route, and the router turns every response
/// into its own `Response<Body>` (a body of another type is boxed into
/// one there, an allocation per response).
pub fn router() -> axum::Router {
    axum::Router::new().route("/", axum::routing::get(|| async { "ok" }))
}

/// [`router`] under paceline's layer at `rate` with `slack`.
pub fn router_paceline(rate: Rate, slack: u64) -> axum::Router {
    router().layer(
        LimitLayer::per_ip(rate)
            .slack(slack)
            .max_keys(100_000)
            .build()
            .unwrap(),
    )
}

/// [`router`] under governor's layer with period `period` and `burst`.
pub fn router_governor(period: Duration, burst: u32) -> axum::Router {
    let config = GovernorConfigBuilder::default()
        .period(period)
        .burst_size(burst)
        .finish()
        .unwrap();
    router().layer(GovernorLayer::<_, _, Body>::new(config))
}

/// A request from `ip`, its peer address where axum's `ConnectInfo` puts it.
pub fn request(ip: IpAddr) -> Request<Body> {
    let mut request = Request::new(Body::empty());
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(ip, 40000)));
    request
}

/// Asserts that `service` answers a request from `ip` with 200, before it
/// is timed: a service that routed nowhere (404) or could not key the
/// request (500) would otherwise be timed all the same.
pub fn admits<S, B>(service: &S, ip: IpAddr)
where
    S: Service<Request<Body>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let response = respond(service, ip, &mut cx).unwrap();
    assert_eq!(response.status(), http::StatusCode::OK);
}

/// One request from `ip` through `service`, as a server makes it, for the
/// benches to time: whether it was answered (see [`respond`]).
#[inline]
pub fn once<S>(service: &S, ip: IpAddr, cx: &mut Context<'_>) -> bool
where
    S: Service<Request<Body>> + Clone,
    S::Error: std::fmt::Debug,
{
    respond(service, ip, cx).is_ok()
}

/// One request from `ip` through `service`, as a server makes it: a clone
/// of the service (as axum makes per request), `poll_ready`, `call` and one
/// poll of the future, with the context's waker doing nothing. Every
/// service and future here is ready at once, so no runtime is needed, and
/// none adds its own cost and jitter to what is compared.
#[inline]
pub fn respond<S>(service: &S, ip: IpAddr, cx: &mut Context<'_>) -> Result<S::Response, S::Error>
where
    S: Service<Request<Body>> + Clone,
    S::Error: std::fmt::Debug,
{
    let mut service = service.clone();
    let Poll::Ready(ready) = service.poll_ready(cx) else {
        unreachable!("every service here is always ready")
    };
    ready.unwrap();
    let mut future = std::pin::pin!(service.call(request(ip)));
    let Poll::Ready(response) = future.as_mut().poll(cx) else {
        unreachable!("every future here is ready at its first poll")
    };
    response
}
