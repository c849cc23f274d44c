//! The SQL of a limit counted by window in PostgreSQL: the window's
//! PL/pgSQL function, `<table>_count`, which `install` creates beside the
//! pacing step's, the statement that calls it and its give-back (how the
//! row holds a window, and the calls: `src/remote/postgres/window.rs`).
//!
//! The calendar is Howard Hinnant's civil-date arithmetic, as
//! `src/model/calendar.rs` writes it, in `numeric`: each division of
//! values that may be negative a `floor` of a quotient of integers below
//! 10^12 (exact: such a quotient is off an integer by at least one part in
//! 10^12, far above `numeric`'s rounding), each of non-negative ones
//! `div`, exact.

/// The statement that calls the function (`install` creates it).
pub(crate) fn count_sql(f: &str) -> String {
    format!(
        "SELECT {f}($1, $2, $3, $4, $5, $6, $7, $8, $9::numeric, $10, $11::numeric, \
         $12::numeric, $13::numeric, $14::numeric, $15)"
    )
}

/// A window give-back to a word: `$1` key, `$2` the grant's word, `$3` the
/// word before it, `$4` its `rest_at` (all encoded but `rest_at`).
pub(crate) fn give_back_sql(t: &str) -> String {
    format!("UPDATE {t} SET tat = $3, prev_tat = NULL, rest_at = $4 WHERE key = $1 AND tat = $2")
}

/// The index at second `sec` into `ix` (`Params::index_at`), in PL/pgSQL.
fn index_at(sec: &str, ix: &str) -> String {
    format!(
        "IF kind = 'f' THEN {ix} := floor({sec} / width);\n\
         ELSE\n\
         \x20 d := floor(({sec} + off) / 86400);\n\
         \x20 IF kind = 'd' THEN nm := d;\n\
         \x20 ELSIF kind = 'w' THEN nm := floor((d + 3 - width) / 7);\n\
         \x20 ELSE\n\
         \x20   z := d + 719468; era := floor(z / 146097); doe := z - era * 146097;\n\
         \x20   yoe := floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365);\n\
         \x20   doy := doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100));\n\
         \x20   mp := floor((5 * doy + 2) / 153);\n\
         \x20   mo := CASE WHEN mp < 10 THEN mp + 3 ELSE mp - 9 END;\n\
         \x20   y := yoe + era * 400 + CASE WHEN mo <= 2 THEN 1 ELSE 0 END;\n\
         \x20   nm := CASE WHEN kind = 'm' THEN y * 12 + mo - 1 ELSE y END;\n\
         \x20 END IF;\n\
         \x20 {ix} := nm - first_;\n\
         END IF;\n"
    )
}

/// The second window `i` starts at into `out` (`Params::start` before its
/// clamp), in PL/pgSQL.
fn start(i: &str, out: &str) -> String {
    format!(
        "IF kind = 'f' THEN {out} := ({i}) * width;\n\
         ELSE\n\
         \x20 nm := ({i}) + first_;\n\
         \x20 IF kind = 'd' THEN d := nm;\n\
         \x20 ELSIF kind = 'w' THEN d := 7 * nm - 3 + width;\n\
         \x20 ELSE\n\
         \x20   IF kind = 'm' THEN y := floor(nm / 12); mo := nm - y * 12 + 1;\n\
         \x20   ELSE y := nm; mo := 1; END IF;\n\
         \x20   IF mo <= 2 THEN y := y - 1; END IF;\n\
         \x20   era := floor(y / 400); yoe := y - era * 400;\n\
         \x20   doy := floor((153 * mod(mo + 9, 12) + 2) / 5);\n\
         \x20   d := era * 146097 + yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy - 719468;\n\
         \x20 END IF;\n\
         \x20 {out} := d * 86400 - off;\n\
         END IF;\n"
    )
}

