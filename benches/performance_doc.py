#!/usr/bin/env python3
"""Writes docs/PERFORMANCE.md from the outputs of one `scripts/perf.sh` run.

    python3 benches/performance_doc.py OUT_DIR > docs/PERFORMANCE.md

OUT_DIR is where scripts/perf.sh left its files (see there): machine.txt,
baselines.txt (the criterion baselines of the throughput and keyed benches),
contention.txt, accuracy.txt, accuracy-slack.txt, keyed.txt, and, when they
ran, redis.txt and tokio.txt. Every figure in the document comes from those
files or from criterion's results; the prose is here. Interpretations that
quote figures of their own are dated: they were written against one run.
"""

import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ beside the benches
import report  # noqa: E402  (benches/report.py: criterion's results, cells)


QUICK = """

**A `--quick` run: short measurements that only check the pipeline. Do not
quote these figures.**"""


def lines(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return [l.rstrip("\n") for l in f]


def table(ls):
    return "\n".join(l for l in ls if l.startswith("|"))


def first(ls, prefix, default=""):
    return next((l for l in ls or [] if l.startswith(prefix)), default)


def keyed_table(baselines):
    """paceline's KeyedLimiter beside governor's, from the `keyed` bench."""
    runs = [report.load(b) for b in baselines]

    def values(key):
        return [r.get(key) for r in runs]

    def ratios(a, b):
        return [r[a] / r[b] if a in r and b in r else None for r in runs]

    out = [
        "| path | threads | paceline ns | governor ns | paceline / governor | floor ns |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, path, threads in [
        ("one hot key", "hot_key", [1, 2, 8]),
        ("100 000 busy keys", "many_keys", [1, 2, 8]),
        ("100 000 keys at rest between visits", "idle_keys", [1, 2]),
    ]:
        for t in threads:
            pl, gv = f"keyed/{path}/paceline/{t}t", f"keyed/{path}/governor/{t}t"
            floor = report.cell(values(f"keyed/floor_atomic_limiter/{t}t")) if path == "hot_key" else ""
            out.append(
                f"| {name} | {t} | {report.cell(values(pl))} | {report.cell(values(gv))} "
                f"| {report.cell(ratios(pl, gv), 2)} | {floor} |"
            )
    return "\n".join(out)


def redis_section(out_dir, baselines):
    red = lines(os.path.join(out_dir, "redis.txt"))
    if red is None:
        return """## Redis

Not measured in this run: `redis-server` was not on PATH. With it,
`bash scripts/perf.sh` runs `cargo bench -p paceline-benches --features redis
--bench redis` and fills this section.
"""
    runs = [report.load(b) for b in baselines]
    rows = ["| transport | `PING` µs | `try_take` µs | × `PING` |", "|---|---:|---:|---:|"]
    for transport in ["unix", "tcp"]:
        ping = [r.get(f"redis_{transport}/ping") for r in runs]
        take = [r.get(f"redis_{transport}/try_take") for r in runs]
        ratio = [t / p if t and p else None for t, p in zip(take, ping)]
        us = lambda v: [x / 1000 if x else None for x in v]  # noqa: E731
        rows.append(f"| {transport} | {report.cell(us(ping))} | {report.cell(us(take))} | {report.cell(ratio, 2)} |")
    printed = [l for l in red if l.startswith(("unix:", "tcp:", "breakdown:"))]
    return f"""## Redis

`RedisLimiter::try_take` (feature `redis`) against one `PING` on the same
connection, to a `redis-server` the bench starts itself (unix socket, and
loopback TCP), every call granted so each one runs the whole step and writes
the key. Criterion's medians:

{chr(10).join(rows)}

Measured interleaved (20 rounds of 2 000 pings, then 2 000 try_takes; a
ratio per round), which holds up better on a busy machine than two separate
criterion groups, and where the time beyond a `PING` goes (an `EVALSHA` of a
script that only returns, then of paceline's step; the server's CPU per call
from `INFO commandstats`):

```text
{chr(10).join(printed)}
```
{redis_cpu_section(out_dir)}"""


def postgres_section(out_dir):
    pg = lines(os.path.join(out_dir, "postgres.txt"))
    if pg is None:
        return """## PostgreSQL

Not measured in this run: no PostgreSQL server was installed. With one,
`bash scripts/perf.sh` runs `cargo bench -p paceline-benches --features
postgres --bench postgres` and fills this section.
"""
    printed = [l for l in pg if l.strip() and not l.startswith(("Compiling", "Finished", "Running"))]
    return f"""## PostgreSQL

`benches/postgres.rs`, on a PostgreSQL the bench starts itself (unix
socket, `fsync=off`): `PostgresLimiter::try_take` against one `SELECT 1` on
the same limiter (same pool and path; interleaved rounds of 2 000 calls, a
ratio per round), for the blocking face (whose calls hop to its runtime
thread) and the async one; floors on one raw connection, and the step's
function called on it; then calls per second at 1, 8 and 64
connections, paceline's step (`AsyncPostgresLimiter`, one task per
connection) beside Pecorino's float leaky-bucket UPSERT (raw prepared
statements on as many connections), each task on its own key (every call
granted and written) and all on one hot key at 1000/s (nearly every call
refused: paceline writes nothing, Pecorino writes every call). Both tables
logged. Rounds alternate paceline and Pecorino; medians, min–max.

```text
{chr(10).join(printed)}
```

{POSTGRES_LIMITS}"""


POSTGRES_LIMITS = """**The limits of this design.** The step is one call of a PL/pgSQL
function that updates first, where the row admits, so a refusal writes
and locks nothing and a grant is one index lookup and one update. On the
server it costs what Pecorino's UPSERT costs (the per-call rows "Pecorino
add_tokens (raw)" and "paceline's step function, granted (raw)"); a
grant is a row write and a commit, so neither comes near `SELECT 1`. With
many connections on few cores, the client's own work per call (the pool's
checkout, the response timeout's timer) is taken from the server. A key
granted less often than once a second changes `rest_at` on every grant,
so such an update is not HOT.
"""


def memcached_section(out_dir):
    mc = lines(os.path.join(out_dir, "memcached.txt"))
    if mc is None:
        return """## memcached

Not measured in this run: no memcached on PATH. With it, `bash
scripts/perf.sh` runs `cargo bench -p paceline-benches --features memcached
--bench memcached` and fills this section.
"""
    printed = [l for l in mc if l.strip() and not l.startswith(("Compiling", "Finished", "Running"))]
    return f"""## memcached

{MEMCACHED_INTRO}
```text
{chr(10).join(printed)}
```
"""


MEMCACHED_INTRO = """`benches/memcached.rs`, on a memcached the bench starts itself (unix socket,
and loopback TCP): `MemcachedLimiter::try_take` against one memcached get
(`mg` of a key nobody stores) on the same connection, interleaved (20 rounds
of 2 000 calls, a ratio per round), every call granted so each one reads
and writes the key (two round trips; a refusal is one); then grants per
second for one second with 1 and 8 clients (each its own limiter and
connection), all on one hot key and spread over 10 000 keys, with the CAS
races the clients lost; then criterion's groups.
"""


def hot_key_section(out_dir):
    runs = {}
    for store in ("redis", "postgres"):
        got = []
        for n in (1, 2, 3):
            ls = lines(os.path.join(out_dir, f"hot_key-{store}-{n}.txt"))
            if ls:
                got.append(first(ls, "hot key:"))
        runs[store] = [g for g in got if g]
    if not runs["redis"] and not runs["postgres"]:
        return """## One hot key through leases

Not measured in this run: no redis-server on PATH and no PostgreSQL
installed. With them, `bash scripts/perf.sh` runs
`benches/examples/hot_key.rs` and fills this section.
"""
    body = []
    for store, name in (("redis", "Redis"), ("postgres", "PostgreSQL")):
        if runs[store]:
            body.append(f"{name}, {len(runs[store])} run(s):\n\n```text\n" + "\n".join(runs[store]) + "\n```\n")
    return "## One hot key through leases\n\n" + HOT_KEY_INTRO + "\n" + "\n".join(body)


HOT_KEY_INTRO = """`benches/examples/hot_key.rs`: 8 processes, one thread each, take as fast
as they can from one key limited to 1 000 000 permits a second with a slack
of 10 000, each through its own `lease::Leased` (leases of 4 ms on Redis, the
server at slack 6 000; 8 ms on PostgreSQL, at 2 000), for 10 s, on a server
the program starts. Every spend's time (the lease's clock, Unix time) from
every process is checked against `S + 1 + w / T` for every window;
*over bound* is the most permits any window held beyond it. *Remote calls*
count every batch asked for (granted or refused) and give-back. The
bound's proof is in the guide's `leases` chapter. On 2 vCPU the 8
processes and the server share two cores: the figure is what this machine
reaches, not what the design allows (a spend is one CAS and a clock read;
one process alone, the limit raised, spent 16.6 to 17.6 million a second here).
"""


def http_runs(out_dir):
    """Criterion's medians (ns) of each `benches/http.rs` run: one dict a run."""
    import re

    unit = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}
    runs = []
    for n in (1, 2, 3):
        ls = lines(os.path.join(out_dir, f"http-{n}.txt"))
        if ls is None:
            continue
        text = "\n".join(ls)
        found = re.findall(r"((?:admit|refuse|keys|router)/\w+)\s+time:\s+\[\S+ \S+ (\S+) (\S+)", text)
        runs.append({name: float(v) * unit[u] for name, v, u in found})
    return runs


