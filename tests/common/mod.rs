//! What the integration tests share: building either limiter behind one
//! interface, and driving worker threads on a `ManualClock` from slot to slot.

// Each test file uses its own part of this module.
#![allow(dead_code, unused_macros)]

pub mod windows;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Scope;
use std::time::Duration;

use paceline::store::Store;
use paceline::{
    clock::Clock, clock::ManualClock, limiter::Pacer, AtomicLimiter, BuildError, Error,
    MutexLimiter, Rate, Slack, Take, Unlimited, Wait,
};

/// The direct limiters' own calls (their inherent methods), as one object
/// safe trait, so a test can run the same case on every store.
pub trait Limiter: Send + Sync {
    fn take(&self) -> Duration;
    fn take_n(&self, cost: u64) -> Result<Duration, Error>;
    fn try_take(&self) -> Result<(), Error> {
        self.try_take_n(1)
    }
    fn try_take_n(&self, cost: u64) -> Result<(), Error>;
    fn take_timeout(&self, max_wait: Duration) -> Result<Duration, Error> {
        self.take_n_timeout(1, max_wait)
    }
    fn take_n_timeout(&self, cost: u64, max_wait: Duration) -> Result<Duration, Error>;
    fn can_take(&self, cost: u64) -> bool;
    fn set_rate(&self, rate: Rate) -> Result<(), BuildError>;
    fn set_slack(&self, slack: Slack) -> Result<(), BuildError>;
    fn set_limit(&self, rate: Rate, slack: Slack) -> Result<(), BuildError>;
    fn reset(&self);
    fn rate(&self) -> Option<Rate>;
    fn slack(&self) -> u64;
    fn available(&self) -> u64;
    fn next_free(&self) -> Duration;
    fn stats(&self) -> Option<paceline::stats::Stats>;
}

impl<S: Store, C: Clock> Limiter for Pacer<S, C> {
    fn take(&self) -> Duration {
        Pacer::take(self).at()
    }
    fn take_n(&self, cost: u64) -> Result<Duration, Error> {
        Pacer::take_n(self, cost).map(|t| t.at())
    }
    fn try_take(&self) -> Result<(), Error> {
        Pacer::try_take(self).map(drop)
    }
    fn try_take_n(&self, cost: u64) -> Result<(), Error> {
        Pacer::try_take_n(self, cost).map(drop)
    }
    fn take_n_timeout(&self, cost: u64, max_wait: Duration) -> Result<Duration, Error> {
        Pacer::take_n_timeout(self, cost, max_wait).map(|t| t.at())
    }
    fn can_take(&self, cost: u64) -> bool {
        Pacer::can_take(self, cost)
    }
    fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        Pacer::set_rate(self, rate)
    }
    fn set_slack(&self, slack: Slack) -> Result<(), BuildError> {
        Pacer::set_slack(self, slack)
    }
    fn set_limit(&self, rate: Rate, slack: Slack) -> Result<(), BuildError> {
        Pacer::set_limit(self, rate, slack)
    }
    fn reset(&self) {
        Pacer::reset(self)
    }
    fn rate(&self) -> Option<Rate> {
        Some(Pacer::rate(self))
    }
    fn slack(&self) -> u64 {
        Pacer::slack(self)
    }
    fn available(&self) -> u64 {
        Pacer::available(self)
    }
    fn next_free(&self) -> Duration {
        Pacer::next_free(self)
    }
    fn stats(&self) -> Option<paceline::stats::Stats> {
        Pacer::stats(self)
    }
}

