//! `paceline::http` against a real axum server on loopback and a real
//! HTTP client (hyper-util's), clients on distinct loopback addresses
//! (127.0.0.2, 127.0.0.3, ...: Linux routes all of 127/8 to `lo`).
#![cfg(all(feature = "tower", feature = "axum"))]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
#[path = "support/http_harness.rs"]
mod harness;
use harness::{client, get_from, header, serve, sf_item};
use paceline::http::{Body, ClientKey, Fields, LimitLayer, MissingKey, Mode, PaceLayer};
use paceline::tokio::{AsyncKeyedLimiter, AsyncLimiter};
use paceline::{KeyedLimiter, Rate};

fn app(layer: LimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/export", get(|| async { "export" }))
        .layer(layer)
}

/// The keys the layer's keyed limiter tracks.
fn keys(layer: &LimitLayer) -> Vec<String> {
    let mut keys: Vec<String> = layer
        .keyed_limiter()
        .unwrap()
        .limiter()
        .snapshot()
        .into_iter()
        .map(|s| s.key.to_string())
        .collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_ip_admits_at_most_the_bound_per_client_under_concurrent_load() {
    // 50/s (T = 20 ms) and a burst of 5 per client.
    let (slack, t) = (4u64, Duration::from_millis(20));
    let layer = LimitLayer::per_ip(Rate::per_second(50))
        .slack(slack)
        .build()
        .unwrap();
    let addr = serve(app(layer.clone())).await;

    const CLIENTS: u8 = 6;
    const TASKS: usize = 3;
    let run = Duration::from_millis(800);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let from = format!("127.0.0.{}", 10 + c);
        for _ in 0..TASKS {
            let client = client(&from);
            let from = from.clone();
            tasks.push(tokio::spawn(async move {
                let (mut ok, mut refused) = (0u64, 0u64);
                while start.elapsed() < run {
                    let answer = get_from(&client, addr, "/", &[]).await;
                    match answer.status {
                        StatusCode::OK => ok += 1,
                        StatusCode::TOO_MANY_REQUESTS => {
                            let retry: u64 = header(&answer, "retry-after").parse().unwrap();
                            assert!(retry >= 1, "Retry-After {retry}");
                            refused += 1;
                        }
                        other => panic!("{other}: {}", answer.body),
                    }
                }
                (from, ok, refused)
            }));
        }
    }
    let mut per_client: HashMap<String, (u64, u64)> = HashMap::new();
    for task in tasks {
        let (from, ok, refused) = task.await.unwrap();
        let entry = per_client.entry(from).or_default();
        entry.0 += ok;
        entry.1 += refused;
    }
    // Every decision fell inside [start, now].
    let window = start.elapsed();
    let bound = slack + 1 + (window.as_nanos() / t.as_nanos()) as u64;
    assert_eq!(per_client.len(), CLIENTS as usize);
    for (from, (ok, refused)) in &per_client {
        println!("{from}: {ok} admitted, {refused} refused (bound {bound} in {window:?})");
        assert!(*ok <= bound, "{from}: {ok} > {bound}");
        assert!(*ok > slack, "{from}: only {ok}");
        assert!(*refused > 0, "{from}: the load never met the limit");
    }
    let refused: u64 = per_client.values().map(|(_, refused)| refused).sum();
    assert_eq!(layer.stats().refused, refused);
    assert_eq!(keys(&layer).len(), CLIENTS as usize);
}

