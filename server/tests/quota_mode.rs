//! `quota_mode` (a descriptor's) and `QUOTA_MODE` (every descriptor's), as
//! envoyproxy/ratelimit's service decides them (src/service/ratelimit.go):
//! a quota descriptor over its limit is OVER_LIMIT in its status, but the
//! request is refused only when every quota descriptor in it is over (or a
//! rate limit descriptor is), and the response headers follow the last
//! rate limit descriptor over, not a quota one.

mod support;

use support::{brief, call, descriptor, in_one_window, request, Server, MINUTE, OK, OVER};

const EXAMPLE: &str = include_str!("fixtures/integration_example.yaml");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_refused_when_all_its_quota_descriptors_are_over() {
    let env = [("LIMIT_RESPONSE_HEADERS_ENABLED", "true")];
    let s = Server::start(&[("example.yaml", EXAMPLE)], &env);
    let c = s.client().await;
    let answers = in_one_window(60, || {
        let mut c = c.clone();
        async move {
            let two = || {
                vec![
                    descriptor(&[("service", "service_2")]),
                    descriptor(&[("service", "service_1")]),
                ]
            };
            let mut out = Vec::new();
            for _ in 0..3 {
                out.push(call(&mut c, request("rl", two())).await);
            }
            // With a rate limit descriptor over (bar: banned, 0 a minute).
            let mut d = two();
            d.push(descriptor(&[("foo", "f"), ("bar", "banned")]));
            out.push(call(&mut c, request("rl", d)).await);
            out
        }
    })
    .await;
    let s1 = |code, left| (code, Some((1, MINUTE)), left);
    let s2 = |code, left| (code, Some((2, MINUTE)), left);
    let briefs: Vec<_> = answers.iter().map(brief).collect();
    assert_eq!(briefs[0], (OK, vec![s2(OK, 1), s1(OK, 0)]));
    // service_1 is over, service_2 not: the request passes.
    assert_eq!(briefs[1], (OK, vec![s2(OK, 0), s1(OVER, 0)]));
    // Both over: refused.
    assert_eq!(briefs[2], (OVER, vec![s2(OVER, 0), s1(OVER, 0)]));
    assert_eq!(briefs[3].0, OVER);
    // The headers: service_2's (the least remaining, first), not those of
    // service_1, over as a quota descriptor; then banned's, over as a rate
    // limit descriptor.
    let limit_header = |i: usize| {
        let h = &answers[i].response_headers_to_add;
        h.iter()
            .find(|h| h.key == "RateLimit-Limit")
            .unwrap()
            .value
            .clone()
    };
    assert_eq!(limit_header(1), "2");
    assert_eq!(limit_header(3), "0");
}

const TWO: &str = "\
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 10}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_mode_makes_every_descriptor_a_quota_descriptor() {
    let s = Server::start(&[("d.yaml", TWO)], &[("QUOTA_MODE", "true")]);
    let c = s.client().await;
    let codes = in_one_window(60, || {
        let mut c = c.clone();
        async move {
            let mut codes = Vec::new();
            for d in [
                vec![descriptor(&[("k", "u")])],
                vec![descriptor(&[("k", "u")]), descriptor(&[("wide", "u")])],
                vec![descriptor(&[("k", "u")]), descriptor(&[("none", "u")])],
                vec![descriptor(&[("k", "u")])],
            ] {
                let a = brief(&call(&mut c, request("d", d)).await);
                codes.push((a.0, a.1.iter().map(|s| s.0).collect::<Vec<_>>()));
            }
            codes
        }
    })
    .await;
    assert_eq!(
        codes,
        vec![
            (OK, vec![OK]),
            // k over, wide not: passes.
            (OK, vec![OVER, OK]),
            // A descriptor no rule matches is a quota descriptor too.
            (OK, vec![OVER, OK]),
            (OVER, vec![OVER]),
        ]
    );
}
