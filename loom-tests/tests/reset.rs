//! A give-back racing a reset: a booking decided before the reset is never
//! undone on the state the limiter (or the key) was given after it.
//!
//! The clock stands at 0 and the limit (slack 0, full credit; a keyed key
//! starts so) has one permit now, slot 0. One thread books a permit and
//! gives it back, as an async take dropped before its slot does; another
//! resets the limit and books a permit, which it keeps. Whatever the order,
//! the limit must end no earlier than where the keeper's grant left it (a
//! direct limiter's canceller that read the generation before the reset and
//! booked after the keeper keeps its own slot spent: conservative, as its
//! `undo` says; a key's generation is read under the lock its step holds,
//! so a key ends exactly there), and a last `try_take` at 0 must be
//! refused. A give-back that does not check the
//! generation (a direct limiter's, or the key's shard's) can undo the
//! keeper's grant instead of its own: both leave the state at `T`, the
//! keeper's from the state the reset put back, and the last take gets slot
//! 0 a second time.

#![cfg(paceline_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::{check, OneKey, Subject};
use paceline::clock::ManualClock;
use paceline::model::schedule::Admit;
use paceline::{AtomicLimiter, MutexLimiter};

const T: Duration = Duration::from_millis(1);

fn a_give_back_never_undoes_a_grant_made_after_a_reset<L: Subject>() {
    check(&format!("{} give_back and reset", L::NAME), || {
        let clock = ManualClock::new();
        let limiter = Arc::new(L::build(T, 0, true, clock));
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
                limiter.reset();
                limiter.reserve(1, Admit::Always).unwrap()
            })
        };
        canceller.join().unwrap();
        let kept = keeper.join().unwrap();
        // Whatever the order, the limit ends no earlier than the keeper's
        // grant left it (the canceller's give-back undid its own grant or
        // nothing), and the keeper holds a slot at or after 0: no take at 0
        // is admitted.
        let origin = paceline::model::schedule::ORIGIN;
        let kept_at = Duration::from_nanos(kept.next - origin);
        let end = limiter.next_free();
        assert!(
            end >= kept_at,
            "the state ({end:?} to the next free slot) is before the keeper's grant's: {kept:?}"
        );
        if L::NAME == "KeyedLimiter" {
            assert_eq!(end, kept_at, "the key's state is not the keeper's grant's");
        }
        assert!(
            limiter.try_take().is_err(),
            "slot 0 handed out again while the keeper holds {kept:?}"
        );
    });
}

#[test]
fn atomic_limiter_give_back_never_undoes_a_grant_made_after_a_reset() {
    a_give_back_never_undoes_a_grant_made_after_a_reset::<AtomicLimiter<ManualClock>>();
}

#[test]
fn mutex_limiter_give_back_never_undoes_a_grant_made_after_a_reset() {
    a_give_back_never_undoes_a_grant_made_after_a_reset::<MutexLimiter<ManualClock>>();
}

#[test]
fn keyed_limiter_give_back_never_undoes_a_grant_made_after_a_reset() {
    a_give_back_never_undoes_a_grant_made_after_a_reset::<OneKey>();
}
