//! The CAS loop with memcached as the word, as a machine without I/O: each
//! call is a [`Machine`] that says what to send next and reads each reply,
//! and the blocking and async connections drive it alike.
//!
//! A take reads the key's state and CAS token (`mg v c`), runs
//! [`schedule::step`](crate::model::schedule::step) on the client's clock
//! (the request's [`step`](Request::step)), and stores the grant over the
//! token (`ms C<cas>`), or with `add` semantics (`ms ME`) when the key was
//! absent; a refusal writes nothing. If anyone wrote in between (`EX`), or
//! the key came or went (`NS`, `NF`), the machine says
//! [`Next::Conflict`]: the driver pauses (see [`pause`]) and starts it
//! again, a bounded number of times within the call's budget, then fails
//! with the contention, an error no fail policy admits.
//!
//! A settle is the same loop over
//! [`schedule::settle`](crate::model::schedule::settle) (`Settle::apply`):
//! read, settle on the client's clock, store over the token if the state
//! changed. A conflict means its store did not land, so starting again
//! never applies it twice.
//!
//! A limit counted by window is the same loop over
//! [`window::step`](crate::model::window::step) and
//! [`window::settle`](crate::model::window::settle) on the stored window
//! word, on the client's Unix time; the item expires
//! [`EXPIRY_GRACE_SECS`] after the end of the window it holds, when it
//! counts nothing any more.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

use super::proto::{self, Failure, Head};
use crate::clock::{internal_now, Clock, UnixClock};
use crate::model::schedule::{FULL, ORIGIN};
use crate::model::window::{self, EMPTY};
use crate::remote::seam::{Count, Recount};
use crate::remote::{Done, Op, Request, Settle};
use crate::store::Booking;

/// The most conflicts one call retries (the call's budget usually ends it
/// first). A conflict means another client's write went through, so the
/// key makes progress whoever loses; but with `k` clients racing flat out,
/// a call loses each round with a chance near `(k - 1) / k`: 32 losses in
/// a row happen to about one call in 70 among 8 clients, 256 to one in
/// 10^15.
pub(crate) const MAX_CONFLICTS: u32 = 256;

/// The pause after a conflict is drawn from zero to this times the
/// conflicts so far, up to [`PAUSE_MAX`]: long enough to let one rival's
/// `ms` through, short beside a round trip. It does not double: a loser
/// that backed off far would only lose more often to clients that did not
/// lose (a conflict is never a sign of an overloaded server, only of a
/// hot key).
const PAUSE_STEP: Duration = Duration::from_micros(50);

/// The longest pause after a conflict.
const PAUSE_MAX: Duration = Duration::from_micros(200);

/// memcached reads an exptime above this (30 days, in seconds) as a Unix
/// time, not a number of seconds from now.
pub(crate) const MAX_RELATIVE_EXPTIME: u64 = 2_592_000;

/// Seconds added to a key's rest time: memcached's clock ticks once a
/// second, so an item may expire up to a second before its exptime says
/// (one second), and one more to spare. A key kept past its rest time
/// decides as an absent one: the margin costs only memory.
pub(crate) const EXPIRY_GRACE_SECS: u64 = 2;

/// Added to an absolute exptime (a rest time over 30 days away), which the
/// server reads on its own wall clock: a day covers any wall clock this
/// host's could disagree with and still be in service. A key kept past its
/// rest time decides as an absent one.
pub(crate) const ABSOLUTE_MARGIN_SECS: u64 = 86_400;

/// One reply: its head and, after a `VA`, the value (`Ok` a state, `Err`
/// the length of a value that is not one).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reply {
    pub(crate) head: Head,
    pub(crate) value: Option<Result<u64, usize>>,
}

/// What the driver does next.
#[derive(Debug)]
pub(crate) enum Next {
    /// Send [`Machine::out`] and feed the reply to [`Machine::reply`].
    Send,
    /// A CAS race was lost: pause, then [`Machine::begin`] again.
    Conflict,
    /// The call's answer.
    Done(Result<Done, Failure>),
}

#[derive(Clone, Copy, Debug)]
enum Phase {
    /// The first command (a read; a reset's delete) is out.
    First,
    /// A step's or a settle's store is out, and this is its answer if it
    /// lands.
    Store(Done),
    /// A give-back's store or delete is out.
    Restore,
}

