//! [`AtomicLimiter`]: the lock-free limiter.
//!
//! # Implementation details
//!
//! The whole state is one `u64`, `tat` (see [`schedule`](crate::schedule)'s
//! model), in a cache-line-padded `AtomicU64` so that threads hammering it do
//! not also invalidate their neighbours' data. An update is a CAS loop:
//! load, run the pure step, `compare_exchange_weak` the new word in, and on
//! failure run the step again on the word that won. The loop may retry; it
//! never loses an update (each success replaces exactly the word its step
//! read) and never hands two callers the same slot (two successes from one
//! word are impossible).
//!
//! The interval sits in a second atomic that only `set_rate` writes; a step
//! reads it before and after `tat` and goes ahead only if the two agree, so
//! each grant is paced by one rate or the other, and once a grant is paced
//! at a new rate no later one is paced at the old (see [`update`]'s memory
//! ordering).
//!
//! `set_rate` must change both words as one: [rebase](schedule::rebase)
//! `tat` by the interval every booking in it was made at, and publish the new
//! interval, with no step booking in between (one that did would book a slot
//! at the old spacing from the rebased word, and a later `set_rate` would
//! rebase it as if booked at the new: back-and-forth changes racing takes
//! could then pull `tat` back and let extra permits through). So it swaps
//! `tat` for [`REBASING`], a word no state ever is (states stop at
//! [`MAX_TAT`]), stores the interval, then stores the
//! rebased word, all under a lock of the store's own. (A rebase leaves the
//! sentinels `FRESH` and `FULL` as they are; the cell then gets another word
//! that stands for the same sentinel, one of [`GENERATIONS`] above
//! [`MAX_TAT`], so that the word changes all the same.) A step that reads
//! `REBASING` waits on that lock (the few instructions in between), then
//! reads the word again; one that read the word before the swap fails its
//! CAS and decides again; a give-back fails (its slot stays spent). Takes
//! are therefore lock-free except during those few instructions of a
//! `set_rate`; they block rather than spin, so a `set_rate` preempted there
//! costs them no CPU.
//!
//! The ordering argument needs `tat` never to repeat a word. A `give_back`
//! (async cancellation) can make it repeat, and so can a rebase that lowers
//! `tat` (a faster rate) followed by bookings that raise it to the very word
//! a preempted step read before the change: that step's CAS then succeeds
//! (ABA) with a decision made at the old interval, after grants at the new
//! one (`loom-tests/tests/give_back.rs`). Its grant is still distinct and
//! paced whole by one rate; in the rebase case the old rate is the slower
//! one, so the grant is late, never early.

use std::fmt;

use crossbeam_utils::CachePadded;

use crate::builder::Builder;
use crate::clock::{Clock, DefaultClock};
use crate::error::BuildError;
use crate::pacer::{Config, Core, Store};
use crate::primitive::{lock, AtomicU64, Mutex, Ordering};
use crate::rate::Rate;
use crate::schedule::{self, Admit, Deny, Grant, Params, FRESH, FULL, MAX_TAT};

/// Runs the step against `cell` in a CAS loop until it stores or refuses.
///
/// # Memory ordering
/// The read-modify-writes of `tat` are totally ordered whatever the ordering
/// argument, and that alone makes grants distinct and loses no update. The
/// acquire loads and the release CAS of `tat` are for the interval: a step that
/// reads the `tat` another step stored also sees the interval that step used
/// (or a newer one), so after a rate change no grant goes back to the old
/// rate once one has been paced at the new rate (loom found that with
/// `Relaxed`). For the same reason a step that reads the word a `set_rate`
/// published (with `Release`, after its interval) reads the new interval
/// after it. The interval is read before the word too, with `Acquire`, and
/// the step goes ahead only if both reads agree: a step that saw a new
/// interval before the word sees that `set_rate`'s swap too (it comes before
/// its interval store), so it decides on the rebased word or a later one,
/// never on a word from before the change that the change may bring back.
/// On x86 these compile to the same instructions as `Relaxed`.
#[inline]
pub(crate) fn update(
    cell: &AtomicU64,
    rebasing: &Mutex<()>,
    interval: &AtomicU64,
    slack: u64,
    now: u64,
    cost: u64,
    admit: Admit,
) -> Result<Grant, Deny> {
    let before = interval.load(Ordering::Acquire);
    let word = cell.load(Ordering::Acquire);
    run::<false>(
        cell, rebasing, interval, slack, now, cost, admit, before, word,
    )
}

/// The CAS loop for a cell whose parameters cannot change while it runs, so
/// it needs none of [`update`]'s care for `set_rate`: the keyed store changes
/// a key's rate only under its shard's write lock, and steps under the read
/// lock, and its words never leave `0..=MAX_TAT`. Same step, same CAS.
#[cfg(feature = "keyed")]
#[inline]
pub(crate) fn update_fixed(
    cell: &AtomicU64,
    params: Params,
    now: u64,
    cost: u64,
    admit: Admit,
) -> Result<Grant, Deny> {
    let mut tat = cell.load(Ordering::Relaxed);
    loop {
        let grant = schedule::step(tat, now, cost, params, admit)?;
        if cost == 0 {
            return Ok(grant);
        }
        match cell.compare_exchange_weak(tat, grant.next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Ok(grant),
            Err(actual) => tat = actual,
        }
    }
}

