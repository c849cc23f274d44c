//! Loom model tests for paceline: every interleaving of the real CAS loop
//! (and of the mutex store, for comparison) on a few threads, with time from
//! a [`ManualClock`] so that the interleaving is the only thing that varies.
//!
//! The models live in `tests/`; this library is their shared harness. All of
//! it compiles to nothing without `--cfg paceline_loom`, so a plain
//! `cargo test --workspace` does not build loom. To run them:
//!
//! ```text
//! RUSTFLAGS="--cfg paceline_loom" LOOM_MAX_PREEMPTIONS=3 CARGO_TARGET_DIR=target/loom \
//!     cargo test -p loom-tests --release
//! ```
//!
//! Each model is written once, generic over [`Subject`], and run against
//! both [`AtomicLimiter`] and [`MutexLimiter`], and all but `set_limit` and
//! one `give_back` model (which start a limiter with slack and no credit,
//! as no keyed key starts) against a [`KeyedLimiter`] through one key
//! ([`OneKey`]): they must give the same answers.
//!
//! The async cancellation give-back (`give_back.rs`) cannot run under loom
//! through Tokio, so its models drive the store-level protocol directly: the
//! limiters' `__book` / `__undo` methods, hidden and compiled only under
//! `--cfg paceline_loom`, call the real `Pacer::book` (the update an async
//! take runs, returning its `Booking`) and `Pacer::undo` (the one give-back
//! rule: the generation unchanged, then the store's CAS `next` → `prev`, or
//! compare-and-set under the lock). A successful give-back lowers `tat`:
//! it is the reason `tat` is not monotonic, and why a `fetch_add` fast path
//! that assumes the state only grows (DESIGN §2) would be wrong as it stands.
//! It also makes ABA possible: a CAS can succeed on a word that was given
//! back and then rebuilt by a reservation at a new rate, so with give-backs
//! the `set_rate` order ("once paced at the new rate, never again at the
//! old") does not hold for `AtomicLimiter`'s store (loom shows it at 4
//! preemptions; see `give_back.rs`). Only `AsyncLimiter` gives back, and it
//! does not promise that order.
//!
//! # The models, and what each has been seen to catch
//!
//! Every model was run against deliberately broken code (never committed)
//! and failed, at 2 preemptions as at 3:
//!
//! | model | broken step | caught by |
//! |---|---|---|
//! | `take` | `update` stores with load + store, not CAS | overlapping grants; with that check off, the final state |
//! | `take` | `update` keeps its grant when the CAS fails (no retry) | overlapping grants |
//! | `try_take` | load + store | over `slack + 1 + elapsed / T` |
//! | `try_take` | admission checked once, not on each retry | over `slack + 1 + elapsed / T` |
//! | `try_take` | reserve, then roll a refusal back with a CAS | a refusal consumed a permit |
//! | `set_rate` | `set_rate` restarts the schedule | a slot handed out twice |
//! | `set_rate` | the interval written in two steps | a grant paced by neither rate |
//! | `set_rate` | `set_rate` leaves the store's interval alone | the next take at the old rate |
//! | `set_rate` | `Relaxed` loads and CAS of `tat` | back to the old rate after the new |
//! | `set_rate` | `set_rate` does not rebase `tat` (either store) | a grant after the change paced at the old rate |
//! | `set_rate`, `set_rate_flips` | the rebased word published before the interval (the old two-step `set_rate`) | a grant after the rebase at the old rate; a slot not one interval in force after the last (`set_rate_flips` with `FLIPS_IGNORE=exact`: two slots closer than the faster interval, an extra permit) |
//! | `set_rate`, `set_rate_flips` | the rebase reads `tat`, then stores it (no swap to `REBASING`) | a slot handed out twice; two slots closer than the faster interval |
//! | `set_rate`, `set_rate_flips` | a fresh state republished as the same word (no new generation) | a grant after the rebase at the old rate; a slot not one interval in force after the last |
//! | `set_rate`, `set_rate_flips` | a step reads the interval only after `tat` | back to the old rate after the new; a slot not one interval in force after the last (the flip back restores the word a stale step read) |
//! | `set_rate`, `set_rate_flips` | a step decides on `REBASING` instead of waiting for the rebased word | grants paced by neither rate; a slot handed out twice |
//! | `take`, `try_take`, `set_rate` | `MutexLimiter` decides under one lock, stores under another | overlapping grants; over budget; a grant paced by neither rate |
//! | `set_limit` | the rebased word published before the new interval and slack (`AtomicStore::set_params`) | an answer no sequential order of the change and the takes explains (a take paced by the old limit after the rebase) |
//! | `manual_clock` | `ManualClock` notifies without taking its lock | loom: deadlock (lost wake-up) |
//! | `manual_clock` | a waiter does not re-check the clock after waking | a take returned before its time |
//! | `give_back` | `give_back` stores `prev` unconditionally | the final state, and a gap in the surviving grants; with those off, a slot handed out twice and over `slack + 1 + elapsed / T` (budget model), a fresh limiter banking credit (tile model); with overlap off too, over budget |
//! | `give_back` | `give_back` compares against `prev`, not `next` (never undoes) | a give-back refused though no one reserved after it |
//! | `give_back` | `give_back` restores the slot, not `prev` (what subtracting `cost * T` gives) | the final state; with it and gaps off, a fresh limiter banking credit after an idle |
//! | `give_back` | `give_back` ignores the CAS result (always reports success) | the final state, and a gap in the surviving grants |
//! | `give_back` | `give_back` checks, then stores in a second step (load + store; two lock sections) | the final state, and a gap; with those off, a slot handed out twice and over budget (budget model), a give-back refused with no one after it (tile model) |
//! | `give_back` (with `set_rate`) | `give_back` stores `prev` unconditionally; restores the slot; ignores the CAS result; checks, then stores | surviving grants that do not chain: a slot handed out twice or lost (a `give_back` that never undoes passes it: the two models above catch that) |
//! | `keyed_first_take` | `decide_new` does not look for the key again under the write lock | over the burst (a second entry for the key) |
//! | `keyed_first_take` | `atomic::update_fixed` stores with load + store, not CAS | over the burst |
//! | `keyed_prune` (prune) | `decide` reads the clock once, before taking the shard's lock, for the tracked key and the new one alike | a key pruned at rest decided as new with the older reading: a whole burst at 0 |
//! | `keyed_prune` (prune) | a sweep drops keys not at rest too | a take admitted at rest, its key then left with its whole burst |
//! | `reset` (`KeyedLimiter`) | a give-back ignores its shard's generation; a reset does not bump it | a slot handed out again while a grant made after the reset holds it |
//! | `reset` (`AtomicLimiter`, `MutexLimiter`) | a give-back ignores the limiter's generation | the same |
//! | `keyed_prune` (evict) | an eviction gives back every key it freed, keeping none for the insert that made it | more keys than `max_keys` |
//! | `take`, `try_take`, `set_rate`, `give_back`, `manual_clock` (`KeyedLimiter`) | the step on a tracked key stores with load + store, not CAS | a gap or overlap between grants (`take`); admitted and left not adding up to the budget (`try_take`); grants paced by neither rate (`set_rate`); a broken invariant listed, and a final state where the grants do not end (`give_back`); permits missing from the state (`manual_clock`) |
//! | `give_back` (`KeyedLimiter`) | the keyed give-back stores `prev` unconditionally | the final state; surviving grants that do not chain |
//! | `set_rate`, `set_rate_flips` (`KeyedLimiter`) | a rate change moves a key to its new class without rebasing its state | a grant after the rebase at the old rate; a slot not one interval in force after the one before |
//! | `settle` | `AtomicStore::settle` stores with load + store, not CAS (so does the keyed entry's `settle_fixed`; `MutexStore`'s decides under one lock section and stores under another) | updates that do not chain from the booking's state to the final one (one lost) |
//! | `settle` (with `set_rate`) | the limiter's refund skips its generation check, or checks it outside the limit's lock (a keyed key's: ignores the shard's generation) | a refund settled after the change, not the old rate's step on the state it found |
//! | `lease` | a spend reads the clock before its CAS, not after | a spend reported before its batch was decided (more spent by a time than the lender granted by then) |
//! | `lease` | a spend stores the count less its cost (load + store), not CAS | the same (its store publishes nothing), or a permit spent twice |
//! | `lease` | the spend's CAS `Relaxed`, the refill's swap `Relaxed` (the first version) | a spend's reading of a `ManualClock` older than the refill's: reported before its batch was decided |
//! | `window` (all three models) | the window store's take stores with load + store, not CAS | a word replaced twice (`takes`); no order of the operations one at a time explains the answers (`settle`, `set_quota`) |
//! | `window` (all three models) | the window store's take keeps its grant when the CAS fails (no retry) | the same |
//! | `window` (`set_quota`) | the window store loads the word `Relaxed` (and its CAS reads the winner's `Relaxed`), so a step need not see the quota of the step whose word it decides on | a take counted at the old quota on the word of a take counted at the new: no order explains it |
//! | `window` (`set_quota`) | the window store reads the quota once, before the word, not after each word it decides on | the same |
//! | `window` (`settle`) | the window store's settle stores with load + store, not CAS | no order of the settle and the takes explains the answers (an update lost) |
//! | `keyed_window` | the window loop (`store::window::update_word`, the store's and a keyed window key's) stores with load + store, not CAS | over the quota in one window |
//!
//! A settle (`settle.rs`) goes through the cfg-gated `__settle` hooks: the
//! limiter's own settle (its generation checked for a refund, under the
//! limit's lock; a keyed key's under its shard's read lock), then the
//! real `Store::settle` or the keyed entry's CAS.
//!
//! The window models (`window.rs`) run the crate-internal store of a
//! quota per window (`src/store/window.rs`, whose loop a keyed limiter's
//! window keys run too; `keyed_window.rs` runs it on a keyed key)
//! through its hidden re-export `paceline::__WindowStore`, compiled only
//! under `--cfg paceline_loom`. Besides their own checks (each admission
//! the pure step on the word it replaced, no window over its quota) each
//! asks whether some order of its operations, one at a time through the
//! pure steps, gives every answer and the store's final word and quota.
//!
//! The keyed models (`keyed_*.rs`, and the models above through [`OneKey`],
//! a keyed limiter seen through one key) run `KeyedLimiter` itself: its
//! atomics and locks come from the same shim, and its hasher has a fixed
//! seed under `--cfg paceline_loom` so that every execution hashes alike.
//! They use `max_keys(1)`, so the map has one shard (one loom lock).
//!
//! `set_rate_flips` (rate `A` -> `B` -> `A` racing two takers) is the model
//! of the exact `set_rate`: with the two-step `set_rate` it replaced (rebase,
//! then store the interval) restored, it fails in its first interleavings
//! (`FLIPS_IGNORE=exact` shows the window bound broken too: two slots 1 ms
//! apart at a 2 ms interval).
//!
//! The `give_back` rows hold for both stores alike; each execution lists
//! every invariant it breaks, and `GIVE_BACK_IGNORE=gap,state` (tags, comma
//! separated) turns checks off to see what the others catch alone.

