//! The rows a query selects: walked once, only the first `limit` in the
//! query's order copied, then sorted.

use std::net::IpAddr;

use super::query::{Column, Query, Row};
use super::{Kind, Registered};

/// The rows a query selects, sorted and capped, and how many matched.
pub(super) struct Listing {
    /// Each with its key.
    pub(super) rows: Vec<(String, Row)>,
    pub(super) matched: usize,
    /// Of the buckets the query's filters select, those at rest (fill 0),
    /// listed (and matched) only if it asks.
    pub(super) at_rest: usize,
}

/// Walks the limiters the query covers and keeps the first `limit` rows in
/// its order, and a count of all. Only those are copied, so a request's
/// memory is bounded by the rows it returns, not by the keys it walks:
/// rows are kept in a buffer of up to `2 * limit`; when it is full, the
/// best `limit` are selected (linear time) and the rest dropped, and from
/// then on the worst of those (`kept[limit - 1]`) is a bar that an offered
/// row must beat to be copied at all. Most rows of a large map are turned
/// away by the bar, borrowed, without an allocation.
pub(super) fn collect(limiters: &[Registered], query: &Query) -> Listing {
    let limit = query.limit;
    let mut kept: Vec<(String, Row)> = Vec::new();
    let (mut matched, mut at_rest, mut cut) = (0, 0, false);
    // Keeps only the best `limit` rows, the worst of them at `limit - 1`.
    let keep_best = |kept: &mut Vec<(String, Row)>| {
        if kept.len() > limit {
            kept.select_nth_unstable_by(limit - 1, |a, b| order(limiters, query, pair(a), pair(b)));
            kept.truncate(limit);
        }
        kept.len() == limit
    };
    for (index, registered) in limiters.iter().enumerate() {
        let Kind::Keyed(limiter) = &registered.kind else {
            continue;
        };
        if query
            .limiter
            .as_ref()
            .is_some_and(|l| *l != registered.name)
        {
            continue;
        }
        limiter.tracking().rows(query, &mut |key, row| {
            // A bucket with none of its burst in use is at rest.
            let rest = row.state.fill == 0.0;
            at_rest += usize::from(rest);
            if rest && !query.at_rest {
                return;
            }
            matched += 1;
            let row = Row {
                limiter: index,
                ..row
            };
            if limit == 0
                || (cut && order(limiters, query, (key, &row), pair(&kept[limit - 1])).is_ge())
            {
                return;
            }
            kept.push((key.to_owned(), row));
            if kept.len() >= limit.saturating_mul(2) {
                cut = keep_best(&mut kept);
            }
        });
    }
    keep_best(&mut kept);
    kept.sort_unstable_by(|a, b| order(limiters, query, pair(a), pair(b)));
    Listing {
        rows: kept,
        matched,
        at_rest,
    }
}

/// A kept row as [`order`] takes it.
pub(super) fn pair((key, row): &(String, Row)) -> (&str, &Row) {
    (key, row)
}

/// The query's order of two rows, each with its key: its column, then
/// (ties) the limiter's name and the key ([`by_key`]), always A to Z, as
/// the page's script. (A key is unique in its limiter: the order is total.)
pub(super) fn order(
    limiters: &[Registered],
    query: &Query,
    (a_key, a): (&str, &Row),
    (b_key, b): (&str, &Row),
) -> std::cmp::Ordering {
    let name = |row: usize| &limiters[row].name;
    let by = match query.sort {
        Column::Limiter => name(a.limiter).cmp(name(b.limiter)),
        Column::Key => by_key(a_key).cmp(&by_key(b_key)),
        Column::Rate => a.rate.per_second_f64().total_cmp(&b.rate.per_second_f64()),
        Column::Burst => a.burst.cmp(&b.burst),
        Column::Fill => a.state.fill.total_cmp(&b.state.fill),
        Column::NextFree => a.state.next_free.cmp(&b.state.next_free),
        Column::Idle => a.state.idle.cmp(&b.state.idle),
        Column::Refused => a.state.refused.cmp(&b.state.refused),
    };
    let by = if query.descending { by.reverse() } else { by };
    by.then_with(|| name(a.limiter).cmp(name(b.limiter)))
        .then_with(|| by_key(a_key).cmp(&by_key(b_key)))
}

/// How keys sort: IP addresses first, as addresses (IPv4 before IPv6, each
/// by number: `127.0.0.2` before `127.0.0.10`), then every other key by
/// its text (bytes). The text last makes the order total where two texts
/// are one address (`::1`, `0::1`).
fn by_key(key: &str) -> (bool, Option<IpAddr>, &str) {
    let ip = key.parse().ok();
    (ip.is_none(), ip, key)
}
