//! Per-IP rate limiting in a small server loop.
//!
//! A loopback TCP server answers one-line requests `GET <path> <client-ip>`
//! (the client IP as a proxy's `X-Forwarded-For` would carry it) with `200`
//! or `429 retry-after-ms=<n>`, limiting each client IP to 20 requests per
//! second with a burst of 5. Three clients run against it:
//!
//! - alice paces herself at 10/s: never refused;
//! - bob fires 40 requests at once: the burst passes, the rest is refused;
//! - a flood from 5 000 spoofed addresses: each new IP gets its burst, and
//!   the limiter never tracks more than its ceiling of 1 000 keys.
//!
//! ```text
//! cargo run --example per_ip
//! ```

use paceline::Take;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use paceline::{keyed::WhenFull, Error, KeyedLimiter, Rate};

const ALICE: usize = 20;
const BOB: usize = 40;
const FLOOD: usize = 5_000;

fn main() -> std::io::Result<()> {
    let limiter = KeyedLimiter::<IpAddr>::builder(Rate::per_second(20))
        .slack(4)
        .max_keys(1_000)
        .when_full(WhenFull::Evict)
        .build()
        .expect("a valid configuration");
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;

    thread::scope(|s| {
        // The server: one request per connection, a bounded number of them.
        let server = s.spawn(|| -> std::io::Result<()> {
            for stream in listener.incoming().take(ALICE + BOB + FLOOD) {
                let mut stream = stream?;
                let mut line = String::new();
                BufReader::new(&stream).read_line(&mut line)?;
                let reply = match line.split_whitespace().nth(2).map(str::parse::<IpAddr>) {
                    Some(Ok(ip)) => match limiter.try_take(&ip) {
                        Ok(_) => "200".to_string(),
                        Err(Error::RetryAfter(d)) => {
                            format!("429 retry-after-ms={}", d.duration().as_millis() + 1)
                        }
                        Err(e) => format!("503 {e}"),
                    },
                    _ => "400".to_string(),
                };
                writeln!(stream, "{reply}")?;
            }
            Ok(())
        });

        let tally = |replies: Vec<String>| {
            let mut counts = BTreeMap::new();
            for r in replies {
                *counts
                    .entry(r.split(' ').next().unwrap_or("").to_string())
                    .or_insert(0) += 1;
            }
            counts
        };

        let alice = s.spawn(move || {
            let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
            (0..ALICE)
                .map(|_| {
                    thread::sleep(Duration::from_millis(100));
                    request(addr, ip)
                })
                .collect::<std::io::Result<Vec<_>>>()
        });
        let bob = s.spawn(move || {
            let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
            (0..BOB)
                .map(|_| request(addr, ip))
                .collect::<std::io::Result<Vec<_>>>()
        });
        let flood = s.spawn(move || {
            (0..FLOOD as u32)
                .map(|i| request(addr, IpAddr::V4(Ipv4Addr::from(0xAC10_0000 + i))))
                .collect::<std::io::Result<Vec<_>>>()
        });

        let bob = bob.join().expect("bob")?;
        let first_refusal = bob.iter().find(|r| r.starts_with("429")).cloned();
        println!("bob   (40 at once):     {:?}", tally(bob));
        if let Some(r) = first_refusal {
            println!("      first refusal:    {r}");
        }
        println!(
            "flood (5000 IPs):       {:?}",
            tally(flood.join().expect("flood")?)
        );
        println!(
            "alice (10/s, paced):    {:?}",
            tally(alice.join().expect("alice")?)
        );
        server.join().expect("server")?;

        let stats = limiter.keyed_stats();
        println!(
            "limiter: {} keys tracked (ceiling {}), {} admitted, {} refused, {} evicted, {} pruned",
            stats.keys,
            limiter.max_keys(),
            stats.admitted,
            stats.refused,
            stats.evicted,
            stats.pruned
        );
        let mut busiest = limiter.snapshot();
        busiest.sort_by(|a, b| b.fill.total_cmp(&a.fill));
        println!("busiest keys now:");
        for k in busiest.iter().take(3) {
            println!(
                "  {:<15} fill {:>4.0} %  next free in {:>7.2?}  idle {:>9.2?}  refused {}",
                k.key.to_string(),
                k.fill * 100.0,
                k.next_free,
                k.idle,
                k.refused
            );
        }
        Ok(())
    })
}

/// One request from `ip` to the server at `addr`; the reply line.
fn request(addr: SocketAddr, ip: IpAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    writeln!(stream, "GET /api {ip}")?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    Ok(reply.trim().to_string())
}
