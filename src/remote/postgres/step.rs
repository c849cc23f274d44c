//! The step as one call of its function (`sql.rs`), and its reply as a
//! decision: the function writes only what the row admits and returns the
//! clock and the `tat` it read, from which the client tells a refusal's
//! kind and wait with the same integer arithmetic the function used.

use tokio::time::Instant;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::backend::AsyncPostgresBackend;
use super::sql::{decode, encode, rest_consts};
use crate::model::schedule::{Admit, Deny, FULL, MAX_TAT};
use crate::remote::{Decision, Error, Request};

/// The step's parameter types: key, span, tau, how far past now a base is
/// admitted (text, cast to `numeric`: `max - lead` may not fit a `bigint`),
/// now, the two `rest_at` constants.
const STEP_TYPES: [Type; 7] = [
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::INT8,
];

impl AsyncPostgresBackend {
    /// Runs the step for `request` on the row `key` (as stored): at the
    /// server's clock, or at `now` (internal ns; tests only).
    pub(crate) async fn step_at(
        &self,
        key: &str,
        request: &Request,
        now: Option<u64>,
    ) -> Result<Decision, Error> {
        if request.cost == 0 {
            // Nothing to pay: admitted at the server's now, nothing stored.
            let (_, now) = self.peek_at(key, now).await?;
            return Ok(request.granted(now, now, None, None));
        }
        let span = request.span as i64;
        let tau = request.params.tau() as i64;
        // Admitted when `base + lead - now <= max`: `base <= now + within`.
        let within = match request.admit {
            Admit::Always => None,
            Admit::Within(max) => Some((i128::from(max) - i128::from(request.lead())).to_string()),
        };
        let (secs, rem) = rest_consts(request.keep);
        let now = now.map(encode);
        let start = Instant::now();
        loop {
            let params: [&(dyn ToSql + Sync); 7] = [&key, &span, &tau, &within, &now, &secs, &rem];
            let row = self.row(&self.0.sql.step, &STEP_TYPES, &params).await?;
            match decision(&row, request)? {
                Some(decision) => {
                    if matches!(decision, Decision::Granted { .. }) {
                        self.wrote();
                    }
                    return Ok(decision);
                }
                // The `tat` read admits, but nothing was written: another
                // call changed the row between the function's update and
                // its read (or inserted the key first). Asking again is
                // safe, and the next call sees the newer state.
                None if start.elapsed() < self.0.response_timeout => continue,
                None => return Err(Error::Timeout),
            }
        }
    }
}

/// The step's reply (`now`, the `tat` read, the state written and the one
/// it replaced) as a decision; `None`: ask again.
fn decision(row: &Row, request: &Request) -> Result<Option<Decision>, Error> {
    let reply: Vec<Option<i64>> = row.try_get(0).map_err(Error::script)?;
    let &[Some(now), tat, next, prev] = reply.as_slice() else {
        let what = format!(
            "the step's function answered {reply:?}, not [now, tat, next, prev]: \
             run install() (or schema_sql()'s SQL) again"
        );
        return Err(Error::script(what));
    };
    let now = decode(now);
    if let Some(next) = next.map(decode) {
        let slot = next - request.params.interval();
        let prev = prev.map(decode);
        return Ok(Some(request.granted(now, slot, prev, Some(next))));
    }
    // Nothing written: the decision on the `tat` read, as the function
    // took it (an absent row is FULL; every stored state is at least FULL).
    let tat = tat.map_or(FULL, decode);
    let base = tat.max(now.saturating_sub(request.params.tau())).max(FULL);
    if base > MAX_TAT - request.span {
        return Ok(Some(Decision::Denied(Deny::Saturated)));
    }
    let wait = (base + request.lead()).saturating_sub(now);
    match request.admit {
        Admit::Within(max) if wait > max => Ok(Some(Decision::Denied(if request.exceeds_burst {
            Deny::ExceedsBurst
        } else {
            Deny::Wait(wait)
        }))),
        // The row read admits, the one updated did not.
        _ => Ok(None),
    }
}
