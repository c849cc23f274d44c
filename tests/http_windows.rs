//! "10 a second and 10,000 a day" on one client, from two limits documents
//! read as configuration, through the HTTP layer: all or nothing, each
//! limit announced as its own policy, the daily one as a quota with its
//! window, `t` and `Retry-After` to midnight. A real axum server on
//! loopback and a real hyper-util client; the clocks are manual, set to a
//! Unix time a few seconds before midnight UTC.
#![cfg(all(feature = "tower", feature = "axum", feature = "serde"))]

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::StatusCode;
use paceline::clock::ManualClock;
use paceline::http::{ClientKey, Fields, LimitLayer};
use paceline::tokio::AsyncKeyedLimiter;
use paceline::{KeyedLimiter, Limits, Rate, Take};

#[path = "support/http_harness.rs"]
mod harness;
use harness::{client, get_from, header, serve, sf_list};

/// 2026-11-29 23:59:50 UTC, in ns.
const BEFORE_MIDNIGHT: u64 = 1_795_996_790 * 1_000_000_000;

const PACE: &str = r#"
[default]
rate = "10/s"
burst = 10
"#;

const DAILY: &str = r#"
[default]
quota = 10000
window = "day"

[overrides]
"127.0.0.62" = { quota = 3, window = "day" }
"#;

fn keyed(limits: &str, clock: &ManualClock) -> AsyncKeyedLimiter<ClientKey, ManualClock> {
    let limits: Limits = toml::from_str(limits).unwrap();
    let limiter = KeyedLimiter::<ClientKey>::builder(Rate::per_second(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    limiter.apply(&limits).unwrap();
    AsyncKeyedLimiter::from(limiter)
}

#[tokio::test]
async fn ten_a_second_and_ten_thousand_a_day_on_one_client() {
    let (pace_clock, day_clock) = (ManualClock::new(), ManualClock::new());
    day_clock.advance(Duration::from_nanos(BEFORE_MIDNIGHT));
    let pace = keyed(PACE, &pace_clock);
    let daily = keyed(DAILY, &day_clock);
    let layer = LimitLayer::per_ip(Rate::per_second(1))
        .limiter(pace.clone())
        .name("pace")
        .and_limiter("daily", daily.clone())
        .fields(Fields::Always)
        .build()
        .unwrap();
    let addr = serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await;
    let from = "127.0.0.61";
    let key = ClientKey::from(from);
    let alice = client(from);

    // The day is nearly spent by calls from elsewhere on the same limiter.
    daily.limiter().try_take_n(&key, 9_990).unwrap();
    for left in (0..10).rev() {
        let answer = get_from(&alice, addr, "/", &[]).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let policies = sf_list(header(&answer, "ratelimit-policy"));
        assert_eq!(policies[0].0, "pace");
        assert_eq!(policies[0].1["q"], "10");
        assert_eq!(policies[0].1["w"], "1");
        assert_eq!(policies[1].0, "daily");
        assert_eq!(policies[1].1["q"], "10000");
        assert_eq!(policies[1].1["w"], "86400");
        assert!(!policies[1].1.contains_key("paceline-burst"));
        let states = sf_list(header(&answer, "ratelimit"));
        assert_eq!(
            (states[1].0.as_str(), states[1].1["r"].as_str()),
            ("daily", &*left.to_string())
        );
        assert_eq!(states[1].1["t"], "10", "whole again at midnight");
        pace_clock.advance(Duration::from_millis(100));
    }
    // The day is spent: refused until midnight, and the pacing permit the
    // request booked given back.
    let before = pace.limiter().available(&key);
    let refused = get_from(&alice, addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after"), "10");
    let states = sf_list(header(&refused, "ratelimit"));
    assert_eq!(states.len(), 1);
    assert_eq!(
        (
            states[0].0.as_str(),
            states[0].1["r"].as_str(),
            states[0].1["t"].as_str()
        ),
        ("daily", "0", "10")
    );
    assert_eq!(
        pace.limiter().available(&key),
        before,
        "the pacing permit given back"
    );

    // Midnight: a new day.
    day_clock.advance(Duration::from_secs(10));
    let answer = get_from(&alice, addr, "/", &[]).await;
    assert_eq!(answer.status, StatusCode::OK);
    let states = sf_list(header(&answer, "ratelimit"));
    assert_eq!(states[1].1["r"], "9999");
    assert_eq!(states[1].1["t"], "86400");

    // Pacing refuses a burst past its 10 (the clock stands still), and the
    // daily count is given its permit back.
    let (mut refused, mut admitted) = (None, 0);
    for _ in 0..12 {
        let answer = get_from(&alice, addr, "/", &[]).await;
        if answer.status == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(answer);
            break;
        }
        admitted += 1;
    }
    let refused = refused.expect("pacing refuses past its burst");
    let states = sf_list(header(&refused, "ratelimit"));
    assert_eq!(states[0].0, "pace");
    assert_eq!(header(&refused, "retry-after"), "1");
    let counted = 10_000 - daily.limiter().available(&key);
    // The first after midnight and the burst's: a request pacing refused
    // is not counted.
    assert_eq!(counted, 1 + admitted);

    // The override of the configuration: 3 a day for another client.
    let other = client("127.0.0.62");
    for _ in 0..3 {
        assert_eq!(
            get_from(&other, addr, "/", &[]).await.status,
            StatusCode::OK
        );
        pace_clock.advance(Duration::from_millis(100));
    }
    let refused = get_from(&other, addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let policies = sf_list(header(&refused, "ratelimit-policy"));
    assert_eq!(policies[1].1["q"], "3");
}