#[tokio::test]
async fn fields_parse_as_structured_field_lists_and_agree_with_the_limiter() {
    let limiter = AsyncKeyedLimiter::from(
        KeyedLimiter::<ClientKey>::builder(Rate::per_minute(1))
            .slack(2)
            .build()
            .unwrap(),
    );
    let layer = LimitLayer::per_ip(Rate::per_second(1))
        .limiter(limiter.clone())
        .fields(Fields::Always)
        .name("per-client")
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let client = client("127.0.0.20");
    let key = ClientKey::Ip("127.0.0.20".parse().unwrap());

    for expected in [2, 1, 0] {
        let answer = get_from(&client, addr, "/", &[]).await;
        assert_eq!(answer.status, StatusCode::OK);
        let (name, params) = sf_item(header(&answer, "ratelimit-policy"));
        assert_eq!(name, "per-client");
        assert_eq!(params["q"], 1);
        assert_eq!(params["w"], 60);
        assert_eq!(params["paceline-burst"], 3);
        let (name, params) = sf_item(header(&answer, "ratelimit"));
        assert_eq!(name, "per-client");
        assert_eq!(params["r"], expected);
        assert_eq!(params["r"] as u64, limiter.limiter().available(&key));
        // Whole again within (3 - r) minutes, rounded up to seconds.
        assert!(params["t"] <= (3 - expected) * 60, "{params:?}");
    }
    let refused = get_from(&client, addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let retry: i64 = header(&refused, "retry-after").parse().unwrap();
    let wait = limiter.limiter().next_free(&key);
    assert!(
        retry as u128 * 1_000_000_000 >= wait.as_nanos(),
        "{retry} s < {wait:?}"
    );
    assert!(retry <= 60);
    let (_, params) = sf_item(header(&refused, "ratelimit"));
    assert_eq!((params["r"], params["t"]), (0, retry));
}

#[tokio::test]
async fn forwarding_headers_count_only_from_trusted_proxies() {
    let layer = LimitLayer::per_ip(Rate::per_second(100))
        .trust_proxies(["127.0.0.1"])
        .build()
        .unwrap();
    let addr = serve(app(layer.clone())).await;

    // An untrusted peer's X-Forwarded-For is ignored: keyed on the peer.
    let untrusted = client("127.0.0.5");
    for spoof in ["9.9.9.9", "8.8.8.8", "1.2.3.4, 5.6.7.8"] {
        let answer = get_from(&untrusted, addr, "/", &[("x-forwarded-for", spoof)]).await;
        assert_eq!(answer.status, StatusCode::OK);
    }
    assert_eq!(keys(&layer), ["127.0.0.5"]);

    // The trusted proxy's list: the right-most entry not a trusted proxy.
    let proxy = client("127.0.0.1");
    let answer = get_from(
        &proxy,
        addr,
        "/",
        &[("x-forwarded-for", "6.6.6.6, 2.2.2.2, 127.0.0.1")],
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(keys(&layer), ["127.0.0.5", "2.2.2.2"]);

    // An unreadable hop before any untrusted address: no key, refused.
    let answer = get_from(
        &proxy,
        addr,
        "/",
        &[("x-forwarded-for", "3.3.3.3, unknown")],
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.body.contains("no client key"), "{}", answer.body);
    assert_eq!(layer.stats().missing_key, 1);
}

/// What a client writes left of its own entry cannot take its key away:
/// a byte that is not text, or a chain longer than `MAX_HOPS`, left of the
/// entry the trusted proxy appended, and the client is still keyed on its
/// own address (not on the shared bucket of requests without a key).
#[tokio::test]
async fn a_client_cannot_make_its_own_key_disappear_behind_trusted_proxies() {
    let layer = LimitLayer::per_ip(Rate::per_second(100))
        .trust_proxies(["127.0.0.1"])
        .on_missing_key(MissingKey::Shared("anonymous".into()))
        .build()
        .unwrap();
    let addr = serve(app(layer.clone())).await;
    let proxy = client("127.0.0.1");
    let long = format!("{}, 2.2.2.2", vec!["9.9.9.9"; 40].join(", "));
    for xff in ["caf\u{e9}, 2.2.2.2", long.as_str()] {
        let answer = get_from(&proxy, addr, "/", &[("x-forwarded-for", xff)]).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(keys(&layer), ["2.2.2.2"], "{xff}");
    }
    assert_eq!(layer.stats().missing_key, 0);
}

#[tokio::test]
async fn ipv6_clients_are_grouped_by_prefix() {
    let layer = LimitLayer::per_ip(Rate::per_second(100))
        .trust_proxies(["127.0.0.1"])
        .build()
        .unwrap();
    let addr = serve(app(layer.clone())).await;
    let proxy = client("127.0.0.1");
    for host in ["2001:db8:1:2::1", "2001:db8:1:2:ffff::9", "2001:db8:1:3::1"] {
        let xff = format!("[{host}]:4711");
        let answer = get_from(&proxy, addr, "/", &[("x-forwarded-for", &xff)]).await;
        assert_eq!(answer.status, StatusCode::OK);
    }
    assert_eq!(keys(&layer), ["2001:db8:1:2::", "2001:db8:1:3::"]);
}

#[tokio::test]
async fn a_request_without_a_key_gets_the_configured_outcome() {
    // Served without connect info: no peer address in the request.
    async fn serve_plain(app: Router) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }
    let refuse = LimitLayer::per_ip(Rate::per_second(100)).build().unwrap();
    let addr = serve_plain(app(refuse.clone())).await;
    let answer = get_from(&client("127.0.0.1"), addr, "/", &[]).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.body.contains("into_make_service_with_connect_info"));
    assert_eq!((refuse.stats().missing_key, refuse.stats().refused), (1, 1));

    let shared = LimitLayer::per_ip(Rate::per_second(1))
        .slack(0)
        .on_missing_key(MissingKey::Shared("anonymous".into()))
        .build()
        .unwrap();
    let addr = serve_plain(app(shared.clone())).await;
    let client = client("127.0.0.1");
    assert_eq!(
        get_from(&client, addr, "/", &[]).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get_from(&client, addr, "/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(keys(&shared), ["anonymous"]);

    // A header key: a request without the header.
    let by_header = LimitLayer::per_header("x-api-key", Rate::per_second(100))
        .on_missing_key(MissingKey::Refuse(StatusCode::UNAUTHORIZED))
        .build()
        .unwrap();
    let addr = serve(app(by_header.clone())).await;
    let answer = get_from(&client, addr, "/", &[]).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    let answer = get_from(&client, addr, "/", &[("x-api-key", "k-123")]).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(keys(&by_header), ["k-123"]);
}

#[tokio::test]
async fn costs_bodies_and_dry_runs() {
    // /export costs the whole burst of 5.
    let layer = LimitLayer::per_ip(Rate::per_minute(1))
        .slack(4)
        .cost(|head| if head.uri.path() == "/export" { 5 } else { 1 })
        .body(Body::Problem)
        .name("exports")
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let client = client("127.0.0.30");
    assert_eq!(
        get_from(&client, addr, "/export", &[]).await.status,
        StatusCode::OK
    );
    let refused = get_from(&client, addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "content-type"), "application/problem+json");
    let problem: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["violated-policies"][0], "exports");

    let json = LimitLayer::per_ip(Rate::per_minute(1))
        .slack(0)
        .body(Body::Json)
        .build()
        .unwrap();
    let addr = serve(app(json)).await;
    get_from(&client, addr, "/", &[]).await;
    let refused = get_from(&client, addr, "/", &[]).await;
    let body: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
    assert_eq!(body["error"], "rate_limited");
    assert_eq!(
        body["retry_after"].as_u64().unwrap(),
        header(&refused, "retry-after").parse::<u64>().unwrap()
    );

    // A cost above the burst: no wait admits it, so no Retry-After and no
    // window, the policy alone, and the reason in the body.
    let too_big = LimitLayer::per_ip(Rate::per_second(1))
        .slack(4)
        .cost(|head| if head.uri.path() == "/export" { 10 } else { 1 })
        .build()
        .unwrap();
    let addr = serve(app(too_big)).await;
    let refused = get_from(&client, addr, "/export", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers.get("retry-after").is_none());
    assert!(refused.headers.get("ratelimit").is_none());
    assert!(refused.headers.get("ratelimit-policy").is_some());
    assert!(refused.body.contains("burst"), "{}", refused.body);
    assert_eq!(
        get_from(&client, addr, "/", &[]).await.status,
        StatusCode::OK
    );

    // A dry run forwards everything and counts what it would refuse.
    let dry = LimitLayer::per_ip(Rate::per_minute(1))
        .slack(1)
        .mode(Mode::DryRun)
        .build()
        .unwrap();
    let addr = serve(app(dry.clone())).await;
    for _ in 0..5 {
        assert_eq!(
            get_from(&client, addr, "/", &[]).await.status,
            StatusCode::OK
        );
    }
    let stats = dry.stats();
    assert_eq!((stats.would_refuse, stats.refused), (3, 0));
}

