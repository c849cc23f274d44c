//! The cost a limiting layer adds to a request, in one criterion run:
//! no layer, paceline's `LimitLayer`, and tower_governor's
//! `GovernorLayer`, each around the same trivial service, called in
//! process (`poll_ready`, `call` and one poll, with no runtime: see
//! `bench`). The load
//! over a real server and client is `examples/http_load.rs`.
//!
//! ```text
//! cargo bench -p paceline-benches --features http --bench http
//! ```
//!
//! Groups (`group/what`):
//! - `admit`: one client whose every request is admitted (a limit far
//!   above the load), the common case;
//! - `refuse`: one client over its limit, every request answered 429;
//! - `keys`: requests from 10,000 client addresses in turn, all admitted
//!   (each layer's map lookups on a large table).
//!
//! In `admit` and `keys`, `keyed_floor` is paceline's keyed limiter behind
//! the least glue a layer can have (this file's `floor`: the peer address
//! as the key, one `try_take`, the inner future passed through, no fields,
//! no body to wrap): what `LimitLayer`'s own glue is measured against.
//!
//! Admitted requests run at 1/s with a burst of a billion: every request
//! admitted, and no key ever back at rest, so both layers look their key
//! up in a table that keeps it. (At a limit so far above the load that a
//! key is at rest between two visits, paceline drops it and tracks it
//! anew, keeping its memory to the keys in use, where governor keeps every
//! key it saw: that insert's cost is `benches/keyed.rs`' `idle_keys`.)
//!
//! Equivalent limits: governor's period `T` and burst `b` are paceline's
//! rate `1/T` and slack `b - 1`. Both key by the peer address from axum's
//! `ConnectInfo`, which each request carries. Timed in the thread's CPU
//! time, as `throughput.rs` is, so a busy machine's preemptions do not
//! count.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use http::{Request, Response};
use paceline::http::LimitLayer;
use paceline::Rate;
use tower::{Layer, Service};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

#[path = "cpu_time.rs"]
mod cpu_time;
use cpu_time::CpuTime;

/// The handler every layer wraps: answers at once.
#[derive(Clone)]
struct Ok200;

impl Service<Request<Body>> for Ok200 {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<Body>) -> Self::Future {
        std::future::ready(Ok(Response::new(Body::empty())))
    }
}

/// The floor: paceline's keyed limiter with the least glue around the
/// handler (a refusal is a bare 429).
fn floor() -> impl Service<Request<Body>, Error = Infallible> + Clone {
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
            Some(Ok(())) => Ok200.call(request),
            _ => {
                let mut refused = Response::new(Body::empty());
                *refused.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                std::future::ready(Ok(refused))
            }
        }
    })
}

fn request(ip: IpAddr) -> Request<Body> {
    let mut request = Request::new(Body::empty());
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(ip, 40000)));
    request
}

/// Runs `service` on each of `ips` in turn, once per iteration: clones it
/// (as axum does per request), then `poll_ready`, `call` and one poll of
/// the future, with a waker that does nothing. Every future here is ready
/// at its first poll, so no runtime is needed, and none adds its own cost
/// and jitter to what is compared.
fn bench<S>(c: &mut BenchmarkGroup<'_, CpuTime>, name: &str, service: S, ips: &[IpAddr])
where
    S: Service<Request<Body>> + Clone,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut i = 0;
    c.bench_function(name, |b| {
        b.iter(|| {
            i = (i + 1) % ips.len();
            let mut service = service.clone();
            let Poll::Ready(ready) = service.poll_ready(&mut cx) else {
                unreachable!("every service here is always ready")
            };
            ready.unwrap();
            let mut future = std::pin::pin!(service.call(request(ips[i])));
            let Poll::Ready(response) = future.as_mut().poll(&mut cx) else {
                unreachable!("every future here is ready at its first poll")
            };
            std::hint::black_box(response.is_ok())
        })
    });
}

/// The burst of the admitted groups: more than any run takes.
const BURST: u64 = 1_000_000_000;

fn ips(n: u32) -> Vec<IpAddr> {
    (0..n)
        .map(|i| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
        .collect()
}

/// paceline at `rate` with `slack`, around the handler.
fn paceline(rate: Rate, slack: u64) -> impl Service<Request<Body>, Error = Infallible> + Clone {
    LimitLayer::per_ip(rate)
        .slack(slack)
        .max_keys(100_000)
        .build()
        .unwrap()
        .layer(Ok200)
}

/// governor with period `period` and `burst`, around the handler.
fn governor(
    period: Duration,
    burst: u32,
) -> impl Service<Request<Body>, Error = Infallible> + Clone {
    let config = GovernorConfigBuilder::default()
        .period(period)
        .burst_size(burst)
        .finish()
        .unwrap();
    GovernorLayer::<_, _, Body>::new(config).layer(Ok200)
}

fn groups(c: &mut Criterion<CpuTime>) {
    // Admitted: 1/s, a burst of 10^9 (governor: 1 s, 10^9).
    let one = ips(1);
    let mut g = c.benchmark_group("admit");
    bench(&mut g, "none", Ok200, &one);
    bench(
        &mut g,
        "paceline",
        paceline(Rate::per_second(1), BURST - 1),
        &one,
    );
    bench(
        &mut g,
        "tower_governor",
        governor(Duration::from_secs(1), BURST as u32),
        &one,
    );
    bench(&mut g, "keyed_floor", floor(), &one);
    g.finish();

    // Refused: 1 an hour, no burst, spent by the first request.
    let mut g = c.benchmark_group("refuse");
    bench(&mut g, "paceline", paceline(Rate::per_hour(1), 0), &one);
    bench(
        &mut g,
        "tower_governor",
        governor(Duration::from_secs(3600), 1),
        &one,
    );
    g.finish();

    let many = ips(10_000);
    let mut g = c.benchmark_group("keys");
    bench(&mut g, "none", Ok200, &many);
    bench(
        &mut g,
        "paceline",
        paceline(Rate::per_second(1), BURST - 1),
        &many,
    );
    bench(
        &mut g,
        "tower_governor",
        governor(Duration::from_secs(1), BURST as u32),
        &many,
    );
    bench(&mut g, "keyed_floor", floor(), &many);
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(CpuTime)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = groups
}
criterion_main!(benches);
