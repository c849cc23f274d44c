//! The cost a limiting layer adds to a request, in one criterion run:
//! no layer, paceline's `LimitLayer`, and tower_governor's
//! `GovernorLayer`, each around the same trivial service, called in
//! process (`poll_ready`, `call` and one poll, with no runtime: see
//! `http_services.rs`' `once`). The load over a real server and client is
//! `examples/http_load.rs`.
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
//!   (each layer's map lookups on a large table);
//! - `router`: one client, all admitted, through an axum `Router` with one
//!   route under each layer (`http_services.rs`' `router`): what a request
//!   costs where most users put the layer, the router's own work included
//!   (its routing, its boxed route, the response turned into its own type).
//!
//! In `admit` and `keys`, `keyed_floor` is paceline's keyed limiter behind
//! the least glue a layer can have (`http_services.rs`' `floor`: the peer
//! address as the key, one `try_take`, the inner future passed through, no
//! fields, no body to wrap): what `LimitLayer`'s own glue is measured
//! against.
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

use std::net::IpAddr;
use std::task::{Context, Waker};
use std::time::Duration;

use axum::body::Body;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use http::{Request, Response};
use paceline::Rate;
use tower::Service;

#[path = "http_services.rs"]
mod http_services;
use http_services::{
    admits, floor, governor, ips, once, paceline, router, router_governor, router_paceline, Ok200,
    BURST,
};

#[path = "cpu_time.rs"]
mod cpu_time;
use cpu_time::CpuTime;

/// Runs `service` on each of `ips` in turn, one request an iteration
/// (see `once`).
fn bench<S, B>(c: &mut BenchmarkGroup<'_, CpuTime>, name: &str, service: S, ips: &[IpAddr])
where
    S: Service<Request<Body>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
{
    admits(&service, ips[0]);
    let mut cx = Context::from_waker(Waker::noop());
    let mut i = 0;
    c.bench_function(name, |b| {
        b.iter(|| {
            i = (i + 1) % ips.len();
            std::hint::black_box(once(&service, ips[i], &mut cx))
        })
    });
}

fn groups(c: &mut Criterion<CpuTime>) {
    // Admitted: 1/s, a burst of 10^9 (governor: 1 s, 10^9), from one
    // client and from 10,000 in turn.
    let (one, many) = (ips(1), ips(10_000));
    for (group, clients) in [("admit", &one), ("keys", &many)] {
        let mut g = c.benchmark_group(group);
        bench(&mut g, "none", Ok200, clients);
        bench(
            &mut g,
            "paceline",
            paceline(Rate::per_second(1), BURST - 1),
            clients,
        );
        bench(
            &mut g,
            "tower_governor",
            governor(Duration::from_secs(1), BURST as u32),
            clients,
        );
        bench(&mut g, "keyed_floor", floor(), clients);
        g.finish();
    }

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

    let mut g = c.benchmark_group("router");
    bench(&mut g, "none", router(), &one);
    bench(
        &mut g,
        "paceline",
        router_paceline(Rate::per_second(1), BURST - 1),
        &one,
    );
    bench(
        &mut g,
        "tower_governor",
        router_governor(Duration::from_secs(1), BURST as u32),
        &one,
    );
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
