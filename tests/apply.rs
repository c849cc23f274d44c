//! `apply`: a whole set of limits at once, for keyed limiters (`Limits`)
//! and direct ones (`Limit`).
#![cfg(feature = "keyed")]

use paceline::Take;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use paceline::{clock::ManualClock, AtomicLimiter, BuildError, KeyedLimiter, Limit, Limits, Rate};

fn per_second(n: u64) -> Rate {
    Rate::per_second(n)
}

/// `apply` replaces the default and every override (an override left out
/// is gone), `limits()` lists what is in force in order, and a key whose
/// limit did not change decides as before: its spent burst stays spent.
#[test]
fn apply_replaces_the_whole_set_and_unchanged_keys_keep_their_state() {
    let limiter = KeyedLimiter::<String, _>::builder(per_second(10))
        .slack(4)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let a = Limits::new(Limit::new(per_second(10), 4))
        .with_override("gold", Limit::new(per_second(100), 9))
        .with_override("free", Limit::new(per_second(1), 0));
    limiter.apply(&a).unwrap();
    assert_eq!(limiter.limits(), a);
    assert!(limiter.try_take_n("gold", 7).is_ok());
    assert_eq!(limiter.available("gold"), 3);

    // "free" is dropped, "silver" is new, "gold" and the default unchanged.
    let b = Limits::new(Limit::new(per_second(10), 4))
        .with_override("gold", Limit::new(per_second(100), 9))
        .with_override(
            "silver",
            Limit::new(per_second(50), Duration::from_millis(100)),
        );
    limiter.apply(&b).unwrap();
    assert_eq!(limiter.limits(), b);
    assert_eq!(limiter.available("gold"), 3, "unchanged, so not refilled");
    assert_eq!(limiter.rate_for("free"), (per_second(10), 4));
    assert_eq!(limiter.rate_for("silver"), (per_second(50), 5));
}

/// A limit that cannot be built anywhere in the set changes nothing.
#[test]
fn a_bad_limit_changes_nothing() {
    let limiter = KeyedLimiter::<String>::new(per_second(10));
    let before = limiter.limits();
    let bad = Limits::new(per_second(20))
        .with_override("ok", per_second(5))
        .with_override("huge", Limit::new(Rate::per_hour(1), u64::MAX / 2));
    assert!(matches!(
        limiter.apply(&bad),
        Err(BuildError::SlackTooLarge { .. })
    ));
    assert_eq!(limiter.limits(), before);
}

/// While one thread applies two sets in turn, another never reads a mix
/// of them: the set is published whole.
#[test]
fn no_reader_sees_a_half_applied_set() {
    let limiter = KeyedLimiter::<String>::new(per_second(10));
    let set = |n: u64| {
        (0..20).fold(Limits::new(per_second(n)), |l, i| {
            l.with_override(format!("key{i}"), per_second(n + i))
        })
    };
    let (a, b) = (set(100), set(200));
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..300 {
                limiter.apply(&a).unwrap();
                limiter.apply(&b).unwrap();
            }
            stop.store(true, Ordering::Release);
        });
        let mut reads = 0;
        while !stop.load(Ordering::Acquire) || reads == 0 {
            let seen = limiter.limits();
            if seen.overrides().is_empty() {
                continue; // before the first apply
            }
            assert!(seen == a || seen == b, "a mix: {seen:?}");
            reads += 1;
        }
    });
}

/// A direct limiter takes a `Limit` the same way, and reports it as every
/// kind's `limit_for` does: its slack in permits (a time resolved).
#[test]
fn a_direct_limiter_applies_a_limit() {
    let limiter = AtomicLimiter::builder(per_second(10))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(limiter.limit(), Limit::new(per_second(10), 10));
    let limit = Limit::new(per_second(4000), Duration::from_millis(5));
    limiter.apply(limit).unwrap();
    let in_permits = Limit::new(per_second(4000), 20);
    assert_eq!(limiter.limit(), in_permits);
    assert_eq!(Take::limit_for(&limiter, &()), Some(in_permits));
    assert_eq!(limiter.slack(), 20);
    let bad = Limit::new(Rate::per_hour(1), u64::MAX / 2);
    assert!(limiter.apply(bad).is_err());
    assert_eq!(limiter.limit(), in_permits);
}