#![cfg(paceline_loom)]
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use paceline::model::schedule::{Admit, Grant};
pub use paceline::store::Booking;
use paceline::{
    clock::ManualClock, AtomicLimiter, BuildError, Error, KeyedLimiter, MutexLimiter, Rate, Take,
};

/// Preemptions explored per execution when `LOOM_MAX_PREEMPTIONS` is unset:
/// 2 already catches every broken step in the table above, in seconds.
pub const DEFAULT_PREEMPTIONS: usize = 2;

/// A limiter type the models run against, on a manual clock.
///
/// Its take calls forward to the limiter's own (inherent) ones, the calls
/// the models race: the shared `Take` interface wraps them in the same
/// steps, so a model of these is a model of that.
pub trait Subject: Send + Sync + Sized + 'static {
    /// The type's name, for failure messages.
    const NAME: &'static str;

    /// Waits for one permit; the time waited.
    fn take(&self) -> Duration;
    /// Waits for `cost` permits; the time waited.
    fn take_n(&self, cost: u64) -> Result<Duration, Error>;
    /// Waits for `cost` permits unless that takes longer than `max_wait`.
    fn take_n_timeout(&self, cost: u64, max_wait: Duration) -> Result<Duration, Error>;
    /// One permit now or a refusal.
    fn try_take(&self) -> Result<(), Error>;
    /// `cost` permits now or a refusal.
    fn try_take_n(&self, cost: u64) -> Result<(), Error>;
    /// Whether `cost` permits could be taken now, consuming nothing.
    fn can_take(&self, cost: u64) -> bool;
    /// Changes the rate.
    fn set_rate(&self, rate: Rate) -> Result<(), BuildError>;
    /// The rate applied.
    fn rate(&self) -> Rate;
    /// Permits that could be taken now.
    fn available(&self) -> u64;
    /// How long until the next permit is free.
    fn next_free(&self) -> Duration;
    /// Puts the limit back as it was built (a keyed key: forgets it).
    fn reset(&self);

    /// A limiter at one permit per `interval` with `slack`, starting with
    /// full credit or none, on `clock`.
    fn build(interval: Duration, slack: u64, full_credit: bool, clock: ManualClock) -> Self;

    /// Books `cost` permits without waiting, as an async take does (the
    /// limiter's cfg-gated `__book` hook: the real `Pacer::book`), and
    /// returns the grant.
    fn reserve(&self, cost: u64, admit: Admit) -> Result<Grant, Error> {
        self.book(cost, admit)
            .map(|b| b.__grant().expect("an in-process booking holds its grant"))
    }

    /// [`reserve`](Subject::reserve), keeping the [`Booking`] that undoes it.
    fn book(&self, cost: u64, admit: Admit) -> Result<Booking, Error>;

    /// Gives a booking back, as a dropped async take does (the cfg-gated
    /// `__undo` hook: the real `Pacer::undo`); `true` when undone.
    fn give_back(&self, booking: Booking) -> bool;

    /// Settles a booking with its actual cost (the cfg-gated `__settle`
    /// hook: the limiter's generation check, then the real
    /// `Store::settle`, or the keyed entry's CAS); the state it found and
    /// the state it left, `None` when nothing was settled (a refund across
    /// a change).
    fn settle(&self, booking: Booking, actual: u64) -> Option<(u64, u64)>;
}

