//! Warm-up: paceline's `WarmUpLimiter` against a reference model of Guava's
//! `SmoothWarmingUp` (its arithmetic transliterated below, in `f64` µs as
//! Guava computes it), and Guava's own test vectors, on a `ManualClock`.

mod common;

use std::time::Duration;

use paceline::model::schedule::{Admit, Params, FRESH, ORIGIN};
use paceline::model::warm_up::{self, WarmState};
use paceline::{
    clock::Clock, clock::ManualClock, AtomicLimiter, BuildError, Error, MutexLimiter, Rate,
    WarmUpLimiter,
};
use proptest::prelude::*;

/// Guava's `SmoothRateLimiter.SmoothWarmingUp` with `coldFactor = 3`, as
/// `RateLimiter.create(permitsPerSecond, warmupPeriod)` makes it: times in
/// µs, permits and intervals `double`. Guava truncates each cost to whole
/// µs (its `(long)` casts); `truncate: false` keeps the fractions, so that
/// the model can be held to paceline's ns within rounding, not within
/// Guava's accumulated µs truncations (which a colder state amplifies up to
/// threefold).
struct Guava {
    stable: f64,
    warmup: f64,
    max: f64,
    threshold: f64,
    slope: f64,
    stored: f64,
    next_free: f64,
    truncate: bool,
}

impl Guava {
    fn new(stable_micros: f64, warmup_micros: i64, truncate: bool) -> Guava {
        let warmup = warmup_micros as f64;
        let cold = stable_micros * 3.0;
        let threshold = 0.5 * warmup / stable_micros;
        let max = threshold + 2.0 * warmup / (stable_micros + cold);
        Guava {
            stable: stable_micros,
            warmup,
            max,
            threshold,
            slope: (cold - stable_micros) / (max - threshold),
            // doSetRate with oldMaxPermits == 0: starts cold.
            stored: max,
            next_free: 0.0,
            truncate,
        }
    }

    /// Guava's `(long)` cast of a non-negative cost, or the cost itself.
    fn cast(&self, micros: f64) -> f64 {
        if self.truncate {
            micros.trunc()
        } else {
            micros
        }
    }

    fn cool_down(&self) -> f64 {
        self.warmup / self.max
    }

    fn resync(&mut self, now: f64) {
        if now > self.next_free {
            let new_permits = (now - self.next_free) / self.cool_down();
            self.stored = self.max.min(self.stored + new_permits);
            self.next_free = now;
        }
    }

    fn permits_to_time(&self, permits: f64) -> f64 {
        self.stable + permits * self.slope
    }

    fn stored_permits_to_wait_time(&self, stored: f64, mut take: f64) -> f64 {
        let above = stored - self.threshold;
        let mut micros = 0.0;
        if above > 0.0 {
            let above_to_take = above.min(take);
            let length = self.permits_to_time(above) + self.permits_to_time(above - above_to_take);
            micros = self.cast(above_to_take * length / 2.0);
            take -= above_to_take;
        }
        micros + self.cast(self.stable * take)
    }

    /// `reserveEarliestAvailable`: when this request may go, µs.
    fn reserve(&mut self, k: f64, now: f64) -> f64 {
        self.resync(now);
        let ret = self.next_free;
        let spend = k.min(self.stored);
        let fresh = k - spend;
        let wait =
            self.stored_permits_to_wait_time(self.stored, spend) + self.cast(fresh * self.stable);
        self.next_free += wait;
        self.stored -= spend;
        ret
    }
}

