//! Throughput of a non-blocking take: paceline beside its floors and its
//! peers, in one criterion run.
//!
//! ```text
//! cargo bench -p paceline-benches --bench throughput                 # everything, a few minutes
//! cargo bench -p paceline-benches --bench throughput -- 'contended'  # a filter
//! ```
//!
//! One thread's calls are timed in that thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), not wall time: on a machine shared with other
//! work, time spent preempted would otherwise count as the call's. The
//! multi-threaded groups are wall time per call (that is their point).
//!
//! Groups (each bench id reads `group/what`):
//!
//! - `floor`: what no non-blocking take can beat: one clock read (quanta raw
//!   and scaled, `std::time::Instant`), one uncontended load + CAS, and
//!   "clock read + CAS loop", the floor of an admitted `try_take`.
//! - `admit`: one thread, a limiter whose rate (10^9/s) and slack are so high
//!   that every call is admitted and nothing waits: paceline's `try_take` and
//!   `take` for `AtomicLimiter`, `MutexLimiter` and `Unlimited`, and
//!   `try_take` for a `WarmUpLimiter` (warm-up 1 s: most calls are on its
//!   cold ramp, the dearer arithmetic, under its lock); governor's
//!   direct `check()`, `ratelimit`'s `try_wait()`, `leaky-bucket`'s
//!   `try_acquire(1)`.
//!   `paceline_atomic_try_take_stats` is `try_take` counting its decisions
//!   (`.stats(true)`); every other paceline limiter here does not count,
//!   which costs it one test of a null pointer.
//! - `contended2` / `contended8`: the same calls from 2 and 8 threads on one
//!   limiter (8 threads on this 2-vCPU machine is oversubscribed: a lock
//!   holder can be preempted). Reported as wall time per call over all
//!   threads, i.e. the inverse of the combined throughput.
//! - `deny`: a limiter already exhausted (1 per hour, no slack), so every
//!   call is refused and reports when to retry.
//!
//! tower's `RateLimit` is left out: it is a `Service` wrapper whose
//! `poll_ready` needs a task context and a timer, not a call a thread makes
//! before its unit of work.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use crossbeam_utils::CachePadded;
#[path = "cpu_time.rs"]
mod cpu_time;
use cpu_time::CpuTime;
#[path = "floor.rs"]
mod floor;
use floor::clock_cas;
use paceline::{AtomicLimiter, MutexLimiter, Rate, Take, Unlimited, WarmUpLimiter};

/// Rate at which nothing waits: one permit a nanosecond, far above what any
/// of these calls can reach.
const FAST: u64 = 1_000_000_000;

/// Burst of the never-waiting limiters: a second's worth at [`FAST`].
const FAST_BURST: u64 = 1_000_000_000;

/// [`atomic_fast`] counting its decisions (`.stats(true)`).
fn atomic_counting() -> AtomicLimiter {
    AtomicLimiter::builder(Rate::per_second(FAST))
        .slack(FAST_BURST)
        .full_credit(true)
        .stats(true)
        .build()
        .expect("valid limiter")
}

fn atomic_fast() -> AtomicLimiter {
    AtomicLimiter::builder(Rate::per_second(FAST))
        .slack(FAST_BURST)
        .full_credit(true)
        .build()
        .expect("valid limiter")
}

fn mutex_fast() -> MutexLimiter {
    MutexLimiter::builder(Rate::per_second(FAST))
        .slack(FAST_BURST)
        .full_credit(true)
        .build()
        .expect("valid limiter")
}

/// A warming-up limiter (two words under a lock), warm-up 1 s.
fn warm_fast() -> WarmUpLimiter {
    AtomicLimiter::builder(Rate::per_second(FAST))
        .slack(FAST_BURST)
        .full_credit(true)
        .warm_up(Duration::from_secs(1))
        .build()
        .expect("valid limiter")
}

type Governor = governor::DefaultDirectRateLimiter;

fn governor_fast() -> Governor {
    let quota = governor::Quota::with_period(Duration::from_nanos(1))
        .expect("non-zero period")
        .allow_burst(NonZeroU32::MAX);
    governor::RateLimiter::direct(quota)
}

