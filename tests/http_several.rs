//! Several limits on one HTTP layer, all or nothing, each announced as its
//! own policy; the draft's `qu` and `pk` parameters. A real axum server on
//! loopback and a real hyper-util client, clients on distinct loopback
//! addresses.
#![cfg(all(feature = "tower", feature = "axum"))]

use axum::routing::get;
use axum::Router;
use http::StatusCode;
use paceline::clock::ManualClock;
use paceline::http::{ClientKey, Fields, LimitLayer};
use paceline::tokio::AsyncKeyedLimiter;
use paceline::{KeyedLimiter, Rate};

#[path = "support/http_harness.rs"]
mod harness;
use harness::{client, get_from, header, serve, sf_list};

fn app(layer: LimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

/// A keyed limiter per client at `rate` with `slack`, its burst banked, on
/// `clock`.
fn keyed(rate: Rate, slack: u64, clock: &ManualClock) -> AsyncKeyedLimiter<ClientKey, ManualClock> {
    AsyncKeyedLimiter::from(
        KeyedLimiter::<ClientKey>::builder(rate)
            .slack(slack)
            .clock(clock.clone())
            .build()
            .unwrap(),
    )
}

#[tokio::test]
async fn every_limit_must_admit_and_a_refusal_gives_the_others_back() {
    let clock = ManualClock::new();
    // A burst of 3 a minute, and a burst of 2 an hour: the second binds.
    let minute = keyed(Rate::per_minute(1), 2, &clock);
    let hour = keyed(Rate::per_hour(1), 1, &clock);
    let layer = LimitLayer::per_ip(Rate::per_second(1))
        .limiter(minute.clone())
        .name("minute")
        .and_limiter("hour", hour.clone())
        .fields(Fields::Always)
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let from = "127.0.0.31";
    let client = client(from);
    let key = ClientKey::Ip(from.parse().unwrap());

    for (minute_left, hour_left) in [(2, 1), (1, 0)] {
        let answer = get_from(&client, addr, "/", &[]).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let policies = sf_list(header(&answer, "ratelimit-policy"));
        let names: Vec<&str> = policies.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["minute", "hour"]);
        assert_eq!(policies[0].1["paceline-burst"], "3");
        assert_eq!(policies[1].1["paceline-burst"], "2");
        let states = sf_list(header(&answer, "ratelimit"));
        assert_eq!(states[0].0, "minute");
        assert_eq!(states[0].1["r"], minute_left.to_string());
        assert_eq!(states[1].0, "hour");
        assert_eq!(states[1].1["r"], hour_left.to_string());
    }
    // The hour is spent: refused by it, and the minute's permit given back.
    let refused = get_from(&client, addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let states = sf_list(header(&refused, "ratelimit"));
    assert_eq!(states.len(), 1);
    assert_eq!(states[0].0, "hour");
    assert_eq!(states[0].1["r"], "0");
    let retry: u64 = header(&refused, "retry-after").parse().unwrap();
    assert_eq!(states[0].1["t"], retry.to_string());
    assert!((3_000..=3_600).contains(&retry), "{retry}");
    assert_eq!(
        minute.limiter().available(&key),
        1,
        "the minute's permit given back"
    );
    assert_eq!(sf_list(header(&refused, "ratelimit-policy")).len(), 2);
}

#[tokio::test]
async fn the_quota_unit_and_a_digest_of_the_key_are_announced() {
    let clock = ManualClock::new();
    let bytes = keyed(Rate::per_second(1000), 999, &clock);
    let layer = |secret: &str| {
        LimitLayer::per_ip(Rate::per_second(1))
            .limiter(bytes.clone())
            .quota_unit("content-bytes")
            .partition_key(secret)
            .fields(Fields::Always)
            .build()
            .unwrap()
    };
    let (a, b) = (
        serve(app(layer("fleet secret"))).await,
        serve(app(layer("fleet secret"))).await,
    );
    let other = serve(app(layer("another secret"))).await;
    let pk = |addr, from: &'static str| async move {
        let answer = get_from(&client(from), addr, "/", &[]).await;
        assert_eq!(answer.status, StatusCode::OK);
        let policy = sf_list(header(&answer, "ratelimit-policy"));
        assert_eq!(policy[0].1["qu"], "content-bytes");
        let state = sf_list(header(&answer, "ratelimit"));
        assert_eq!(state[0].1["pk"], policy[0].1["pk"]);
        let pk = policy[0].1["pk"].clone();
        assert_eq!(pk.len(), 24, "12 bytes: {pk}");
        pk
    };
    let first = pk(a, "127.0.0.41").await;
    // Another replica with the same secret: the same digest.
    assert_eq!(pk(b, "127.0.0.41").await, first);
    // Another client, or another secret: another digest.
    assert_ne!(pk(a, "127.0.0.42").await, first);
    assert_ne!(pk(other, "127.0.0.41").await, first);
    // Not the address in clear: 127.0.0.41 is 7f 00 00 29.
    assert!(!first.contains("7f000029"), "{first}");

    let bad = LimitLayer::per_ip(Rate::per_second(1))
        .quota_unit("bytes\n")
        .build();
    let e = bad.err().unwrap().to_string();
    assert!(e.contains("\"bytes\\n\""), "{e}");
    let bad = LimitLayer::per_ip(Rate::per_second(1))
        .and_limiter("naïve", bytes.clone())
        .build();
    assert!(bad.err().unwrap().to_string().contains("naïve"));
}