/// One call on one stored key, on the client's clock `C`.
pub(crate) struct Machine<'a, C> {
    key: &'a str,
    op: Op,
    clock: &'a C,
    phase: Phase,
    out: Vec<u8>,
    /// CAS races lost so far.
    pub(crate) conflicts: u32,
    /// Whether a store was sent: the call may have written, and must not
    /// be sent again on another connection.
    pub(crate) wrote: bool,
}

impl<'a, C: Clock> Machine<'a, C> {
    pub(crate) fn new(key: &'a str, op: Op, clock: &'a C) -> Self {
        Machine {
            key,
            op,
            clock,
            phase: Phase::First,
            out: Vec::with_capacity(96),
            conflicts: 0,
            wrote: false,
        }
    }

    /// What to send now.
    pub(crate) fn out(&self) -> &[u8] {
        &self.out
    }

    /// Starts (or starts again, after a conflict) with the first command.
    pub(crate) fn begin(&mut self) {
        self.phase = Phase::First;
        match self.op {
            Op::Step(_)
            | Op::Undo { .. }
            | Op::Settle(_)
            | Op::Count(_)
            | Op::UndoCount { .. }
            | Op::Recount(_) => proto::get(&mut self.out, self.key),
            Op::Peek | Op::PeekCount(_) => proto::peek(&mut self.out, self.key),
            Op::Reset => proto::delete(&mut self.out, self.key, None),
        }
    }

    /// Reads the reply to [`out`](Self::out).
    pub(crate) fn reply(&mut self, reply: Reply) -> Next {
        match (self.phase, self.op) {
            (Phase::First, Op::Step(request)) => match read(reply, true) {
                Ok(found) => self.decide(found, &request),
                Err(f) => Next::Done(Err(f)),
            },
            (Phase::First, Op::Peek) => Next::Done(read(reply, false).map(|found| {
                let tat = found.map_or(FULL, |(tat, _)| tat);
                Done::Peeked(tat, self.now())
            })),
            (Phase::First, Op::Undo { tau, booking }) => match read(reply, true) {
                Ok(found) => self.give_back(found, tau, booking),
                Err(f) => Next::Done(Err(f)),
            },
            (Phase::First, Op::Settle(settle)) => match read(reply, true) {
                Ok(found) => self.settle(found, &settle),
                Err(f) => Next::Done(Err(f)),
            },
            (Phase::First, Op::Count(count)) => match read(reply, true) {
                Ok(found) => self.count(found, &count),
                Err(f) => Next::Done(Err(f)),
            },
            (Phase::First, Op::PeekCount(_)) => Next::Done(read(reply, false).map(|found| {
                let word = found.map_or(EMPTY, |(word, _)| word);
                Done::Peeked(word, self.unix_now())
            })),
            (Phase::First, Op::UndoCount { params, booking }) => match read(reply, true) {
                Ok(found) => self.give_back_count(found, params, booking),
                Err(f) => Next::Done(Err(f)),
            },
            (Phase::First, Op::Recount(recount)) => match read(reply, true) {
                Ok(found) => self.recount(found, &recount),
                Err(f) => Next::Done(Err(f)),
            },
            (Phase::First, Op::Reset) => Next::Done(match reply.head {
                Head::Done => Ok(Done::Flag(true)),
                Head::NotFound => Ok(Done::Flag(false)),
                other => Err(unexpected(other)),
            }),
            (Phase::Store(done), _) => match reply.head {
                Head::Done => Next::Done(Ok(done)),
                Head::Exists | Head::NotFound | Head::NotStored => {
                    self.conflicts += 1;
                    Next::Conflict
                }
                other => Next::Done(Err(unexpected(other))),
            },
            (Phase::Restore, _) => Next::Done(match reply.head {
                Head::Done => Ok(Done::Flag(true)),
                // Someone wrote since: the slot is theirs now.
                Head::Exists | Head::NotFound | Head::NotStored => Ok(Done::Flag(false)),
                other => Err(unexpected(other)),
            }),
        }
    }

    fn now(&self) -> u64 {
        internal_now(self.clock)
    }

    /// The window step's clock: Unix time, internal ns (the clock's own
    /// readings when it knows its Unix origin, else the host's wall clock).
    fn unix_now(&self) -> u64 {
        let unix = match self.clock.unix_origin() {
            Some(origin) => origin.saturating_add(self.clock.now()),
            None => UnixClock.now(),
        };
        unix.saturating_add(ORIGIN)
    }

