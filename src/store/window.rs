//! [`WindowStore`]: the lock-free store of a quota per window, the word of
//! [`model::window`](crate::model::window) in one padded `AtomicU64` and a
//! CAS loop. Crate-internal: its loop ([`update_word`], [`settle_word`])
//! is the one a keyed limiter's window entries run (`src/keyed/`); the
//! store itself is compiled into paceline for its unit tests and, under
//! `--cfg paceline_loom`, for the loom models (`loom-tests/tests/window.rs`),
//! which reach it through a hidden re-export and so run that very loop.
//!
//! # Implementation details
//!
//! The state is the window word: the index of the window last counted in
//! and its count, packed by [`Params::pack`] ([`EMPTY`], 0, has counted
//! nothing). It sits in an `AtomicU64` on a padded cache line with the
//! quota in force, so that threads hammering it invalidate no neighbour's
//! data, and a step finds all it reads on one line.
//!
//! A take is a CAS loop: load the word, run
//! [`window::step`](crate::model::window::step) on it, and
//! `compare_exchange_weak` the step's `next` over the word it read; a lost
//! CAS (or a spurious failure) decides again on the word that won. So each
//! success replaces exactly the word its step read: no update is lost, and
//! two successes from one word are impossible, so no permit is counted
//! twice and none goes uncounted. A refusal stores nothing, nor does a
//! cost of 0 (its grant's `next` is its `prev`). A settle is the same loop
//! with [`window::settle`](crate::model::window::settle), and stores
//! nothing when the settle changes nothing.
//!
//! ## Parameters
//!
//! The window is fixed when the store is made; the quota can change. That
//! is the whole protocol, and why it needs no seqlock: the word's packing
//! depends on the window alone ([`Params::count_bits`]), so a change of
//! quota leaves the word as it is ([`window::rebase`] returns it
//! unchanged when the window stays), and the quota is one atomic, so a
//! step reads the parameters whole whatever it races: the fixed window
//! and one quota, old or new, never a mix. A change stores the new quota
//! under a lock of the store's own, which only orders changes among
//! themselves (the last one's quota is the one in force); a reset stores
//! [`EMPTY`] under the same lock.
//!
//! A change of window is not offered here. It would change the word's
//! packing, and a step that read the word and the old window before the
//! change could still win its CAS after it whenever the rebased word
//! happens to equal the word it read (a window with nothing counted is
//! [`EMPTY`] in every packing): its result, packed for the old window,
//! would then be read in the new one. The pacing store's generations of
//! its sentinel words answer that for `tat`; the window word has no spare
//! bits for them. A limiter over this store changes its window by making
//! a new store.
//!
//! ## Memory ordering
//!
//! The read-modify-writes of the word are totally ordered whatever the
//! ordering argument; that alone gives "nothing lost, nothing twice".
//! The orderings are for the quota: the word is loaded `Acquire` (and a
//! failed CAS reads the winner's word `Acquire`), the quota is loaded
//! after it, and the CAS stores `Release`. A step that decides on the word
//! another step stored therefore happens after that step's read of the
//! quota, and by read-read coherence reads the same quota or a newer one:
//! once a take is counted at the new quota, no take decided on its word
//! or any later one goes back to the old (loom: a `Relaxed` load of the
//! word breaks this). The quota itself needs no more than `Relaxed`
//! (the word's orderings carry it, and a change publishes one value); the
//! lock orders changes and resets among themselves. On x86 these compile to
//! the same instructions as `Relaxed`.
//!
//! A reset can make the word repeat: a step that read a word before the
//! reset may find it again once takes after the reset have counted back
//! up to it, and its CAS then succeeds. Its decision is the step on a
//! state the store holds, in the window and a quota in force (only its
//! clock reading is older, as any step's reading is older than its CAS),
//! so it is counted as a take on that state would be. A refund (a settle
//! of less than booked) can make it repeat the same way, with the same
//! answer; and after a change of quota such a step may be counted at the
//! quota it read (before the change), as if it had landed just before it.

// No limiter runs the store itself: outside its tests and the loom models,
// only the two loops below it are called (by the keyed limiter).
#![cfg_attr(not(any(test, paceline_loom)), allow(dead_code))]