def rls_section(out_dir):
    rows = lines(os.path.join(out_dir, "rls_load.txt"))
    if not rows:
        return """## paceline-server

Not measured in this run. `bash scripts/perf.sh` builds `paceline-server`
and runs `benches/examples/rls_load.rs`, which fills this section.
"""
    return f"""## paceline-server

`cargo build --release -p paceline-server && cargo run --release -p
paceline-benches --features rls --example rls_load -- --redis`:
`ShouldRateLimit` against the binary, started by the program on loopback,
counting in process and on a `redis-server` it starts (`BACKEND_TYPE=redis`,
a unix socket), from tonic's RLS client out of envoy-types: 1, 16 and 256
streams, each a task sending one request after the last is answered, 16
streams to an HTTP/2 connection. Latency is from the send to the answer, as
each task sees it. Client and server share this machine's two cores, so
these are the pair's figures, not the server's alone; each runs one tokio
worker thread (the server through `TOKIO_WORKER_THREADS=1`), one core each,
where two each took turns on two cores (16 streams in process: p99 about
800 µs then, about 300 µs so).

The second table is one hot descriptor on Redis: every request on one
counter, counted one `INCRBY` a request, then with `leased: true` (batches
of the window's hits, one `INCRBY` each; `server/README.md`). Redis's CPU
per request is its `used_cpu_user` + `used_cpu_sys` over the run, divided by
the requests answered (with leases it is mostly Redis's own timer, not the
counter); "one Redis core" is 10^6 over it: how many requests a second one
Redis core would carry for that one descriptor.

```text
{chr(10).join(rows)}
```
"""