    /// The step on what the read found (`None`: absent, at rest).
    fn decide(&mut self, found: Option<(u64, u64)>, request: &Request) -> Next {
        // The decision's time: the state read holds until the store, or
        // the store fails.
        let now = self.now();
        let (prev, cas) = found.unzip();
        let (decision, wrote) = request.step(prev, now);
        let Some(next) = wrote else {
            // A refusal, or a cost of 0: nothing to store.
            return Next::Done(Ok(Done::Decision(decision)));
        };
        let exptime = exptime(next, request.keep, now, wall_secs);
        proto::store(&mut self.out, self.key, next, cas, exptime);
        self.phase = Phase::Store(Done::Decision(decision));
        self.wrote = true;
        Next::Send
    }

    /// The settle on what the read found (`None`: absent, at rest): the
    /// state it leaves stored over the token, if it changed.
    fn settle(&mut self, found: Option<(u64, u64)>, settle: &Settle) -> Next {
        let now = self.now();
        let (prev, cas) = found.unzip();
        let Some(next) = settle.apply(prev, now) else {
            return Next::Done(Ok(Done::Peeked(prev.unwrap_or(FULL), now)));
        };
        let exptime = exptime(next, settle.keep, now, wall_secs);
        proto::store(&mut self.out, self.key, next, cas, exptime);
        self.phase = Phase::Store(Done::Peeked(next, now));
        self.wrote = true;
        Next::Send
    }

    /// The window step on what the read found (`None`: absent, nothing
    /// counted), the word it leaves stored over the token.
    fn count(&mut self, found: Option<(u64, u64)>, count: &Count) -> Next {
        let now = self.unix_now();
        let (prev, cas) = found.unzip();
        let (decision, wrote) = count.step(prev, now);
        let Some(next) = wrote else {
            return Next::Done(Ok(Done::Decision(decision)));
        };
        proto::store(
            &mut self.out,
            self.key,
            next,
            cas,
            window_exptime(next, count.params, now),
        );
        self.phase = Phase::Store(Done::Decision(decision));
        self.wrote = true;
        Next::Send
    }

    /// The window settle on what the read found, stored over the token if
    /// it changed the word.
    fn recount(&mut self, found: Option<(u64, u64)>, recount: &Recount) -> Next {
        let now = self.unix_now();
        let (prev, cas) = found.unzip();
        let Some(next) = recount.apply(prev, now) else {
            return Next::Done(Ok(Done::Peeked(prev.unwrap_or(EMPTY), now)));
        };
        let exptime = window_exptime(next, recount.params, now);
        proto::store(&mut self.out, self.key, next, cas, exptime);
        self.phase = Phase::Store(Done::Peeked(next, now));
        self.wrote = true;
        Next::Send
    }

    /// Puts a window key back to `undo.prev` (deletes it for `None`) over
    /// the token just read, if it still holds the grant's word.
    fn give_back_count(
        &mut self,
        found: Option<(u64, u64)>,
        params: window::Params,
        undo: Booking,
    ) -> Next {
        let cas = match found {
            Some((word, cas)) if word == undo.next => cas,
            _ => return Next::Done(Ok(Done::Flag(false))),
        };
        match undo.prev {
            Some(prev) => {
                let exptime = window_exptime(prev, params, self.unix_now());
                proto::store(&mut self.out, self.key, prev, Some(cas), exptime);
            }
            None => proto::delete(&mut self.out, self.key, Some(cas)),
        }
        self.phase = Phase::Restore;
        self.wrote = true;
        Next::Send
    }

    /// Puts the key back to `undo.prev` over the token just read, if it
    /// still holds the grant's state.
    fn give_back(&mut self, found: Option<(u64, u64)>, tau: u64, undo: Booking) -> Next {
        let cas = match found {
            Some((tat, cas)) if tat == undo.next => cas,
            _ => return Next::Done(Ok(Done::Flag(false))),
        };
        let now = self.now();
        match undo.prev {
            // (A state at rest decides as an absent key.)
            Some(prev) if prev.saturating_add(tau) > now => {
                let exptime = exptime(prev, tau, now, wall_secs);
                proto::store(&mut self.out, self.key, prev, Some(cas), exptime);
            }
            _ => proto::delete(&mut self.out, self.key, Some(cas)),
        }
        self.phase = Phase::Restore;
        self.wrote = true;
        Next::Send
    }
}