use crossbeam_utils::CachePadded;

use crate::model::schedule::{Admit, Grant};
use crate::model::window::{self, Deny, Invalid, Params, EMPTY};
use crate::primitive::{lock, AtomicU64, Mutex, Ordering};

/// The lock-free store of one quota per window: the window word and the
/// quota in force, on a padded cache line of their own, updated by a CAS
/// loop that runs [`window::step`] (see the module doc's "Implementation
/// details" in `src/store/window.rs`).
pub struct WindowStore {
    /// The word and the quota, on one cache line: a step reads both, and
    /// only the word is written outside a change.
    cell: CachePadded<Cell>,
    /// Serializes changes of quota and resets. Steps never take it.
    changing: Mutex<()>,
}

/// What a step reads.
struct Cell {
    /// The window word ([`Params::pack`]).
    word: AtomicU64,
    /// The quota in force, at most `params.max_quota()`.
    quota: AtomicU64,
    /// The window and what the step derives from it; its quota is the one
    /// the store was made with, replaced by `quota` for every step.
    params: Params,
}

impl WindowStore {
    /// A store that has counted nothing ([`EMPTY`]), at `params`.
    pub fn new(params: Params) -> WindowStore {
        WindowStore {
            cell: CachePadded::new(Cell {
                word: AtomicU64::new(EMPTY),
                quota: AtomicU64::new(params.quota()),
                params,
            }),
            changing: Mutex::new(()),
        }
    }

    /// The parameters in force: the fixed window and the quota last
    /// stored. Read after the word a step decides on (see "Memory
    /// ordering").
    #[inline]
    fn params(&self) -> Params {
        let quota = self.cell.quota.load(Ordering::Relaxed);
        // Every quota stored was checked against this window's largest by
        // `set_quota`, so this is never the fallback.
        self.cell
            .params
            .with_quota(quota)
            .unwrap_or(self.cell.params)
    }

    /// Runs [`window::step`] for `cost` permits at `now` (Unix time, ns)
    /// on the word, and stores its result by a CAS over the word it read,
    /// deciding again on the word that beat it. With the grant (its `prev`
    /// the word it replaced, its `next` the word it stored), the
    /// parameters it ran in. A refusal and a cost of 0 store nothing.
    ///
    /// # Memory ordering
    /// The word is loaded `Acquire` and stored `Release`, the quota read in
    /// between: a step deciding on a word another step stored reads that
    /// step's quota or a newer one.
    #[inline]
    pub fn update(&self, now: u64, cost: u64, admit: Admit) -> Result<(Grant, Params), Deny> {
        update_word(&self.cell.word, || self.params(), now, cost, admit)
            .map(|(grant, _, params)| (grant, params))
    }

    /// Settles a booking of `booked` permits whose permit went at `went`
    /// with its `actual` cost ([`window::settle`]), by the same CAS loop as
    /// [`update`](Self::update): decided on the word it read, in the
    /// parameters in force, with the clock read by `now` after the word
    /// (again on a retry), stored over that word, decided again on the
    /// word that beat it. So its effect lands once, and nothing it did not
    /// see is replaced. The word it found and the word it left; a settle
    /// that changes nothing stores nothing.
    pub fn settle(&self, now: impl Fn() -> u64, went: u64, booked: u64, actual: u64) -> (u64, u64) {
        settle_word(
            &self.cell.word,
            || self.params(),
            now,
            (went, booked, actual),
        )
    }

    /// Changes the quota; the window and the word stay (a change of quota
    /// is [`window::rebase`]'s identity: what a window counted stays
    /// counted, a lowered quota leaves nothing more in it, a raised one
    /// adds the difference). Refused, changing nothing, when the quota is
    /// over what the word's count holds for the window. The parameters now
    /// in force.
    pub fn set_quota(&self, quota: u64) -> Result<Params, Invalid> {
        let params = self.cell.params.with_quota(quota)?;
        let _changing = lock(&self.changing);
        self.cell.quota.store(quota, Ordering::Relaxed);
        Ok(params)
    }