/// [`update`] once it has met a `word` above [`MAX_TAT`] (a `set_rate` in
/// progress, or a sentinel's generation): out of the hot loop's way.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn update_marked(
    cell: &AtomicU64,
    rebasing: &Mutex<()>,
    interval: &AtomicU64,
    slack: u64,
    now: u64,
    cost: u64,
    admit: Admit,
    before: u64,
    word: u64,
) -> Result<Grant, Deny> {
    run::<true>(
        cell, rebasing, interval, slack, now, cost, admit, before, word,
    )
}

/// The CAS loop, from the interval `before` and the `word` read after it.
/// With `MARKED` false it hands a word above [`MAX_TAT`] on to
/// [`update_marked`], so the hot loop holds no wait.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn run<const MARKED: bool>(
    cell: &AtomicU64,
    rebasing: &Mutex<()>,
    interval: &AtomicU64,
    slack: u64,
    now: u64,
    cost: u64,
    admit: Admit,
    mut before: u64,
    mut word: u64,
) -> Result<Grant, Deny> {
    loop {
        // One compare on the hot path: a plain state is its own word.
        let tat = if word > MAX_TAT {
            if !MARKED {
                return update_marked(
                    cell, rebasing, interval, slack, now, cost, admit, before, word,
                );
            }
            word = settle(cell, rebasing, word);
            state(word)
        } else {
            word
        };
        // The interval again, after the word: if a `set_rate` published one
        // in between, the word may be from before its rebase (and may come
        // back, if the rate does): read it again.
        let after = interval.load(Ordering::Acquire);
        if after != before {
            before = after;
            word = cell.load(Ordering::Acquire);
            continue;
        }
        let params = Params::new_unchecked(before, slack);
        let grant = schedule::step(tat, now, cost, params, admit)?;
        // Nothing to store (a cost of 0)? Asked of `cost`, not of the new
        // word, so that a constant cost folds it away.
        if cost == 0 {
            return Ok(grant);
        }
        match cell.compare_exchange_weak(word, grant.next, Ordering::Release, Ordering::Acquire) {
            Ok(_) => return Ok(grant),
            // Someone else moved the state (or a spurious failure): decide
            // again on the word that is there now.
            Err(actual) => word = actual,
        }
    }
}

/// The cell's word while a `set_rate` rebases it.
const REBASING: u64 = u64::MAX;

/// How many words stand for each of the sentinels `FRESH` and `FULL`, above
/// [`MAX_TAT`] (plus the sentinel itself, the word a limiter starts with).
const GENERATIONS: u64 = (1 << 15) - 1;

/// The state a word stands for: itself, or a sentinel's generation's.
#[inline]
fn state(word: u64) -> u64 {
    if word > MAX_TAT {
        (word - MAX_TAT - 1) & 1
    } else {
        word
    }
}

/// The word a `set_rate` stores for `tat` when the cell held `word`: `tat`
/// itself, except that a sentinel (`FRESH`, `FULL`, which a rebase leaves
/// as they are) gets the next generation's word, so that a CAS decided on
/// the word before, at the old interval, fails all the same.
fn word_after_rebase(word: u64, tat: u64) -> u64 {
    if tat != FRESH && tat != FULL {
        return tat;
    }
    let generation = if word > MAX_TAT {
        ((word - MAX_TAT - 1) / 2 + 1) % GENERATIONS
    } else {
        0
    };
    MAX_TAT + 1 + 2 * generation + tat
}

/// Waits out a `set_rate` if `word` is [`REBASING`] (it holds `rebasing`
/// for the few instructions until it stores the rebased word), and returns
/// the word to decide on, which stands for a state.
#[cold]
#[inline(never)]
fn settle(cell: &AtomicU64, rebasing: &Mutex<()>, mut word: u64) -> u64 {
    while word == REBASING {
        // Acquiring the lock orders this after the store `set_rate` made
        // before releasing it, so the load sees that word or a later one
        // (`REBASING` again only if another `set_rate` has begun since).
        drop(lock(rebasing));
        word = cell.load(Ordering::Acquire);
    }
    word
}

/// The atomic store: `tat` padded to its own cache line, the interval and
/// the rebase lock beside.
pub(crate) struct AtomicState {
    tat: CachePadded<AtomicU64>,
    interval: AtomicU64,
    slack: u64,
    /// Held by `set_rate` while `tat` is [`REBASING`]; steps that meet that
    /// word wait on it. Nothing else takes it.
    rebasing: Mutex<()>,
}

impl Store for AtomicState {
    fn new(tat: u64, params: Params) -> Self {
        AtomicState {
            tat: CachePadded::new(AtomicU64::new(tat)),
            interval: AtomicU64::new(params.interval()),
            slack: params.slack(),
            rebasing: Mutex::new(()),
        }
    }