impl Limiter for Unlimited {
    fn take(&self) -> Duration {
        Take::take(self, &()).unwrap().at()
    }
    fn take_n(&self, cost: u64) -> Result<Duration, Error> {
        Take::take_n(self, &(), cost).map(|t| t.at())
    }
    fn try_take_n(&self, cost: u64) -> Result<(), Error> {
        Take::try_take_n(self, &(), cost).map(drop)
    }
    fn take_n_timeout(&self, _cost: u64, _max_wait: Duration) -> Result<Duration, Error> {
        Ok(Duration::ZERO)
    }
    fn can_take(&self, cost: u64) -> bool {
        Take::can_take(self, &(), cost).unwrap()
    }
    fn set_rate(&self, _rate: Rate) -> Result<(), BuildError> {
        unreachable!("an unlimited limiter has no rate to set")
    }
    fn set_slack(&self, _slack: Slack) -> Result<(), BuildError> {
        unreachable!("an unlimited limiter has no rate to set")
    }
    fn set_limit(&self, _rate: Rate, _slack: Slack) -> Result<(), BuildError> {
        unreachable!("an unlimited limiter has no rate to set")
    }
    fn reset(&self) {}
    fn rate(&self) -> Option<Rate> {
        None
    }
    fn slack(&self) -> u64 {
        u64::MAX
    }
    fn available(&self) -> u64 {
        u64::MAX
    }
    fn next_free(&self) -> Duration {
        Duration::ZERO
    }
    fn stats(&self) -> Option<paceline::stats::Stats> {
        None
    }
}

/// The two limiters that must make the same decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Atomic,
    Mutex,
}

pub const KINDS: [Kind; 2] = [Kind::Atomic, Kind::Mutex];

/// How long a test waits, in real time, for its workers to park before it
/// fails instead of hanging.
pub const PARK_TIMEOUT: Duration = Duration::from_secs(20);

/// A limiter of `kind` at `rate` with `slack`, on `clock`.
pub fn build<C: Clock + 'static>(kind: Kind, rate: Rate, slack: u64, clock: C) -> Arc<dyn Limiter> {
    build_with(kind, rate, slack, false, Wait::Sleep, clock)
}

/// A limiter of `kind` with every builder option given.
pub fn build_with<C: Clock + 'static>(
    kind: Kind,
    rate: Rate,
    slack: u64,
    full_credit: bool,
    wait: Wait,
    clock: C,
) -> Arc<dyn Limiter> {
    match kind {
        Kind::Atomic => Arc::new(
            AtomicLimiter::builder(rate)
                .slack(slack)
                .full_credit(full_credit)
                .wait(wait)
                .clock(clock)
                .build()
                .expect("valid options"),
        ),
        Kind::Mutex => Arc::new(
            MutexLimiter::builder(rate)
                .slack(slack)
                .full_credit(full_credit)
                .wait(wait)
                .clock(clock)
                .build()
                .expect("valid options"),
        ),
    }
}

/// The times (since the clock's origin) at which permits were handed out.
#[derive(Default)]
pub struct Log(Mutex<Vec<Duration>>);

impl Log {
    pub fn push(&self, t: Duration) {
        self.0.lock().unwrap().push(t);
    }

    /// How many permits went strictly before `t`: what an observer sees just
    /// before the clock reaches `t`.
    pub fn count_before(&self, t: Duration) -> usize {
        self.0.lock().unwrap().iter().filter(|&&x| x < t).count()
    }

    /// Every time logged, sorted.
    pub fn sorted(&self) -> Vec<Duration> {
        let mut v = self.0.lock().unwrap().clone();
        v.sort();
        v
    }
}

/// Worker threads that take in a loop on a `ManualClock`, and the test
/// thread that moves the clock only while they are all parked.
pub struct Sim<'a> {
    pub clock: &'a ManualClock,
    pub log: &'a Log,
    stop: &'a AtomicBool,
    workers: usize,
}

impl<'a> Sim<'a> {
    pub fn new(clock: &'a ManualClock, log: &'a Log, stop: &'a AtomicBool) -> Self {
        Sim {
            clock,
            log,
            stop,
            workers: 0,
        }
    }