def http_section(out_dir):
    runs = http_runs(out_dir)
    if not runs:
        return """## The HTTP layer

Not measured in this run. `bash scripts/perf.sh` runs `cargo bench -p
paceline-benches --features http --bench http` three times and fills this
section.
"""

    def cell(values, digits=0):
        values = [v for v in values if v is not None]
        if not values:
            return "–"
        fmt = f"{{:.{digits}f}}"
        med = fmt.format(statistics.median(values))
        if len(values) == 1:
            return med
        return f"{med} ({fmt.format(min(values))}–{fmt.format(max(values))})"

    def added(r, group, who):
        return r[f"{group}/{who}"] - r[f"{group}/none"]

    rows = []
    groups = [("one client, admitted", "admit"), ("10,000 clients in turn, admitted", "keys")]
    if all("router/none" in r for r in runs):
        groups.append(("one client, admitted, through an axum `Router`", "router"))
    for label, group in groups:
        pl = [added(r, group, "paceline") for r in runs]
        gv = [added(r, group, "tower_governor") for r in runs]
        rows.append(f"| {label} | +{cell(pl)} | +{cell(gv)} | {cell([a / b for a, b in zip(pl, gv)], 2)}× |")
    for label, group in [("one client, the floor", "admit"), ("10,000 clients, the floor", "keys")]:
        fl = [added(r, group, "keyed_floor") for r in runs if f"{group}/keyed_floor" in r]
        gv = [added(r, group, "tower_governor") for r in runs if f"{group}/keyed_floor" in r]
        if fl:
            rows.append(f"| {label} (`keyed_floor`) | +{cell(fl)} | +{cell(gv)} | {cell([a / b for a, b in zip(fl, gv)], 2)}× |")
    pl = [r["refuse/paceline"] / 1e3 for r in runs]
    gv = [r["refuse/tower_governor"] / 1e3 for r in runs]
    rows.append(f"| refused (429), in all, µs | {cell(pl, 2)} | {cell(gv, 1)} | {cell([a / b for a, b in zip(pl, gv)], 3)}× |")
    return f"""## The HTTP layer

`benches/http.rs`: one request through no layer, `LimitLayer::per_ip` and
tower_governor's `GovernorLayer` around the same trivial service, in the
thread's CPU time; {len(runs)} runs, the median and the range over runs. The
admitted rows give the ns each layer adds to no layer; the ratio is taken
within each run. The floor rows put paceline's keyed limiter behind the
least glue a layer can have (`benches/http_services.rs`' `floor`: the peer address
as the key, one `try_take`, the inner future passed through).

| | paceline | tower_governor | paceline ÷ governor |
|---|---:|---:|---:|
{chr(10).join(rows)}
{http_turns_part(out_dir)}{HTTP_NOTES}"""


