//! The wire format: the arguments `step.lua` takes and the replies it gives,
//! for the blocking and the async limiter alike. The script's own header
//! documents both ends.
//!
//! A call is one `EVALSHA` built straight into one [`Cmd`]: the key (prefix
//! and name) and every number are written into its buffer, with no string
//! of their own. Times and spans under 2^53 ns cross as one decimal, larger
//! ones (and every reply) as pairs `(s, n)` of `s * 10^9 + n`, which the
//! script's doubles hold exactly.

use std::io::Write;

use ::redis::{
    Cmd, ConnectionLike, FromRedisValue, RedisError, RedisResult, RedisWrite, Script, ToRedisArgs,
    Value,
};

use crate::clock::{Clock, UnixClock};
use crate::model::schedule::{Admit, Deny, ORIGIN};
use crate::model::window::{self, Window};
use crate::remote::key;
use crate::remote::seam::{paced, Count};
use crate::remote::socket::cut;
use crate::remote::{Decision, Done, Error, Op, Request};
use crate::store::Booking;

/// The step, as Redis runs it.
pub(super) const STEP_LUA: &str = include_str!("step.lua");

/// The window step, as Redis runs it (why a script of its own: its
/// header).
pub(super) const WINDOW_LUA: &str = include_str!("window.lua");

/// The largest quota the window script counts: a count plus a cost fits
/// the 37 bits its key gives the count (`window.lua`).
pub(crate) const MAX_QUOTA: u64 = (1 << 36) - 1;

/// The window script's key, `f * 2^52 + r * 2^37 + c`: the count's unit
/// of `r`, `f`, and how many windows `r` tells apart.
const COUNT: u64 = 1 << 37;
const AHEAD: u64 = 1 << 52;
const ROUND: u64 = 32_767;

/// The split of the script's pairs: `s * B + n`.
const B: u64 = 1_000_000_000;

/// The script and the prefix: what turns a call into an `EVALSHA`.
pub(super) struct Wire {
    script: Script,
    window: Script,
    prefix: String,
}

/// A key as Redis names it: the prefix, then the caller's key as stored
/// (see `src/remote/key.rs`), written into the command as one argument.
struct FullKey<'a> {
    prefix: &'a str,
    key: &'a str,
}

impl ToRedisArgs for FullKey<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut arg = out.writer_for_next_arg();
        // Writing into the command's buffer cannot fail.
        let _ = arg.write_all(self.prefix.as_bytes());
        let _ = arg.write_all(self.key.as_bytes());
    }
}

impl Wire {
    pub(super) fn new(prefix: String) -> Wire {
        Wire {
            script: Script::new(STEP_LUA),
            window: Script::new(WINDOW_LUA),
            prefix,
        }
    }

