//! A take booked at an estimate and settled with its actual cost, through
//! the take interface (`Take::book` / `Take::settle`, and their async
//! twins), on every in-process kind: a refund gives the difference back
//! (never more than was booked, never past the burst), an excess is
//! charged at once as debt later takes wait behind, a booking dropped
//! unsettled stands, and a booking settles only where it was made.
//! (`tests/settle.rs` holds the pure step to the bound over random
//! interleavings; the stores' own tests and the loom models hold each
//! store to the step.)
#![cfg(all(feature = "tokio", feature = "keyed"))]

use std::time::Duration;

use paceline::clock::ManualClock;
use paceline::take::{OnKey, Within};
use paceline::tokio::{AsyncKeyedLimiter, AsyncLimiter, TokioClock};
use paceline::{AsyncTake, AtomicLimiter, Error, KeyedLimiter, MutexLimiter, Rate, Take};

/// Every limit: 1/s with a slack of 4 (a burst of 5), at rest with its
/// burst, on a clock that moves only when told.
const BURST: u64 = 5;
const T: Duration = Duration::from_secs(1);

fn available<K: ?Sized, L: Take<K> + ?Sized>(limiter: &L, key: &K) -> u64 {
    limiter.state(key).unwrap().available()
}

/// The blocking cases on `key` of `limiter`, whose clock is `clock`.
fn suite<K: ?Sized, L: Take<K> + ?Sized>(name: &str, limiter: &L, key: &K, clock: &ManualClock) {
    assert_eq!(available(limiter, key), BURST, "{name}: at rest");
    // Booked at 4, it cost 1: 3 come back.
    let booked = limiter.book(key, 4, Within::Now).unwrap();
    assert_eq!(booked.cost(), 4, "{name}");
    assert_eq!(
        booked.taken().available(),
        1,
        "{name}: the take found 1 left"
    );
    limiter.settle(key, booked, 1).unwrap();
    assert_eq!(available(limiter, key), 4, "{name}: the refund of 3");
    // A refund never gives back more than was booked: settled at 0, a
    // booking of 2 gives its 2 back and no more.
    let booked = limiter.book(key, 2, Within::Now).unwrap();
    assert_eq!(available(limiter, key), 2, "{name}");
    limiter.settle(key, booked, 0).unwrap();
    assert_eq!(available(limiter, key), 4, "{name}: 2 back, not more");
    // An excess is charged at the settle, never refused: booked at 1, it
    // cost 7: 6 more, past what is left, as debt.
    let booked = limiter.book(key, 1, Within::Now).unwrap();
    limiter.settle(key, booked, 7).unwrap();
    assert_eq!(available(limiter, key), 0, "{name}: in debt");
    let e = limiter.try_take(key).unwrap_err();
    assert_eq!(
        e.retry_after(),
        Some(4 * T),
        "{name}: the next waits out the debt: 4 + 1 + 7 = 12 permits of a burst of 5 ({e})"
    );
    // A refund while others wait behind the schedule waits for them: it
    // gives back nothing early, and the estimate stands until it can.
    clock.advance(4 * T);
    let booked = limiter.book(key, 1, Within::Now).unwrap();
    clock.advance(T);
    limiter.settle(key, booked, 1).unwrap();
    assert_eq!(available(limiter, key), 1, "{name}: settled as booked");
    // Dropped unsettled, the estimate stands.
    let _ = limiter.book(key, 1, Within::Now).unwrap();
    assert_eq!(available(limiter, key), 0, "{name}: the estimate stood");
    // A refund long after its permit went has nothing left to give back:
    // the burst's span has passed, and banking is capped at the burst.
    clock.advance(BURST as u32 * T);
    let booked = limiter.book(key, 3, Within::Now).unwrap();
    clock.advance(3 * T);
    limiter.settle(key, booked, 0).unwrap();
    assert_eq!(
        available(limiter, key),
        BURST,
        "{name}: never past the burst"
    );
    // A blocking book waits for its slot, as a take does.
    limiter.try_take_n(key, BURST).unwrap();
    let booked = limiter.book(key, 1, Within::Max(Duration::ZERO));
    assert!(
        matches!(booked, Err(Error::QueueFull { .. })),
        "{name}: {booked:?}"
    );
}