fn ratelimit_fast() -> ratelimit::Ratelimiter {
    ratelimit::Ratelimiter::builder(FAST)
        .max_tokens(FAST_BURST)
        .initial_available(FAST_BURST)
        .build()
        .expect("valid ratelimit")
}

fn leaky_fast() -> leaky_bucket::RateLimiter {
    // leaky-bucket refills in whole milliseconds: 10^6 per ms is 10^9/s.
    leaky_bucket::RateLimiter::builder()
        .interval(Duration::from_millis(1))
        .refill(1_000_000)
        .max(FAST_BURST as usize)
        .initial(FAST_BURST as usize)
        .build()
}

fn floors(c: &mut Criterion<CpuTime>) {
    let mut g = c.benchmark_group("floor");
    let clock = quanta::Clock::new();
    g.bench_function("quanta_raw", |b| b.iter(|| black_box(clock.raw())));
    g.bench_function("quanta_now", |b| b.iter(|| black_box(clock.now())));
    g.bench_function("std_instant_now", |b| b.iter(|| black_box(Instant::now())));
    let cell = CachePadded::new(AtomicU64::new(0));
    g.bench_function("load_cas", |b| {
        b.iter(|| {
            let cur = cell.load(Ordering::Relaxed);
            black_box(cell.compare_exchange(cur, cur + 1, Ordering::Relaxed, Ordering::Relaxed))
        })
    });
    g.bench_function("clock_cas", |b| {
        b.iter(|| black_box(clock_cas(&clock, &cell)))
    });
    g.finish();
}

fn admit(c: &mut Criterion<CpuTime>) {
    let mut g = c.benchmark_group("admit");

    let atomic = atomic_fast();
    g.bench_function("paceline_atomic_try_take", |b| {
        b.iter(|| black_box(atomic.try_take()))
    });
    let atomic = atomic_fast();
    g.bench_function("paceline_atomic_take", |b| {
        b.iter(|| black_box(atomic.take()))
    });
    let counting = atomic_counting();
    g.bench_function("paceline_atomic_try_take_stats", |b| {
        b.iter(|| black_box(counting.try_take()))
    });
    let mutex = mutex_fast();
    g.bench_function("paceline_mutex_try_take", |b| {
        b.iter(|| black_box(mutex.try_take()))
    });
    let mutex = mutex_fast();
    g.bench_function("paceline_mutex_take", |b| {
        b.iter(|| black_box(mutex.take()))
    });
    let warm = warm_fast();
    g.bench_function("paceline_warm_up_try_take", |b| {
        b.iter(|| black_box(warm.try_take()))
    });
    g.bench_function("paceline_unlimited_try_take", |b| {
        b.iter(|| black_box(Take::try_take(black_box(&Unlimited), &())))
    });
    g.bench_function("paceline_unlimited_take", |b| {
        b.iter(|| black_box(Take::take(black_box(&Unlimited), &())))
    });

    let gov = governor_fast();
    g.bench_function("governor_check", |b| b.iter(|| black_box(gov.check())));
    let rl = ratelimit_fast();
    g.bench_function("ratelimit_try_wait", |b| {
        b.iter(|| black_box(rl.try_wait()))
    });
    let leaky = leaky_fast();
    g.bench_function("leaky_bucket_try_acquire", |b| {
        b.iter(|| black_box(leaky.try_acquire(1)))
    });
    g.finish();
}

/// Runs `op` `iters` times in all, split over `threads` threads started
/// together, and returns the wall time from the start signal to the last
/// thread's end: criterion divides it by `iters`, giving wall time per call.
///
/// The threads spin at the start gate rather than block on a `Barrier`, so
/// that those the OS is running begin at once instead of one by one as
/// futex wake-ups arrive.
fn run_threads<F>(threads: u64, iters: u64, op: &F) -> Duration
where
    F: Fn() + Sync,
{
    let ready = AtomicU64::new(0);
    let go = AtomicBool::new(false);
    let start = std::thread::scope(|s| {
        for i in 0..threads {
            let share = iters / threads + u64::from(i < iters % threads);
            let (ready, go) = (&ready, &go);
            s.spawn(move || {
                ready.fetch_add(1, Ordering::SeqCst);
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                    std::thread::yield_now();
                }
                for _ in 0..share {
                    op();
                }
            });
        }
        while ready.load(Ordering::SeqCst) < threads {
            std::thread::yield_now();
        }
        let start = Instant::now();
        go.store(true, Ordering::Release);
        // Leaving the scope joins every thread.
        start
    });
    start.elapsed()
}

