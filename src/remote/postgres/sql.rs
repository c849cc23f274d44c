//! The SQL paceline sends, for one table, and how times cross as `bigint`.
//!
//! A state `tat` is a `u64` of internal ns; a `bigint` is signed, so a
//! column holds `tat - 2^63` ([`encode`]), an order-keeping bijection: every
//! state, [`MAX_TAT`](crate::schedule::MAX_TAT) included, is stored exactly,
//! and `bigint` comparisons order states as `u64` ones. The Unix time in ns
//! is the column plus `2^62`.

use crate::remote::Error;

/// `tat` as its column: `tat - 2^63`.
pub(crate) fn encode(tat: u64) -> i64 {
    (tat ^ (1 << 63)) as i64
}

/// A column as `tat`.
pub(crate) fn decode(col: i64) -> u64 {
    (col as u64) ^ (1 << 63)
}

/// The server's now as a column: Unix ns (exact: `clock_timestamp()` has a
/// resolution of 1 µs, and `extract(epoch …)` is `numeric` from PostgreSQL
/// 14 on, exact to the µs) plus `ORIGIN`, encoded. `$6` (a test's clock,
/// encoded) replaces it when it is not NULL.
const NOW: &str =
    "-4611686018427387904 + (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint";

/// Where the limits live: a table name as given (`limits`,
/// `app.paceline_limits`) and its quoted forms.
#[derive(Clone, Debug)]
pub(crate) struct Table {
    /// As the builder got it.
    pub(crate) name: String,
    /// Quoted, schema-qualified if given so: what the SQL names.
    pub(crate) quoted: String,
    /// The index on `rest_at`, quoted (unqualified: an index lives in its
    /// table's schema).
    pub(crate) index: String,
}

fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

impl Table {
    /// `name`, or `schema.name`; each part quoted as given (so case and
    /// any character are kept: `"Limits"` is not `limits`).
    pub(crate) fn new(name: &str) -> Result<Table, Error> {
        let parts: Vec<&str> = name.splitn(2, '.').collect();
        let bad = parts.iter().any(|p| p.is_empty() || p.contains('\0'))
            || parts.iter().map(|p| p.len()).max().unwrap_or(0) > 63 - 8;
        if bad {
            return Err(Error::Config(format!(
                "table name {name:?}: want `table` or `schema.table`, each part 1 to 55 bytes \
                 without NUL"
            )));
        }
        let table = parts[parts.len() - 1];
        Ok(Table {
            name: name.to_owned(),
            quoted: parts.iter().map(|p| quote(p)).collect::<Vec<_>>().join("."),
            index: quote(&format!("{table}_rest_at")),
        })
    }
}

/// The statements for one table.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) step: String,
    pub(crate) peek: String,
    pub(crate) give_back: String,
    pub(crate) give_back_absent: String,
    pub(crate) reset: String,
    pub(crate) prune: String,
}

/// `rest_at` for a state `next` (an encoded SQL expression) and `tau`: the
/// Unix second from which the row is at rest (rounded up), plus one second
/// of grace. In `numeric`: near `MAX_TAT` the sum overflows a `bigint`.
fn rest_at(next: &str, tau: &str) -> String {
    format!("ceil((({next})::numeric + {tau} + 4611686018427387904 + 1000000000) / 1e9)::bigint")
}