/// With fields on every response, an in-process keyed layer asks for the
/// key's state with each decision; without, it asks for the answer alone.
/// The two ways decide alike: same statuses, same refusals, same counts.
#[tokio::test]
async fn a_keyed_layer_decides_alike_with_and_without_fields_on_every_response() {
    let layer = |fields, mode| {
        LimitLayer::per_ip(Rate::per_minute(1))
            .slack(2)
            .cost(|head| if head.uri.path() == "/export" { 2 } else { 1 })
            .fields(fields)
            .mode(mode)
            .build()
            .unwrap()
    };
    let paths = ["/", "/export", "/", "/export", "/", "/"];
    for mode in [Mode::Refuse, Mode::DryRun] {
        let (always, on_refusal) = (layer(Fields::Always, mode), layer(Fields::OnRefusal, mode));
        let (a, b) = (
            serve(app(always.clone())).await,
            serve(app(on_refusal.clone())).await,
        );
        let client = client("127.0.0.31");
        let mut statuses = Vec::new();
        for path in paths {
            let (one, two) = (
                get_from(&client, a, path, &[]).await,
                get_from(&client, b, path, &[]).await,
            );
            assert_eq!(one.status, two.status, "{mode:?} {path}");
            for name in ["retry-after", "ratelimit", "ratelimit-policy"] {
                if one.status == StatusCode::TOO_MANY_REQUESTS {
                    assert_eq!(header(&one, name), header(&two, name), "{name}");
                }
            }
            statuses.push(two.status.as_u16());
        }
        let (one, two) = (always.stats(), on_refusal.stats());
        assert_eq!(
            (one.refused, one.would_refuse),
            (two.refused, two.would_refuse)
        );
        match mode {
            // A burst of 3: 1 + 2, then every request refused.
            Mode::Refuse => {
                assert_eq!(statuses, [200, 200, 429, 429, 429, 429]);
                assert_eq!((two.refused, two.would_refuse), (4, 0));
            }
            _ => {
                assert_eq!(statuses, [200; 6]);
                assert_eq!((two.refused, two.would_refuse), (0, 4));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_mode_holds_a_request_and_a_client_gone_gives_its_slot_back() {
    // 2/s (T = 500 ms), no slack; hold a request up to 3 s.
    let layer = LimitLayer::per_ip(Rate::per_second(2))
        .slack(0)
        .mode(Mode::Wait(Duration::from_secs(3)))
        .build()
        .unwrap();
    let addr = serve(app(layer.clone())).await;
    let client = client("127.0.0.40");
    let first = Instant::now();
    assert_eq!(
        get_from(&client, addr, "/", &[]).await.status,
        StatusCode::OK
    );
    // Held until its slot, 500 ms after the first.
    assert_eq!(
        get_from(&client, addr, "/", &[]).await.status,
        StatusCode::OK
    );
    assert!(
        first.elapsed() >= Duration::from_millis(490),
        "{:?}",
        first.elapsed()
    );

    // This one's slot is 500 ms away; its client gives up after 100 ms.
    let gone = {
        let client = client.clone();
        tokio::spawn(async move { get_from(&client, addr, "/", &[]).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    gone.abort();
    let _ = gone.await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The slot came back: the next request gets it, not the one after.
    let next = Instant::now();
    assert_eq!(
        get_from(&client, addr, "/", &[]).await.status,
        StatusCode::OK
    );
    let held = next.elapsed();
    assert!(
        held < Duration::from_millis(700),
        "held {held:?}: the slot was not given back"
    );

    // Beyond the bound: refused at once.
    let bounded = LimitLayer::per_ip(Rate::per_minute(1))
        .slack(0)
        .mode(Mode::Wait(Duration::from_millis(100)))
        .build()
        .unwrap();
    let addr = serve(app(bounded)).await;
    get_from(&client, addr, "/", &[]).await;
    let at = Instant::now();
    let refused = get_from(&client, addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(at.elapsed() < Duration::from_secs(1));
}

/// Issue 30, item 6: held requests abandoned oldest first (clients that
/// give up in the order they came) give every slot back, on a per-client
/// limit and on a shared one: the next request waits at most about the
/// 10 ms horizon, not for the slots of requests no one is waiting for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_requests_abandoned_in_arrival_order_give_their_slots_back() {
    // 1/s, no slack: each held request's slot is a second after the one
    // before; held up to 30 s.
    let hold = Mode::Wait(Duration::from_secs(30));
    let shared = AsyncLimiter::builder(Rate::per_second(1))
        .slack(0)
        .build()
        .unwrap();
    let layers = [
        (
            "per client",
            "127.0.0.90",
            LimitLayer::per_ip(Rate::per_second(1)).slack(0),
        ),
        (
            "global",
            "127.0.0.91",
            LimitLayer::global(Rate::per_second(1)).slack(0),
        ),
        (
            "a shared AsyncLimiter",
            "127.0.0.92",
            LimitLayer::per_ip(Rate::per_second(1)).limiter(shared),
        ),
    ];
    let mut waits = Vec::new();
    for (name, from, layer) in layers {
        let addr = serve(app(layer.mode(hold).build().unwrap())).await;
        let client = client(from);
        let start = Instant::now();
        assert_eq!(
            get_from(&client, addr, "/", &[]).await.status,
            StatusCode::OK
        );
        // Ten requests held behind it, in a known order.
        let mut held = Vec::new();
        for _ in 0..10 {
            let client = client.clone();
            held.push(tokio::spawn(async move {
                get_from(&client, addr, "/", &[]).await
            }));
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Their clients give up, oldest first.
        for request in held {
            request.abort();
            let gone = request.await;
            assert!(
                matches!(&gone, Err(e) if e.is_cancelled()),
                "{name}: answered"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Once the first request's interval is over, the limit is free
        // again: no one is waiting.
        let free = Duration::from_millis(1_100);
        tokio::time::sleep(free.saturating_sub(start.elapsed())).await;
        let next = Instant::now();
        let answer =
            tokio::time::timeout(Duration::from_secs(3), get_from(&client, addr, "/", &[])).await;
        let status = answer.map(|a| a.status);
        waits.push((name, next.elapsed(), status));
    }
    for (name, waited, status) in waits.iter() {
        assert!(
            *waited < Duration::from_millis(250) && *status == Ok(StatusCode::OK),
            "{name}: the next request waited {waited:?} (the abandoned held requests \
             kept their slots): {waits:?}"
        );
    }
}

#[tokio::test]
async fn route_layers_and_router_clones_share_one_budget() {
    let layer = LimitLayer::per_ip(Rate::per_minute(1))
        .slack(2)
        .build()
        .unwrap();
    let app = Router::new()
        .route("/a", get(|| async { "a" }))
        .route("/b", get(|| async { "b" }))
        .route_layer(layer.clone())
        .route("/free", get(|| async { "free" }));
    let addr = serve(app).await;
    // A new connection per request: axum clones the service for each.
    let mut ok = 0;
    for i in 0..10 {
        let client = client("127.0.0.50");
        let path = ["/a", "/b"][i % 2];
        if get_from(&client, addr, path, &[]).await.status == StatusCode::OK {
            ok += 1;
        }
    }
    assert_eq!(ok, 3, "one burst of 3 across routes and connections");
    let free = get_from(&client("127.0.0.50"), addr, "/free", &[]).await;
    assert_eq!(free.status, StatusCode::OK);
}

#[tokio::test]
async fn a_shared_limit_takes_from_one_async_limiter() {
    let limiter = AsyncLimiter::builder(Rate::per_minute(1))
        .slack(1)
        .full_credit(true)
        .build()
        .unwrap();
    let layer = LimitLayer::per_ip(Rate::per_second(1))
        .limiter(limiter.clone())
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let mut statuses = Vec::new();
    for from in ["127.0.0.60", "127.0.0.61", "127.0.0.62"] {
        statuses.push(get_from(&client(from), addr, "/", &[]).await.status);
    }
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert_eq!(ok, 2, "{statuses:?}");
    assert_eq!(limiter.limiter().available(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_pace_layer_sends_each_call_at_its_slot() {
    use tower::{Service, ServiceExt};

    let limiter = AsyncLimiter::builder(Rate::per_second(10))
        .slack(0)
        .build()
        .unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&sent);
    let inner = tower::service_fn(move |_: ()| {
        counter.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, Infallible>(Response::new(())) }
    });
    let mut service = tower::ServiceBuilder::new()
        .layer(PaceLayer::new(limiter.clone()))
        .service(inner);
    let start = tokio::time::Instant::now();
    for _ in 0..5 {
        service.ready().await.unwrap().call(()).await.unwrap();
    }
    // Slots at 0, 100, 200, 300, 400 ms.
    assert_eq!(start.elapsed(), Duration::from_millis(400));
    assert_eq!(sent.load(Ordering::Relaxed), 5);

    // Readiness abandoned while waiting gives the slot back.
    let mut waiting = service.clone();
    // Booked within the wait's 10 ms horizon (at 490 ms), dropped at 495.
    let abandoned = tokio::time::timeout(Duration::from_millis(95), waiting.ready()).await;
    assert!(abandoned.is_err());
    drop(waiting);
    let before = tokio::time::Instant::now();
    service.ready().await.unwrap().call(()).await.unwrap();
    // The slot at 500 ms, not the one after it.
    assert_eq!(before.elapsed(), Duration::from_millis(5));
}

/// `PaceLayer` takes any async limiter with the unit key: here one key of a
/// remote limiter (the in-memory backend, which counts its round trips and
/// can play a server that is down). A take that fails fails `poll_ready`
/// with the limiter's error, and the service asks again once it can.
#[tokio::test]
async fn the_pace_layer_paces_through_any_limiter_and_fails_with_its_error() {
    use paceline::remote::memory::{AsyncMemoryLimiter, MemoryBackend, MemoryLimiter};
    use paceline::remote::FailPolicy;
    use paceline::{take::OnKey, Limit};
    use tower::{Service, ServiceExt};

    let backend = MemoryBackend::new();
    let limit = Limit::new(Rate::per_second(20), 1);
    let limiter = MemoryLimiter::with_backend(backend.clone(), limit, FailPolicy::Closed).unwrap();
    let limiter = OnKey::new(AsyncMemoryLimiter::from(limiter), "upstream".to_string());
    let inner = tower::service_fn(|_: ()| async { Ok::<_, Infallible>(Response::new(())) });
    let mut service = tower::ServiceBuilder::new()
        .layer(PaceLayer::new(limiter))
        .service(inner);

    let start = Instant::now();
    for _ in 0..4 {
        service.ready().await.unwrap().call(()).await.unwrap();
    }
    // The burst of 2 at once, then two slots 50 ms apart.
    assert!(
        start.elapsed() >= Duration::from_millis(95),
        "{:?}",
        start.elapsed()
    );
    // One round trip a take, and one more for each that asked before its
    // slot came within the async wait's horizon.
    let trips = backend.round_trips();
    assert!((4..=8).contains(&trips), "{trips} round trips");

    backend.set_down(true);
    let Err(failed) = service.ready().await else {
        panic!("the take should fail while the server is down")
    };
    let failed = failed
        .downcast_ref::<paceline::Error>()
        .expect("the limiter's error");
    assert!(
        matches!(failed, paceline::Error::Unavailable(_)),
        "{failed:?}"
    );
    backend.set_down(false);
    service.ready().await.unwrap().call(()).await.unwrap();
}

#[test]
fn bad_configuration_is_named() {
    let bad_proxy = LimitLayer::per_ip(Rate::per_second(1))
        .trust_proxies(["10.0.0.0/8", "10.0.0/8"])
        .build()
        .err()
        .unwrap();
    assert!(
        bad_proxy.to_string().contains("\"10.0.0/8\""),
        "{bad_proxy}"
    );
    let bad_header = LimitLayer::per_header("x api key", Rate::per_second(1))
        .build()
        .err()
        .unwrap();
    assert!(bad_header.to_string().contains("x api key"), "{bad_header}");
    let bad_name = LimitLayer::global(Rate::per_second(1))
        .name("naïve")
        .build()
        .err()
        .unwrap();
    assert!(bad_name.to_string().contains("naïve"), "{bad_name}");
    let bad_prefix = LimitLayer::per_ip(Rate::per_second(1))
        .ipv6_prefix(129)
        .build()
        .err()
        .unwrap();
    assert!(bad_prefix.to_string().contains("/129"), "{bad_prefix}");
}

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod support;

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_limit_is_shared_by_layers_and_fails_closed_with_503() {
    use paceline::redis::{AsyncRedisLimiter, RedisLimiter};

    let mut server = support::RedisServer::start();
    let limiter = |url: &str| {
        AsyncRedisLimiter::from(
            RedisLimiter::builder(url, Rate::per_minute(1))
                .slack(1)
                .prefix(format!("http-test-{}:", std::process::id()))
                .response_timeout(Duration::from_millis(300))
                .connect_timeout(Duration::from_millis(300))
                .build()
                .unwrap(),
        )
    };
    let url = server.url();
    let layer = |fields| {
        LimitLayer::per_ip(Rate::per_second(1))
            .limiter(limiter(&url))
            .fields(fields)
            .build()
            .unwrap()
    };
    let (one, two) = (layer(Fields::Always), layer(Fields::OnRefusal));
    shared_remote_limit(
        one,
        two,
        ["127.0.0.70", "127.0.0.71"],
        Duration::from_secs(2),
        || server.stop(),
    )
    .await;
}

/// Two servers (two layers over one remote limit, two connections): one
/// limit per client, a burst of 2 at 1/min. `one` sends the fields on
/// every response. Then `stop` takes the limit's server down, and a
/// request is answered 503 within `within`.
#[cfg(any(feature = "redis", feature = "postgres"))]
async fn shared_remote_limit(
    one: LimitLayer,
    two: LimitLayer,
    from: [&str; 2],
    within: Duration,
    stop: impl FnOnce(),
) {
    let (a, b) = (serve(app(one)).await, serve(app(two)).await);
    let client = client(from[0]);
    let first = get_from(&client, a, "/", &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    let (_, params) = sf_item(header(&first, "ratelimit"));
    assert_eq!(params["r"], 1);
    assert_eq!(get_from(&client, b, "/", &[]).await.status, StatusCode::OK);
    let refused = get_from(&client, a, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = header(&refused, "retry-after").parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // Another client has its own bucket.
    assert_eq!(
        get_from(&self::client(from[1]), b, "/", &[]).await.status,
        StatusCode::OK
    );

    stop();
    let started = Instant::now();
    let failed = get_from(&client, b, "/", &[]).await;
    assert_eq!(failed.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&failed, "retry-after"), "1");
    assert!(started.elapsed() < within, "{:?}", started.elapsed());
}

#[cfg(feature = "postgres")]
#[path = "support/pg_server.rs"]
mod pg;

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_limit_is_shared_by_layers_and_fails_closed_with_503() {
    use paceline::postgres::{AsyncPostgresLimiter, PostgresLimiter};

    let mut server = pg::PgServer::start();
    let limiter = |conn: &str| {
        let limiter = PostgresLimiter::builder(conn, Rate::per_minute(1))
            .slack(1)
            .connect_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        limiter.install().unwrap();
        AsyncPostgresLimiter::from(limiter)
    };
    let conn = server.conn();
    let layer = |fields| {
        LimitLayer::per_ip(Rate::per_second(1))
            .limiter(limiter(&conn))
            .fields(fields)
            .build()
            .unwrap()
    };
    let (one, two) = (layer(Fields::Always), layer(Fields::OnRefusal));
    shared_remote_limit(
        one,
        two,
        ["127.0.0.80", "127.0.0.81"],
        Duration::from_secs(3),
        || server.stop(),
    )
    .await;
}

#[tokio::test]
async fn the_refusals_body_follows_accept_when_allowed() {
    // One request a minute per client, and each client refused once.
    let layer = LimitLayer::per_ip(Rate::per_minute(1))
        .slack(0)
        .body(Body::Accept)
        .name("api")
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    /// A client address, the headers it sends, the body type it gets.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 5] = [
        (
            "127.0.0.41",
            &[("accept", "application/problem+json")],
            "application/problem+json",
        ),
        (
            "127.0.0.42",
            &[("accept", "text/html, application/json;q=0.9")],
            "application/json",
        ),
        ("127.0.0.43", &[], "text/plain; charset=utf-8"),
        (
            "127.0.0.44",
            &[("accept", "*/*")],
            "application/problem+json",
        ),
        (
            "127.0.0.45",
            &[("accept", "application/json;q=0.1, text/plain")],
            "text/plain; charset=utf-8",
        ),
    ];
    for (from, accept, expected) in cases {
        let client = client(from);
        assert_eq!(
            get_from(&client, addr, "/", accept).await.status,
            StatusCode::OK
        );
        let refused = get_from(&client, addr, "/", accept).await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&refused, "content-type"), expected, "{accept:?}");
        if expected.contains("json") {
            let body: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
            assert!(body.is_object(), "{}", refused.body);
        } else {
            assert!(
                refused.body.starts_with("Too Many Requests: retry in"),
                "{}",
                refused.body
            );
        }
    }
}

/// Two requests from one client through `service` (one admitted, one
/// refused at a slack of 0): each response's status and body text.
async fn admitted_then_refused<S, B>(service: S) -> [(StatusCode, String); 2]
where
    S: tower::Service<Request<()>, Response = Response<B>, Error = Infallible> + Clone,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let mut answers = Vec::new();
    for _ in 0..2 {
        let request = Request::builder().header("x-key", "a").body(()).unwrap();
        let response = tower::ServiceExt::oneshot(service.clone(), request)
            .await
            .unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        answers.push((status, String::from_utf8(bytes.to_vec()).unwrap()));
    }
    answers.try_into().unwrap()
}

/// `service`, checked at compile time to answer `Response<B>`.
fn answering<B, S>(service: S) -> S
where
    S: tower::Service<Request<()>, Response = Response<B>>,
{
    service
}

/// The layer answers in the inner service's own body type: an admitted
/// response is the inner one, its body untouched; a refusal's text is
/// written in a body of the same type; a body that cannot hold it (here
/// `Empty`) is mapped into `LimitBody` below the limit.
#[tokio::test]
async fn the_layer_answers_in_the_inner_services_body_type() {
    use http_body_util::combinators::BoxBody;
    use http_body_util::Full;
    use paceline::http::LimitBody;
    use tower::Layer;

    let layer = || {
        LimitLayer::per_header("x-key", Rate::per_hour(1))
            .slack(0)
            .build()
            .unwrap()
    };
    let refused = |answers: &[(StatusCode, String); 2]| {
        assert_eq!(answers[0], (StatusCode::OK, "inner".to_string()));
        assert_eq!(answers[1].0, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            answers[1].1.starts_with("Too Many Requests: retry in"),
            "{}",
            answers[1].1
        );
    };
    let full = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"inner"))))
    });
    let limited = answering::<Full<Bytes>, _>(layer().layer(full));
    refused(&admitted_then_refused(limited).await);
    let boxed = tower::service_fn(|_: Request<()>| async {
        let body = Full::new(Bytes::from_static(b"inner")).map_err(|never| match never {});
        Ok::<_, Infallible>(Response::new(BoxBody::<Bytes, Infallible>::new(body)))
    });
    let limited = answering::<BoxBody<Bytes, Infallible>, _>(layer().layer(boxed));
    refused(&admitted_then_refused(limited).await);
    let axum_body = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(axum::body::Body::from("inner")))
    });
    let limited = answering::<axum::body::Body, _>(layer().layer(axum_body));
    refused(&admitted_then_refused(limited).await);
    // A body the layer cannot write in, as a proxy's or another layer's
    // would be: mapped into `LimitBody` under the limit, as the guide shows.
    let empty = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    });
    let limited = tower::ServiceBuilder::new()
        .layer(layer())
        .map_response(|r: Response<Empty<Bytes>>| r.map(LimitBody::new))
        .service(empty);
    let limited = answering::<LimitBody<Empty<Bytes>>, _>(limited);
    let answers = admitted_then_refused(limited).await;
    assert_eq!(answers[0], (StatusCode::OK, String::new()));
    assert_eq!(answers[1].0, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        answers[1].1.starts_with("Too Many Requests"),
        "{}",
        answers[1].1
    );
}