fn atomic(clock: &ManualClock) -> AtomicLimiter<ManualClock> {
    AtomicLimiter::builder(Rate::per_second(1))
        .slack(BURST - 1)
        .full_credit(true)
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn keyed(clock: &ManualClock) -> KeyedLimiter<String, ManualClock> {
    KeyedLimiter::builder(Rate::per_second(1))
        .slack(BURST - 1)
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn every_in_process_kind_settles_a_booking() {
    let clock = ManualClock::new();
    suite("atomic", &atomic(&clock), &(), &clock);
    let mutex = MutexLimiter::builder(Rate::per_second(1))
        .slack(BURST - 1)
        .full_credit(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    suite("mutex", &mutex, &(), &clock);
    let keyed = keyed(&clock);
    suite("keyed", &keyed, "alice", &clock);
    suite("keyed, another key", &keyed, "bob", &clock);
    suite(
        "OnKey of keyed",
        &OnKey::new(&keyed, "carol".to_string()),
        &(),
        &clock,
    );
    let boxed: Box<dyn Take> = Box::new(atomic(&clock));
    suite("dyn Take", &*boxed, &(), &clock);
}

#[test]
fn a_booking_settles_only_where_it_was_made() {
    let clock = ManualClock::new();
    let (a, b) = (atomic(&clock), atomic(&clock));
    let booked = a.book(4, Within::Now).unwrap();
    let e = b.settle(booked, 0).unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert!(e.to_string().contains("did not book it"), "{e}");
    assert_eq!((a.available(), b.available()), (1, BURST), "nothing moved");

    let keyed = keyed(&clock);
    let booked = Take::book(&keyed, "alice", 4, Within::Now).unwrap();
    let e = Take::settle(&keyed, "bob", booked, 0).unwrap_err();
    assert!(matches!(e, Error::Config(_)), "another key: {e}");
    assert_eq!(available(&keyed, "alice"), 1, "alice's estimate stands");
    let booked = Take::book(&keyed, "alice", 1, Within::Now).unwrap();
    assert!(
        a.settle(booked, 0).is_err(),
        "a keyed booking on a direct limiter"
    );
}

#[test]
fn a_refund_across_a_change_of_the_limit_is_dropped() {
    let clock = ManualClock::new();
    let limiter = atomic(&clock);
    let booked = limiter.book(4, Within::Now).unwrap();
    limiter.set_limit(Rate::per_second(1), BURST - 1).unwrap();
    limiter.settle(booked, 0).unwrap();
    assert_eq!(limiter.available(), 1, "the estimate stands");
}

/// The async faces: the same, as futures, on Tokio's paused clock.
#[tokio::test(start_paused = true)]
async fn the_async_faces_settle_a_booking() {
    let direct = AsyncLimiter::builder(Rate::per_second(1))
        .slack(BURST - 1)
        .full_credit(true)
        .clock(TokioClock::new())
        .build()
        .unwrap();
    let keyed = KeyedLimiter::<String, _>::builder(Rate::per_second(1))
        .slack(BURST - 1)
        .clock(TokioClock::new())
        .build()
        .unwrap();
    let keyed = AsyncKeyedLimiter::from(keyed);
    async_suite("async direct", &direct, &()).await;
    async_suite("async keyed", &keyed, "alice").await;
    let booked = AsyncTake::book(&keyed, "carol", 1, Within::Now)
        .await
        .unwrap();
    let e = AsyncTake::settle(&keyed, "bob", booked, 0)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
}

async fn async_suite<K: ?Sized + Sync, L: AsyncTake<K>>(name: &str, limiter: &L, key: &K) {
    let left = |s: paceline::State| s.available();
    assert_eq!(left(limiter.state(key).await.unwrap()), BURST, "{name}");
    let booked = limiter.book(key, 4, Within::Now).await.unwrap();
    limiter.settle(key, booked, 1).await.unwrap();
    assert_eq!(left(limiter.state(key).await.unwrap()), 4, "{name}: 3 back");
    let booked = limiter.book(key, 1, Within::Now).await.unwrap();
    limiter.settle(key, booked, 7).await.unwrap();
    let e = limiter.try_take(key).await.unwrap_err();
    assert!(e.retry_after().is_some(), "{name}: in debt: {e}");
    // An unbounded book waits for its slot on the timer, then settles.
    let booked = limiter.book(key, 1, Within::Any).await.unwrap();
    limiter.settle(key, booked, 1).await.unwrap();
    // Dropped while it waits, a book gives its slot back, as a take does.
    let before = limiter.state(key).await.unwrap().next_free();
    let waiting = limiter.book(key, 1, Within::Any);
    let dropped = tokio::time::timeout(Duration::from_millis(10), waiting).await;
    assert!(dropped.is_err(), "{name}: still waiting");
    let after = limiter.state(key).await.unwrap().next_free();
    assert!(
        after <= before,
        "{name}: its slot given back ({before:?}, {after:?})"
    );
}
