//! `paceline::http::Inspect` served by a real axum server on loopback, asked
//! by a real HTTP client (hyper-util), and its page run in a real headless
//! browser (Debian's chromium: a missing one fails these tests, it does not
//! skip them; `scripts/test.sh` installs it).
//!
//! The buckets' rate is 10/h with a burst of 10, so a fill set by the
//! test (k permits taken: fill k/10) drifts by less than 0.01 a minute:
//! the filters' bounds sit between the fills, far from that.
//!
//! `PACELINE_SCREENSHOT=docs/limits.png cargo test --features tower --test
//! inspect screenshot` writes the README's screenshot anew.

#![cfg(all(feature = "tower", feature = "keyed"))]

use paceline::Take;
#[path = "support/chromium.rs"]
mod chromium;
#[path = "support/promtool.rs"]
mod promtool;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use paceline::http::Inspect;
use paceline::{clock::ManualClock, AtomicLimiter, KeyedLimiter, Rate};

/// An axum server on 127.0.0.1:0 with the page mounted at `/limits`, on a
/// runtime of its own; shut down when dropped.
struct Server {
    addr: SocketAddr,
    runtime: tokio::runtime::Runtime,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Server {
    fn start(inspect: Inspect) -> Server {
        Server::start_service(inspect.service())
    }

    fn start_service(service: paceline::http::InspectService) -> Server {
        Server::start_app(axum::Router::new().nest_service("/limits", service))
    }

    /// `app`, served with each connection's peer address (for a layer).
    fn start_app(app: axum::Router) -> Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(async move {
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Server {
            addr,
            runtime,
            stop: Some(stop),
        }
    }

    fn url(&self, path_and_query: &str) -> String {
        format!("http://{}{path_and_query}", self.addr)
    }

    /// One request with hyper-util's client: status, headers, body.
    fn request(&self, method: &str, path_and_query: &str) -> Reply {
        let url = self.url(path_and_query);
        self.runtime.block_on(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            let request = http::Request::builder()
                .method(method)
                .uri(&url)
                .body(Full::new(Bytes::new()))
                .unwrap();
            let response = client.request(request).await.expect("request on loopback");
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            Reply {
                status,
                headers,
                body: String::from_utf8(body.to_vec()).expect("a UTF-8 body"),
            }
        })
    }

    fn get(&self, path_and_query: &str) -> Reply {
        self.request("GET", path_and_query)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct Reply {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no {name} header"))
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Takes `n` permits from `key` (of a burst of 10: fill n/10).
fn fill(limiter: &KeyedLimiter<String>, key: &str, n: u64) {
    limiter.try_take_n(key, n).unwrap();
}

/// A keyed limiter "actions" at 10/h, burst 10, `upload/` keys at 20/h
/// burst 20 (an override), with these fills:
///
/// | key | taken | fill |
/// |---|---|---|
/// | message_send/alice | 8 | 0.8 |
/// | message_send/bob | 3 | 0.3 |
/// | message_send/<b>carol</b> | 6 | 0.6 |
/// | message_send/dave | 10, then 1 refused | 1.0 |
/// | message_sender/erin | 9 | 0.9 |
/// | upload/alice | 19 of 20 | 0.95 |
///
/// and "per_ip", an `IpAddr` limiter with two addresses, and "global", a
/// counting direct limiter.
fn fixture() -> (Inspect, Arc<KeyedLimiter<String>>) {
    let actions = Arc::new(
        KeyedLimiter::<String>::builder(Rate::per_hour(10))
            .slack(9)
            .stats(true)
            .parent(paceline::keyed::path_parent)
            .build()
            .unwrap(),
    );
    actions
        .set_override("upload".to_string(), Rate::per_hour(20), 19)
        .unwrap();
    fill(&actions, "message_send/alice", 8);
    fill(&actions, "message_send/bob", 3);
    fill(&actions, "message_send/<b>carol</b>", 6);
    fill(&actions, "message_send/dave", 10);
    assert!(actions.try_take("message_send/dave").is_err());
    fill(&actions, "message_sender/erin", 9);
    fill(&actions, "upload/alice", 19);
    let per_ip = Arc::new(
        KeyedLimiter::<IpAddr>::builder(Rate::per_hour(10))
            .slack(9)
            .build()
            .unwrap(),
    );
    per_ip.try_take_n(&"10.0.0.7".parse().unwrap(), 4).unwrap();
    per_ip
        .try_take_n(&"2001:db8::1".parse().unwrap(), 2)
        .unwrap();
    let global = Arc::new(
        AtomicLimiter::builder(Rate::per_second(1000))
            .stats(true)
            .build()
            .unwrap(),
    );
    global.try_take_n(3).unwrap();
    let inspect = Inspect::new()
        .keyed("actions", Arc::clone(&actions))
        .keyed("per_ip", per_ip)
        .counted("global", global);
    (inspect, actions)
}

fn keys(json: &serde_json::Value) -> Vec<String> {
    json["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["key"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn json_lists_the_buckets_a_query_selects_in_its_order() {
    let (inspect, _actions) = fixture();
    let server = Server::start(inspect);
    // The issue's question: keys beginning with message_send whose budget
    // is under 50 % (fill above 0.5), fullest first.
    let reply = server.get("/limits/json?prefix=message_send&fill_gt=0.5&sort=fill");
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("content-type"), "application/json");
    let json = reply.json();
    assert_eq!(
        keys(&json),
        [
            "message_send/dave",
            "message_sender/erin",
            "message_send/alice",
            "message_send/<b>carol</b>"
        ]
    );
    assert_eq!(
        (json["matched"].as_u64(), json["shown"].as_u64()),
        (Some(4), Some(4))
    );
    let dave = &json["buckets"][0];
    assert_eq!(dave["limiter"], "actions");
    assert_eq!(dave["rate"], "10/h");
    assert_eq!(dave["burst"], 10);
    assert!(
        (dave["fill"].as_f64().unwrap() - 1.0).abs() < 0.01,
        "{dave}"
    );
    // The next permit is one interval (6 min) away, less the time since.
    let next_free = dave["next_free"].as_f64().unwrap();
    assert!(next_free > 300.0 && next_free <= 360.0, "{dave}");
    assert!(dave["idle"].as_f64().unwrap() < 60.0, "{dave}");
    assert_eq!(dave["refused"].as_u64(), Some(1));
    // Admitted calls are counted per limiter only.
    assert!(dave.get("admitted").is_none(), "{dave}");
    // The raw key, in JSON, with `<` escaped.
    assert!(reply
        .body
        .contains(r#""message_send/\u003cb\u003ecarol\u003c/b\u003e""#));

    // An override shows as its own rate; ascending order; a fill range.
    let json = server
        .get("/limits/json?fill_gt=0.85&fill_lt=0.97&sort=key&order=asc")
        .json();
    assert_eq!(keys(&json), ["message_sender/erin", "upload/alice"]);
    assert_eq!(json["buckets"][1]["rate"], "20/h");
    assert_eq!(json["buckets"][1]["burst"], 20);

    // Another limiter's keys as their Display text; the limiter filter.
    let json = server.get("/limits/json?limiter=per_ip&sort=fill").json();
    assert_eq!(keys(&json), ["10.0.0.7", "2001:db8::1"]);

    // The cap keeps the first rows in the order asked for, and says so.
    let json = server.get("/limits/json?sort=fill&limit=2").json();
    assert_eq!(keys(&json), ["message_send/dave", "upload/alice"]);
    assert_eq!(
        (json["matched"].as_u64(), json["shown"].as_u64()),
        (Some(8), Some(2))
    );

    // Totals per limiter.
    let limiters = json["limiters"].as_array().unwrap();
    assert_eq!(limiters.len(), 3);
    assert_eq!(limiters[0]["name"], "actions");
    assert_eq!(limiters[0]["keys"], 6);
    assert_eq!(limiters[0]["refused"], 1);
    assert_eq!(limiters[2]["kind"], "counted");
    assert_eq!(limiters[2]["admitted"], 1);
}

#[test]
fn bad_queries_are_a_400_naming_the_value() {
    let (inspect, _actions) = fixture();
    let server = Server::start(inspect);
    for (query, named) in [
        ("?fill_gt=half", "\"half\""),
        ("?fill_lt=-0.5", "\"-0.5\""),
        ("?sort=colour", "\"colour\""),
        ("?order=sideways", "\"sideways\""),
        ("?limit=0", "\"0\""),
        ("?limit=100000", "\"100000\""),
        ("?limiter=nobody", "\"nobody\""),
        ("?fill%3E0.5", "\"fill>0.5\""),
        ("?prefix=%ff", "%ff"),
    ] {
        for path in ["/limits", "/limits/json"] {
            let reply = server.get(&format!("{path}{query}"));
            assert_eq!(reply.status, 400, "{path}{query}: {}", reply.body);
            assert!(reply.body.contains(named), "{path}{query}: {}", reply.body);
            assert!(reply.header("content-type").starts_with("text/plain"));
        }
    }
}

#[test]
fn methods_other_than_get_and_head_are_405() {
    let (inspect, _actions) = fixture();
    let server = Server::start(inspect);
    for method in ["POST", "PUT", "DELETE"] {
        let reply = server.request(method, "/limits/json");
        assert_eq!(reply.status, 405, "{method}");
        assert_eq!(reply.header("allow"), "GET, HEAD");
    }
    let get = server.get("/limits/metrics");
    let head = server.request("HEAD", "/limits/metrics");
    assert_eq!(head.status, 200);
    assert_eq!(head.body, "");
    assert_eq!(
        head.header("content-length"),
        get.body.len().to_string(),
        "HEAD announces GET's length"
    );
    assert_eq!(server.get("/limits/nothing").status, 404);
}

#[test]
fn metrics_are_prometheus_text_without_per_key_labels() {
    let (inspect, actions) = fixture();
    let server = Server::start(inspect);
    let reply = server.get("/limits/metrics");
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = &reply.body;
    for line in [
        // stats::prometheus: the limiters that count.
        "paceline_admitted_total{limiter=\"actions\"} 6\n",
        "paceline_refused_total{limiter=\"actions\"} 1\n",
        "paceline_permits_total{limiter=\"global\"} 3\n",
        // A keyed limiter counts its calls admitted and refused whether or
        // not it meters the rest, and /json shows them: so does /metrics.
        "paceline_admitted_total{limiter=\"per_ip\"} 2\n",
        "paceline_refused_total{limiter=\"per_ip\"} 0\n",
        // The keyed limiters' own series, every keyed limiter.
        "# TYPE paceline_keys gauge\n",
        "paceline_keys{limiter=\"actions\"} 6\n",
        "paceline_keys{limiter=\"per_ip\"} 2\n",
        "paceline_keys_max{limiter=\"per_ip\"} 1000000\n",
        "# TYPE paceline_pruned_total counter\n",
        "paceline_pruned_total{limiter=\"actions\"} 0\n",
        "paceline_evicted_total{limiter=\"per_ip\"} 0\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    // The memory the key map holds, as the limiter counts it.
    let bytes = actions.keyed_stats().bytes;
    assert!(bytes >= 6 * 24, "{bytes} bytes for 6 keys");
    let line = format!("paceline_keys_bytes{{limiter=\"actions\"}} {bytes}\n");
    assert!(text.contains(&line), "missing {line:?} in\n{text}");
    // Only those two: what it does not meter is not written as zero.
    for family in ["permits_total", "cancelled_total", "wait_seconds_count"] {
        assert!(!text.contains(&format!("paceline_{family}{{limiter=\"per_ip\"}}")));
    }
    promtool::check(text);
    // Every limiter's counts as /json shows them.
    for limiter in server.get("/limits/json").json()["limiters"]
        .as_array()
        .unwrap()
    {
        for count in ["admitted", "refused"] {
            let line = format!(
                "paceline_{count}_total{{limiter={}}} {}\n",
                limiter["name"], limiter[count]
            );
            assert!(text.contains(&line), "missing {line:?} in\n{text}");
        }
    }
    assert!(!text.contains("message_send") && !text.contains("10.0.0.7"));
    // The format's rules: every sample's family was announced just before
    // its samples (HELP, then TYPE), and samples of a family are together.
    assert!(text.ends_with('\n'));
    let mut seen = std::collections::HashSet::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            current = rest.split(' ').next().unwrap().to_owned();
            assert!(seen.insert(current.clone()), "family {current} twice");
        } else if !line.starts_with("# HELP ") {
            let name = line.split('{').next().unwrap();
            assert!(
                name == current
                    || name
                        .strip_prefix(current.as_str())
                        .is_some_and(|s| s == "_sum" || s == "_count"),
                "sample {line:?} outside its family {current}"
            );
        }
    }
}

#[test]
fn page_is_self_contained_and_keys_are_never_markup() {
    let (inspect, actions) = fixture();
    // A key a client chose to break out of the data block and the markup.
    let evil = "x/</script><script>alert(1)</script>&<img src=y onerror=alert(2)>";
    actions.try_take(evil).unwrap();
    let server = Server::start(inspect);
    for path in ["/limits", "/limits/"] {
        let reply = server.get(&format!("{path}?prefix=x/%3C&sort=key"));
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(reply.header("content-type"), "text/html; charset=utf-8");
        let csp = reply.header("content-security-policy");
        assert!(
            csp.starts_with("default-src 'none'; script-src 'sha256-"),
            "{csp}"
        );
        assert!(!csp.contains("unsafe"), "{csp}");
        let html = &reply.body;
        // Nothing fetched from elsewhere: no script, image, frame or style
        // sheet by address, no URL off the page's own server.
        for fetch in [
            "<script src",
            "<img",
            "<iframe",
            "<link",
            "url(",
            "@import",
            "fetch(",
        ] {
            assert!(!html.contains(fetch), "{fetch} in {html}");
        }
        assert!(!html.contains("http://") && !html.contains("https://"));
        // One inline script (and the data block), one style sheet.
        assert_eq!(html.matches("<script").count(), 2);
        assert_eq!(html.matches("</script>").count(), 2);
        assert_eq!(html.matches("<style>").count(), 1);
        // The key is in the data block, escaped, and nowhere as markup;
        // the prefix echoed in the form is HTML-escaped.
        assert!(!html.contains("<img") && !html.contains("alert(1)</script>"));
        assert!(html.contains("\\u003c/script\\u003e\\u003cscript\\u003ealert(1)"));
        assert!(html.contains("name=\"prefix\" value=\"x/&lt;\""));
    }
}

/// The rows the browser rendered into the buckets table: (limiter, key)
/// per row, in order, read from the DOM chromium dumps after the script ran.
fn rendered_rows(dom: &str) -> Vec<(String, String)> {
    let table = dom
        .split("<table id=\"buckets\">")
        .nth(1)
        .expect("the buckets table in the DOM");
    let tbody = table
        .split("<tbody>")
        .nth(1)
        .and_then(|t| t.split("</tbody>").next())
        .unwrap_or("");
    tbody
        .split("<tr>")
        .skip(1)
        .map(|row| {
            let cell = |class: &str| {
                let start = row
                    .find(&format!("class=\"{class}\""))
                    .unwrap_or_else(|| panic!("no {class} cell in {row}"));
                let text = &row[start..];
                let text = &text[text.find('>').unwrap() + 1..];
                text[..text.find("</td>").unwrap()].to_owned()
            };
            (cell("limiter"), cell("key"))
        })
        .collect()
}

/// The text of each cell of the DOM's table `id`, row by row.
fn table_cells(dom: &str, id: &str) -> Vec<Vec<String>> {
    let table = dom
        .split(&format!("<table id=\"{id}\">"))
        .nth(1)
        .and_then(|t| t.split("<tbody>").nth(1))
        .and_then(|t| t.split("</tbody>").next())
        .unwrap_or_else(|| panic!("no table {id} in the DOM"));
    let text = |cell: &str| cell[cell.find('>').unwrap() + 1..].to_owned();
    table
        .split("<tr>")
        .skip(1)
        .map(|row| {
            row.split("</td>")
                .filter_map(|c| c.split_once("<td"))
                .map(|(_, c)| text(c))
                .collect()
        })
        .collect()
}

/// The rows of the page's "Limits in force" table.
fn in_force(dom: &str) -> Vec<Vec<String>> {
    table_cells(dom, "in-force")
}

#[test]
fn browser_renders_the_filtered_sorted_rows() {
    let (inspect, _actions) = fixture();
    let server = Server::start(inspect);
    let dom = chromium::dump_dom(
        &server.url("/limits?prefix=message_send%2F&fill_gt=0.5&sort=fill&order=desc"),
    );
    // The table body is empty in the HTML the server sent: rows in the DOM
    // are the script's. Only the matching rows, fullest first; the key
    // with markup in it is text (escaped in the serialized DOM).
    assert_eq!(
        rendered_rows(&dom),
        [
            ("actions".to_owned(), "message_send/dave".to_owned()),
            ("actions".to_owned(), "message_send/alice".to_owned()),
            (
                "actions".to_owned(),
                "message_send/&lt;b&gt;carol&lt;/b&gt;".to_owned()
            ),
        ],
        "{dom}"
    );
    assert!(!dom.contains("<b>carol"));
    assert!(dom.contains("3 buckets shown."), "{dom}");
    // The limits in force: the default as built, the override set by a
    // call, neither from a layer, and neither said to be set by hand.
    assert_eq!(
        in_force(&dom),
        [
            ["actions", "(default)", "10/h", "10", "(no layer)"],
            ["actions", "upload", "20/h", "20", "(no layer)"],
            ["per_ip", "(default)", "10/h", "10", "(no layer)"],
        ],
        "{dom}"
    );
    // The sorted column is marked.
    assert!(
        dom.contains("data-col=\"fill\" tabindex=\"0\" aria-sort=\"descending\""),
        "{dom}"
    );

    // Ascending by key, across limiters, with a fill range.
    let dom = chromium::dump_dom(&server.url("/limits?fill_lt=0.5&sort=key&order=asc"));
    assert_eq!(
        rendered_rows(&dom),
        [
            ("per_ip".to_owned(), "10.0.0.7".to_owned()),
            ("per_ip".to_owned(), "2001:db8::1".to_owned()),
            ("actions".to_owned(), "message_send/bob".to_owned()),
        ],
        "{dom}"
    );
}

#[test]
fn screenshot_of_a_realistic_page() {
    // The README's picture: actions per user, uploads, and client addresses,
    // two minutes of traffic on a manual clock, so the picture is the same
    // however slow the machine.
    let clock = ManualClock::new();
    let actions = Arc::new(
        KeyedLimiter::<String>::builder(Rate::per_minute(20))
            .slack(9)
            .stats(true)
            .parent(paceline::keyed::path_parent)
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    actions
        .set_override("upload".to_string(), Rate::per_hour(60), 4)
        .unwrap();
    let per_ip = Arc::new(
        KeyedLimiter::<IpAddr>::builder(Rate::per_second(5))
            .slack(19)
            .stats(true)
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    // (key, every so many 250 ms ticks, calls each time, last tick)
    let actors: [(&str, u32, u32, u32); 12] = [
        ("message_send/alice", 6, 2, 480),
        ("message_send/bob", 20, 1, 470),
        ("message_send/carol", 7, 1, 420),
        ("message_send/dmitri", 2, 3, 479),
        ("message_send/eve", 9, 1, 470),
        ("message_send/farah", 40, 1, 200),
        ("message_send/gustav", 4, 1, 476),
        ("upload/alice", 60, 2, 460),
        ("upload/carol", 25, 1, 478),
        ("upload/hiro", 90, 1, 380),
        ("203.0.113.7", 1, 2, 480),
        ("2001:db8:4f2a::1", 1, 2, 470),
    ];
    for tick in 0..=480u32 {
        for &(key, every, calls, last) in &actors {
            if tick % every != 0 || tick > last {
                continue;
            }
            for _ in 0..calls {
                match key.parse::<IpAddr>() {
                    Ok(ip) => drop(per_ip.try_take(&ip)),
                    Err(_) => drop(actions.try_take(key)),
                }
            }
        }
        clock.advance(Duration::from_millis(250));
    }
    per_ip
        .try_take_n(&"192.0.2.144".parse().unwrap(), 14)
        .unwrap();
    per_ip
        .try_take_n(&"198.51.100.23".parse().unwrap(), 6)
        .unwrap();
    clock.advance(Duration::from_millis(700));
    let global = Arc::new(
        AtomicLimiter::builder(Rate::per_second(2000))
            .stats(true)
            .build()
            .unwrap(),
    );
    global.try_take_n(15).unwrap();
    let server = Server::start(
        Inspect::new()
            .keyed("actions", actions)
            .keyed("per_ip", per_ip)
            .counted("global", global),
    );
    let png = chromium::screenshot(&server.url("/limits?sort=fill&order=desc"), 1280, 900);
    assert_eq!(chromium::png_size(&png), (1280, 900));
    // A blank page compresses to a few kilobytes; a table of text does not.
    assert!(png.len() > 30_000, "{} bytes: a blank page?", png.len());
    if let Ok(path) = std::env::var("PACELINE_SCREENSHOT") {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        std::fs::write(&path, &png).unwrap();
        eprintln!("wrote {}", path.display());
    }
}

#[test]
fn service_is_clone_send_sync_and_takes_the_async_face() {
    fn shareable<T: Clone + Send + Sync + 'static>(_: &T) {}
    let limiter = paceline::tokio::AsyncKeyedLimiter::from(
        KeyedLimiter::<u32>::builder(Rate::per_hour(10))
            .slack(9)
            .build()
            .unwrap(),
    );
    Take::try_take_n(limiter.limiter(), &7, 5).unwrap();
    let old = Arc::new(KeyedLimiter::<u32>::new(Rate::per_hour(10)));
    old.try_take(&1).unwrap();
    // The second registration under "tasks" replaces the first.
    let service = Inspect::new()
        .keyed("tasks", old)
        .keyed("tasks", limiter.clone())
        .service();
    shareable(&service);
    let server = Server::start_service(service.clone());
    let json = server.get("/limits/json").json();
    assert_eq!(keys(&json), ["7"]);
    assert_eq!(json["limiters"].as_array().unwrap().len(), 1);
    assert!((json["buckets"][0]["fill"].as_f64().unwrap() - 0.5).abs() < 0.01);
}

/// The limits in force, each with the layer it came from: a set merged
/// from layers names them, an override set by hand names none, and a long
/// list stops at 100 with the total said.
#[cfg(feature = "fleet")]
#[test]
fn json_lists_the_limits_in_force_with_their_layers() {
    use paceline::config::fleet::{Layer, Layers};

    let limiter = Arc::new(KeyedLimiter::<String>::new(Rate::per_second(1)));
    let target = Arc::clone(&limiter);
    let layers = Layers::new(move |limits| target.apply(limits));
    let (global, local) = (layers.add("global"), layers.add("local"));
    let mut base = Layer::new().with_default(Rate::per_second(100));
    for i in 0..150 {
        base = base.with_override(format!("k{i}"), Rate::per_second(10));
    }
    global.offer(1, base).unwrap();
    local
        .offer(1, Layer::new().with_override("k1", Rate::per_second(5)))
        .unwrap();
    limiter
        .set_override("by-hand".to_owned(), Rate::per_second(7), 0)
        .unwrap();
    let server = Server::start(Inspect::new().keyed("api", Arc::clone(&limiter)));
    let json = server.get("/limits/json").json();
    let api = &json["limiters"][0];
    let limits = api["limits"].as_array().unwrap();
    assert_eq!(api["overrides"], 151);
    assert_eq!(limits.len(), 101, "the default and 100 overrides");
    assert_eq!(
        (&limits[0]["key"], &limits[0]["rate"], &limits[0]["layer"]),
        (&serde_json::Value::Null, &"100/s".into(), &"global".into())
    );
    assert_eq!(
        (&limits[1]["key"], &limits[1]["layer"]),
        (&"k0".into(), &"global".into())
    );
    assert_eq!(
        (&limits[2]["key"], &limits[2]["rate"], &limits[2]["layer"]),
        (&"k1".into(), &"5/s".into(), &"local".into())
    );
    let html = server.get("/limits").body;
    assert!(html.contains("Limits in force"), "{html}");
    // Set by hand: the last override, past the 100 shown, in `limits()`.
    assert_eq!(limiter.limits().layer("by-hand"), None);
    assert_eq!(limiter.limits().layer("k149"), Some("global"));
}

/// Buckets at rest (fill 0, tracked until a sweep) are counted where they
/// are not listed, and listed when the query asks: in the JSON, and on the
/// page, whose "0 buckets shown" beside "4 keys" said nothing of them.
#[test]
fn buckets_at_rest_are_counted_and_listed_when_asked() {
    let clock = ManualClock::new();
    let limiter = Arc::new(
        KeyedLimiter::<String>::builder(Rate::per_hour(10))
            .slack(9)
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    for key in ["a", "b", "c", "d"] {
        limiter.try_take(key).unwrap();
    }
    // Two hours on, all four are at rest; then "d" takes half its burst
    // (a key already tracked: no insert, so no sweep).
    clock.advance(Duration::from_secs(7200));
    limiter.try_take_n("d", 5).unwrap();
    let server = Server::start(Inspect::new().keyed("api", Arc::clone(&limiter)));
    let json = server.get("/limits/json").json();
    assert_eq!(keys(&json), ["d"]);
    let counts = |j: &serde_json::Value| {
        (
            j["matched"].clone(),
            j["shown"].clone(),
            j["at_rest"].clone(),
        )
    };
    assert_eq!(counts(&json), (1.into(), 1.into(), 3.into()));
    assert_eq!(json["limiters"][0]["keys"], 4);
    let json = server.get("/limits/json?at_rest=1").json();
    assert_eq!(keys(&json), ["a", "b", "c", "d"]);
    assert_eq!(counts(&json), (4.into(), 4.into(), 3.into()));
    assert_eq!(json["buckets"][0]["fill"], 0.0);
    assert_eq!(json["buckets"][0]["next_free"], 0.0);
    // The filters apply to the count: a bucket at rest has fill 0.
    let json = server.get("/limits/json?fill_gt=0.1").json();
    assert_eq!(counts(&json), (1.into(), 1.into(), 0.into()));
    let json = server.get("/limits/json?prefix=a&fill_lt=0.5").json();
    assert_eq!(counts(&json), (0.into(), 0.into(), 1.into()));
    // What a take sees is the same: at rest, a whole burst.
    assert_eq!(limiter.snapshot().len(), 1);

    let dom = chromium::dump_dom(&server.url("/limits"));
    assert!(
        dom.contains("1 bucket shown; 3 more at rest, not listed"),
        "{dom}"
    );
    assert_eq!(rendered_rows(&dom), [("api".to_owned(), "d".to_owned())]);
    let dom = chromium::dump_dom(&server.url("/limits?at_rest=1"));
    assert!(dom.contains("4 buckets shown."), "{dom}");
    assert!(dom.contains("value=\"1\" checked=\"\""), "{dom}");
    let shown: Vec<_> = rendered_rows(&dom).into_iter().map(|(_, k)| k).collect();
    assert_eq!(shown, ["a", "b", "c", "d"]);
}

/// Keys that are IP addresses sort as addresses (IPv4 by number, then
/// IPv6 by number), before other keys, which sort as text; the server
/// (JSON) and the page's script agree, ties included.
#[test]
fn addresses_sort_as_addresses_on_the_server_and_the_page() {
    let limiter = Arc::new(
        KeyedLimiter::<String>::builder(Rate::per_hour(10))
            .slack(9)
            .build()
            .unwrap(),
    );
    let ascending = [
        "9.9.9.9",
        "10.0.0.1",
        "127.0.0.2",
        "127.0.0.10",
        "::",
        "0::1", // one address in two texts: by text
        "::1",
        "::ffff:1.2.3.4",
        "2001:db8::9",
        "2001:DB8::a",
        "2001:db8::10",
        "fe80::1",
        "1.2.3.04", // no address (a leading zero): text
        "256.0.0.1",
        "Bob",
        "alice",
    ];
    for key in ascending.iter().rev() {
        fill(&limiter, key, 1);
    }
    let server = Server::start(Inspect::new().keyed("ip", Arc::clone(&limiter)));
    let json = server.get("/limits/json?sort=key&order=asc").json();
    assert_eq!(keys(&json), ascending);
    let descending: Vec<_> = ascending.iter().rev().copied().collect();
    assert_eq!(
        keys(&server.get("/limits/json?sort=key&order=desc").json()),
        descending
    );
    let page = |query: &str| -> Vec<String> {
        let dom = chromium::dump_dom(&server.url(&format!("/limits?{query}")));
        rendered_rows(&dom).into_iter().map(|(_, k)| k).collect()
    };
    assert_eq!(page("sort=key&order=desc"), descending);
    // Equal counts: ties go by key, A to Z, in the same order.
    assert_eq!(page("sort=refused&order=desc"), ascending);
}

/// An HTTP layer's own limiter is one call from the page,
/// `Inspect::layer`, which then shows what the layer decided: its keys,
/// and its counts in the JSON and the metrics alike.
#[cfg(feature = "axum")] // the layer answers in axum's body
#[test]
fn a_layers_own_limiter_is_one_call_from_the_page() {
    use paceline::http::LimitLayer;
    let per_ip = LimitLayer::per_ip(Rate::per_hour(10))
        .slack(2)
        .build()
        .unwrap();
    let inspect = Inspect::new().layer("per_ip", &per_ip);
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "hello" }))
        .layer(per_ip)
        .nest_service("/limits", inspect.service());
    let server = Server::start_app(app);
    let statuses: Vec<u16> = (0..5).map(|_| server.get("/").status).collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    let json = server.get("/limits/json").json();
    assert_eq!(keys(&json), ["127.0.0.1"]);
    let limiter = &json["limiters"][0];
    assert_eq!(
        (&limiter["name"], &limiter["kind"]),
        (&"per_ip".into(), &"keyed".into())
    );
    assert_eq!(
        (&limiter["admitted"], &limiter["refused"]),
        (&3.into(), &2.into())
    );
    let metrics = server.get("/limits/metrics").body;
    for line in [
        "paceline_admitted_total{limiter=\"per_ip\"} 3\n",
        "paceline_refused_total{limiter=\"per_ip\"} 2\n",
        "paceline_keys{limiter=\"per_ip\"} 1\n",
    ] {
        assert!(metrics.contains(line), "missing {line:?} in\n{metrics}");
    }
    promtool::check(&metrics);
    // A layer with no keyed limiter of its own adds nothing.
    let global = LimitLayer::global(Rate::per_hour(10)).build().unwrap();
    let inspect = format!("{:?}", Inspect::new().layer("global", &global));
    assert!(inspect.contains("limiters: []"), "{inspect}");
}

/// A key counted by window shows its window, its count and when the window
/// ends, in the JSON and on the page; a pacing key's row has no window.
#[test]
fn a_window_keys_row_shows_its_count_and_its_windows_end() {
    let clock = ManualClock::new();
    // Noon UTC on 2024-02-29: a ManualClock's readings are Unix times.
    clock.set(Duration::from_secs(1_709_164_800 + 12 * 3_600));
    let limiter = Arc::new(
        KeyedLimiter::<String>::builder(Rate::per_hour(10))
            .slack(9)
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let daily = paceline::Limit::per_window(4, "day".parse().unwrap()).unwrap();
    limiter
        .set_override_limit("tenant:free".into(), daily)
        .unwrap();
    limiter.try_take_n("tenant:free", 3).unwrap();
    limiter.try_take_n("paced", 5).unwrap();
    let server = Server::start(Inspect::new().keyed("api", Arc::clone(&limiter)));
    let json = server.get("/limits/json").json();
    let bucket = |key: &str| {
        json["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["key"] == key)
            .unwrap_or_else(|| panic!("no bucket {key} in {json}"))
            .clone()
    };
    let free = bucket("tenant:free");
    assert_eq!(free["window"]["window"], "day");
    assert_eq!(free["window"]["count"], 3);
    assert_eq!(free["window"]["ends"], 12.0 * 3_600.0);
    assert_eq!(
        (free["burst"].clone(), free["fill"].clone()),
        (4.into(), 0.75.into())
    );
    assert_eq!(bucket("paced")["window"], serde_json::Value::Null);

    let dom = chromium::dump_dom(&server.url("/limits"));
    let rows = table_cells(&dom, "buckets");
    let free = rows
        .iter()
        .find(|r| r[1] == "tenant:free")
        .unwrap_or_else(|| panic!("{dom}"));
    assert_eq!(free[2], "per day: 3 counted, ends in 12 h");
    let paced = rows.iter().find(|r| r[1] == "paced").unwrap();
    assert_eq!(paced[2], "10/h");
}