/// The pure step with slack 0, driven like `reserve`: `(slot - ORIGIN) / 1000`
/// µs, and the new state.
fn ours(s: WarmState, now_micros: u64, cost: u64, p: Params, w: u64) -> (f64, WarmState) {
    let now = ORIGIN + now_micros * 1000;
    let (grant, next) = warm_up::step(s, now, cost, p, w, Admit::Always).unwrap();
    ((grant.slot - ORIGIN) as f64 / 1000.0, next)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(256)))]

    /// Unit requests at arbitrary arrival times get Guava's instants: the
    /// same slot for every request, within paceline's rounding to whole ns
    /// (1 ns per request) and `f64`'s.
    #[test]
    fn unit_requests_get_guavas_instants(
        stable_micros in 10u64..100_000,
        warmup_intervals in 1u64..40,
        gaps in prop::collection::vec(0u64..3, 1..120),
        gap_scale in prop::sample::select(vec![1u64, 7, 100, 1000]),
    ) {
        let warmup_micros = stable_micros * warmup_intervals;
        let mut guava = Guava::new(stable_micros as f64, warmup_micros as i64, false);
        let p = Params::new(stable_micros * 1000, 0).unwrap();
        let w = warmup_micros * 1000;
        let mut s = WarmState::cold(FRESH, w);
        let mut now = 0;
        for (i, gap) in gaps.iter().enumerate() {
            // Arrivals from back to back up to a few intervals apart.
            now += gap * stable_micros * gap_scale / 10;
            let want = guava.reserve(1.0, now as f64);
            let (got, next) = ours(s, now, 1, p, w);
            s = next;
            // 1 ns a request (rounding down), tripled where it is cold.
            let rounding = 0.003 * (i + 1) as f64 + 1e-9 * want;
            prop_assert!(
                (got - want).abs() <= rounding,
                "request {} at {} µs: ours {} µs, Guava's {} µs", i, now, got, want
            );
        }
    }

    /// A request of `n` pays first: its slot is Guava's instant for the
    /// last of `n` unit requests made at once, and it leaves the limiter as
    /// those `n` do ("acquire(3) costs what three acquire(1) do").
    #[test]
    fn a_request_of_n_goes_when_guavas_nth_unit_request_would(
        stable_micros in 10u64..100_000,
        warmup_intervals in 1u64..40,
        requests in prop::collection::vec((1u64..6, 0u64..4), 1..40),
    ) {
        let warmup_micros = stable_micros * warmup_intervals;
        let mut guava = Guava::new(stable_micros as f64, warmup_micros as i64, false);
        let p = Params::new(stable_micros * 1000, 0).unwrap();
        let w = warmup_micros * 1000;
        let (mut s, mut units) = (WarmState::cold(FRESH, w), WarmState::cold(FRESH, w));
        let (mut now, mut count) = (0, 0);
        for (n, gap) in requests {
            now += gap * stable_micros;
            let mut want = 0.0;
            for _ in 0..n {
                want = guava.reserve(1.0, now as f64);
                units = ours(units, now, 1, p, w).1;
            }
            count += n;
            let (got, next) = ours(s, now, n, p, w);
            s = next;
            prop_assert_eq!(s, units, "n = {} at {} µs", n, now);
            let rounding = 0.003 * count as f64 + 1e-9 * want;
            prop_assert!((got - want).abs() <= rounding, "n = {}: ours {}, Guava's {}", n, got, want);
        }
    }

    /// `available` is the largest cost `step` admits now, and a
    /// `WarmUpLimiter`'s `can_take` answers as its `try_take_n` then does.
    #[test]
    fn available_and_can_take_agree_with_the_step(
        slack in 0u64..40,
        warmup_intervals in 0u64..60,
        ops in prop::collection::vec((0u64..4000, 1u64..12), 1..30),
    ) {
        let p = Params::new(100, slack).unwrap();
        let w = 100 * warmup_intervals;
        let mut s = WarmState::cold(FRESH, w);
        let mut now = ORIGIN;
        let clock = ManualClock::new();
        let limiter = AtomicLimiter::builder(Rate::every(Duration::from_nanos(100)).unwrap())
            .slack(slack)
            .warm_up(Duration::from_nanos(w))
            .clock(clock.clone())
            .build()
            .unwrap();
        for (gap, cost) in ops {
            now += gap;
            clock.advance(Duration::from_nanos(gap));
            let admits = |n| warm_up::step(s, now, n, p, w, Admit::Within(0)).is_ok();
            let most = (1..=slack + 1).take_while(|&n| admits(n)).last().unwrap_or(0);
            prop_assert_eq!(warm_up::available(s, now, p, w), most);
            prop_assert_eq!(limiter.available(), most);
            let can = limiter.can_take(cost);
            prop_assert_eq!(can, limiter.try_take_n(cost).is_ok());
            if let Ok((_, next)) = warm_up::step(s, now, cost, p, w, Admit::Within(0)) {
                s = next;
            }
        }
    }

    /// With no warm-up the step is `schedule::step`, decision for decision.
    #[test]
    fn no_warm_up_decides_as_the_plain_step(
        interval in 1u64..1000,
        slack in 0u64..5,
        ops in prop::collection::vec((0u64..3000, 0u64..8, 0u64..3), 1..60),
    ) {
        let p = Params::new(interval, slack).unwrap();
        let (mut tat, mut s) = (FRESH, WarmState::cold(FRESH, 0));
        let mut now = ORIGIN;
        for (gap, cost, admit) in ops {
            now += gap;
            let admit = match admit { 0 => Admit::Always, 1 => Admit::Within(0), _ => Admit::Within(interval) };
            let plain = paceline::model::schedule::step(tat, now, cost, p, admit);
            let warm = warm_up::step(s, now, cost, p, 0, admit);
            prop_assert_eq!(plain, warm.map(|(g, _)| g));
            if let (Ok(g), Ok((_, next))) = (plain, warm) {
                tat = g.next;
                s = next;
            }
            prop_assert_eq!(s.tat, tat);
        }
    }
}

