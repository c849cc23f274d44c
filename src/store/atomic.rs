//! [`AtomicStore`]: the lock-free store, one padded `AtomicU64` and a CAS
//! loop.
//!
//! # Implementation details
//!
//! The whole state is one `u64` word, an `AtomicU64` that shares a padded
//! cache line with its parameters only, so that threads hammering it do not
//! also invalidate their neighbours' data, and a step finds all it reads on
//! one line. An update is a CAS loop: load, run the pure step,
//! `compare_exchange_weak` the new word in, and on failure run the step again
//! on the word that won. The first attempt is inlined into the take; the
//! loop that follows a lost CAS (or meets a change) is out of line.
//! The loop may retry; it never loses an update (each success replaces
//! exactly the word its step read) and never hands two callers the same
//! slot (two successes from one word are impossible).
//!
//! ## The state word
//!
//! | word | meaning |
//! |---|---|
//! | `0` ([`FRESH`]) | nothing granted yet: the first request goes at once, banks nothing |
//! | `1` ([`FULL`]) | at rest with full credit (a `full_credit` limiter's start) |
//! | `2 ..= MAX_TAT` | `tat`: the earliest internal time the next request may start |
//! | `MAX_TAT + 1 ..= MAX_TAT + 2 * GENERATIONS` | `FRESH` (even offset) or `FULL` (odd offset) republished by a parameter change or a reset, so the word changes all the same |
//! | `u64::MAX` ([`REBASING`]) | a parameter change (or a reset) holds the word; steps wait on its lock |
//!
//! ([`MAX_TAT`] is `2^16` ns below `u64::MAX`; the step never produces a
//! state above it.)
//!
//! ## Parameters
//!
//! The interval and `tau` (the slack as time) sit in two more atomics that only
//! [`set_params`](Store::set_params) writes, guarded by a version counter
//! (a seqlock): odd while a change is being written, even otherwise. A step
//! reads the version, the word, the parameters, then the version again, and
//! goes ahead only if both versions agree and are even: the parameters it
//! decides with are then the ones in force for the word it read, as one
//! unit. (A single permit refused whatever the parameters, its word more
//! than the allowed wait ahead of the clock, is refused from the word alone
//! ([`schedule::refusal_at_once`]): that refusal holds at the moment the
//! word was read, so it needs no parameters and no second version.) A
//! change must also rebase the word by the parameters every booking
//! in it was made at, with no step booking in between (one that did would
//! book a slot at the old spacing from the rebased word). So it swaps the
//! word for [`REBASING`], writes the parameters, then stores the rebased
//! word, all under a lock of the store's own. A step that reads
//! `REBASING` (or an odd version) waits on that lock for those few
//! instructions; one that read the word before the swap fails its CAS and
//! decides again; a give-back fails (its slot stays spent). Takes are
//! therefore lock-free except during the few instructions of a change; they
//! block rather than spin, so a change preempted there costs them no CPU.
//!
//! The ordering argument needs the word never to repeat. A `give_back`
//! (async cancellation) can make it repeat, and so can a rebase that lowers
//! `tat` (a faster rate) followed by bookings that raise it to the very word
//! a preempted step read before the change: that step's CAS then succeeds
//! (ABA) with a decision made at the old parameters, after grants at the new
//! ones (`loom-tests/tests/give_back.rs`). Its grant is still distinct and
//! paced whole by one set of parameters; in the rebase case the old rate is
//! the slower one, so the grant is late, never early. A reset (which puts
//! `FRESH` or `FULL` back, under the same lock and by the same table) can
//! let a word repeat the same way: a step that read a word before the reset
//! may find it again once takes after the reset have brought `tat` back to
//! it, and its CAS then succeeds. Its grant is distinct from every other
//! (its slot is at or after that word, which every grant since the reset
//! lies before) and paced by the one set of parameters from a state the
//! limiter held since the reset; only its clock reading is older, as any
//! step's reading is older than its CAS. (A change of slack
//! alone that leaves the word as it was is the same as the step landing
//! just before the change: the rebase leaves its result as it is too.)

use crossbeam_utils::CachePadded;

