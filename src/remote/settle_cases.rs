//! Tests only: random settles for the backends' property tests, which
//! interleave them with steps on a real server and hold every state it
//! leaves to [`schedule::settle`]'s; and the runner those tests share.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::{Op, Settle};
use crate::model::schedule::{self, Params};

/// A runner of `default` cases, or `PROPTEST_CASES` for a longer hunt (as
/// for the `proptest!` tests), that keeps no failure file.
pub(crate) fn runner(default: u32) -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default);
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// A settle of a booking of `booked` permits that cost `actual`, whose
/// permit went `went` quarter intervals from the clock (before it when
/// negative), after the clock moved `dt` quarter intervals.
#[derive(Clone, Debug)]
pub(crate) struct Settling {
    booked: u64,
    actual: u64,
    went: i64,
    dt: u64,
}

impl Settling {
    /// The clock `now` moved on by `dt`.
    pub(crate) fn advance(&self, now: u64, interval: u64) -> u64 {
        now.saturating_add(self.dt.saturating_mul(interval) / 4)
    }

    /// The call that settles it at `now` on a limit of `p` whose states
    /// live until at rest at `keep`, and the state the model leaves on
    /// `tat`.
    pub(crate) fn at(&self, tat: u64, now: u64, p: Params, keep: u64) -> (Op, u64) {
        let by = self.went.unsigned_abs().saturating_mul(p.interval()) / 4;
        let went = match self.went < 0 {
            true => now.saturating_sub(by),
            false => now.saturating_add(by),
        };
        let (booked, actual) = (self.booked, self.actual);
        let settle = Settle {
            went,
            booked,
            actual,
            params: p,
            keep,
        };
        let want = schedule::settle(tat, now, went, booked, actual, p);
        (Op::Settle(settle), want)
    }
}

/// One call of an interleaving: a backend's step case, or a settle.
#[derive(Clone, Debug)]
pub(crate) enum Call<O> {
    Step(O),
    Settle(Settling),
}

/// Steps from `step` and settles, about as many of each.
pub(crate) fn interleaved<O: std::fmt::Debug + Clone>(
    step: impl Strategy<Value = O>,
) -> impl Strategy<Value = Call<O>> {
    let cost = || prop_oneof![8 => 0..=13u64, 1 => Just(u64::MAX), 1 => Just(1u64 << 40)];
    let settling = (
        cost(),
        cost(),
        prop_oneof![-80..=8i64, Just(0i64)],
        prop_oneof![3 => 0..=8u64, 1 => Just(0u64), 1 => 0..=200u64],
    )
        .prop_map(|(booked, actual, went, dt)| Settling {
            booked,
            actual,
            went,
            dt,
        });
    prop_oneof![step.prop_map(Call::Step), settling.prop_map(Call::Settle)]
}