macro_rules! subject {
    ($ty:ident) => {
        impl Subject for $ty<ManualClock> {
            const NAME: &'static str = stringify!($ty);

            fn take(&self) -> Duration {
                $ty::take(self).at()
            }
            fn take_n(&self, cost: u64) -> Result<Duration, Error> {
                $ty::take_n(self, cost).map(|t| t.at())
            }
            fn take_n_timeout(&self, cost: u64, max_wait: Duration) -> Result<Duration, Error> {
                $ty::take_n_timeout(self, cost, max_wait).map(|t| t.at())
            }
            fn try_take(&self) -> Result<(), Error> {
                $ty::try_take(self).map(drop)
            }
            fn try_take_n(&self, cost: u64) -> Result<(), Error> {
                $ty::try_take_n(self, cost).map(drop)
            }
            fn can_take(&self, cost: u64) -> bool {
                $ty::can_take(self, cost)
            }
            fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
                $ty::set_rate(self, rate)
            }
            fn rate(&self) -> Rate {
                $ty::rate(self)
            }
            fn available(&self) -> u64 {
                $ty::available(self)
            }
            fn next_free(&self) -> Duration {
                $ty::next_free(self)
            }

            fn reset(&self) {
                $ty::reset(self)
            }

            fn build(
                interval: Duration,
                slack: u64,
                full_credit: bool,
                clock: ManualClock,
            ) -> Self {
                let rate = Rate::every(interval).expect("a valid test interval");
                $ty::builder(rate)
                    .slack(slack)
                    .full_credit(full_credit)
                    .clock(clock)
                    .build()
                    .expect("a valid test configuration")
            }

            fn book(&self, cost: u64, admit: Admit) -> Result<Booking, Error> {
                self.__book(cost, admit)
            }

            fn give_back(&self, booking: Booking) -> bool {
                self.__undo(booking)
            }

            fn settle(&self, booking: Booking, actual: u64) -> Option<(u64, u64)> {
                self.__settle(booking, actual)
            }
        }
    };
}

