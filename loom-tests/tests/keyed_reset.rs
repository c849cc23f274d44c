//! A give-back racing a reset of its key: a reservation decided before the
//! reset is never undone on the entry the key was tracked with after it.
//!
//! The clock stands at 0 and the key (slack 0) has one permit now, slot 0.
//! One thread reserves a permit and gives it back, as an async take dropped
//! before its slot does; another resets the key and reserves a permit,
//! which it keeps. Whatever the order, the key must end where the keeper's
//! grant left it, and a last `try_take` at 0 must be refused. A give-back that does not check the
//! shard's generation can undo the keeper's grant instead of its own (both
//! leave the key's state at `T`, from a new entry each), and the last take
//! gets slot 0 a second time.

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::{check, OneKey, Subject, ONE_KEY};
use paceline::model::schedule::Admit;

const T: Duration = Duration::from_millis(1);

#[test]
fn a_give_back_never_undoes_a_grant_made_after_a_reset() {
    check("keyed give_back and reset", || {
        let clock = paceline::clock::ManualClock::new();
        let limiter = Arc::new(OneKey::build(T, 0, true, clock));
        let canceller = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                let booking = limiter.book(1, Admit::Always).unwrap();
                limiter.give_back(booking);
            })
        };
        let keeper = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                limiter.0.reset(&ONE_KEY);
                limiter.reserve(1, Admit::Always).unwrap()
            })
        };
        canceller.join().unwrap();
        let kept = keeper.join().unwrap();
        // Whatever the order, the key ends where the keeper's grant left it
        // (the canceller's give-back undid its own grant or nothing), and
        // the keeper holds a slot at or after 0: no take at 0 is admitted.
        let origin = paceline::model::schedule::ORIGIN;
        assert_eq!(
            limiter.next_free(),
            Duration::from_nanos(kept.next - origin),
            "the key's state is not the keeper's grant's: {kept:?}"
        );
        assert!(
            limiter.try_take().is_err(),
            "slot 0 handed out again while the keeper holds {kept:?}"
        );
    });
}