    #[inline]
    fn update(&self, now: u64, cost: u64, admit: Admit) -> Result<Grant, Deny> {
        update(
            &self.tat,
            &self.rebasing,
            &self.interval,
            self.slack,
            now,
            cost,
            admit,
        )
    }

    fn peek(&self) -> (u64, Params) {
        // As in `update`: the same interval before and after the word.
        let mut before = self.interval.load(Ordering::Acquire);
        loop {
            let word = settle(&self.tat, &self.rebasing, self.tat.load(Ordering::Acquire));
            let after = self.interval.load(Ordering::Acquire);
            if after == before {
                return (state(word), Params::new_unchecked(before, self.slack));
            }
            before = after;
        }
    }

    fn set_params(&self, params: Params) {
        // Calls are serialized (`Core::set_rate`'s lock, and this one), so
        // the interval is the one every booking in the word below was made
        // at: a step reads the interval after the word, and only a word the
        // last rebase published (`Release`, read with `Acquire`) lets its CAS
        // in.
        let _rebasing = lock(&self.rebasing);
        let old = Params::new_unchecked(self.interval.load(Ordering::Relaxed), self.slack);
        // Take the word: from here until the store below, steps wait (on
        // `rebasing`), CASes decided on the word fail, and give-backs fail.
        let word = self.tat.swap(REBASING, Ordering::Acquire);
        let tat = schedule::rebase(state(word), old, params);
        self.interval.store(params.interval(), Ordering::Release);
        // Publish the rebased word with the interval it was rebased to.
        self.tat
            .store(word_after_rebase(word, tat), Ordering::Release);
    }

    fn give_back(&self, grant: Grant) -> bool {
        self.tat
            .compare_exchange(grant.next, grant.prev, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

/// A lock-free pacing limiter: `take()` before each unit of work returns when
/// that unit may go, so units leave at a steady rate with a bounded burst.
///
/// Its state is one cache-line-padded `AtomicU64` updated by a CAS loop: load,
/// decide, `compare_exchange`, and on a lost race decide again on the word
/// that won, so no update is lost and no slot is handed out twice. The
/// semantics are
/// uber-go/ratelimit's, plus a non-blocking [`try_take`](Self::try_take), a
/// bounded wait ([`take_timeout`](Self::take_timeout)), weighted costs, a
/// question that consumes nothing ([`can_take`](Self::can_take)) and live
/// rate changes ([`set_rate`](Self::set_rate)).
///
/// ```
/// use paceline::{AtomicLimiter, Rate};
///
/// let limiter = AtomicLimiter::new(Rate::per_second(1000));
/// let start = std::time::Instant::now();
/// for _ in 0..11 {
///     limiter.take(); // the first 11 at 1 ms spacing: ~10 ms in all
/// }
/// assert!(start.elapsed() >= std::time::Duration::from_millis(10));
/// ```
///
/// Share it between threads by reference or in an `Arc`; it is `Send + Sync`.
///
/// # Progress
/// Takes are lock-free, except during the few instructions of a
/// [`set_rate`](Self::set_rate): it holds the state word while it rebases it
/// and publishes the new interval, so that the change is exact whatever runs
/// beside it, and a take that meets it blocks on a lock `set_rate` holds for
/// just those instructions. Takes never touch a lock otherwise.
///
/// # Memory ordering
/// A limiter orders permits, not memory: `take` returning is not a
/// synchronization point with any other thread's `take`.
pub struct AtomicLimiter<C: Clock = DefaultClock> {
    core: Core<AtomicState, C>,
}

impl AtomicLimiter {
    /// A limiter at `rate` with uber's default slack of 10, on the
    /// [`DefaultClock`], waiting by sleeping.
    ///
    /// # Panics
    /// If ten intervals of `rate` exceed 146 years (an interval over about
    /// 14 years); [`builder`](Self::builder) reports that as an error.
    pub fn new(rate: Rate) -> AtomicLimiter {
        match Self::builder(rate).build() {
            Ok(limiter) => limiter,
            Err(e) => panic!("{e}"),
        }
    }

    /// A builder for a limiter at `rate`, to set its slack, clock, wait
    /// strategy or initial credit.
    ///
    /// ```
    /// use paceline::{AtomicLimiter, ManualClock, Rate, Wait};
    ///
    /// let limiter = AtomicLimiter::builder("500/s".parse()?)
    ///     .slack(0)                 // uber's WithoutSlack
    ///     .wait(Wait::PRECISE)      // sleep, then spin the last 150 µs
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(rate: Rate) -> Builder<AtomicLimiter> {
        Builder::with_default_clock(rate, DefaultClock::new)
    }
}

impl<C: Clock> AtomicLimiter<C> {
    pub(crate) fn from_config(config: Config<C>) -> Result<Self, BuildError> {
        Ok(AtomicLimiter {
            core: Core::new(config)?,
        })
    }
}

crate::limiter::impl_methods!(AtomicLimiter);

impl<C: Clock> fmt::Debug for AtomicLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AtomicLimiter")
            .field("rate", &self.rate())
            .field("slack", &self.slack())
            .field("available", &self.available())
            .finish()
    }
}