fn contended_group(c: &mut Criterion, threads: u64) {
    let mut g = c.benchmark_group(format!("contended{threads}"));
    let mut bench = |name: &str, op: &(dyn Fn() + Sync)| {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| run_threads(threads, iters, &op))
        });
    };

    let clock = quanta::Clock::new();
    let cell = CachePadded::new(AtomicU64::new(0));
    bench("floor_clock_cas", &|| {
        black_box(clock_cas(&clock, &cell));
    });

    let atomic = atomic_fast();
    bench("paceline_atomic_try_take", &|| {
        let _ = black_box(atomic.try_take());
    });
    let atomic = atomic_fast();
    bench("paceline_atomic_take", &|| {
        black_box(atomic.take());
    });
    let counting = atomic_counting();
    bench("paceline_atomic_try_take_stats", &|| {
        let _ = black_box(counting.try_take());
    });
    let mutex = mutex_fast();
    bench("paceline_mutex_try_take", &|| {
        let _ = black_box(mutex.try_take());
    });
    let warm = warm_fast();
    bench("paceline_warm_up_try_take", &|| {
        let _ = black_box(warm.try_take());
    });
    let gov = governor_fast();
    bench("governor_check", &|| {
        let _ = black_box(gov.check());
    });
    let rl = ratelimit_fast();
    bench("ratelimit_try_wait", &|| {
        let _ = black_box(rl.try_wait());
    });
    let leaky = leaky_fast();
    bench("leaky_bucket_try_acquire", &|| {
        black_box(leaky.try_acquire(1));
    });
    g.finish();
}

fn contended(c: &mut Criterion) {
    contended_group(c, 2);
    contended_group(c, 8);
}

fn deny(c: &mut Criterion<CpuTime>) {
    let mut g = c.benchmark_group("deny");
    let hourly = Rate::per_hour(1);

    let atomic = AtomicLimiter::builder(hourly)
        .slack(0)
        .build()
        .expect("valid");
    atomic.take();
    g.bench_function("paceline_atomic_try_take", |b| {
        b.iter(|| black_box(atomic.try_take()))
    });
    let mutex = MutexLimiter::builder(hourly)
        .slack(0)
        .build()
        .expect("valid");
    mutex.take();
    g.bench_function("paceline_mutex_try_take", |b| {
        b.iter(|| black_box(mutex.try_take()))
    });

    let gov = governor::RateLimiter::direct(governor::Quota::per_hour(NonZeroU32::MIN));
    assert!(gov.check().is_ok());
    g.bench_function("governor_check", |b| b.iter(|| black_box(gov.check())));

    let rl = ratelimit::Ratelimiter::builder(1)
        .period(Duration::from_secs(3600))
        .max_tokens(1)
        .initial_available(0)
        .build()
        .expect("valid ratelimit");
    g.bench_function("ratelimit_try_wait", |b| {
        b.iter(|| black_box(rl.try_wait()))
    });

    let leaky = leaky_bucket::RateLimiter::builder()
        .interval(Duration::from_secs(3600))
        .refill(1)
        .max(1)
        .initial(0)
        .build();
    g.bench_function("leaky_bucket_try_acquire", |b| {
        b.iter(|| black_box(leaky.try_acquire(1)))
    });
    g.finish();
}

criterion_group! {
    name = one_thread;
    // Short runs: the whole file takes a few minutes.
    config = Criterion::default()
        .with_measurement(CpuTime)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1200))
        .sample_size(50);
    targets = floors, admit, deny
}
criterion_group! {
    name = threads;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1200))
        .sample_size(50);
    targets = contended
}
criterion_main!(one_thread, threads);