def http_turns_part(out_dir):
    """`benches/examples/http_turns.rs`' report, as it printed it."""
    turns = lines(os.path.join(out_dir, "http_turns.txt"))
    if not turns:
        return ""
    return f"""
The same services in turn in one process (`benches/examples/http_turns.rs`:
each round times every service for a batch, the ratio is taken per round,
medians and quartiles over the rounds):

```text
{chr(10).join(turns)}
```
"""


# Dated: written against the runs of 2026-11-26 at df63228
# (the figures it quotes are those runs').
HTTP_NOTES = """
**The layer answers in the inner service's body type** (2026-11-26, the
runs above, at `df63228`; load average 1.0 throughout). Until then a
limited service's response was `Response<LimitBody<B>>`, the inner body
wrapped so that a refusal's text fitted the same type; now the refusal is
written into a body of the inner type itself (`AnswerBody`), and an
admitted response's body passes through untouched. In the bare service that
moves less than the noise; under an axum `Router` it removes an
allocation per response, since the router boxed every `LimitBody` into
its own `Body` again. The `router` row is new, so there is no before in
it; timed as whole processes (2,000,000 requests through the router, the
calls out of line, seven runs A B A B), the layer's overhead in the router
went from 1.08× tower_governor's to 0.94×, one allocation and one free
fewer a request (callgrind: 222 instructions fewer).
Without a key or cost function, the admitted path now also moves the
request once, into the inner service, where it was copied once more on its
way (one `memcpy` of 240
bytes fewer, in the disassembly).

Every criterion run above has both bare ratios at or below 1.0
(0.88–0.99); their medians, 0.96 and 0.97, are not the 0.9 aimed at.

**Measured again on 2026-11-26, at `bc20150`**, builds run in turn in one
sitting (criterion's warm-up 1 s, measurement 2 s). Commit `9847dc0`
had the layer call `client_ip` (a function since removed) whole (13
instructions more a request by callgrind, and not timed then). That
build reads 1.13–1.15 (one client) and 1.09–1.15 (10,000 clients) over
six runs in two sittings, about 10 ns a request more. With the peer
checked in `decide` and the proxy's walk out of line again (`bc20150`),
three runs read 0.96, 0.98 and 1.02 (one client) and 0.97, 0.98 and 1.02
(10,000 clients), medians 0.98 and 0.98, beside 0.96–1.02 and 0.97–1.01
for the build of `1eee9de` in the same sitting.

**How far code layout moves these ratios.** The same source, compiled
into another binary, gives another ratio: `benches/examples/http_turns.rs`
(above) puts the same services in turn in one process, and there
tower_governor's request costs 68–78 ns where criterion's binary measured
73–87, so the ratio reads 1.04 and 1.07, with quartiles within ±0.01.
Across the builds made while working on this, `keyed_floor` (whose code
did not change) moved between 0.73× and 0.97× of governor's overhead.
A difference of 0.05 in one of these ratios is not a finding.

**What is left is the keyed decision's locks, and a lock-free map does
not remove them.** Profiled in criterion's binary, the keyed decision's
three locked instructions (the shard stripe's read lock, its release, the
entry's CAS) are 44 % of its samples, about 14 ns of the layer's 70;
tower_governor pays the same three (dashmap's lock, release and its CAS).
The one way to drop one in safe Rust is a map whose readers take no lock,
and it was built in full and measured (branch `keyed-lockfree`, commit
`1a8c23b`, not merged): papaya's concurrent maps, the class parameters in
two banks of atomic slots, and entries retired by a CAS to a dead word
before a sweep, an eviction, a reset or a rate change drops or replaces
them, with loom models of each. It is slower where it matters:

- papaya's memory reclamation releases a reader's guard with a locked
  exchange (seize's `leave`), so two locked instructions remain, not one;
- papaya keeps each entry in an allocation of its own, so a lookup over
  many keys misses the cache once more than hashbrown's inline slots;
- the decision grew from 298 instructions to 414 (a second hash, the
  guard's thread-local, the slot's words).

One run each of `benches/keyed.rs`, one thread: one hot key 32.6 ns
against 35.2 (0.93×), 100,000 busy keys 95.0 ns against 65.0 (1.46×).
Through the HTTP layer the ratio to tower_governor's overhead rose to
1.17–1.19 (one client) and 1.14–1.27 (10,000 clients), two runs each.
The 0.9 aimed at would need the keyed decision to cost less than
governor's with the same three locked instructions; the glue around it
has nothing of that size left.
"""


