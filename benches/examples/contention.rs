//! Contended throughput, measured in interleaved rounds: a cross-check of the
//! criterion bench's `contended2` / `contended8` groups for a noisy machine.
//!
//! ```text
//! cargo run --release -p paceline-benches --example contention    # ~10 s
//! cargo run --release -p paceline-benches --example contention -- --rounds 60
//! ```
//!
//! criterion times one bench after another, so on a machine shared with
//! other work a burst of load can land on one limiter and not the next. Here
//! every round runs each limiter once (2 or 8 threads on one limiter, ~20 ms,
//! in an order rotated each round), so all of them see the same load; a
//! ratio is taken within a round, and the table gives medians over rounds.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use paceline::{AtomicLimiter, MutexLimiter, Rate};

/// Rate and burst at which nothing waits (as in `benches/throughput.rs`).
const FAST: u64 = 1_000_000_000;

/// Calls per round and limiter, over all threads (~20 ms at ~20 ns a call).
const CALLS: u64 = 1_000_000;

/// The clock-read + CAS-loop floor.
struct Floor {
    clock: quanta::Clock,
    cell: CachePadded<AtomicU64>,
}

impl Floor {
    fn call(&self) {
        let now = self.clock.raw();
        let mut cur = self.cell.load(Ordering::Relaxed);
        while let Err(actual) = self.cell.compare_exchange_weak(
            cur,
            cur.max(now) + 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            cur = actual;
        }
    }
}

type Call<'a> = (&'static str, Box<dyn Fn() + Sync + 'a>);

/// Wall ns per call: `CALLS` calls of `op` split over `threads` threads
/// released together.
fn round(threads: u64, op: &(dyn Fn() + Sync)) -> f64 {
    let ready = AtomicU64::new(0);
    let go = AtomicBool::new(false);
    let start = std::thread::scope(|s| {
        for _ in 0..threads {
            let (ready, go) = (&ready, &go);
            s.spawn(move || {
                ready.fetch_add(1, Ordering::SeqCst);
                while !go.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                for _ in 0..CALLS / threads {
                    op();
                }
            });
        }
        while ready.load(Ordering::SeqCst) < threads {
            std::thread::yield_now();
        }
        let start = Instant::now();
        go.store(true, Ordering::Release);
        start
    });
    start.elapsed().as_nanos() as f64 / (CALLS / threads * threads) as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => 30,
        [flag, n] if flag == "--rounds" => match n.parse() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("--rounds needs a positive count, got {n:?}");
                std::process::exit(2);
            }
        },
        _ => {
            eprintln!("usage: contention [--rounds N]");
            std::process::exit(2);
        }
    };

    let floor = Floor {
        clock: quanta::Clock::new(),
        cell: CachePadded::new(AtomicU64::new(0)),
    };
    let atomic = AtomicLimiter::builder(Rate::per_second(FAST))
        .slack(FAST)
        .full_credit(true)
        .build()
        .expect("a valid limiter");
    let atomic_take = AtomicLimiter::builder(Rate::per_second(FAST))
        .slack(FAST)
        .full_credit(true)
        .build()
        .expect("a valid limiter");
    let mutex = MutexLimiter::builder(Rate::per_second(FAST))
        .slack(FAST)
        .full_credit(true)
        .build()
        .expect("a valid limiter");
    let gov = governor::RateLimiter::direct(
        governor::Quota::with_period(Duration::from_nanos(1))
            .expect("a non-zero period")
            .allow_burst(NonZeroU32::MAX),
    );
    let rl = ratelimit::Ratelimiter::builder(FAST)
        .max_tokens(FAST)
        .initial_available(FAST)
        .build()
        .expect("a valid ratelimit");
    let leaky = leaky_bucket::RateLimiter::builder()
        .interval(Duration::from_millis(1))
        .refill(1_000_000)
        .max(FAST as usize)
        .initial(FAST as usize)
        .build();

    let calls: Vec<Call> = vec![
        (
            "paceline `AtomicLimiter::try_take`",
            Box::new(|| {
                let _ = black_box(atomic.try_take());
            }),
        ),
        ("floor: clock read + CAS loop", Box::new(|| floor.call())),
        (
            "paceline `AtomicLimiter::take`",
            Box::new(|| {
                let _ = black_box(atomic_take.take());
            }),
        ),
        (
            "paceline `MutexLimiter::try_take`",
            Box::new(|| {
                let _ = black_box(mutex.try_take());
            }),
        ),
        (
            "governor `check()`",
            Box::new(|| {
                let _ = black_box(gov.check());
            }),
        ),
        (
            "ratelimit `try_wait()`",
            Box::new(|| {
                let _ = black_box(rl.try_wait());
            }),
        ),
        (
            "leaky-bucket `try_acquire(1)`",
            Box::new(|| {
                let _ = black_box(leaky.try_acquire(1));
            }),
        ),
    ];

    println!("{rounds} interleaved rounds of {CALLS} calls per limiter; wall ns per call.\n");
    println!("| threads | limiter | ns per call, median (p10–p90) | × paceline atomic `try_take`, median of per-round ratios | rounds it beat paceline atomic `try_take` |");
    println!("|---:|---|---:|---:|---:|");
    for threads in [1, 2, 8] {
        let mut ns = vec![Vec::with_capacity(rounds); calls.len()];
        for r in 0..rounds {
            for k in 0..calls.len() {
                let i = (k + r) % calls.len();
                ns[i].push(round(threads, &*calls[i].1));
            }
        }
        for (i, (name, _)) in calls.iter().enumerate() {
            let mut ratios: Vec<f64> = ns[i].iter().zip(&ns[0]).map(|(a, b)| a / b).collect();
            let wins = ratios.iter().filter(|&&q| q < 1.0).count();
            let ratio = median(&mut ratios);
            let mut v = ns[i].clone();
            v.sort_by(f64::total_cmp);
            let (p10, p90) = (v[v.len() / 10], v[(v.len() * 9) / 10]);
            let m = median(&mut v);
            if i == 0 {
                println!("| {threads} | {name} | {m:.1} ({p10:.1}–{p90:.1}) | 1 | – |");
            } else {
                println!("| {threads} | {name} | {m:.1} ({p10:.1}–{p90:.1}) | {ratio:.2} | {wins}/{rounds} |");
            }
        }
    }
}
