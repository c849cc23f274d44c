//! The look inside: an operator's page of a keyed limiter's buckets, with
//! its JSON and Prometheus text, mounted in an axum app at `/limits`.
//!
//! ```text
//! cargo run -p paceline-examples --features tower --example limits_page            # serve on 127.0.0.1:3000
//! cargo run -p paceline-examples --features tower --example limits_page -- --once  # ask it once, print, exit
//! ```
//!
//! A few simulated users send messages and upload files through one keyed
//! limiter (`message_send/<user>` at 20/min, `upload/<user>` at 60/h by an
//! override); open http://127.0.0.1:3000/limits and sort, or filter: the
//! issue's "keys beginning with message_send whose budget is under 50 %"
//! is `/limits?prefix=message_send&fill_gt=0.5`. The paceline part is two
//! lines (marked); in a real app, mount it behind your own authentication.

use paceline::Take;
use std::sync::Arc;
use std::time::Duration;

use paceline::http::Inspect;
use paceline::{keyed::path_parent, KeyedLimiter, Rate};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let actions = Arc::new(
        KeyedLimiter::<String>::builder(Rate::per_minute(20))
            .slack(9)
            .stats(true)
            .parent(path_parent)
            .build()?,
    );
    actions.set_override("upload".to_owned(), Rate::per_hour(60), 4)?;

    // Traffic: each user acts at their own pace, some faster than allowed.
    let users = ["alice", "bob", "carol", "dmitri", "eve", "farah"];
    for (i, user) in users.into_iter().enumerate() {
        let actions = Arc::clone(&actions);
        tokio::spawn(async move {
            let every = Duration::from_millis(400 + 500 * i as u64);
            loop {
                let _ = actions.try_take(format!("message_send/{user}").as_str());
                if i % 2 == 0 {
                    let _ = actions.try_take(format!("upload/{user}").as_str());
                }
                tokio::time::sleep(every).await;
            }
        });
    }

    // paceline, 1 of 2: what the page shows.
    let inspect = Inspect::new().keyed("actions", Arc::clone(&actions));
    // paceline, 2 of 2: where it is mounted.
    let app = axum::Router::new().nest_service("/limits", inspect.service());

    let once = std::env::args().any(|a| a == "--once");
    let listener = tokio::net::TcpListener::bind(if once {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:3000"
    })
    .await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    if !once {
        println!("http://{addr}/limits  (JSON: /limits/json, Prometheus: /limits/metrics)");
        server.await??;
        return Ok(());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let json = get(
        addr,
        "/limits/json?prefix=message_send&fill_gt=0.5&sort=fill",
    )
    .await??;
    println!("GET /limits/json?prefix=message_send&fill_gt=0.5&sort=fill\n{json}\n");
    let metrics = get(addr, "/limits/metrics").await??;
    println!("GET /limits/metrics (keyed series)");
    for line in metrics.lines().filter(|l| l.starts_with("paceline_keys")) {
        println!("{line}");
    }
    Ok(())
}

/// A bare HTTP/1.0 GET on loopback, on a blocking thread: the body.
fn get(
    addr: std::net::SocketAddr,
    path: &'static str,
) -> tokio::task::JoinHandle<std::io::Result<String>> {
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr)?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response
            .split_once("\r\n\r\n")
            .map_or(String::new(), |(_, body)| body.to_owned()))
    })
}