def redis_cpu_section(out_dir):
    cpu = lines(os.path.join(out_dir, "redis_cpu.txt"))
    if cpu is None:
        return ""
    return f"""
### The step's cost on the server

`cargo run --release -p paceline-benches --features redis --example
redis_cpu`: paceline's step beside go-redis/redis_rate's GCRA script, a
minimal TIME + GET + SET GCRA (`benches/lua/`), and paceline's step as it
was before its rewrite of 2026-11-23 (`1dea08d`); and paceline's window
step (`src/remote/redis/window.lua`: a quota per fixed minute, and per
calendar month, its civil-date arithmetic on a window's first call; every
other admitted call an `INCRBY` alone, the key's expiry its window) beside the usual
fixed-window counter, `INCRBY` with `EXPIREAT` on a window's first count
(`benches/lua/minimal_window.lua`, the window named in the key by the
client, no clock read); on one `redis-server` the program starts itself,
every call admitted and writing its key. *µs per call* is Redis's own
`usec_per_call` for `EVALSHA` (`INFO commandstats`: the time in the
command, script included); *calls/s* is one connection sending pipelines
of 64 back to back; *calls per server CPU s* divides the calls by the CPU
time the server used meanwhile (`INFO cpu`): what one core of its own
would sustain, which holds up when other work takes the server's core.
Three runs of nine interleaved rounds, a ratio taken within each round;
median (min, max) of the runs.

```text
{chr(10).join(cpu)}
```
"""


def far_side_section(out_dir):
    far = lines(os.path.join(out_dir, "far_side.txt"))
    if far is None:
        return """## A paced client reading a far side's budget

Not measured in this run: no venv with FastAPI, slowapi and uvicorn under
the target directory. With it (`bash scripts/far_side_venv.sh` makes it),
`bash scripts/perf.sh` runs `cargo run --release -p paceline-benches
--features far-side --example far_side` and fills this section.
"""
    return f"""## A paced client reading a far side's budget

`benches/examples/far_side.rs`: a reqwest client paced by `Pace` with
`follow_budget()` and `honour_retry_after(3 s)`, its `AsyncLimiter` started
at 400/s with the default slack, sending one request after another to
FastAPI with slowapi at 100/s (fixed windows, `X-RateLimit-*` on every
answer) served by uvicorn on loopback. The client is never told the rate: it learns the quota from
`X-RateLimit-Limit` and the window from the resets, and paces at the
quota per window less 3 %. *rate reached* is the answers after the first
two seconds per second, as a ratio of the announced 100/s; *converged*
the time from the first request after which every one-second window
holds at least 95 % of it.

```text
{chr(10).join(far)}
```
"""


def tokio_section(out_dir):
    tok = lines(os.path.join(out_dir, "tokio.txt"))
    if tok is None:
        return ""
    return f"""## Tokio's 1 ms timer

`cargo run --release --features tokio --example tokio_granularity`: one task
taking from an `AsyncLimiter` in a loop (nothing queued ahead of it absorbs a
late wake-up) with the default slack (10 permits or 10 ms, whichever is
more), with uber's 10 permits, and with `paceline::tokio::PRECISE`; then 1000
tasks sharing one limiter with the default slack. *achieved* is the
permits over the run; *long-run* the error of the rate between the first
tenth of the permits and the last tenth, each placed by its median lateness
on the OS clock (as in the accuracy tables: only rate lost for good moves
it); *late* how long after its slot a permit went.

With the default slack every configuration keeps its rate within a few
thousandths of a percent, but one: a lone task waiting with `PRECISE` at
1M/s asks the runtime for a permit every microsecond, each released at its
own slot, and on this 2-vCPU machine it falls behind now and then by more
than the 10 ms the slack banks (its row). The same task with the timer
(`Wait::Sleep`) takes its permits in millisecond batches and keeps the rate.

```text
{chr(10).join(tok)}
```
"""


