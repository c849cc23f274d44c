//! One set of limits for a fleet: three processes (stand-ins for three
//! servers), each a keyed limiter under two layers, the fleet's global
//! document in Redis and a local tweak of its own. The global document is
//! changed once (with `paceline limits set` when the CLI is built beside
//! this example, else with the library call it makes); the program prints
//! how soon each process had the new limits in force, and that each kept
//! its local tweak.
//!
//! ```text
//! redis-server --port 6379 --save '' &   # any Redis will do
//! cargo build -p paceline-cli            # optional: `paceline limits set`
//! cargo run -p paceline-examples --features fleet --example fleet_limits [redis://127.0.0.1/]
//! ```

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use paceline::config::fleet::{Document, Layer, Layers};
use paceline::{KeyedLimiter, Limit, Rate};

const GLOBAL_V1: &str =
    "[default]\nrate = \"100/s\"\nburst = 20\n\n[overrides]\n\"tenant:acme\" = \"1000/s\"\n";
const GLOBAL_V2: &str =
    "[default]\nrate = \"50/s\"\nburst = 10\n\n[overrides]\n\"tenant:acme\" = \"2000/s\"\n";

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("--server") {
        let (url, n) = (
            args.next().unwrap_or_default(),
            args.next().unwrap_or_default(),
        );
        return server(&url, &n);
    }
    let url = first.unwrap_or_else(|| "redis://127.0.0.1/".to_owned());
    // One name for every run: each run writes two more versions.
    let name = "paceline:example".to_owned();

    let mut document = Document::redis(&url, Some(&name))?;
    let v1 = document.set(GLOBAL_V1, None)?;
    println!("global document {name:?} at version {v1}: default 100/s, burst 20");

    // Three servers, each waiting for stdin to close.
    let exe = std::env::current_exe()?;
    let mut servers = Vec::new();
    for n in 0..3 {
        let mut child = Command::new(&exe)
            .args(["--server", url.as_str(), &format!("{n}:{name}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        servers.push((child, lines));
    }
    for (_, lines) in &mut servers {
        let ready = lines.next().transpose()?.unwrap_or_default();
        println!("  {ready}");
    }

    // The change, as an operator makes it.
    let since = now_ns();
    let cli = exe
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("paceline"))
        .filter(|bin| bin.is_file());
    match &cli {
        Some(bin) => set_with_cli(bin, &url, &name, v1)?,
        None => {
            let v = document.set(GLOBAL_V2, Some(v1))?;
            println!(
                "stored version {v} (the library's `Document::set`, as `paceline limits set` does)"
            );
        }
    }
    let mut latencies = Vec::new();
    for (child, lines) in &mut servers {
        let line = lines.next().transpose()?.unwrap_or_default();
        let at: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or(since);
        latencies.push(Duration::from_nanos(at.saturating_sub(since)));
        println!("  {line}");
        drop(child.stdin.take());
        let summary = lines.next().transpose()?.unwrap_or_default();
        println!("  {summary}");
        child.wait()?;
    }
    latencies.sort();
    println!(
        "the new global limits were in force in all 3 processes {:.1?} after the write \
         (median {:.1?})",
        latencies[2], latencies[1]
    );
    Ok(())
}

fn set_with_cli(
    bin: &Path,
    url: &str,
    name: &str,
    over: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let over = over.to_string();
    println!(
        "$ paceline limits set --redis {url} --name {name} --if-version {over}   # the new document on stdin"
    );
    let mut set = Command::new(bin)
        .args([
            "limits",
            "set",
            "--redis",
            url,
            "--name",
            name,
            "--if-version",
            &over,
        ])
        .stdin(Stdio::piped())
        .spawn()?;
    set.stdin
        .take()
        .expect("piped")
        .write_all(GLOBAL_V2.as_bytes())?;
    let status = set.wait()?;
    if !status.success() {
        return Err(format!("paceline limits set: {status}").into());
    }
    Ok(())
}

/// One server: a keyed limiter, the global document under its own local
/// tweak (`tenant:local-n` at 5/s).
fn server(url: &str, spec: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (n, name) = spec.split_once(':').ok_or("want N:NAME")?;
    let limiter = Arc::new(KeyedLimiter::<String>::new(Rate::per_second(1)));
    let target = Arc::clone(&limiter);
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let printer = Arc::clone(&out);
    let server = format!("server {n}");
    let layers = Layers::new(move |limits| {
        target.apply(limits)?;
        let default = limits.default_limit();
        let mut out = printer.lock().unwrap_or_else(|e| e.into_inner());
        writeln!(
            out,
            "{server}: in force: default {} burst {} ({}) {}",
            default.rate(),
            default.burst(),
            limits.default_layer().unwrap_or("-"),
            now_ns()
        )?;
        out.flush()?;
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    });
    let global = layers.add("global");
    let local = layers.add("local");
    let mine = format!("tenant:local-{n}");
    local.offer(
        1,
        Layer::new().with_override(mine.clone(), Rate::per_second(5)),
    )?;
    let _watching = Document::redis(url, Some(name))?.feed(global)?;
    // Until the parent closes stdin.
    let mut sink = String::new();
    while std::io::stdin().read_line(&mut sink)? > 0 {}
    let limits = limiter.limits();
    println!(
        "server {n}: {mine} still {} from layer {:?}",
        limits
            .get(&mine)
            .map_or(Limit::from(Rate::per_second(1)), |l| *l)
            .rate(),
        limits.layer(&mine).unwrap_or("-")
    );
    Ok(())
}