    /// Starts a thread that calls `unit` (one unit of work: one or more takes,
    /// returning the time it went) in a loop, logging each time, until
    /// [`finish`](Self::finish).
    pub fn spawn<'scope, F>(&mut self, s: &'scope Scope<'scope, '_>, unit: F)
    where
        F: Fn() -> Duration + Send + 'scope,
        'a: 'scope,
    {
        let (stop, log) = (self.stop, self.log);
        self.workers += 1;
        s.spawn(move || loop {
            let t = unit();
            if stop.load(Ordering::SeqCst) {
                break;
            }
            log.push(t);
        });
    }

    /// Waits until every worker is parked on a slot ahead of the clock.
    pub fn quiesce(&self) {
        assert!(
            self.clock.wait_for_waiters(self.workers, PARK_TIMEOUT),
            "{} workers did not all park within {PARK_TIMEOUT:?}",
            self.workers
        );
    }

    /// Moves the clock to `t` one waiter's deadline at a time, never past a
    /// slot: each permit goes at the clock time of its slot, and every
    /// worker has logged and parked again before the clock moves on.
    pub fn run_until(&self, t: Duration) {
        loop {
            self.quiesce();
            match self.clock.next_deadline() {
                Some(next) if next <= t => self.clock.set(next),
                _ => {
                    if self.clock.elapsed() < t {
                        self.clock.set(t);
                        self.quiesce();
                    }
                    return;
                }
            }
        }
    }

    /// Stops the workers: they drop whatever they take from now on and exit
    /// once the clock releases them.
    pub fn finish(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.clock
            .advance(Duration::from_secs(100 * 365 * 24 * 3600));
    }
}

/// Runs `$body` once with an `AtomicLimiter` and once with a `MutexLimiter`,
/// each built at `$rate` with the builder calls `$options`, on the concrete
/// types (not through `dyn Limiter`). For `#[macro_use] mod common;`.
macro_rules! for_both_kinds {
    ($rate:expr, [$($options:tt)*], |$limiter:ident| $body:block) => {{
        {
            let $limiter = paceline::AtomicLimiter::builder($rate)$($options)*.build().unwrap();
            $body
        }
        {
            let $limiter = paceline::MutexLimiter::builder($rate)$($options)*.build().unwrap();
            $body
        }
    }};
}

/// `n` bytes that differ from one position to the next.
pub fn data(n: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Checks a real-time copy, from `marks`: after each piece, the time since
/// the limiter's first permit and the bytes through so far.
///
/// - Never early: at every mark, `bytes` intervals have passed.
/// - The long-run rate within 1 % of the limiter's: measured at the best of
///   the last four marks, so that one late wake-up at the very end (a
///   loaded machine can hold a thread off its core for tens of ms) is not
///   taken for a rate lost. A rate lost stays lost, at every later mark.
pub fn assert_paced(what: &str, interval: Duration, marks: &[(Duration, usize)]) {
    for &(at, bytes) in marks {
        let due = interval * bytes as u32;
        assert!(
            at >= due,
            "{what}: early: {bytes} bytes at {at:?}, due {due:?}"
        );
    }
    let ratio = |&(at, bytes): &(Duration, usize)| {
        at.as_secs_f64() / (interval * bytes as u32).as_secs_f64()
    };
    let last = marks.last().unwrap();
    let best = marks[marks.len() - 4..]
        .iter()
        .map(ratio)
        .fold(f64::INFINITY, f64::min);
    println!(
        "{what}: {} bytes in {:?}: rate error {:+.4} % (long-run {:+.4} %) against the \
         limiter's {:.0}/s",
        last.1,
        last.0,
        (1.0 / ratio(last) - 1.0) * 100.0,
        (1.0 / best - 1.0) * 100.0,
        1.0 / interval.as_secs_f64(),
    );
    assert!(
        best <= 1.01,
        "{what}: the rate is {:.2} % short",
        (1.0 - 1.0 / best) * 100.0
    );
}

/// `default` cases, or `PROPTEST_CASES` for a longer hunt
/// (`ProptestConfig::with_cases` alone would ignore it).
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