use crate::model::schedule::{self, Admit, Deny, Grant, Params, FRESH, FULL, MAX_TAT};
use crate::primitive::{fence, lock, AtomicU64, Mutex, Ordering};

use super::sealed::Store;

/// The word while a parameter change rebases it.
const REBASING: u64 = u64::MAX;

/// How many words stand for each of the sentinels `FRESH` and `FULL`, above
/// [`MAX_TAT`] (plus the sentinel itself, the word a limiter starts with).
/// 2^15 - 1: the table's words stay clear of [`REBASING`].
const GENERATIONS: u64 = (1 << 15) - 1;

/// The lock-free store of [`AtomicLimiter`](crate::AtomicLimiter): the state
/// word and its parameters, padded to a cache line of their own (see the
/// module's table of words in the source, `src/store/atomic.rs`).
pub struct AtomicStore {
    /// The word and its parameters, on one cache line of their own: a step
    /// reads all four, and only the word is written outside a change.
    cell: CachePadded<Cell>,
    /// Held by a parameter change while the word is [`REBASING`]; steps
    /// that meet that word (or an odd version) wait on it. Nothing else
    /// takes it.
    rebasing: Mutex<()>,
}

/// What a step reads.
struct Cell {
    /// The state word (see the table above).
    tat: AtomicU64,
    /// Even when the parameters below are settled, odd while a change
    /// writes them.
    version: AtomicU64,
    interval: AtomicU64,
    /// `tau` (slack times interval), kept so that no step multiplies.
    tau: AtomicU64,
}

impl AtomicStore {
    /// The version and the word, read for a step.
    #[inline]
    fn load(&self) -> (u64, u64) {
        let version = self.cell.version.load(Ordering::Acquire);
        (version, self.cell.tat.load(Ordering::Acquire))
    }

    /// The parameters, if they are still those of `version`: read after the
    /// word, and checked against a second read of the version (the fence
    /// orders that read after theirs).
    #[inline]
    fn params(&self, version: u64) -> Option<Params> {
        let interval = self.cell.interval.load(Ordering::Relaxed);
        let tau = self.cell.tau.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let settled = version & 1 == 0 && self.cell.version.load(Ordering::Relaxed) == version;
        settled.then(|| Params::from_tau_unchecked(interval, tau))
    }

    /// The CAS loop, for whatever the hot path of [`update`](Store::update)
    /// did not settle in one attempt: a lost CAS (contention), a word above
    /// [`MAX_TAT`], or a parameter change in progress. Out of line, so that
    /// the hot path stays small enough to inline into every take.
    /// It goes on from the `version` and `word` the hot path last read (the
    /// word its CAS met, if that failed), so it reads nothing twice.
    #[cold]
    #[inline(never)]
    fn update_contended(
        &self,
        now: u64,
        cost: u64,
        admit: Admit,
        mut version: u64,
        mut word: u64,
    ) -> Result<(Grant, Params), Deny> {
        loop {
            (version, word) = self.wait_out(version, word);
            let Some(params) = self.params(version) else {
                // A change began since the version was read: the word may be
                // from before its rebase. Wait it out and read both again.
                word = REBASING;
                continue;
            };
            match self.step_and_store(word, state(word), now, cost, params, admit)? {
                Ok(grant) => return Ok((grant, params)),
                // Someone else moved the state (or a spurious failure): decide
                // again on the word that is there now.
                Err(actual) => word = actual,
            }
        }
    }

    /// The step on `tat` (the state `word` stands for) and the CAS of its
    /// result over `word`: `Ok(grant)` once stored (or with nothing to
    /// store, at a cost of 0), `Err(actual)` when the CAS met `actual`.
    #[inline(always)]
    fn step_and_store(
        &self,
        word: u64,
        tat: u64,
        now: u64,
        cost: u64,
        params: Params,
        admit: Admit,
    ) -> Result<Result<Grant, u64>, Deny> {
        let grant = schedule::step(tat, now, cost, params, admit)?;
        // Nothing to store (a cost of 0)? Asked of `cost`, not of the new
        // word, so that a constant cost folds it away.
        if cost == 0 {
            return Ok(Ok(grant));
        }
        Ok(self
            .cell
            .tat
            .compare_exchange_weak(word, grant.next, Ordering::Release, Ordering::Acquire)
            .map(|_| grant))
    }