    /// The prefix put before every key.
    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The command for `op`: `EVALSHA <sha> 1 <prefix><key>` and the
    /// script's arguments, after its "test" clock when a test sets one
    /// (`now`: then a grant is stored without expiry); or for a reset
    /// `DEL <prefix><key>`, which forgets the key's state (absent is at
    /// rest), as redis_rate's `Reset` (a `DEL` twice is one).
    pub(super) fn command(&self, key: &str, op: &Op, now: Option<u64>) -> Cmd {
        // The key as stored (src/remote/key.rs): as given, or its digest.
        let key = &*key::redis(key);
        // At most 14 arguments, each its digits plus ~16 bytes of framing.
        let size = 64 + self.prefix.len() + key.len() + 14 * 36;
        let mut cmd = Cmd::with_capacity(12, size);
        let full = FullKey {
            prefix: &self.prefix,
            key,
        };
        if let Op::Reset = op {
            cmd.arg("DEL").arg(full);
            return cmd;
        }
        let counted = op.params().is_some();
        let script = if counted { &self.window } else { &self.script };
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(1).arg(full);
        if let Some(now) = now {
            cmd.arg("test");
            // The window script's test clock is Unix time.
            pair(&mut cmd, if counted { now - ORIGIN } else { now });
        }
        match *op {
            Op::Step(request) => {
                // Spans as one decimal each: the script splits them.
                cmd.arg("take")
                    .arg(request.span)
                    .arg(request.params.tau())
                    .arg(request.lead());
                match request.admit {
                    Admit::Always => cmd.arg(""),
                    Admit::Within(max) => cmd.arg(max),
                };
                cmd.arg(request.keep);
            }
            Op::Peek => {
                cmd.arg("peek");
            }
            // A grant undone (see `Booking`): `tau` sets the restored
            // state's TTL.
            Op::Undo { tau, booking } => {
                cmd.arg("give");
                pair(&mut cmd, tau);
                cmd.arg(booking.next);
                match booking.prev {
                    Some(prev) => {
                        cmd.arg(prev);
                        pair(&mut cmd, prev);
                    }
                    None => {
                        cmd.arg("").arg("").arg("");
                    }
                }
            }
            // The model's settle: the refund's spans, then for an excess a
            // take's arguments, admitted whatever its wait.
            Op::Settle(settle) => {
                let (give, reach) = settle.refund_spans();
                let p = settle.params;
                cmd.arg("settle").arg(give).arg(reach).arg(p.interval());
                pair(&mut cmd, settle.went);
                let span = settle.excess_span();
                cmd.arg(span)
                    .arg(p.tau())
                    .arg(span.saturating_sub(p.interval()))
                    .arg("")
                    .arg(settle.keep);
            }
            Op::Reset => {}
            // The window's, then the operation's arguments (see
            // `window.lua`).
            Op::Count(count) => {
                cmd.arg("take");
                windowed(&mut cmd, count.params);
                cmd.arg(count.cost);
                match count.admit {
                    Admit::Always => cmd.arg("").arg(""),
                    Admit::Within(max) => cmd.arg(max / B).arg(max % B),
                };
            }
            Op::PeekCount(params) => {
                cmd.arg("peek");
                windowed(&mut cmd, params);
            }
            Op::UndoCount { params, booking } => {
                cmd.arg("give");
                windowed(&mut cmd, params);
                let next = params.unpack(booking.next);
                cmd.arg(next.index).arg(next.count);
                match booking.prev.map(|w| params.unpack(w)) {
                    Some(prev) => cmd.arg(prev.index).arg(prev.count),
                    None => cmd.arg("").arg(""),
                };
            }
            Op::Recount(recount) => {
                cmd.arg("settle");
                windowed(&mut cmd, recount.params);
                let (booked, actual) = (recount.booked, recount.actual);
                let cap = recount.params.max_quota().min(MAX_QUOTA + 1);
                cmd.arg(recount.went / B)
                    .arg(actual.saturating_sub(booked))
                    .arg(booked.saturating_sub(actual))
                    .arg(cap);
            }
        }
        cmd
    }

    /// Sends `cmd` (made by this wire, or a `PING`); after a `NOSCRIPT` (a server that
    /// restarted, a `SCRIPT FLUSH`), loads the script and sends it again.
    pub(super) fn invoke<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        con: &mut dyn ConnectionLike,
    ) -> RedisResult<T> {
        match cmd.query(con) {
            // (Both scripts: a server that lost one lost the other.)
            Err(e) if no_script(&e) => {
                self.script.load(con)?;
                self.window.load(con)?;
                cmd.query(con)
            }
            reply => reply,
        }
    }

    /// [`invoke`](Self::invoke), async.
    #[cfg(feature = "tokio")]
    pub(super) async fn invoke_async<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        con: &mut (impl ::redis::aio::ConnectionLike + Send),
    ) -> RedisResult<T> {
        match cmd.query_async(con).await {
            Err(e) if no_script(&e) => {
                self.script.load_async(con).await?;
                self.window.load_async(con).await?;
                cmd.query_async(con).await
            }
            reply => reply,
        }
    }
}

fn no_script(e: &RedisError) -> bool {
    e.code() == Some("NOSCRIPT")
}

/// Refuses a call the window script cannot count exactly: a quota over
/// [`MAX_QUOTA`].
pub(super) fn check(op: &Op) -> Result<(), Error> {
    match op.params().map(|p| p.quota()) {
        Some(quota) if quota > MAX_QUOTA => Err(Error::Config(format!(
            "a quota of {quota} per window is over what Redis counts exactly ({MAX_QUOTA}, \
             2^36 - 1)"
        ))),
        _ => Ok(()),
    }
}

