//! What paceline's Redis step costs the server, beside two other GCRA
//! scripts, on one `redis-server` this program starts itself (a unix socket
//! in a temporary directory; killed by pid at the end):
//!
//! ```text
//! cargo run --release -p paceline-benches --features redis --example redis_cpu   # ~35 s
//! ```
//!
//! (`-- --quick`: a few seconds, to check that it runs; do not quote it.)
//!
//! - **server CPU per admitted call**: `usec_per_call` of `evalsha` in
//!   `INFO commandstats` after `CONFIG RESETSTAT` (the time Redis spends in
//!   the command, script included; not the round trip);
//! - **throughput at 64 in flight**: calls/s on one connection, sending
//!   pipelines of 64 `EVALSHA`s back to back (the same way for every script).
//!
//! The scripts: paceline's step as it is (`src/remote/redis/step.lua`), as
//! it was before its rewrite of 2026-11-23 (`benches/lua/step_before.lua`), go-redis/
//! redis_rate's GCRA (`benches/lua/redis_rate.lua`), and a minimal
//! TIME + GET + SET GCRA (`benches/lua/minimal_gcra.lua`); and for a
//! quota per window, paceline's window step (`src/remote/redis/
//! window.lua`, a fixed minute and a calendar month) beside the usual
//! fixed-window counter, `INCRBY` and `EXPIREAT`
//! (`benches/lua/minimal_window.lua`). Each call is
//! admitted (1 permit per µs, far faster than the calls come) and writes its
//! key: paceline's `try_take`, and its blocking `take` and a settle's
//! excess (charged as a take) for reference.
//!
//! A run is 9 rounds, each measuring every script once (~0.1 s each, in an
//! order rotated each round) so that all of them see the same load. A run's
//! figure for a script is the median of its rounds; its ratio of two
//! scripts is the median of the ratios within each round (measured a moment
//! apart, which holds up better on a busy machine). Three runs, printed as
//! the median of the three and their spread (min, max).

use std::time::Instant;

use redis::{Connection, Pipeline};

#[path = "../../tests/support/redis_server.rs"]
mod server;

/// Calls in flight: one pipeline's length.
const IN_FLIGHT: usize = 64;

/// How long it measures: pipelines per measurement (~0.1 s at 5 µs a
/// call), rounds per run, runs.
struct Size {
    batches: usize,
    rounds: usize,
    runs: usize,
}

const FULL: Size = Size {
    batches: 300,
    rounds: 9,
    runs: 3,
};

/// `--quick`: checks that it runs (scripts/perf.sh --quick); do not quote.
const QUICK: Size = Size {
    batches: 50,
    rounds: 1,
    runs: 3,
};

/// One script, with the arguments of an admitted call.
struct Case {
    name: &'static str,
    code: &'static str,
    args: &'static [&'static str],
}

/// paceline's wire format for 1 permit at 1 per µs, slack 10, as
/// `src/remote/redis/script.rs` sends it: "take", span 1 000 ns, tau
/// 10 000 ns, the lead (0 for a cost of 1), the longest wait ("0" for
/// `try_take`, "" for `take`: every request admitted) and how long the
/// state lives (tau's own).
const CASES: &[Case] = &[
    Case {
        name: "paceline try_take",
        code: include_str!("../../src/remote/redis/step.lua"),
        args: &["take", "1000", "10000", "0", "0", "10000"],
    },
    Case {
        name: "paceline take",
        code: include_str!("../../src/remote/redis/step.lua"),
        args: &["take", "1000", "10000", "0", "", "10000"],
    },
    // A settle of a booking of 1 that cost 2, its permit gone at 0: the
    // excess charged, as a take admitted whatever its wait ("settle",
    // give, reach, T, went (2), then the take's span, tau, lead, max, keep).
    Case {
        name: "paceline settle, an excess",
        code: include_str!("../../src/remote/redis/step.lua"),
        args: &[
            "settle", "0", "1000", "1000", "0", "0", "1000", "10000", "0", "", "10000",
        ],
    },
    // Before: op, lead, span, tau, max ("0": try_take), exceeds-burst flag,
    // test clock ("").
    Case {
        name: "before try_take",
        code: include_str!("../lua/step_before.lua"),
        args: &["take", "0", "1000", "10000", "0", "0", ""],
    },
    // burst 10, 1 000 000 per 1 s, cost 1.
    Case {
        name: "redis_rate",
        code: include_str!("../lua/redis_rate.lua"),
        args: &["10", "1000000", "1", "1"],
    },
    // T = 1 µs, tau = 10 µs.
    Case {
        name: "minimal",
        code: include_str!("../lua/minimal_gcra.lua"),
        args: &["1", "10"],
    },
    // paceline's window step (`src/remote/redis/window.lua`), a try of 1
    // as `script.rs` sends it: "take", the window (quota, kind, width,
    // offset, first, last), the cost, the longest wait (0 s, 0 ns). A
    // quota of 10^9 per minute (or 10^10 per month) admits every call.
    Case {
        name: "paceline window try_take, a minute",
        code: include_str!("../../src/remote/redis/window.lua"),
        args: &[
            "take",
            "1000000000",
            "f",
            "60",
            "0",
            "0",
            "307445734",
            "1",
            "0",
            "0",
        ],
    },
    // A calendar month at UTC (first: 1970 * 12; last: July 2554): its
    // civil-date arithmetic on a month's first call.
    Case {
        name: "paceline window try_take, a month",
        code: include_str!("../../src/remote/redis/window.lua"),
        args: &[
            "take",
            "10000000000",
            "m",
            "0",
            "0",
            "23640",
            "7014",
            "1",
            "0",
            "0",
        ],
    },
    // The usual fixed window: INCRBY, and EXPIREAT on the window's first
    // count (`benches/lua/minimal_window.lua`); cost 1, quota 10^9.
    Case {
        name: "minimal fixed window",
        code: include_str!("../lua/minimal_window.lua"),
        args: &["1", "1000000000", "4102444800"],
    },
];