    /// Waits out a parameter change if `word` is [`REBASING`] or `version`
    /// is odd (the change holds `rebasing` for the few instructions until it
    /// stores the rebased word), and returns a version and a word to decide
    /// on, the word standing for a state.
    #[cold]
    #[inline(never)]
    fn wait_out(&self, mut version: u64, mut word: u64) -> (u64, u64) {
        while word == REBASING || version & 1 == 1 {
            // Acquiring the lock orders this after the stores the change
            // made before releasing it, so the loads see them or later ones
            // (`REBASING` again only if another change has begun since).
            drop(lock(&self.rebasing));
            (version, word) = self.load();
        }
        (version, word)
    }
}

impl Store for AtomicStore {
    const LIMITER: &'static str = "AtomicLimiter";

    fn new(tat: u64, params: Params, warm_up: u64) -> Self {
        debug_assert_eq!(warm_up, 0, "only WarmStore warms up");
        AtomicStore {
            cell: CachePadded::new(Cell {
                tat: AtomicU64::new(tat),
                version: AtomicU64::new(0),
                interval: AtomicU64::new(params.interval()),
                tau: AtomicU64::new(params.tau()),
            }),
            rebasing: Mutex::new(()),
        }
    }

    /// # Memory ordering
    /// The read-modify-writes of the word are totally ordered whatever the
    /// ordering argument, and that alone makes grants distinct and loses no
    /// update. The acquire loads and the release CAS of the word are for the
    /// parameters: a step that reads the word another step stored also sees
    /// the parameters that step used (or newer ones), so after a change no
    /// grant goes back to the old parameters once one has been paced by the
    /// new (loom found that with `Relaxed`). A step that reads the word a
    /// change published (`Release`, after its parameters and its even
    /// version) sees those parameters. The version read before the word and
    /// again after the parameters (behind an acquire fence) proves that no
    /// change wrote them in between. On x86 these compile to the same
    /// instructions as `Relaxed`.
    #[inline(always)]
    fn update(&self, now: u64, cost: u64, admit: Admit) -> Result<(Grant, Params), Deny> {
        // One attempt at the common case: a plain word (a state is its own
        // word), settled parameters, no one else's CAS in between.
        let (version, mut word) = self.load();
        // A refusal no parameters could change needs none read.
        if let Some(wait) = schedule::refusal_at_once(word, now, cost, admit) {
            return Err(Deny::Wait(wait));
        }
        if word <= MAX_TAT {
            if let Some(params) = self.params(version) {
                match self.step_and_store(word, word, now, cost, params, admit)? {
                    Ok(grant) => return Ok((grant, params)),
                    // Someone else moved the state (or a spurious failure).
                    Err(actual) => word = actual,
                }
            } else {
                // A change began since the version was read.
                word = REBASING;
            }
        }
        self.update_contended(now, cost, admit, version, word)
    }

    fn peek(&self) -> (u64, Params) {
        let (mut version, mut word) = self.load();
        loop {
            (version, word) = self.wait_out(version, word);
            if let Some(params) = self.params(version) {
                return (state(word), params);
            }
            (version, word) = self.load();
        }
    }

