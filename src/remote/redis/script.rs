//! The wire format: the arguments `step.lua` takes and the replies it gives,
//! for the blocking and the async limiter alike. The script's own header
//! documents both ends.

use ::redis::{RedisError, Script, ScriptInvocation};

use crate::remote::{Decision, Error, Request, Undo};
use crate::schedule::{Admit, Deny};

/// The step, as Redis runs it.
pub(super) const STEP_LUA: &str = include_str!("step.lua");

/// The script and the prefix: what turns a call into an `EVALSHA`.
pub(super) struct Wire {
    script: Script,
    prefix: String,
}

impl Wire {
    pub(super) fn new(prefix: String) -> Wire {
        Wire {
            script: Script::new(STEP_LUA),
            prefix,
        }
    }

    /// The prefix put before every key.
    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key of `key`.
    fn full_key(&self, key: &str) -> String {
        let mut full = String::with_capacity(self.prefix.len() + key.len());
        full.push_str(&self.prefix);
        full.push_str(key);
        full
    }

    /// The script call for a step: at the server's `TIME`, or at `now`
    /// (internal ns; tests only, and then the key is stored without expiry).
    pub(super) fn step(
        &self,
        key: &str,
        request: &Request,
        now: Option<u64>,
    ) -> ScriptInvocation<'_> {
        let max = match request.admit {
            Admit::Always => String::new(),
            Admit::Within(max) => max.to_string(),
        };
        let mut call = self.script.key(self.full_key(key));
        call.arg("take")
            .arg(request.lead())
            .arg(request.span)
            .arg(request.params.tau())
            .arg(max)
            .arg(if request.exceeds_burst { "1" } else { "0" })
            .arg(now.map(|n| n.to_string()).unwrap_or_default());
        call
    }

    /// The script call that undoes a grant (see [`Undo`]): `tau` sets the
    /// restored state's TTL.
    #[cfg(any(test, feature = "tokio"))]
    pub(super) fn give_back(
        &self,
        key: &str,
        tau: u64,
        undo: Undo,
        now: Option<u64>,
    ) -> ScriptInvocation<'_> {
        let mut call = self.script.key(self.full_key(key));
        call.arg("give")
            .arg(0)
            .arg(0)
            .arg(tau)
            .arg(undo.next)
            .arg(undo.prev.map(|p| p.to_string()).unwrap_or_default())
            .arg(now.map(|n| n.to_string()).unwrap_or_default());
        call
    }

    /// The script call that reads a key's state and the server's time.
    pub(super) fn peek(&self, key: &str, now: Option<u64>) -> ScriptInvocation<'_> {
        let mut call = self.script.key(self.full_key(key));
        call.arg("peek")
            .arg(0)
            .arg(0)
            .arg(0)
            .arg("")
            .arg("0")
            .arg(now.map(|n| n.to_string()).unwrap_or_default());
        call
    }
}

/// The script's reply to a step: the decision, and for a grant the TTL the
/// key was given, ms (0 for a refusal).
pub(super) fn decision(reply: &[String]) -> Result<(Decision, u64), Error> {
    let num = |i: usize| -> Result<u64, Error> {
        reply
            .get(i)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad_reply(reply))
    };
    let denied = |deny| Ok((Decision::Denied(deny), 0));
    match reply.first().map(String::as_str) {
        Some("1") => {
            // `prev` ("" when the key was absent) and `next`: absent for a
            // cost of 0, which stored nothing.
            let undo = match (reply.get(4), reply.get(5)) {
                (Some(prev), Some(_)) => Some(Undo {
                    prev: if prev.is_empty() { None } else { Some(num(4)?) },
                    next: num(5)?,
                }),
                _ => None,
            };
            Ok((
                Decision::Granted {
                    slot: num(1)?,
                    now: num(2)?,
                    undo,
                },
                num(3)?,
            ))
        }
        Some("0") => denied(Deny::Wait(num(1)?)),
        Some("2") => denied(Deny::ExceedsBurst),
        Some("4") => denied(Deny::Saturated),
        _ => Err(bad_reply(reply)),
    }
}

/// The script's reply to a give-back: whether the grant was undone.
#[cfg(any(test, feature = "tokio"))]
pub(super) fn given_back(reply: &[String]) -> Result<bool, Error> {
    match (
        reply.first().map(String::as_str),
        reply.get(1).map(String::as_str),
    ) {
        (Some("5"), Some("1")) => Ok(true),
        (Some("5"), Some("0")) => Ok(false),
        _ => Err(bad_reply(reply)),
    }
}

/// The script's reply to a peek: `(tat, now)`.
pub(super) fn peeked(reply: &[String]) -> Result<(u64, u64), Error> {
    match (
        reply.first().map(String::as_str),
        reply.get(1),
        reply.get(2),
    ) {
        (Some("3"), Some(tat), Some(now)) => match (tat.parse(), now.parse()) {
            (Ok(tat), Ok(now)) => Ok((tat, now)),
            _ => Err(bad_reply(reply)),
        },
        _ => Err(bad_reply(reply)),
    }
}

fn bad_reply(reply: &[String]) -> Error {
    // At most the first few fields: a reply is small unless something is
    // badly wrong, and an error message should stay readable.
    let shown: Vec<&str> = reply
        .iter()
        .take(4)
        .map(|s| {
            s.char_indices()
                .nth(40)
                .map_or(s.as_str(), |(i, _)| &s[..i])
        })
        .collect();
    Error::Script(std::sync::Arc::new(RedisError::from((
        ::redis::ErrorKind::Parse,
        "unexpected reply from paceline's step script",
        format!("{shown:?}"),
    ))))
}