/// One measurement: server µs per call, calls/s, and calls per second of
/// the server's CPU time.
#[derive(Clone, Copy)]
struct Sample {
    cpu_us: f64,
    per_s: f64,
    per_cpu_s: f64,
}

fn pipeline(sha: &str, key: &str, args: &[&str]) -> Pipeline {
    let mut pipe = redis::pipe();
    for _ in 0..IN_FLIGHT {
        pipe.cmd("EVALSHA").arg(sha).arg(1).arg(key).arg(args);
    }
    pipe
}

fn usec_per_call(con: &mut Connection) -> f64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO");
    stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("usec_per_call=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.trim().parse().ok())
        .expect("usec_per_call of evalsha")
}

/// The server's CPU time so far, s (user + system, all its threads).
fn server_cpu(con: &mut Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(con).expect("INFO");
    info.lines()
        .filter(|l| l.starts_with("used_cpu_user:") || l.starts_with("used_cpu_sys:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum()
}

fn measure(con: &mut Connection, pipe: &Pipeline, key: &str, batches: usize) -> Sample {
    let _: () = redis::cmd("DEL").arg(key).query(con).expect("DEL");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(con)
        .expect("RESETSTAT");
    let cpu = server_cpu(con);
    let start = Instant::now();
    for _ in 0..batches {
        let _: () = pipe.query(con).expect("pipeline");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = server_cpu(con) - cpu;
    let calls = (batches * IN_FLIGHT) as f64;
    Sample {
        cpu_us: usec_per_call(con),
        per_s: calls / elapsed,
        per_cpu_s: calls / cpu,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn spread(v: &[f64]) -> String {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    format!(
        "{:.2} (min {:.2}, max {:.2})",
        v[v.len() / 2],
        v[0],
        v[v.len() - 1]
    )
}

fn main() {
    let size = match std::env::args().nth(1).as_deref() {
        None => FULL,
        Some("--quick") => QUICK,
        Some(other) => panic!("unknown argument {other:?} (only --quick)"),
    };
    let Size {
        batches,
        rounds,
        runs: run_count,
    } = size;
    let server = server::RedisServer::start();
    let client = redis::Client::open(server.url()).expect("client");
    let mut con = client.get_connection().expect("connection");
    let pipes: Vec<Pipeline> = CASES
        .iter()
        .enumerate()
        .map(|(i, case)| {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(case.code)
                .query(&mut con)
                .expect("SCRIPT LOAD");
            let key = format!("bench:{i}");
            // Every call admitted: a grant's reply, twice (absent key, then
            // the state the first one wrote).
            for _ in 0..2 {
                let reply: redis::Value = redis::cmd("EVALSHA")
                    .arg(&sha)
                    .arg(1)
                    .arg(&key)
                    .arg(case.args)
                    .query(&mut con)
                    .unwrap_or_else(|e| panic!("{}: {e}", case.name));
                assert!(admitted(&reply), "{}: not admitted: {reply:?}", case.name);
            }
            pipeline(&sha, &key, case.args)
        })
        .collect();

    // runs[run][round][case]
    let mut runs: Vec<Vec<Vec<Sample>>> = Vec::new();
    for _ in 0..run_count {
        let mut run = Vec::new();
        for round in 0..rounds {
            let mut samples = vec![None; CASES.len()];
            for k in 0..CASES.len() {
                let i = (k + round) % CASES.len();
                samples[i] = Some(measure(&mut con, &pipes[i], &format!("bench:{i}"), batches));
            }
            run.push(samples.into_iter().map(Option::unwrap).collect());
        }
        runs.push(run);
    }

    println!(
        "server CPU per admitted call (usec_per_call) and calls/s at {IN_FLIGHT} in flight, \
         {run_count} runs of {rounds} interleaved rounds:"
    );
    println!("| script | µs per call | calls/s | calls per server CPU s |");
    println!("|---|---:|---:|---:|");
    for (i, case) in CASES.iter().enumerate() {
        // Each run's median over its rounds.
        let column = |f: fn(&Sample) -> f64, scale: f64| {
            let per_run = runs
                .iter()
                .map(|run| median(run.iter().map(|round| f(&round[i]) / scale).collect()));
            spread(&per_run.collect::<Vec<_>>())
        };
        println!(
            "| {} | {} | {}k | {}k |",
            case.name,
            column(|s| s.cpu_us, 1.0),
            column(|s| s.per_s, 1000.0),
            column(|s| s.per_cpu_s, 1000.0),
        );
    }
    let index = |name: &str| CASES.iter().position(|c| c.name == name).unwrap();
    let (after, take, before) = (
        index("paceline try_take"),
        index("paceline take"),
        index("before try_take"),
    );
    let (rate, minimal) = (index("redis_rate"), index("minimal"));
    let excess = index("paceline settle, an excess");
    let (minute, month, fixed) = (
        index("paceline window try_take, a minute"),
        index("paceline window try_take, a month"),
        index("minimal fixed window"),
    );
    // A ratio within each round (the two measured close in time, under the
    // same load), each run's median of them.
    let ratio = |a: usize, b: usize, f: fn(&Sample) -> f64| -> Vec<f64> {
        runs.iter()
            .map(|run| {
                median(
                    run.iter()
                        .map(|round| f(&round[a]) / f(&round[b]))
                        .collect(),
                )
            })
            .collect()
    };
    let cpu = |s: &Sample| s.cpu_us;
    let per_s = |s: &Sample| s.per_s;
    let per_cpu_s = |s: &Sample| s.per_cpu_s;
    println!();
    println!("ratios, median of {run_count} runs (min, max):");
    for (label, v) in [
        (
            "paceline try_take / redis_rate, CPU",
            ratio(after, rate, cpu),
        ),
        ("paceline take / redis_rate, CPU", ratio(take, rate, cpu)),
        (
            "paceline settle, an excess / paceline take, CPU",
            ratio(excess, take, cpu),
        ),
        ("before / redis_rate, CPU", ratio(before, rate, cpu)),
        ("paceline try_take / before, CPU", ratio(after, before, cpu)),
        (
            "paceline try_take / minimal, CPU",
            ratio(after, minimal, cpu),
        ),
        (
            "paceline try_take / minimal, calls/s",
            ratio(after, minimal, per_s),
        ),
        (
            "paceline take / minimal, calls/s",
            ratio(take, minimal, per_s),
        ),
        ("before / minimal, calls/s", ratio(before, minimal, per_s)),
        (
            "paceline try_take / minimal, calls per server CPU s",
            ratio(after, minimal, per_cpu_s),
        ),
        (
            "paceline take / minimal, calls per server CPU s",
            ratio(take, minimal, per_cpu_s),
        ),
        (
            "before / minimal, calls per server CPU s",
            ratio(before, minimal, per_cpu_s),
        ),
        (
            "paceline window, a minute / minimal fixed window, CPU",
            ratio(minute, fixed, cpu),
        ),
        (
            "paceline window, a month / minimal fixed window, CPU",
            ratio(month, fixed, cpu),
        ),
        (
            "paceline window, a minute / paceline try_take, CPU",
            ratio(minute, after, cpu),
        ),
    ] {
        println!("  {label}: {}", spread(&v));
    }
    drop(con);
    drop(server); // kills redis-server by its pid and removes its directory
}

/// Whether a script's reply says the call was admitted: paceline's `1` or
/// `{1, ...}` (a settle's `{6, ...}`), before's `{"1", ...}`, redis_rate's `{cost, ...}` with a
/// cost of 1, the minimal script's `0`.
fn admitted(reply: &redis::Value) -> bool {
    use redis::Value;
    match reply {
        Value::Int(n) => *n == 1 || *n == 0,
        Value::Array(items) => match items.first() {
            Some(Value::Int(1 | 6)) => true,
            Some(Value::BulkString(b)) => b.as_slice() == b"1",
            _ => false,
        },
        _ => false,
    }
}