    fn set_params(&self, now: u64, params: Params) {
        // Calls are serialized (the limiter's lock, and this one), so the
        // parameters read here are the ones every booking in the word was
        // made at: a step checks the version around its reads, and only a
        // word the last change published lets its CAS in.
        let _rebasing = lock(&self.rebasing);
        let version = self.cell.version.load(Ordering::Relaxed);
        let old = Params::from_tau_unchecked(
            self.cell.interval.load(Ordering::Relaxed),
            self.cell.tau.load(Ordering::Relaxed),
        );
        // Take the word: from here until the store below, steps wait (on
        // `rebasing`), CASes decided on the word fail, and give-backs fail.
        let word = self.cell.tat.swap(REBASING, Ordering::Acquire);
        let tat = schedule::rebase(state(word), now, old, params);
        // Odd while the parameters are written: a step that reads any of
        // the new ones sees the odd version after its fence.
        self.cell.version.store(version + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.cell
            .interval
            .store(params.interval(), Ordering::Relaxed);
        self.cell.tau.store(params.tau(), Ordering::Relaxed);
        self.cell.version.store(version + 2, Ordering::Release);
        // Publish the rebased word with the parameters it was rebased to.
        self.cell
            .tat
            .store(word_after_rebase(word, tat), Ordering::Release);
    }

    fn reset(&self, tat: u64) {
        // A reset follows a change's protocol, with the parameters left as
        // they are: under the change's lock it takes the word (steps wait,
        // CASes decided on the word fail, give-backs fail) and publishes the
        // next generation's word for `tat`, so that a CAS decided on any
        // word before the reset fails too, as after a rebase.
        let _rebasing = lock(&self.rebasing);
        let word = self.cell.tat.swap(REBASING, Ordering::Acquire);
        self.cell
            .tat
            .store(word_after_rebase(word, tat), Ordering::Release);
    }

    fn give_back(&self, grant: Grant) -> bool {
        self.cell
            .tat
            .compare_exchange(grant.next, grant.prev, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// The CAS loop of [`update`](Store::update) with the settle step, by
    /// the same protocol: decided on a word and the parameters in force for
    /// it (a change in progress waited out), stored by a CAS over that
    /// word, decided again on the word that beat it. So it replaces exactly
    /// the word it read, and no update replaces it unseen: nothing lost,
    /// its effect once. A settle racing a change lands wholly before it
    /// (its CAS beat the swap to `REBASING`, and the change rebases what it
    /// stored) or wholly after, on the rebased word in the new parameters
    /// (and the limiter sends no refund there: see the trait). A settle
    /// that changes nothing stores nothing.
    fn settle(&self, now: impl Fn() -> u64, went: u64, booked: u64, actual: u64) -> (u64, u64) {
        let (mut version, mut word) = self.load();
        loop {
            (version, word) = self.wait_out(version, word);
            let Some(params) = self.params(version) else {
                // A change began since the version was read.
                word = REBASING;
                continue;
            };
            let found = state(word);
            let next = schedule::settle(found, now(), went, booked, actual, params);
            if next == found {
                return (found, found);
            }
            match self.cell.tat.compare_exchange_weak(
                word,
                next,
                Ordering::Release,
                Ordering::Acquire,
            ) {
                Ok(_) => return (found, next),
                Err(actual) => word = actual,
            }
        }
    }
}

/// The CAS loop for a cell whose parameters cannot change while it runs, so
/// it needs none of [`AtomicStore`]'s care for changes: the keyed store
/// changes a key's parameters only under its shard's write lock, and steps
/// under the read lock, and its words never leave `0..=MAX_TAT`. Same step,
/// same CAS.
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

/// [`AtomicStore::settle`]'s loop for a keyed entry's word, whose
/// parameters cannot change while it runs (as for [`update_fixed`]); the
/// state it found and the state it left.
#[cfg(feature = "keyed")]
pub(crate) fn settle_fixed(
    cell: &AtomicU64,
    params: Params,
    now: impl Fn() -> u64,
    (went, booked, actual): (u64, u64, u64),
) -> (u64, u64) {
    let mut found = cell.load(Ordering::Relaxed);
    loop {
        let next = schedule::settle(found, now(), went, booked, actual, params);
        if next == found {
            return (found, found);
        }
        match cell.compare_exchange_weak(found, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return (found, next),
            Err(actual) => found = actual,
        }
    }
}

/// The state a word stands for: itself, or a sentinel's generation's.
#[inline]
fn state(word: u64) -> u64 {
    if word > MAX_TAT {
        (word - MAX_TAT - 1) & 1
    } else {
        word
    }
}

/// The word a change stores for `tat` when the cell held `word`: `tat`
/// itself, except that a sentinel (`FRESH`, `FULL`, which a rebase leaves
/// as they are) gets the next generation's word, so that a CAS decided on
/// the word before, at the old parameters, fails all the same.
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

#[cfg(test)]
#[cfg(not(paceline_loom))]
mod tests;
