//! The cost a limiting layer adds to a request, with the layers in turn in
//! one process: no layer, paceline's `LimitLayer`, tower_governor's
//! `GovernorLayer` and `keyed_floor` (the services of `benches/http.rs`),
//! each for a batch of requests, round after round, each batch timed in the
//! thread's CPU time.
//!
//! ```text
//! cargo run --release -p paceline-benches --features http --example http_turns [-- ROUNDS BATCH]
//! ```
//!
//! Criterion times each service on its own, one after the other, so a
//! machine that drifts between them (another tenant, the clock's speed)
//! moves the ratio of their overheads; here each round times all four
//! within a few milliseconds, the ratio is taken per round, and the report
//! gives its median and quartiles over the rounds, for one client and for
//! 10,000 clients in turn, every request admitted; then the same through an
//! axum `Router` (`benches/http.rs`' `router` group).

use std::net::IpAddr;
use std::task::{Context, Waker};
use std::time::Duration;

use axum::body::Body;
use cpu_time::ThreadTime;
use http::Request;
use paceline::Rate;
use tower::Service;

#[path = "../http_services.rs"]
mod http_services;
use http_services::{
    admits, floor, governor, ips, once, paceline, router, router_governor, router_paceline, Ok200,
    BURST,
};

/// The mean CPU time of one request through `service`, over `n` requests
/// from `ips` in turn (continuing at `at`).
fn batch<S>(service: &S, ips: &[IpAddr], n: usize, at: &mut usize) -> f64
where
    S: Service<Request<Body>> + Clone,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    let start = ThreadTime::now();
    for _ in 0..n {
        *at = (*at + 1) % ips.len();
        std::hint::black_box(once(service, ips[*at], &mut cx));
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn quartiles(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let at = |q: usize| values[(values.len() - 1) * q / 4];
    (at(1), at(2), at(3))
}

/// Each round times `none`, then `ours`, `theirs` and `least` (if any)
/// on `ips`, `n` requests each; prints the medians of their overheads
/// over `none` and of their ratios to `theirs`, with quartiles.
fn turns<N, P, G, F>(
    label: &str,
    ips: &[IpAddr],
    rounds: usize,
    n: usize,
    services: (&N, &P, &G, Option<&F>),
) where
    N: Service<Request<Body>> + Clone,
    N::Error: std::fmt::Debug,
    P: Service<Request<Body>> + Clone,
    P::Error: std::fmt::Debug,
    G: Service<Request<Body>> + Clone,
    G::Error: std::fmt::Debug,
    F: Service<Request<Body>> + Clone,
    F::Error: std::fmt::Debug,
{
    let (none, ours, theirs, least) = services;
    let mut at = [0; 4];
    let mut added: [Vec<f64>; 3] = Default::default();
    let (mut ratios, mut floors) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let base = batch(none, ips, n, &mut at[0]);
        let pl = batch(ours, ips, n, &mut at[1]) - base;
        let gv = batch(theirs, ips, n, &mut at[2]) - base;
        let fl = least.map_or(0.0, |f| batch(f, ips, n, &mut at[3]) - base);
        for (v, x) in added.iter_mut().zip([pl, gv, fl]) {
            v.push(x);
        }
        ratios.push(pl / gv);
        floors.push(fl / gv);
    }
    let [pl, gv, fl] = added.map(|v| quartiles(v).1);
    let (q1, ratio, q3) = quartiles(ratios);
    print!(
        "{label}: paceline +{pl:.1} ns, tower_governor +{gv:.1} ns over no layer; \
         paceline / tower_governor {ratio:.2} (quartiles {q1:.2}-{q3:.2})"
    );
    if least.is_some() {
        let (f1, floor_ratio, f3) = quartiles(floors);
        print!(
            "; keyed_floor +{fl:.1} ns, keyed_floor / tower_governor \
             {floor_ratio:.2} ({f1:.2}-{f3:.2})"
        );
    }
    println!();
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(40, |a| a.parse().expect("ROUNDS"));
    let n: usize = args.next().map_or(100_000, |a| a.parse().expect("BATCH"));
    assert!(rounds > 0 && n > 0, "ROUNDS and BATCH must be at least 1");
    println!("{rounds} rounds of {n} requests through each service, in turn");
    for clients in [1, 10_000] {
        let ips = ips(clients);
        let (ours, theirs) = (
            paceline(Rate::per_second(1), BURST - 1),
            governor(Duration::from_secs(1), BURST as u32),
        );
        let least = floor();
        admits(&ours, ips[0]);
        admits(&theirs, ips[0]);
        admits(&least, ips[0]);
        let label = format!("{clients} client(s)");
        turns(
            &label,
            &ips,
            rounds,
            n,
            (&Ok200, &ours, &theirs, Some(&least)),
        );
    }
    let ips = ips(1);
    let (none, ours, theirs) = (
        router(),
        router_paceline(Rate::per_second(1), BURST - 1),
        router_governor(Duration::from_secs(1), BURST as u32),
    );
    admits(&none, ips[0]);
    admits(&ours, ips[0]);
    admits(&theirs, ips[0]);
    let label = "axum Router, 1 client";
    turns(
        label,
        &ips,
        rounds,
        n,
        (&none, &ours, &theirs, None::<&Ok200>),
    );
}
