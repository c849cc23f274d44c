//! The SQL paceline sends, for one table, and how times cross as `bigint`.
//!
//! A state `tat` is a `u64` of internal ns; a `bigint` is signed, so a
//! column holds `tat - 2^63` ([`encode`]), an order-keeping bijection: every
//! state, [`MAX_TAT`](crate::model::schedule::MAX_TAT) included, is stored exactly,
//! and `bigint` comparisons order states as `u64` ones. The Unix time in ns
//! is the column plus `2^62`.

use super::window_sql;
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
/// 14 on, exact to the µs) plus `ORIGIN`, encoded. A test's clock (encoded)
/// replaces it when it is given.
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
    /// The step's function, `<table>_step`, quoted, in the table's schema
    /// if the table's name gives one.
    pub(crate) step_fn: String,
    /// The settle's function, `<table>_settle`, beside it.
    pub(crate) settle_fn: String,
    /// The window's function, `<table>_count`, beside them.
    pub(crate) count_fn: String,
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
        let schema: String = parts[..parts.len() - 1]
            .iter()
            .map(|p| quote(p) + ".")
            .collect();
        Ok(Table {
            name: name.to_owned(),
            quoted: format!("{schema}{}", quote(table)),
            index: quote(&format!("{table}_rest_at")),
            step_fn: format!("{schema}{}", quote(&format!("{table}_step"))),
            settle_fn: format!("{schema}{}", quote(&format!("{table}_settle"))),
            count_fn: format!("{schema}{}", quote(&format!("{table}_count"))),
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
    pub(crate) settle: String,
    pub(crate) reset: String,
    pub(crate) prune: String,
    /// A limit counted by window's: its function's call and its give-back
    /// to a word (`src/remote/postgres/window.rs`).
    pub(crate) count: String,
    pub(crate) give_back_count: String,
}

/// The two constants [`rest_at`] adds for a limit of `tau`: its whole
/// seconds plus `4611686019`, and its remainder plus `1427387903`.
///
/// `rest_at` is `ceil((unix_ns(next) + tau + 10^9) / 10^9)`: the Unix second
/// from which the row is at rest, rounded up, plus a second of grace. Write
/// `next = q * 10^9 + r` (floor division, `0 <= r < 10^9`), `tau = a * 10^9
/// plus b` and `2^62 = 4611686018 * 10^9 + 427387904`: it is `q + a +
/// 4611686019 + ceil((r + b + 427387904) / 10^9)`. `bigint` division
/// truncates; with `m = next % 10^9` (of the sign of `next`) it is `next /
/// 10^9 + (m + b + 1427387903) / 10^9 + a + 4611686019` whatever the sign,
/// since `m + b + 1427387903 > 0`. Exact, in integers only: a `numeric`
/// division costs the server more than the rest of the update, and rounds
/// to 16 digits.
pub(crate) fn rest_consts(tau: u64) -> (i64, i64) {
    const E9: u64 = 1_000_000_000;
    (
        (tau / E9) as i64 + 4_611_686_019,
        (tau % E9) as i64 + 1_427_387_903,
    )
}

/// `rest_at` for a state `next` (an encoded SQL expression), `secs` and
/// `rem` naming [`rest_consts`].
fn rest_at(next: &str, secs: &str, rem: &str) -> String {
    format!("({next}) / 1000000000 + (({next}) % 1000000000 + {rem}) / 1000000000 + {secs}")
}

impl Sql {
    pub(crate) fn new(t: &Table) -> Sql {
        // The step is the function `install` creates (`step_function`):
        // one call, one round trip. Parameters: $1 key; $2 span = cost * T
        // (> 0); $3 tau; $4 how far past now a base may be and still be
        // admitted, `max - lead`, as text (a `u64` minus a `u64`: it may not
        // fit a `bigint`; NULL: admit always); $5 now, encoded (NULL: the
        // server's clock); $6, $7 `rest_consts(keep)` (see `Core::keep`).
        let step = format!(
            "SELECT {f}($1, $2, $3, $4::numeric, $5, $6, $7)",
            f = t.step_fn
        );
        // The settle is the other function `install` creates
        // (`settle_function`). Parameters: $1 key; $2 now, encoded (NULL:
        // the server's clock); then as text, each a `u64`: $3 when the
        // permit went (internal ns), $4 give, $5 reach, $6 T, $7 the
        // excess's span (0: a refund), $8 tau; $9, $10 `rest_consts(keep)`.
        let settle = format!(
            "SELECT {f}($1, $2, $3::numeric, $4::numeric, $5::numeric, $6::numeric, \
             $7::numeric, $8::numeric, $9, $10)",
            f = t.settle_fn
        );
        let count = window_sql::count_sql(&t.count_fn);
        let give_back_count = window_sql::give_back_sql(&t.quoted);
        let t = &t.quoted;
        let peek = format!(
            "SELECT c.now, b.tat FROM (SELECT COALESCE($2, {NOW}) AS now) c \
             LEFT JOIN {t} b ON b.key = $1"
        );
        // $1 key; $2 the grant's state; $3 the state before it; $4, $5
        // `rest_consts(keep)`.
        let give_back = format!(
            "UPDATE {t} SET tat = $3, prev_tat = NULL, rest_at = {} WHERE key = $1 AND tat = $2",
            rest_at("$3", "$4", "$5")
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
            settle,
            reset,
            prune,
            count,
            give_back_count,
        }
    }
}

/// The schema, as [`install`](super::PostgresLimiter::install) runs it
/// (inside one transaction, after taking an advisory lock, and checking the
/// table's columns before the rest): the table, the index, the step's
/// function, the settle's function, the window's function.
pub(crate) fn schema(t: &Table, unlogged: bool) -> [String; 5] {
    let unlogged = if unlogged { "UNLOGGED " } else { "" };
    [
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
        step_function(t),
        settle_function(t),
        window_sql::count_function(&t.count_fn, &t.quoted, NOW),
    ]
}

/// The step's function: `schedule::step` on one row, in one call.
///
/// Arguments: the key; `span` = cost * T (> 0); `tau`; `within`, how far
/// past now a base may be and still be admitted (`max - lead`, NULL: admit
/// always); `now_`, encoded (NULL: the server's clock); `secs`, `rem`, the
/// [`rest_consts`] of how long the state lives (`tau`, or longer). `floor_`
/// is `max(now - tau, FULL)`, so a base is `GREATEST(tat, floor_)` (every
/// stored state is at least FULL, and an absent row decides as FULL); `lim`
/// is the largest base admitted (not saturated: `base <= MAX_TAT - span`;
/// within the longest wait: `base + lead - now <= max`).
///
/// The update comes first: a grant on a tracked key is one index lookup
/// and one (mostly HOT) update. Its condition is checked on the newest row
/// (under the row's lock only when the visible version passes it), so a
/// refusal writes and locks nothing; it then reads the row, for the client
/// to explain the refusal. An absent key that is admitted is inserted; if
/// another call inserted it meanwhile, nothing is written. It returns
/// `[now, tat read, state written, state replaced]`: a row that admits
/// although nothing was written (another call changed it between the
/// update and the read) makes the client ask again.
fn step_function(t: &Table) -> String {
    let next = "GREATEST(b.tat, floor_) + span";
    format!(
        "CREATE OR REPLACE FUNCTION {f}(\n\
         \x20 k text, span bigint, tau bigint, within numeric, now_ bigint, secs bigint, rem bigint)\n\
         RETURNS bigint[] LANGUAGE plpgsql AS $paceline$\n\
         DECLARE\n\
         \x20 n bigint := COALESCE(now_, {NOW});\n\
         \x20 floor_ bigint := GREATEST(n, -9223372036854775807 + tau) - tau;\n\
         \x20 lim bigint := CASE WHEN within IS NULL THEN 9223372036854710271 - span\n\
         \x20   ELSE LEAST(9223372036854710271 - span,\n\
         \x20              GREATEST(-9223372036854775807 - 1, n + within))::bigint END;\n\
         \x20 t bigint; nx bigint; pv bigint;\n\
         BEGIN\n\
         \x20 UPDATE {table} AS b SET tat = {next}, prev_tat = b.tat,\n\
         \x20        rest_at = {rest_update}\n\
         \x20  WHERE b.key = k AND GREATEST(b.tat, floor_) <= lim\n\
         \x20 RETURNING b.tat, b.prev_tat INTO nx, pv;\n\
         \x20 IF FOUND THEN RETURN ARRAY[n, NULL, nx, pv]; END IF;\n\
         \x20 SELECT b.tat INTO t FROM {table} AS b WHERE b.key = k;\n\
         \x20 IF FOUND OR floor_ > lim THEN RETURN ARRAY[n, t, NULL, NULL]; END IF;\n\
         \x20 INSERT INTO {table} AS b (key, tat, prev_tat, rest_at)\n\
         \x20 VALUES (k, floor_ + span, NULL, {rest_insert})\n\
         \x20 ON CONFLICT (key) DO NOTHING RETURNING b.tat INTO nx;\n\
         \x20 RETURN ARRAY[n, NULL, nx, NULL];\n\
         END $paceline$;",
        f = t.step_fn,
        table = t.quoted,
        rest_update = rest_at(next, "secs", "rem"),
        rest_insert = rest_at("floor_ + span", "secs", "rem"),
    )
}

/// The settle's function: `schedule::settle` on one row, in one call, in
/// `numeric` (every `u64` exact; a settle is rarer than a step, and its
/// arithmetic is the model's line for line).
///
/// Arguments: the key; `now_`, encoded (NULL: the server's clock); `went`,
/// `give`, `reach`, `t`, `span`, `tau` as `Settle` makes them (internal ns,
/// not encoded); `secs`, `rem`, the [`rest_consts`] of how long the state
/// lives. The row is read under its lock (`FOR UPDATE`: a step waits for
/// the settle, and then decides on what it wrote); an excess is the step
/// of its span from the model's base, admitted whatever its wait and
/// saturating at `MAX_TAT`; a refund moves the state back by `give`, at
/// most by `reach` less the time since `went`, never below `max(now - tau,
/// FULL + 1)` (nor above the state), and only once the permit has gone and
/// `tat <= now + T`. An absent row (at rest, `FULL`) is inserted only by an
/// excess, and if another call inserts it first the row is read again. It
/// returns `[now, the state left]`, both encoded.
fn settle_function(t: &Table) -> String {
    format!(
        "CREATE OR REPLACE FUNCTION {f}(\n\
         \x20 k text, now_ bigint, went numeric, give numeric, reach numeric, t numeric,\n\
         \x20 span numeric, tau numeric, secs bigint, rem bigint)\n\
         RETURNS bigint[] LANGUAGE plpgsql AS $paceline$\n\
         DECLARE\n\
         \x20 n bigint := COALESCE(now_, {NOW});\n\
         \x20 u numeric := n::numeric + 9223372036854775808;\n\
         \x20 cur bigint; st numeric; base numeric; res numeric; nx bigint;\n\
         BEGIN\n\
         \x20 FOR attempt IN 1..8 LOOP\n\
         \x20   SELECT b.tat INTO cur FROM {table} AS b WHERE b.key = k FOR UPDATE;\n\
         \x20   st := COALESCE(cur::numeric + 9223372036854775808, 1);\n\
         \x20   IF span > 0 THEN\n\
         \x20     base := CASE WHEN st = 0 THEN GREATEST(u - LEAST(span - t, tau), 0)\n\
         \x20                  ELSE GREATEST(st, u - tau, 0) END;\n\
         \x20     res := LEAST(base + span, 18446744073709486079);\n\
         \x20   ELSIF st <= 1 OR went > u OR st > u + t THEN\n\
         \x20     res := st;\n\
         \x20   ELSE\n\
         \x20     res := GREATEST(st - LEAST(give, GREATEST(reach - (u - went), 0)), 0,\n\
         \x20                     LEAST(st, GREATEST(u - tau, 2)));\n\
         \x20   END IF;\n\
         \x20   nx := (res - 9223372036854775808)::bigint;\n\
         \x20   IF res = st THEN RETURN ARRAY[n, nx]; END IF;\n\
         \x20   IF cur IS NOT NULL THEN\n\
         \x20     UPDATE {table} AS b SET tat = nx, prev_tat = NULL, rest_at = {rest}\n\
         \x20      WHERE b.key = k;\n\
         \x20     RETURN ARRAY[n, nx];\n\
         \x20   END IF;\n\
         \x20   INSERT INTO {table} AS b (key, tat, prev_tat, rest_at)\n\
         \x20   VALUES (k, nx, NULL, {rest}) ON CONFLICT (key) DO NOTHING;\n\
         \x20   IF FOUND THEN RETURN ARRAY[n, nx]; END IF;\n\
         \x20 END LOOP;\n\
         \x20 RAISE EXCEPTION 'paceline: key % came and went 8 times during one settle', k;\n\
         END $paceline$;",
        f = t.settle_fn,
        table = t.quoted,
        rest = rest_at("nx", "secs", "rem"),
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
    use crate::model::schedule::{FULL, MAX_TAT, ORIGIN};

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
        assert_eq!(t.step_fn, "\"app\".\"Limits_step\"");
        assert_eq!(Table::new("limits").unwrap().step_fn, "\"limits_step\"");
        assert_eq!(t.settle_fn, "\"app\".\"Limits_settle\"");
        assert_eq!(Table::new("a\"b").unwrap().quoted, "\"a\"\"b\"");
        for bad in ["", ".x", "x.", "a\0b"] {
            let e = Table::new(bad).unwrap_err().to_string();
            assert!(e.contains("table name"), "{e}");
        }
    }
}