def adaptive_section(out_dir):
    ad = lines(os.path.join(out_dir, "adaptive.txt"))
    if ad is None:
        return """## An adaptive rate against nginx

Not measured in this run: no nginx installed. With it, `bash
scripts/perf.sh` runs `benches/examples/adaptive.rs` and fills this section.
"""
    return f"""## An adaptive rate against nginx

{ADAPTIVE_INTRO}
```text
{chr(10).join(ad)}
```
"""


ADAPTIVE_INTRO = """`cargo run --release -p paceline-benches --features adaptive --example
adaptive`: a reqwest client paced by `paceline::reqwest::Pace` with an
`adapt::Adaptive` (floor 1/s, ceiling 1000/s, the default increase of 1/s
per second and backoff of 0.9), starting at 200/s, sends from 4 tasks to a
real nginx whose `limit_req` allows 50 requests a second with a burst of 2
and answers 429 past it. *Converged* is the first answer after which the
controller's rate stays within 10 % of nginx's (the descent from 200/s
over); *90 % served* the first request served such that the second before
it held 90 % of nginx's rate (never before 1 s, by its definition);
*after* counts the requests from convergence to the end of the run: the
rate served as a share of nginx's, and the share refused. The last line
is a client told nginx's rate (slack 0, 4 tasks), for comparison: what a
client that knows the limit gets.
"""


def persist_section(out_dir):
    ls = lines(os.path.join(out_dir, "persist.txt"))
    if not ls:
        return """## A keyed limiter's state saved and loaded

Not measured in this run: `bash scripts/perf.sh` runs
`benches/examples/persist.rs` and fills this section.
"""
    return f"""## A keyed limiter's state saved and loaded

`benches/examples/persist.rs` (feature `persist`): a `KeyedLimiter<u64>`
whose every key took one permit (so every key is busy and saved), saved
with `save` (every shard read-locked in turn, one JSON line a key, the
file written whole, fsynced, renamed, the directory fsynced) and loaded
with `load` into a fresh limiter of the same limits (the file read and
checked whole, then each key put back under its shard's write lock);
medians of the program's runs, in wall time, on the system's temporary
directory, whose flushes are in the save's figure.

{table(ls)}
"""