/// Every answer the layer writes itself carries `Answered` in its
/// extensions, saying why; an admitted response carries none.
#[tokio::test]
async fn the_layers_own_answers_say_why_in_an_extension() {
    use http_body_util::Full;
    use paceline::http::Answered;
    use paceline::remote::memory::{AsyncMemoryLimiter, MemoryBackend, MemoryLimiter};
    use paceline::remote::FailPolicy;
    use paceline::Limit;
    use tower::{Layer, ServiceExt};

    let inner = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"inner"))))
    });
    let keyed = || Request::builder().header("x-key", "a").body(()).unwrap();
    let why = |response: &Response<Full<Bytes>>| response.extensions().get::<Answered>().copied();

    let layer = LimitLayer::per_header("x-key", Rate::per_hour(1))
        .slack(0)
        .build()
        .unwrap();
    let service = layer.layer(inner);
    let admitted = service.clone().oneshot(keyed()).await.unwrap();
    assert_eq!((admitted.status(), why(&admitted)), (StatusCode::OK, None));
    let refused = service.clone().oneshot(keyed()).await.unwrap();
    assert_eq!(
        (refused.status(), why(&refused)),
        (StatusCode::TOO_MANY_REQUESTS, Some(Answered::Refused))
    );
    let keyless = service.oneshot(Request::new(())).await.unwrap();
    assert_eq!(
        (keyless.status(), why(&keyless)),
        (StatusCode::BAD_REQUEST, Some(Answered::MissingKey))
    );

    // A remote limit whose server is down, failing closed: 503.
    let backend = MemoryBackend::new();
    let limit = Limit::new(Rate::per_second(10), 1);
    let limiter = MemoryLimiter::with_backend(backend.clone(), limit, FailPolicy::Closed).unwrap();
    let layer = LimitLayer::per_header("x-key", Rate::per_second(10))
        .limiter(AsyncMemoryLimiter::from(limiter))
        .build()
        .unwrap();
    backend.set_down(true);
    let failed = layer.layer(inner).oneshot(keyed()).await.unwrap();
    assert_eq!(
        (failed.status(), why(&failed)),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Some(Answered::ServerFailed)
        )
    );
}
