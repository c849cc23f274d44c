//! A limit counted by window in PostgreSQL: the window step's and settle's
//! PL/pgSQL function, `<table>_count`, which `install` creates beside the
//! pacing step's, and the calls that run it.
//!
//! The row is the pacing step's (`key`, `tat`, `prev_tat`, `rest_at`):
//! `tat` holds the window word ([`window::Params::pack`]: the index of the
//! window last counted in, then its count), encoded as a state is
//! ([`encode`]); `rest_at` is the Unix second [`GRACE_SECS`] after that
//! window's end, from which the row counts nothing and is pruned like
//! any row at rest. The function reads the row under its lock (`FOR
//! UPDATE`), runs [`window::step`] or [`window::settle`] on it at the
//! server's `clock_timestamp()`, in `numeric` (every `u64` exact), and
//! writes only what changed; its text is `window_sql.rs`.

use tokio_postgres::types::{ToSql, Type};

use super::backend::AsyncPostgresBackend;
use super::sql::{decode, encode};
use crate::model::schedule::{Admit, Deny};
use crate::model::window::{self, Window};
use crate::remote::seam::{Count, Recount};
use crate::remote::{Decision, Done, Error};
use crate::store::Booking;

/// Seconds a window's row is kept past the window's end: its count is
/// then spent for nothing, and a second covers the server's clock's
/// resolution of a second for `rest_at`.
pub(crate) const GRACE_SECS: u64 = 2;

/// The function's arguments' types: key, now, op, kind, width, offset,
/// first, last, quota, count bits, cost, within, went, cap, grace.
const COUNT_TYPES: [Type; 15] = [
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::INT4,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
];

impl AsyncPostgresBackend {
    /// Runs the window's function for `op` ('take' or 'settle') on the
    /// row `key` (as stored): its reply, `[now, code, …]`.
    async fn count_call(
        &self,
        key: &str,
        now: Option<u64>,
        op: &str,
        p: window::Params,
        [cost, within, went, cap]: [Option<String>; 4],
    ) -> Result<Vec<i64>, Error> {
        let (kind, width) = match p.window() {
            Window::Fixed { seconds } => ("f", seconds as i64),
            Window::Day { .. } => ("d", 0),
            Window::Week { starts, .. } => ("w", starts as i64),
            Window::Month { .. } => ("m", 0),
            Window::Year { .. } => ("y", 0),
        };
        let now = now.map(encode);
        let (offset, first, last) = (
            i64::from(p.window().offset()),
            p.first(),
            p.last_index() as i64,
        );
        let (quota, bits, grace) = (
            p.quota().to_string(),
            p.count_bits() as i32,
            GRACE_SECS as i64,
        );
        let params: [&(dyn ToSql + Sync); 15] = [
            &key, &now, &op, &kind, &width, &offset, &first, &last, &quota, &bits, &cost, &within,
            &went, &cap, &grace,
        ];
        let row = self.row(&self.0.sql.count, &COUNT_TYPES, &params).await?;
        let reply: Vec<Option<i64>> = row.try_get(0).map_err(Error::script)?;
        reply
            .into_iter()
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(|| {
                Error::script("the window's function answered a NULL: run install() again")
            })
    }

    /// The window step on `key` (as stored), at the server's clock or at
    /// `now` (internal ns; tests only).
    pub(crate) async fn count_at(
        &self,
        key: &str,
        count: &Count,
        now: Option<u64>,
    ) -> Result<Decision, Error> {
        let within = match count.admit {
            Admit::Always => None,
            Admit::Within(max) => Some(max.to_string()),
        };
        let args = [Some(count.cost.to_string()), within, None, None];
        let reply = self
            .count_call(key, now, "take", count.params, args)
            .await?;
        let granted = |n: i64, i: i64, c: i64, prev: Option<(i64, i64)>| {
            let prev = match prev {
                Some((pi, pc)) => Some(count.params.pack(window::State {
                    index: u64::try_from(pi).ok()?,
                    count: u64::try_from(pc).ok()?,
                })?),
                None => None,
            };
            let (i, c) = (u64::try_from(i).ok()?, u64::try_from(c).ok()?);
            count.granted(decode(n), i, c, prev)
        };
        let decision = match *reply.as_slice() {
            [n, 1, i, c, 1, pi, pc] => granted(n, i, c, Some((pi, pc))),
            [n, 1, i, c, 0, _, _] => granted(n, i, c, None),
            [_, 0, wait] => u64::try_from(wait)
                .ok()
                .map(|w| Decision::Denied(Deny::Wait(w))),
            [_, 2] => Some(Decision::Denied(Deny::ExceedsBurst)),
            [_, 4] => Some(Decision::Denied(Deny::Saturated)),
            _ => None,
        };
        if matches!(decision, Some(Decision::Granted(_))) && count.cost > 0 {
            self.wrote();
        }
        decision.ok_or_else(|| Error::script(format!("the window's function answered {reply:?}")))
    }

    /// The window settle on `key` (as stored): the word left and the
    /// server's time.
    pub(crate) async fn recount_at(
        &self,
        key: &str,
        r: &Recount,
        now: Option<u64>,
    ) -> Result<Done, Error> {
        let args = [
            Some(r.actual.saturating_sub(r.booked).to_string()),
            Some(r.booked.saturating_sub(r.actual).to_string()),
            Some(r.went.to_string()),
            Some(r.params.max_quota().to_string()),
        ];
        let reply = self.count_call(key, now, "settle", r.params, args).await?;
        match *reply.as_slice() {
            [n, 3, i, c] if i >= 0 && c >= 0 => r
                .params
                .pack(window::State {
                    index: i as u64,
                    count: c as u64,
                })
                .map(|word| Done::Peeked(word, decode(n))),
            _ => None,
        }
        .ok_or_else(|| Error::script(format!("the window's function answered {reply:?}")))
    }

    /// A window key's word ([`window::EMPTY`] when absent) and the
    /// server's time.
    pub(crate) async fn peek_count_at(&self, key: &str, now: Option<u64>) -> Result<Done, Error> {
        let now = now.map(encode);
        let row = self
            .row(&self.0.sql.peek, &[Type::TEXT, Type::INT8], &[&key, &now])
            .await?;
        let now: i64 = row.try_get(0).map_err(Error::script)?;
        let word: Option<i64> = row.try_get(1).map_err(Error::script)?;
        Ok(Done::Peeked(
            word.map_or(window::EMPTY, decode),
            decode(now),
        ))
    }

    /// Undoes a window grant by the one rule: back to its word before (or
    /// deleted, when it had none) only while the row holds its word.
    pub(crate) async fn undo_count(
        &self,
        key: &str,
        p: window::Params,
        booking: Booking,
    ) -> Result<Done, Error> {
        let sql = &self.0.sql;
        let next = encode(booking.next);
        let changed = match booking.prev {
            Some(prev) => {
                let end = p.end(p.unpack(prev).index) / 1_000_000_000;
                let rest_at = end.saturating_add(GRACE_SECS).min(i64::MAX as u64) as i64;
                let types = [Type::TEXT, Type::INT8, Type::INT8, Type::INT8];
                let params: [&(dyn ToSql + Sync); 4] = [&key, &next, &encode(prev), &rest_at];
                self.exec(&sql.give_back_count, &types, &params).await?
            }
            None => {
                let types = [Type::TEXT, Type::INT8];
                self.exec(&sql.give_back_absent, &types, &[&key, &next])
                    .await?
            }
        };
        Ok(Done::Flag(changed > 0))
    }
}