/// A warming-up limiter at 2/s over 4 s, slack 0, on a clock that jumps to
/// each slot.
fn guava_2_per_s(clock: &ManualClock) -> WarmUpLimiter<ManualClock> {
    AtomicLimiter::builder(Rate::per_second(2))
        .slack(0)
        .warm_up(Duration::from_secs(4))
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// The sleeps of `n` back-to-back `take()`s, in ms.
fn sleeps(limiter: &WarmUpLimiter<ManualClock>, clock: &ManualClock, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            let before = clock.now();
            limiter.take();
            (clock.now() - before) / 1_000_000
        })
        .collect()
}

/// The model with Guava's truncation reproduces Guava's own vectors (so the
/// transliteration is Guava's), and so does paceline.
#[test]
fn the_model_is_guavas() {
    let mut guava = Guava::new(500_000.0, 4_000_000, true);
    let mut now = 0.0;
    let mut sleeps = vec![];
    for _ in 0..8 {
        let ret = guava.reserve(1.0, now);
        sleeps.push(ret - now);
        now = now.max(ret);
    }
    assert_eq!(
        sleeps,
        [
            0.0,
            1_375_000.0,
            1_125_000.0,
            875_000.0,
            625_000.0,
            500_000.0,
            500_000.0,
            500_000.0
        ]
    );
}

/// Guava's `testWarmUp`, verbatim in its sleeps: cold, warm, idle 4 s (cold
/// again), idle 2 s (stored permits only up to the threshold: no ramp).
#[test]
fn guavas_test_warm_up() {
    let clock = ManualClock::with_auto_advance();
    let limiter = guava_2_per_s(&clock);
    let ramp = [0, 1375, 1125, 875, 625, 500, 500, 500];
    assert_eq!(sleeps(&limiter, &clock, 8), ramp);
    clock.advance(Duration::from_millis(500)); // repay the last permit's debt
    clock.advance(Duration::from_secs(4));
    assert_eq!(sleeps(&limiter, &clock, 8), ramp);
    clock.advance(Duration::from_millis(500));
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        sleeps(&limiter, &clock, 8),
        [0, 500, 500, 500, 500, 500, 500, 500]
    );
}

/// Guava's `testWarmUpAndUpdate`: a rate change keeps the coldness (in
/// time), so a cold limiter at the new rate ramps over the same warm-up.
/// One event differs, by design: the permit right after the change waits
/// one *new* interval after the last slot plus what the old rate's warm
/// premium left (paceline's `set_rate` rule), where Guava waits out the old
/// cost (0.875 s).
#[test]
fn guavas_test_warm_up_and_update() {
    let clock = ManualClock::with_auto_advance();
    let limiter = guava_2_per_s(&clock);
    assert_eq!(
        sleeps(&limiter, &clock, 8),
        [0, 1375, 1125, 875, 625, 500, 500, 500]
    );
    clock.advance(Duration::from_millis(4500)); // cold again
    assert_eq!(sleeps(&limiter, &clock, 3), [0, 1375, 1125]);
    limiter.set_rate(Rate::per_second(4)).unwrap();
    assert_eq!(sleeps(&limiter, &clock, 1), [625]);
    clock.advance(Duration::from_millis(4250)); // cold again
    let micros: Vec<u128> = (0..11)
        .map(|_| {
            let before = clock.now();
            limiter.take();
            u128::from(clock.now() - before) / 1000
        })
        .collect();
    // Guava: R0.00, R0.72, R0.66, R0.59, R0.53, R0.47, R0.41, R0.34, R0.28,
    // R0.25, R0.25 (to two decimals; exact here).
    assert_eq!(
        micros,
        [
            0, 718_750, 656_250, 593_750, 531_250, 468_750, 406_250, 343_750, 281_250, 250_000,
            250_000
        ]
    );
}

/// Both builders make the same warming-up limiter; `warm_up` keeps every
/// other option; a warm-up of 0 is the plain limiter's pacing.
#[test]
fn both_builders_warm_up_alike() {
    let a = AtomicLimiter::builder(Rate::per_second(2))
        .slack(0)
        .warm_up(Duration::from_secs(4))
        .clock(ManualClock::with_auto_advance())
        .build()
        .unwrap();
    let m = MutexLimiter::builder(Rate::per_second(2))
        .slack(0)
        .clock(ManualClock::with_auto_advance())
        .warm_up(Duration::from_secs(4))
        .build()
        .unwrap();
    for _ in 0..12 {
        assert_eq!(a.take(), m.take());
    }
    let none = AtomicLimiter::builder(Rate::per_second(2))
        .slack(0)
        .warm_up(Duration::ZERO)
        .clock(ManualClock::with_auto_advance())
        .build()
        .unwrap();
    let slots: Vec<u128> = (0..4).map(|_| none.take().at().as_millis()).collect();
    assert_eq!(slots, [0, 500, 1000, 1500]);
    assert_eq!(format!("{none:?}").split(' ').next(), Some("WarmUpLimiter"));
}