/// The window's function: [`window::step`] (`op` 'take') or
/// [`window::settle`] ('settle') on one row, in one call.
///
/// Arguments: the key; `now_`, encoded (NULL: the server's clock); `op`;
/// the window (`kind` f, d, w, m or y; `width`, a fixed window's seconds
/// or a week's first day, Monday 0; `off`, seconds east of UTC; `first_`
/// and `last_`, as `window::Params` has them); `quota`; `bits`, the
/// count's bits in the word. For a take: `cost`, and `within`, the
/// longest wait in ns (NULL: any). For a settle: `cost` the excess,
/// `within` the refund, `went` (Unix ns) when the booking's permit went,
/// `cap` the largest count. `grace`: `window::GRACE_SECS`.
///
/// It returns `[now, code, …]`: `[n, 1, i, c, had, pi, pc]` a grant
/// counted in window `i`, which then held `c` (for a cost of 0, the state
/// found), on a row that held (`had` 1) the state `(pi, pc)`; `[n, 0,
/// wait]` a refusal; `[n, 2]` a cost over the quota; `[n, 4]` past the
/// clock's end; `[n, 3, i, c]` a settle's state left.
pub(crate) fn count_function(f: &str, table: &str, now: &str) -> String {
    let write = "\
         \x20 nx := (i * m + c - 9223372036854775808)::bigint;\n\
         \x20 IF cur IS NOT NULL THEN\n\
         \x20   UPDATE {table} AS b SET tat = nx, prev_tat = cur, rest_at = ra WHERE b.key = k;\n\
         \x20 ELSE\n\
         \x20   INSERT INTO {table} AS b (key, tat, prev_tat, rest_at)\n\
         \x20   VALUES (k, nx, NULL, ra) ON CONFLICT (key) DO NOTHING;\n\
         \x20   IF NOT FOUND THEN CONTINUE; END IF;\n\
         \x20 END IF;\n"
        .replace("{table}", table);
    format!(
        "CREATE OR REPLACE FUNCTION {f}(\n\
         \x20 k text, now_ bigint, op text, kind text, width bigint, off bigint, first_ bigint,\n\
         \x20 last_ bigint, quota numeric, bits int, cost numeric, within numeric, went numeric,\n\
         \x20 cap numeric, grace bigint)\n\
         RETURNS bigint[] LANGUAGE plpgsql AS $paceline$\n\
         DECLARE\n\
         \x20 n bigint := COALESCE(now_, {now});\n\
         \x20 u numeric := n::numeric + 4611686018427387904;\n\
         \x20 m numeric := power(2::numeric, bits);\n\
         \x20 cur bigint; st numeric; si numeric; sc numeric; had int;\n\
         \x20 at numeric; wi numeric; ci numeric; cc numeric; i numeric; c numeric;\n\
         \x20 sn numeric; en numeric; ra bigint; nx bigint;\n\
         \x20 d numeric; nm numeric; z numeric; era numeric; doe numeric; yoe numeric;\n\
         \x20 doy numeric; mp numeric; mo numeric; y numeric;\n\
         BEGIN\n\
         \x20 FOR attempt IN 1..8 LOOP\n\
         \x20 SELECT b.tat INTO cur FROM {table} AS b WHERE b.key = k FOR UPDATE;\n\
         \x20 st := COALESCE(cur::numeric + 9223372036854775808, 0);\n\
         \x20 had := CASE WHEN cur IS NULL THEN 0 ELSE 1 END;\n\
         \x20 si := div(st, m); sc := st - si * m;\n\
         {at}\
         \x20 IF si >= at THEN ci := si; cc := sc; ELSE ci := at; cc := 0; END IF;\n\
         \x20 IF op = 'take' THEN\n\
         \x20   IF cost = 0 THEN RETURN ARRAY[n, 1, si, sc, had, si, sc]; END IF;\n\
         \x20   IF cost > quota THEN RETURN ARRAY[n, 2]; END IF;\n\
         \x20   IF cc <= quota - cost THEN i := ci; c := cc + cost; ELSE i := ci + 1; c := cost; END IF;\n\
         \x20   IF i > last_ THEN RETURN ARRAY[n, 4]; END IF;\n\
         {start}\
         \x20   IF within IS NOT NULL AND sn * 1000000000 - u > within THEN\n\
         \x20     RETURN ARRAY[n, 0, (sn * 1000000000 - u)::bigint];\n\
         \x20   END IF;\n\
         \x20 ELSE\n\
         \x20   i := si; c := sc;\n\
         \x20   IF cost > 0 THEN i := ci; c := LEAST(cc + cost, cap);\n\
         \x20   ELSIF within > 0 AND si = ci THEN\n\
         {went}\
         \x20     IF wi = si THEN c := sc - LEAST(within, sc); END IF;\n\
         \x20   END IF;\n\
         \x20   IF i = si AND c = sc THEN RETURN ARRAY[n, 3, si, sc]; END IF;\n\
         \x20 END IF;\n\
         {end}\
         \x20 ra := LEAST(en + grace, 9223372036854775807)::bigint;\n\
         {write}\
         \x20 IF op = 'take' THEN RETURN ARRAY[n, 1, i, c, had, si, sc]; END IF;\n\
         \x20 RETURN ARRAY[n, 3, i, c];\n\
         \x20 END LOOP;\n\
         \x20 RAISE EXCEPTION 'paceline: key % came and went 8 times during one count', k;\n\
         END $paceline$;",
        at = index_at("div(u, 1000000000)", "at"),
        start = start("i", "sn"),
        went = index_at("div(went, 1000000000)", "wi"),
        end = start("i + 1", "en"),
    )
}