    /// Forgets what every window counted: the word goes back to
    /// [`EMPTY`], atomically with respect to every update (a CAS decided
    /// on the word before lands wholly before it, or finds `EMPTY` and
    /// decides again). The quota stays.
    pub fn reset(&self) {
        let _changing = lock(&self.changing);
        self.cell.word.store(EMPTY, Ordering::Release);
    }

    /// The word and the parameters in force, for a question that consumes
    /// nothing ([`window::available`], [`window::next_free`]).
    pub fn peek(&self) -> (u64, Params) {
        let word = self.cell.word.load(Ordering::Acquire);
        (word, self.params())
    }
}

/// What a grant's word leaves at its clock reading: [`window::left`]'s
/// permits available and ns until the next is free and until the window
/// ends.
pub(crate) type Left = (u64, u64, u64);

/// The one window CAS loop, over any word: [`WindowStore::update`]'s, and
/// a keyed limiter's window entries' (`src/keyed/`), so the loom models of
/// the store (`loom-tests/tests/window.rs`) run the keyed path's loop too.
/// Runs [`window::take`] ([`window::step`], and what its grant leaves) for
/// `cost` permits at `now` (Unix time, ns) on the
/// word in `cell`, in the parameters `params` reads after each load of the
/// word (the store's quota in force; a keyed entry's class, fixed under
/// its shard's read lock), and stores its result by a CAS over the word it
/// read, deciding again on the word that beat it. With the grant (its
/// `prev` the word it replaced, its `next` the word it stored), what that
/// word leaves at `now` ([`window::left`]'s three numbers) and the
/// parameters it ran in. A refusal and a cost of 0 store nothing.
///
/// # Memory ordering
/// The word is loaded `Acquire` and stored `Release`, the parameters read
/// in between: a step deciding on a word another step stored reads that
/// step's quota or a newer one (see the module doc).
#[inline(always)]
pub(crate) fn update_word(
    cell: &AtomicU64,
    params: impl Fn() -> Params,
    now: u64,
    cost: u64,
    admit: Admit,
) -> Result<(Grant, Left, Params), Deny> {
    let mut word = cell.load(Ordering::Acquire);
    loop {
        // Read after the word: at least as new as the quota of the step
        // that stored it.
        let params = params();
        // Refused? Nothing to store: the refusal holds for this word.
        let (grant, left) = window::take(word, now, cost, params, admit)?;
        // Nothing to store (a cost of 0)?
        if grant.next == word {
            return Ok((grant, left, params));
        }
        match cell.compare_exchange_weak(word, grant.next, Ordering::Release, Ordering::Acquire) {
            Ok(_) => return Ok((grant, left, params)),
            // Someone else moved the word (or a spurious failure): decide
            // again on the word that is there now.
            Err(actual) => word = actual,
        }
    }
}

/// The one window settle loop, over any word ([`WindowStore::settle`]'s
/// and a keyed window entry's): [`window::settle`] of a booking of
/// `booked` permits whose permit went at `went` (Unix time, ns) with its
/// `actual` cost, decided on the word it read in the parameters `params`
/// reads after it, with the clock read by `now` after the word (again on a
/// retry), stored over that word, decided again on the word that beat it.
/// So its effect lands once, and nothing it did not see is replaced. The
/// word it found and the word it left; a settle that changes nothing
/// stores nothing.
pub(crate) fn settle_word(
    cell: &AtomicU64,
    params: impl Fn() -> Params,
    now: impl Fn() -> u64,
    (went, booked, actual): (u64, u64, u64),
) -> (u64, u64) {
    let mut word = cell.load(Ordering::Acquire);
    loop {
        let params = params();
        let next = window::settle(word, now(), went, booked, actual, params);
        if next == word {
            return (word, word);
        }
        match cell.compare_exchange_weak(word, next, Ordering::Release, Ordering::Acquire) {
            Ok(_) => return (word, next),
            Err(found) => word = found,
        }
    }
}

impl std::fmt::Debug for WindowStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (word, params) = self.peek();
        f.debug_struct("WindowStore")
            .field("state", &params.unpack(word))
            .field("quota", &params.quota())
            .field("window", &params.window())
            .finish()
    }
}

#[cfg(test)]
#[cfg(not(paceline_loom))]
mod tests;