/// A window's arguments: quota, kind, width, offset, first, last.
fn windowed(cmd: &mut Cmd, p: window::Params) {
    let (kind, width) = match p.window() {
        Window::Fixed { seconds } => ("f", seconds),
        Window::Day { .. } => ("d", 0),
        Window::Week { starts, .. } => ("w", starts as u64),
        Window::Month { .. } => ("m", 0),
        Window::Year { .. } => ("y", 0),
    };
    cmd.arg(p.quota())
        .arg(kind)
        .arg(width)
        .arg(p.window().offset())
        .arg(p.first())
        .arg(p.last_index());
}

/// A time as a pair `(s, n)`.
fn pair(cmd: &mut Cmd, ns: u64) {
    cmd.arg(ns / B).arg(ns % B);
}

/// The integers of a reply (one, or an array of them), or `None` for any
/// other shape.
fn ints(reply: &Value) -> Option<Vec<u64>> {
    let int = |value: &Value| match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match reply {
        Value::Array(items) => items.iter().map(int).collect(),
        one => Some(vec![int(one)?]),
    }
}

/// The time the pair at `i` names, if a well-formed one.
fn joined(ints: &[u64], i: usize) -> Option<u64> {
    match (ints.get(i), ints.get(i + 1)) {
        (Some(&s), Some(&n)) if n < B => s.checked_mul(B)?.checked_add(n),
        _ => None,
    }
}

/// The reply to `op`, and for a grant made at a test clock (`tested`) the
/// TTL the key would have had, ms (else 0).
pub(super) fn done(reply: &Value, op: &Op, tested: bool) -> Result<(Done, u64), Error> {
    match op {
        Op::Step(request) => {
            decision(reply, request, tested).map(|(d, ttl)| (Done::Decision(d), ttl))
        }
        Op::Count(count) => counted(reply, count).map(|d| (Done::Decision(d), 0)),
        // A window's state, packed, and the server's time, internal ns.
        Op::PeekCount(params) | Op::Recount(crate::remote::seam::Recount { params, .. }) => {
            match ints(reply).as_deref() {
                Some(ints @ [3, i, c, _, _]) => joined(ints, 3)
                    .zip(params.pack(window::State {
                        index: *i,
                        count: *c,
                    }))
                    .map(|(now, word)| (Done::Peeked(word, now.saturating_add(ORIGIN)), 0)),
                _ => None,
            }
            .ok_or_else(|| bad_reply(reply))
        }
        Op::UndoCount { .. } => match ints(reply).as_deref() {
            Some(&[5, given @ (0 | 1)]) => Ok((Done::Flag(given == 1), 0)),
            _ => Err(bad_reply(reply)),
        },
        // A peek's `(tat, now)`; whether a give-back undid the grant; the
        // keys a `DEL` removed.
        _ => match (op, ints(reply).as_deref()) {
            (Op::Peek, Some(ints @ [3, _, _, _, _])) => {
                let (tat, now) = (joined(ints, 1), joined(ints, 3));
                tat.zip(now).map(|(tat, now)| Done::Peeked(tat, now))
            }
            (Op::Undo { .. }, Some(&[5, given @ (0 | 1)])) => Some(Done::Flag(given == 1)),
            // A settle's state left and the server's time (and in tests
            // the TTL it set, ms, which `call_at` answers beside it).
            (Op::Settle(_), Some(ints @ ([6, _, _, _, _] | [6, _, _, _, _, _]))) => {
                let (tat, now) = (joined(ints, 1), joined(ints, 3));
                tat.zip(now).map(|(tat, now)| Done::Peeked(tat, now))
            }
            (Op::Reset, Some(&[removed])) => Some(Done::Flag(removed > 0)),
            _ => None,
        }
        .map(|done| (done, settle_ttl(reply, op, tested)))
        .ok_or_else(|| bad_reply(reply)),
    }
}

/// The TTL a settle at a test clock gave its key, ms; 0 otherwise.
fn settle_ttl(reply: &Value, op: &Op, tested: bool) -> u64 {
    match (op, tested, ints(reply).as_deref()) {
        (Op::Settle(_), true, Some(&[6, _, _, _, _, ttl])) => ttl,
        _ => 0,
    }
}