subject!(AtomicLimiter);
subject!(MutexLimiter);

/// A keyed limiter seen through one key, [`ONE_KEY`]: the models of a lone
/// limiter run on it too, so a take on a tracked key (the entry's CAS under
/// its shard's read lock) is checked against a rate change (entries rebased
/// in place under the write lock, the shard's generation bumped) and a
/// give-back, as the lone limiters are.
pub struct OneKey(pub KeyedLimiter<u32, ManualClock>);

/// The key [`OneKey`] takes on.
pub const ONE_KEY: u32 = 7;

impl Subject for OneKey {
    const NAME: &'static str = "KeyedLimiter";

    fn take(&self) -> Duration {
        let taken = self.0.take(&ONE_KEY).expect("a tracked key's take waits");
        taken.at()
    }
    fn take_n(&self, cost: u64) -> Result<Duration, Error> {
        self.0.take_n(&ONE_KEY, cost).map(|t| t.at())
    }
    fn take_n_timeout(&self, cost: u64, max_wait: Duration) -> Result<Duration, Error> {
        self.0
            .take_n_timeout(&ONE_KEY, cost, max_wait)
            .map(|t| t.at())
    }
    fn try_take(&self) -> Result<(), Error> {
        self.0.try_take(&ONE_KEY).map(drop)
    }
    fn try_take_n(&self, cost: u64) -> Result<(), Error> {
        self.0.try_take_n(&ONE_KEY, cost).map(drop)
    }
    fn can_take(&self, cost: u64) -> bool {
        self.0
            .can_take(&ONE_KEY, cost)
            .expect("an in-process key answers")
    }
    fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        self.0.set_rate(rate)
    }
    fn rate(&self) -> Rate {
        self.0.rate()
    }
    fn available(&self) -> u64 {
        self.0.available(&ONE_KEY)
    }
    fn next_free(&self) -> Duration {
        self.0.next_free(&ONE_KEY)
    }

    fn reset(&self) {
        self.0.reset(&ONE_KEY);
    }

    /// A new key starts with full credit; with a slack of 0 that is the
    /// same as none (one permit at once, the next an interval later), so
    /// only models that start with none and a slack above 0 cannot run on
    /// it.
    fn build(interval: Duration, slack: u64, full_credit: bool, clock: ManualClock) -> Self {
        assert!(
            full_credit || slack == 0,
            "a keyed limiter's new key starts with full credit"
        );
        let rate = Rate::every(interval).expect("a valid test interval");
        OneKey(
            KeyedLimiter::builder(rate)
                .slack(slack)
                // One shard: one loom lock.
                .max_keys(1)
                .clock(clock)
                .build()
                .expect("a valid test configuration"),
        )
    }

    fn book(&self, cost: u64, admit: Admit) -> Result<Booking, Error> {
        self.0.__book(&ONE_KEY, cost, admit)
    }

    fn give_back(&self, booking: Booking) -> bool {
        self.0.__undo(&ONE_KEY, booking)
    }

    fn settle(&self, booking: Booking, actual: u64) -> Option<(u64, u64)> {
        self.0.__settle(&ONE_KEY, booking, actual)
    }
}

/// Runs `model` under loom, exploring every interleaving within the
/// preemption bound (`LOOM_MAX_PREEMPTIONS`, else [`DEFAULT_PREEMPTIONS`]),
/// and returns how many it explored (printed too, seen with `--nocapture`).
pub fn check<F>(name: &str, model: F) -> usize
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(DEFAULT_PREEMPTIONS);
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        model();
    });
    let runs = runs.load(Ordering::Relaxed);
    println!("{name}: {runs} interleavings");
    runs
}

/// Grants as `(slot, cost)`, sorted by slot: the order they were reserved in,
/// since a later reservation never gets an earlier slot.
pub fn in_slot_order(mut grants: Vec<(Duration, u64)>) -> Vec<(Duration, u64)> {
    grants.sort();
    grants
}
