//! The adaptive rate (`paceline::adapt`) on a real reqwest client against a
//! real nginx on loopback, whose `limit_req` allows 50 requests a second
//! with a burst of 2 and answers 429 past it (`tests/support/nginx_server.rs`):
//! a client told the rate keeps to it exactly; one not told finds it.
#![cfg(feature = "reqwest")]

#[path = "support/nginx_server.rs"]
mod nginx_server;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nginx_server::Nginx;
use paceline::adapt::Adaptive;
use paceline::reqwest::Pace;
#[cfg(feature = "keyed")]
use paceline::take::OnKey;
#[cfg(feature = "keyed")]
use paceline::tokio::AsyncKeyedLimiter;
use paceline::tokio::{AsyncLimiter, PRECISE};
use paceline::{AsyncTake, Rate};
use reqwest_middleware::ClientBuilder;

/// nginx's rate, per second.
const LIMIT: u32 = 50;

/// How long each client runs.
const RUN: Duration = Duration::from_secs(10);

/// Tasks sending through one adaptive client, as a program's would.
const TASKS: usize = 4;

/// Each answer: when its request left (since the start), and its status.
type Log = Arc<Mutex<Vec<(Duration, u16)>>>;

/// Sends through `pace` to `url` from `tasks` tasks until [`RUN`] is over
/// (each request bounded by a timeout); every answer, in the order sent.
async fn run<L: AsyncTake + 'static>(
    pace: Pace<L>,
    url: String,
    tasks: usize,
) -> Vec<(Duration, u16)> {
    let client = ClientBuilder::new(
        reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap(),
    )
    .with(pace)
    .build();
    let log: Log = Arc::default();
    let start = Instant::now();
    let tasks: Vec<_> = (0..tasks)
        .map(|_| {
            let (client, url, log) = (client.clone(), url.clone(), Arc::clone(&log));
            tokio::spawn(async move {
                while start.elapsed() < RUN {
                    // Bounded: a request the pace holds past the run ends it.
                    let left = RUN.saturating_sub(start.elapsed());
                    let sent = tokio::time::timeout(left, client.get(&url).send()).await;
                    let Ok(answer) = sent else { break };
                    let status = answer.expect("nginx answers").status().as_u16();
                    // The time it left is when the pace let it go: the
                    // answer comes back within a millisecond on loopback.
                    log.lock().unwrap().push((start.elapsed(), status));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let mut log = log.lock().unwrap().clone();
    log.sort();
    log
}

/// The first time the requests served in the second before it reach
/// `share` of nginx's rate, and the share of the requests sent from then
/// on that were refused.
fn converged(log: &[(Duration, u16)], share: f64) -> Option<(Duration, f64)> {
    let served: Vec<Duration> = log
        .iter()
        .filter(|(_, s)| *s == 200)
        .map(|(t, _)| *t)
        .collect();
    let need = (share * f64::from(LIMIT)).ceil() as usize;
    let at = served.iter().enumerate().find_map(|(i, &t)| {
        let from = t.checked_sub(Duration::from_secs(1))?;
        let in_second = served[..=i].iter().filter(|&&u| u > from).count();
        (in_second >= need).then_some(t)
    })?;
    let after: Vec<_> = log.iter().filter(|(t, _)| *t > at).collect();
    let refused = after.iter().filter(|(_, s)| *s == 429).count();
    Some((at, refused as f64 / after.len().max(1) as f64))
}

/// Told nginx's own rate with no slack, a client is never refused and
/// reaches it (98 % of 50/s over 10 s). Told 55/s it is refused (48 of
/// 550 in a run); told 48/s it falls short.
///
/// One task: its requests reach nginx one at a time, so a stall of nginx
/// (a loaded machine's) cannot queue several that nginx then counts in
/// one millisecond; the pace alone sends at most two back to back (one
/// late, the next at its slot), within nginx's burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_told_the_rate_keeps_to_it() {
    let nginx = Nginx::start(LIMIT);
    let limiter = AsyncLimiter::builder(Rate::per_second(u64::from(LIMIT)))
        .slack(0)
        .wait(PRECISE)
        .build()
        .unwrap();
    let log = run(Pace::new(limiter), nginx.url(), 1).await;
    let refused = log.iter().filter(|(_, s)| *s != 200).count();
    assert_eq!(refused, 0, "refused {refused} of {}", log.len());
    let rate = log.len() as f64 / RUN.as_secs_f64();
    assert!(
        rate >= 0.98 * f64::from(LIMIT),
        "{rate:.1}/s is under 98 % of {LIMIT}/s"
    );
}

/// Not told the rate, starting four times over it, an adaptive client
/// reaches 90 % of it within 10 s and is refused at most 2 % of the time
/// from then on. (Without its decrease, 75 % of its requests are refused
/// after; without its increase it still lands near the limit from above,
/// but never climbs: no increase is counted.)
async fn finds_the_rate<L: AsyncTake + paceline::adapt::Adjust + Clone + 'static>(limit: L) {
    let nginx = Nginx::start(LIMIT);
    let adaptive =
        Adaptive::new(limit.clone(), Rate::per_second(1), Rate::per_second(1000)).unwrap();
    let log = run(Pace::new(limit).adapt(adaptive.clone()), nginx.url(), TASKS).await;
    let stats = adaptive.stats();
    let (at, refused) = converged(&log, 0.9)
        .unwrap_or_else(|| panic!("never reached 90 % of {LIMIT}/s in {RUN:?}: {stats:?}"));
    assert!(
        refused <= 0.02,
        "{:.1} % refused after reaching 90 % at {at:?}: {stats:?}",
        refused * 100.0
    );
    // The controller's rate is the limiter's, and it is near nginx's.
    assert!(
        stats.rate > 0.8 * f64::from(LIMIT) && stats.rate < 1.2 * f64::from(LIMIT),
        "{stats:?}"
    );
    assert!(stats.decreases >= 1 && stats.increases >= 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_client_finds_the_rate() {
    let limiter = AsyncLimiter::builder(Rate::per_second(200))
        .slack(0)
        .wait(PRECISE)
        .build()
        .unwrap();
    finds_the_rate(limiter.clone()).await;
    assert_ne!(
        limiter.limiter().rate(),
        Rate::per_second(200),
        "the limiter's rate moved"
    );
}

#[cfg(feature = "keyed")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_key_finds_the_rate() {
    let keyed = AsyncKeyedLimiter::<String>::from(
        paceline::KeyedLimiter::builder(Rate::per_second(200))
            .slack(0)
            .wait(PRECISE)
            .build()
            .unwrap(),
    );
    finds_the_rate(OnKey::new(keyed.clone(), "nginx".to_string())).await;
    // Only the key's own rate moved: it is an override, shown in the limits.
    assert_eq!(keyed.limiter().rate(), Rate::per_second(200));
    let (rate, _) = keyed.limiter().rate_for("nginx");
    assert_ne!(rate, Rate::per_second(200));
    // And in the look inside, among the limits in force.
    #[cfg(feature = "tower")]
    {
        use http_body_util::BodyExt;
        use tower::ServiceExt;

        let service = paceline::http::Inspect::new()
            .keyed("far", keyed.clone())
            .service();
        let request = http::Request::get("/json").body(String::new()).unwrap();
        let response = service.oneshot(request).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let row = json["limiters"][0]["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["key"] == "nginx")
            .unwrap_or_else(|| panic!("no limit for the key: {json}"));
        assert_eq!(row["rate"], rate.to_string(), "{row}");
    }
}