/// The slack absorbs lateness while warm, and a cold limiter's burst is
/// what the slack pays for at cold intervals; a request no wait could
/// admit is refused as exceeding that burst, not with a wait that would
/// never be enough.
#[test]
fn the_slack_and_a_cold_limiters_burst() {
    let clock = ManualClock::new();
    // 1000/s, slack 9 ms, warm-up 100 ms: cold intervals 3 ms.
    let limiter = AtomicLimiter::builder(Rate::per_second(1000))
        .slack(Duration::from_millis(9))
        .warm_up(Duration::from_millis(100))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(limiter.slack(), 9);
    // Fresh and cold: the first permit goes at once and banks nothing.
    assert!(limiter.try_take().is_ok());
    clock.advance(Duration::from_millis(200));
    // At rest, cold: 9 ms pays for permits at ~3 ms: 4 go at once.
    assert_eq!(limiter.available(), 4);
    assert_eq!(
        limiter.try_take_n(5),
        Err(Error::ExceedsBurst { cost: 5, burst: 4 })
    );
    assert!(limiter.try_take_n(4).is_ok());
    assert!(limiter.try_take().is_err());
    // Used steadily it warms to 1 ms spacing; a caller 5 ms late then
    // loses nothing: the slack banks it and the permits go at once.
    for _ in 0..200 {
        clock.advance(limiter.next_free());
        assert!(limiter.try_take().is_ok());
    }
    assert_eq!(
        limiter.next_free(),
        Duration::from_millis(1),
        "warm: one interval apart"
    );
    clock.advance(Duration::from_millis(6));
    assert_eq!(limiter.available(), 6);
}

#[test]
fn a_warm_up_over_146_years_is_refused_by_name() {
    let err = AtomicLimiter::builder(Rate::per_second(1))
        .warm_up(Duration::MAX)
        .build()
        .unwrap_err();
    assert!(matches!(err, BuildError::WarmUpTooLong { .. }));
    assert!(err.to_string().contains("warm-up"), "{err}");
}

/// Lateness within the slack is banked, not turned into coldness: a warm
/// limiter whose caller comes back 59 ms late (slack 90 ms) lets the 59
/// missed permits and the due one go at once, at full rate. Counting that
/// time as idle would make it half cold (past the 50 ms threshold).
#[test]
fn lateness_within_the_slack_does_not_cool() {
    let clock = ManualClock::new();
    let limiter = AtomicLimiter::builder(Rate::per_second(1000))
        .slack(Duration::from_millis(90))
        .warm_up(Duration::from_millis(100))
        .clock(clock.clone())
        .build()
        .unwrap();
    for _ in 0..200 {
        clock.advance(limiter.next_free());
        assert!(limiter.try_take().is_ok());
    }
    clock.advance(Duration::from_millis(60));
    assert_eq!(limiter.available(), 60);
    assert!(limiter.try_take_n(60).is_ok());
    assert_eq!(limiter.next_free(), Duration::from_millis(1));
}

/// What a warm-up's take left (its `Taken`, read from the state the take
/// stored, coldness and all) is what the limiter's own look finds right
/// after it, while cold, warming and warm.
#[test]
fn a_warm_up_take_reports_what_its_state_finds() {
    // A wait jumps the clock to its slot.
    let clock = ManualClock::with_auto_advance();
    let limiter = AtomicLimiter::builder(Rate::per_second(10))
        .slack(20)
        .full_credit(true)
        .warm_up(Duration::from_secs(4))
        .clock(clock.clone())
        .build()
        .unwrap();
    for step in 0..60u64 {
        let taken = match step % 3 {
            0 => limiter.take(),
            1 => match limiter.try_take_n(2) {
                Ok(taken) => taken,
                Err(_) => limiter.take(),
            },
            _ => limiter.take_n(1).unwrap(),
        };
        let state = limiter.state();
        assert_eq!(
            (taken.available(), taken.next_free(), taken.at()),
            (
                state.available(),
                state.next_free(),
                Duration::from_nanos(clock.now())
            ),
            "step {step}"
        );
        clock.advance(Duration::from_millis(37 * (step % 5)));
    }
}