/// A read's answer: `Some((state, cas))`, or `None` for an absent key. A
/// peek does not ask for the token (it reads 0); a step and a give-back do,
/// and a reply without one is not the protocol.
fn read(reply: Reply, with_cas: bool) -> Result<Option<(u64, u64)>, Failure> {
    match (reply.head, reply.value) {
        (Head::Miss, _) => Ok(None),
        (Head::Value { .. }, Some(Err(len))) => Err(Failure::Foreign(len)),
        (Head::Value { cas: Some(cas), .. }, Some(Ok(tat))) => Ok(Some((tat, cas))),
        (Head::Value { cas: None, .. }, Some(Ok(tat))) if !with_cas => Ok(Some((tat, 0))),
        (other, _) => Err(unexpected(other)),
    }
}

fn unexpected(head: Head) -> Failure {
    Failure::Garbled(format!("an unexpected reply {head:?}"))
}

/// The host's wall clock, Unix seconds: what an absolute exptime is
/// counted on (the server's wall clock, which this host's approximates).
fn wall_secs() -> u64 {
    UnixClock.now() / 1_000_000_000
}

/// The exptime to store `state` with: its rest time (`state + tau`) seen
/// from `now`, rounded up to whole seconds, plus [`EXPIRY_GRACE_SECS`].
/// Over 30 days, memcached wants a Unix time: `wall()` plus that plus
/// [`ABSOLUTE_MARGIN_SECS`]; past 2038 (what its 32-bit exptime holds),
/// 0, which never expires.
pub(crate) fn exptime(state: u64, tau: u64, now: u64, wall: impl FnOnce() -> u64) -> u32 {
    let rest = state.saturating_add(tau).saturating_sub(now);
    let secs = rest
        .div_ceil(1_000_000_000)
        .saturating_add(EXPIRY_GRACE_SECS);
    if secs <= MAX_RELATIVE_EXPTIME {
        return secs as u32;
    }
    let at = wall()
        .saturating_add(secs)
        .saturating_add(ABSOLUTE_MARGIN_SECS);
    i32::try_from(at).map_or(0, |at| at as u32)
}

/// The exptime to store the window word `word` with: the end of the
/// window it holds seen from `now` (internal ns), as [`exptime`] reckons a
/// rest time.
fn window_exptime(word: u64, params: window::Params, now: u64) -> u32 {
    let end = params.end(params.unpack(word).index);
    exptime(end.saturating_add(ORIGIN), 0, now, wall_secs)
}

/// The pause after a call's `conflicts`-th lost race: drawn uniformly from
/// zero to [`PAUSE_STEP`] times `conflicts`, at most [`PAUSE_MAX`], so that
/// clients that lost to the same write do not all come back together.
pub(crate) fn pause(conflicts: u32) -> Duration {
    let bound = PAUSE_STEP.saturating_mul(conflicts.max(1)).min(PAUSE_MAX);
    // A few bits of noise, not security: every `RandomState` has random
    // keys of its own.
    let r = RandomState::new().hash_one(conflicts);
    Duration::from_nanos(r % (bound.as_nanos() as u64).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn exptime_is_the_rest_time_rounded_up_and_absolute_past_30_days() {
        let now = 1 << 62;
        let wall = || 1_800_000_000;
        // 1.5 s to rest: 2 s, plus the grace.
        assert_eq!(exptime(now + S / 2, S, now, wall), 2 + 2);
        // At most 30 days is relative.
        let days30 = MAX_RELATIVE_EXPTIME * S;
        assert_eq!(
            exptime(now, days30 - 2 * S, now, wall),
            MAX_RELATIVE_EXPTIME as u32
        );
        // Beyond, a Unix time, with the margin.
        let days100 = 100 * 86_400 * S;
        assert_eq!(
            exptime(now, days100, now, wall),
            (1_800_000_000 + 100 * 86_400 + 2 + ABSOLUTE_MARGIN_SECS) as u32
        );
        // Past what 32 bits hold: never expire.
        assert_eq!(exptime(now, u64::MAX / 2, now, wall), 0);
    }

    #[test]
    fn pauses_stay_within_their_bounds() {
        for conflicts in 0..40 {
            let p = pause(conflicts);
            assert!(p < PAUSE_MAX, "{p:?}");
        }
        assert!(pause(1) < PAUSE_STEP);
    }
}