impl Sql {
    pub(crate) fn new(t: &Table) -> Sql {
        let t = &t.quoted;
        // Parameters: $1 key; $2 lead = (cost - 1) * T; $3 span = cost * T
        // (> 0); $4 tau; $5 the longest wait, as text (NULL: admit always);
        // $6 now, encoded (NULL: the server's clock).
        let base_new = "GREATEST(b.tat, (SELECT floor_ FROM clk))";
        let step = format!(
            "WITH clk AS MATERIALIZED (\n\
             \x20 SELECT n.now,\n\
             \x20        CASE WHEN n.now >= (-9223372036854775807 - 1) + $4 THEN n.now - $4\n\
             \x20             ELSE (-9223372036854775807 - 1) END AS floor_\n\
             \x20 FROM (SELECT COALESCE($6, {NOW}) AS now) n),\n\
             pre AS MATERIALIZED (\n\
             \x20 SELECT c.now, GREATEST(COALESCE(b.tat, -9223372036854775807), c.floor_) AS base\n\
             \x20 FROM clk c LEFT JOIN {t} b ON b.key = $1),\n\
             dec AS MATERIALIZED (\n\
             \x20 SELECT p.now, p.base, p.base > 9223372036854710271 - $3 AS saturated,\n\
             \x20        CASE WHEN p.base <= 9223372036854710271 - $3 THEN p.base + $2 END AS slot\n\
             \x20 FROM pre p),\n\
             ok AS MATERIALIZED (\n\
             \x20 SELECT d.*, d.slot IS NOT NULL\n\
             \x20        AND ($5 IS NULL OR d.slot::numeric - d.now <= $5::numeric) AS admitted\n\
             \x20 FROM dec d),\n\
             up AS (\n\
             \x20 INSERT INTO {t} AS b (key, tat, prev_tat, rest_at)\n\
             \x20 SELECT $1, o.base + $3, NULL, {rest_insert}\n\
             \x20 FROM ok o WHERE o.admitted\n\
             \x20 ON CONFLICT (key) DO UPDATE\n\
             \x20    SET tat = {base_new} + $3,\n\
             \x20        prev_tat = b.tat,\n\
             \x20        rest_at = {rest_update}\n\
             \x20  WHERE {base_new} <= 9223372036854710271 - $3\n\
             \x20    AND ($5 IS NULL OR ({base_new} + $2)::numeric - (SELECT now FROM clk) <= $5::numeric)\n\
             \x20 RETURNING b.tat AS next, b.prev_tat AS prev)\n\
             SELECT o.now, o.saturated, o.admitted, o.slot, u.next, u.prev FROM ok o LEFT JOIN up u ON true",
            rest_insert = rest_at("o.base + $3", "$4"),
            rest_update = rest_at(&format!("{base_new} + $3"), "$4"),
        );
        let peek = format!(
            "SELECT c.now, b.tat FROM (SELECT COALESCE($2, {NOW}) AS now) c \
             LEFT JOIN {t} b ON b.key = $1"
        );
        // $1 key; $2 the grant's state; $3 the state before it; $4 tau.
        let give_back = format!(
            "UPDATE {t} SET tat = $3, prev_tat = NULL, rest_at = {} WHERE key = $1 AND tat = $2",
            rest_at("$3", "$4")
        );
        let give_back_absent = format!("DELETE FROM {t} WHERE key = $1 AND tat = $2");
        let reset = format!("DELETE FROM {t} WHERE key = $1");
        // $1 how many rows at most. Walks the `rest_at` index from its
        // oldest end, skipping rows a step holds.
        let prune = format!(
            "WITH c AS MATERIALIZED (SELECT floor(extract(epoch FROM clock_timestamp()))::bigint AS s)\n\
             DELETE FROM {t} WHERE key IN (\n\
             \x20 SELECT key FROM {t} WHERE rest_at <= (SELECT s FROM c)\n\
             \x20 ORDER BY rest_at LIMIT $1 FOR UPDATE SKIP LOCKED)\n\
             AND rest_at <= (SELECT s FROM c)"
        );
        Sql {
            step,
            peek,
            give_back,
            give_back_absent,
            reset,
            prune,
        }
    }
}

/// The schema, as [`install`](super::PostgresLimiter::install) runs it
/// (inside one transaction, after taking an advisory lock, and checking the
/// table's columns before the index): the table, then the index.
pub(crate) fn schema(t: &Table, unlogged: bool) -> (String, String) {
    let unlogged = if unlogged { "UNLOGGED " } else { "" };
    (
        format!(
            "CREATE {unlogged}TABLE IF NOT EXISTS {t} (\n\
             \x20 key      text COLLATE \"C\" PRIMARY KEY,\n\
             \x20 tat      bigint NOT NULL,\n\
             \x20 prev_tat bigint,\n\
             \x20 rest_at  bigint NOT NULL\n\
             ) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01,\n\
             \x20      autovacuum_vacuum_threshold = 1000);",
            t = t.quoted,
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS {i} ON {t} (rest_at);",
            t = t.quoted,
            i = t.index,
        ),
    )
}

/// Serializes concurrent `install()`s: `CREATE … IF NOT EXISTS` racing
/// itself can fail on the catalog's unique index.
pub(crate) const INSTALL_LOCK: i64 = 7_312_604_315;

/// The columns `install()` checks for, in order: name and type.
pub(crate) const COLUMNS: [(&str, &str); 4] = [
    ("key", "text"),
    ("tat", "bigint"),
    ("prev_tat", "bigint"),
    ("rest_at", "bigint"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{FULL, MAX_TAT, ORIGIN};

    #[test]
    fn the_encoding_keeps_order_and_the_documented_constants() {
        assert_eq!(encode(0), i64::MIN);
        assert_eq!(encode(FULL), -9223372036854775807);
        assert_eq!(encode(ORIGIN), -4611686018427387904);
        assert_eq!(encode(MAX_TAT), 9223372036854710271);
        for t in [0, 1, 5, ORIGIN, 1 << 63, MAX_TAT, u64::MAX] {
            assert_eq!(decode(encode(t)), t);
        }
        assert!(encode(1 << 63) > encode((1 << 63) - 1));
    }

    #[test]
    fn table_names_are_quoted_and_checked() {
        let t = Table::new("app.Limits").unwrap();
        assert_eq!(t.quoted, "\"app\".\"Limits\"");
        assert_eq!(t.index, "\"Limits_rest_at\"");
        assert_eq!(Table::new("a\"b").unwrap().quoted, "\"a\"\"b\"");
        for bad in ["", ".x", "x.", "a\0b"] {
            let e = Table::new(bad).unwrap_err().to_string();
            assert!(e.contains("table name"), "{e}");
        }
    }
}