/// The script's reply to `request`: the decision, and for a grant made at
/// a test clock (`tested`) the TTL the key would have had, ms (else 0).
fn decision(reply: &Value, request: &Request, tested: bool) -> Result<(Decision, u64), Error> {
    let parsed = ints(reply).as_deref().and_then(|ints| {
        Some(match ints {
            [1, ..] => {
                let (slot, now) = (joined(ints, 1)?, joined(ints, 3)?);
                let (ttl, rest) = if tested {
                    (*ints.get(5)?, &ints[6..])
                } else {
                    (0, &ints[5..])
                };
                let prev = match rest {
                    [] => None,
                    [_, _] => Some(joined(rest, 0)?),
                    _ => return None,
                };
                // A grant stored the state one interval after its slot; a
                // cost of 0 stored nothing.
                let wrote = match request.cost {
                    0 => None,
                    _ => Some(slot.checked_add(request.params.interval())?),
                };
                (request.granted(now, slot, prev, wrote), ttl)
            }
            [0, _, _] => {
                let deny = if request.exceeds_burst {
                    Deny::ExceedsBurst
                } else {
                    Deny::Wait(joined(ints, 1)?)
                };
                (Decision::Denied(deny), 0)
            }
            [4] => (Decision::Denied(Deny::Saturated), 0),
            _ => return None,
        })
    });
    parsed.ok_or_else(|| bad_reply(reply))
}

/// The window script's reply to `count`.
fn counted(reply: &Value, count: &Count) -> Result<Decision, Error> {
    let parsed = ints(reply).as_deref().and_then(|ints| match ints {
        [1, v, rest @ ..] => {
            // Granted at once in the started window the key holds: the
            // server's clock came back in tests only, else the client's
            // stands in (a grant at once waits for no slot).
            let now = match rest {
                [] => UnixClock.now(),
                [s, n] if *n < B => s.checked_mul(B)?.checked_add(*n)?,
                _ => return None,
            };
            let (r, c) = ((v % AHEAD) / COUNT, v % COUNT);
            if *v >= AHEAD || r == 0 || c < count.cost {
                return None;
            }
            let p = count.params;
            let i = nearest(r - 1, p.index_at(now));
            let prev = p.pack(window::State {
                index: i,
                count: c - count.cost,
            })?;
            let next = p.pack(window::State { index: i, count: c })?;
            let now = now.saturating_add(ORIGIN);
            let booking = Booking::granted(now, now, count.cost, Some(prev), next);
            Some(Decision::Granted(booking))
        }
        [6, i, c, ..] => {
            let now = joined(ints, 3)?.saturating_add(ORIGIN);
            let prev = match &ints[5..] {
                [] => None,
                [pi, pc] => Some(count.params.pack(window::State {
                    index: *pi,
                    count: *pc,
                })?),
                _ => return None,
            };
            count.granted(now, *i, *c, prev)
        }
        [0, _, _] => Some(Decision::Denied(Deny::Wait(joined(ints, 1)?))),
        [2] => Some(Decision::Denied(paced(window::Deny::ExceedsQuota))),
        [4] => Some(Decision::Denied(Deny::Saturated)),
        _ => None,
    });
    parsed.ok_or_else(|| bad_reply(reply))
}

/// The window index `≡ r (mod ROUND)` nearest `near`: the one a key's `r`
/// abbreviates, read on a clock within `ROUND / 2` windows of the server's.
pub(super) fn nearest(r: u64, near: u64) -> u64 {
    let ahead = (r + ROUND - near % ROUND) % ROUND;
    match near.checked_sub(ROUND - ahead) {
        Some(behind) if ahead > ROUND / 2 => behind,
        _ => near + ahead,
    }
}

fn bad_reply(reply: &Value) -> Error {
    // At most the first few elements, each cut short: a reply is small
    // unless something is badly wrong, and an error message should stay
    // readable.
    let short = |value: &Value| cut(&format!("{value:?}")).to_owned();
    let shown: Vec<String> = match reply {
        Value::Array(items) => items.iter().take(8).map(short).collect(),
        other => vec![short(other)],
    };
    Error::script(RedisError::from((
        ::redis::ErrorKind::Parse,
        "unexpected reply from paceline's step script",
        format!("{shown:?}"),
    )))
}