def main():
    out_dir = sys.argv[1]
    machine = lines(os.path.join(out_dir, "machine.txt")) or []
    baselines = (lines(os.path.join(out_dir, "baselines.txt")) or ["new"])[0].split(",")
    when = first(machine, "date:").removeprefix("date:").strip()
    commit = first(machine, "commit:").removeprefix("commit:").strip()
    cpu = first(machine, "cpu:").removeprefix("cpu:").strip()
    system = first(machine, "system:").removeprefix("system:").strip()
    rustc = first(machine, "rustc:").removeprefix("rustc:").strip()
    loads = [l.removeprefix("load:").strip() for l in machine if l.startswith("load:")]
    quick = any(l.startswith("quick: yes") for l in machine)
    duration = first(machine, "duration:").removeprefix("duration:").strip()
    took = f", {int(duration.split()[0]) // 60} minutes here" if duration[:1].isdigit() else ""

    throughput = subprocess.run(
        [sys.executable, os.path.join(HERE, "report.py"), *baselines],
        check=True, capture_output=True, text=True,
    ).stdout
    acc = lines(os.path.join(out_dir, "accuracy.txt")) or []
    slack = lines(os.path.join(out_dir, "accuracy-slack.txt"))
    cont = lines(os.path.join(out_dir, "contention.txt")) or []
    fast = lines(os.path.join(out_dir, "fast_path.txt")) or []
    window_path = lines(os.path.join(out_dir, "window_path.txt")) or []
    keyed_out = lines(os.path.join(out_dir, "keyed.txt")) or []
    acc_machine = (
        first(acc, "Machine now").replace("Machine now:", "While it ran:").replace("wakes late", "woke late")
    )
    drift = first(acc, "The limiters' clock")

    print(f"""# paceline's performance

How fast a call that does not wait is, beside the floor no limiter can beat
and beside the peer crates; how exactly each wait strategy paces; the keyed
and Redis limiters; Tokio's timer. Every figure below comes from one run of

```sh
bash scripts/perf.sh    # rewrites this file and docs/accuracy-*.svg{took}
```

at commit `{commit}`, on {when}.{QUICK if quick else ""}

**Machine**: {cpu}; {system}; {rustc}. Load averages (1, 5, 15 min) through
the run:

{chr(10).join("- " + l for l in loads)}

On a machine shared with other work, figures from one run are comparable
with each other, not with another run's: every comparison below is a ratio
taken within one run. Criterion's throughput and keyed figures are medians
over {len(baselines)} consecutive run{"s" if len(baselines) > 1 else ""}{", the min–max over runs in brackets" if len(baselines) > 1 else ""}. Earlier
runs, on earlier code, are in this file's history.

The benches and measurement programs live in the `paceline-benches` crate
(`benches/`), beside the peers they compare paceline with (governor,
ratelimit, leaky-bucket):

```sh
cargo bench -p paceline-benches --bench throughput            # the cost of a call
cargo bench -p paceline-benches --bench keyed                 # KeyedLimiter beside governor's
cargo bench -p paceline-benches --features redis --bench redis
cargo bench -p paceline-benches --features postgres --bench postgres
cargo run --release -p paceline-benches --example fast_path   # one thread, interleaved
cargo run --release -p paceline-benches --example window_path # a window key beside a pacing key
cargo run --release -p paceline-benches --example contention  # interleaved cross-check
cargo run --release -p paceline-benches --example accuracy    # pacing accuracy
cargo run --release --features tokio --example tokio_granularity
```

## The cost of a call that does not wait

A limiter whose rate (10^9/s) never makes anyone wait. One thread's calls
are timed in that thread's CPU time, which time spent preempted by the
machine's other work does not inflate; several threads' in wall time per
call over all of them. The floor is one TSC read plus one CAS loop on one
word: no non-blocking take can do less.

{throughput.rstrip()}

### One thread, interleaved

`benches/examples/fast_path.rs` times a batch of each call in turn, round
after round, in the thread's CPU time, and takes each ratio within its
round, so load that lands on one round slows both sides of its ratios:
the floor (raw, and scaled to nanoseconds as a limiter's clock is),
`AtomicLimiter::try_take` and governor's `check()`, admitted and refused,
and each again with only `is_ok()` read. A refusal from either limiter costs
what the floor does, about one clock read: the refused ratios compare two
calls of that length, and their spread is the machine's.

```text
{chr(10).join(fast)}
```

### Contention, interleaved

criterion times one bench after another, so a burst of load can land on one
limiter and not the next. `benches/examples/contention.rs` runs every limiter
once per round (~20 ms each, in rotated order, so all see the same load) and
gives per-round ratios to `AtomicLimiter::try_take` ({cont[0].split(';')[0] if cont else ''}):

{table(cont)}

On 2 vCPUs two threads contend only while both are on a core, which a loaded
machine grants now and then: when the other core is busy, the threads of the
2- and 8-thread rows mostly run one after the other, and these rows measure
the call more than the contention. Each call here goes through a `&dyn Fn`
instead of being inlined into the loop.

## Keyed limiters

`KeyedLimiter` beside governor's keyed limiter (dashmap, its default), wall
ns per `try_take` on each thread, every call admitted
(`benches/keyed.rs`): one hot key; a random walk over 100 000 busy keys; the
same walk at 10^9/s with a slack of 10 (governor's burst of 11), where
every key is back at rest between visits. governor keeps every key;
paceline drops a key at rest only when its shard's table needs the room,
so one thread's walk (65,536 calls over about 48,000 keys, which fit the
tables) finds its keys, and two threads' walks (twice the keys) track a
new key on about three calls in four (measured with `keyed_stats().pruned`).
The floor is a lone `AtomicLimiter`. The ratio is taken within each run,
then its median.

{keyed_table(baselines)}

Memory, RSS growth over a million `u64` keys, each limiter in a fresh
process:

```text
{chr(10).join(l for l in keyed_out if l.startswith("memory:"))}
```

paceline's entry (16 bytes) holds the state word and two half-words of
bookkeeping: the last use, which a grant stores plainly (no locked
instruction) about once a millisecond, and the key's rate class with a
refusal count that stops at 4095, which a grant only reads; the calls
admitted are counted per limiter, on a stripe per thread, so the threads
of a hot key meet only on its state word. The shards' locks are striped
(crossbeam's `ShardedLock`): a read locks only its own thread's stripe, so
readers of one shard share no lock line, and a write (a new key, a sweep)
locks all eight, which is what the "at rest" rows pay. governor's entry is
the state word. governor drops no key until `retain_recent()` is called; paceline's
memory is bounded by `max_keys`, and keys at rest give their room to new
ones, at the price of an insert (the "at rest" rows) when such a key comes
back.

Not run by `scripts/perf.sh`: `tests/keyed_flood.rs` sends 10 million
distinct keys through a 100 000-key limiter on 2 threads and prints its time,
the most keys tracked and its peak RSS
(`PACELINE_FLOOD_KEYS=10000000 cargo test --release --test keyed_flood -- --nocapture`).

### A quota per window beside pacing

`benches/examples/window_path.rs` times, interleaved as the fast path is,
`try_take` on one key of a keyed limiter whose limit paces and of one
whose limit is a quota per day (`Limit::per_window`), admitted (pacing at
10^9/s with a burst of a billion, a quota of 2^40) and refused (the key
spent: 1 an hour with no slack, 1 a day), each ratio taken within its
round. Both take the shard's lock, find the key, read the clock and win
one CAS; the window's step adds the window's arithmetic (the current
window by a product, its start and end) and what a take reports (the
count left, the window's end).

```text
{chr(10).join(window_path)}
```

{http_section(out_dir)}
{rls_section(out_dir)}
{redis_section(out_dir, baselines)}
{postgres_section(out_dir)}
{memcached_section(out_dir)}
{hot_key_section(out_dir)}
## Pacing accuracy

`benches/examples/accuracy.rs`: `AtomicLimiter` (default slack: 10 permits
or 10 ms of permits, whichever is more) with each wait
strategy, and governor driven the way its documentation shows (`check()`,
then sleep the wait it reports) with a burst of 1 and of 10, at four rates,
from 1 thread and from 8 threads on one limiter; each configuration's median
of its interleaved runs. Times come from the OS clock, not the limiters'.
*error* is the achieved rate (all permits over the time to the last one)
against the target, so the last permit's own lateness counts (1 ms late in
a 3 s run reads -0.03 %); *long-run error* is the rate between the first
tenth of the permits and the last tenth, each placed by its median
lateness, which only rate lost for good moves.
*Lateness* is against the ideal slot `t0 + k / rate`, so a limiter that
loses rate falls ever further behind and its lateness grows with the run;
*gap* is the time between consecutive permits; *CPU* is the threads' run
time in % of one core. {acc_machine}

{table(acc)}

{drift}
""")
    if slack:
        print(f"""The same for paceline from one thread with uber's slack of 10 permits
(the default before it was sized in time), run right after it:

{chr(10).join(l for l in slack if l.startswith(("| limiter", "|---", "| paceline")))}
""")
    print("""A thread kept off its core for longer than `slack × interval` loses that
time for good, whatever the limiter and its wait strategy; on an
oversubscribed machine such stalls last milliseconds. So the rows that keep
the rate exact are those whose banked window covered every stall of their
run: 10 permits (the second table) are 10 µs at 1M/s and lose most of the
rate, while the default's 10 ms keeps high rates exact on a busy machine,
at the price of a burst of up to `rate × 10 ms + 1` permits after a stall
or idle time. The precise mode suffers most from a
starved machine: it needs its core at the moment of each slot, and while it
has it, the permit leaves within about a microsecond of its slot.

![Share of permits later than a given lateness, per rate](accuracy-lateness.svg)

![Permits per millisecond over 30 ms, per limiter and rate](accuracy-profile.svg)

### Choosing a wait strategy

- **`Wait::Sleep`** (the default) costs little CPU (the CPU column). Each
  permit is as late as the OS wakes a sleeper (the `thread::sleep` figure
  above the table), and the long-run rate stays exact as long as that
  lateness fits in the banked window `slack × interval`. The default slack
  makes that window 10 ms at every rate from 1k/s up (below, uber's 10
  permits are longer); uber's 10 permits would be 1 ms at 10k/s and 10 µs
  at 1M/s (never enough).
- **`Wait::PRECISE`** sleeps until 150 µs before the slot and spins the
  rest: while the thread keeps its core, permits leave within microseconds
  of their slots (the late p50 column), for a larger share of a core, a
  whole one from about 10k/s on. Use it when each permit's timing matters
  (pacing packets, load generators), not just the rate.
- **A thread that is not running cannot take its permit.** On a machine with
  more runnable threads than cores a waiter can be off its core for
  milliseconds, whatever the strategy. A stall shorter than
  `slack × interval` is made up by a short burst; a longer one loses rate
  for good. The default covers 10 ms; if your machine stalls longer, give
  the slack more time (`.slack(Duration::from_millis(50))`); if the burst
  matters more than the rate, give it a permit count (`.slack(10)`).
- governor driven by check-and-sleep with a burst of 1 loses every sleep's
  overshoot (its rows); with a burst of 10 it behaves much like
  `Wait::Sleep`.
""")
    print(tokio_section(out_dir))
    print(far_side_section(out_dir))
    print(adaptive_section(out_dir))
    print(persist_section(out_dir))


if __name__ == "__main__":
    main()
