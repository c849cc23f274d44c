#!/usr/bin/env bash
# Regenerates docs/PERFORMANCE.md (and docs/accuracy-*.svg): runs every
# benchmark and measurement program, then benches/performance_doc.py.
#
#   bash scripts/perf.sh           # the full run, 12 minutes on 2 cores
#   bash scripts/perf.sh --quick   # a few minutes of short runs; writes only
#                                  # under target/perf/quick: checks the pipeline
#
# Run it on a machine as quiet as you can get: the document records the load
# averages, but cannot undo them. The Redis section needs redis-server on
# PATH, the PostgreSQL one an installed server, the far side's the venv of
# scripts/far_side_venv.sh, the adaptive rate's nginx (each is skipped, and
# says so, without it).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=no
case "${1:-}" in
    "") ;;
    --quick) quick=yes ;;
    *) echo "usage: bash scripts/perf.sh [--quick]" >&2; exit 2 ;;
esac

target=${CARGO_TARGET_DIR:-target}
if [ $quick = yes ]; then
    out=$target/perf/quick
    plots=$out
    doc=$out/PERFORMANCE.md
    runs=(quick1)
    crit=(--warm-up-time 0.1 --measurement-time 0.3 --sample-size 10 --noplot)
    acc=(--secs 0.3 --repeat 1)
    rounds=4
    tokio_secs=0.3
else
    out=$target/perf/full
    plots=docs
    doc=docs/PERFORMANCE.md
    runs=(perf1 perf2 perf3)
    crit=(--noplot)
    acc=(--secs 3 --repeat 3)
    rounds=40
    tokio_secs=3
fi
mkdir -p "$out"
export CARGO_TERM_COLOR=never
note_load() { echo "load: $(cut -d' ' -f1-3 /proc/loadavg) ($1)" >>"$out/machine.txt"; }

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo ' with uncommitted changes')"
    hv=$(lscpu 2>/dev/null | sed -n 's/^Hypervisor vendor: *//p')
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) vCPU${hv:+, a $hv guest}"
    echo "system: $(uname -sr)"
    echo "rustc: $(rustc -V)"
    echo "quick: $quick"
} >"$out/machine.txt"
note_load "start"

echo "== build (benches, examples)" >&2
cargo bench -p paceline-benches --all-features --no-run
cargo build --release -p paceline-benches --examples
cargo build --release --features tokio --example tokio_granularity

for run in "${runs[@]}"; do
    echo "== throughput and keyed benches, baseline $run" >&2
    cargo bench -p paceline-benches --bench throughput -- --save-baseline "$run" "${crit[@]}"
    cargo bench -p paceline-benches --bench keyed -- --save-baseline "$run" "${crit[@]}" >"$out/keyed.txt"
    note_load "after benches, $run"
done
(IFS=,; echo "${runs[*]}") >"$out/baselines.txt"

if command -v redis-server >/dev/null 2>&1; then
    echo "== redis bench" >&2
    cargo bench -p paceline-benches --features redis --bench redis -- \
        --save-baseline "${runs[0]}" "${crit[@]}" >"$out/redis.txt"
    echo "== redis step's server CPU" >&2
    cargo run -q --release -p paceline-benches --features redis --example redis_cpu -- \
        $([ $quick = yes ] && echo --quick) >"$out/redis_cpu.txt"
else
    echo "== redis bench skipped: no redis-server on PATH" >&2
    rm -f "$out/redis.txt" "$out/redis_cpu.txt"
fi

if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
    echo "== postgres bench" >&2
    cargo bench -p paceline-benches --features postgres --bench postgres >"$out/postgres.txt"
else
    echo "== postgres bench skipped: no PostgreSQL server installed" >&2
    rm -f "$out/postgres.txt"
fi

if command -v memcached >/dev/null 2>&1; then
    echo "== memcached bench" >&2
    cargo bench -p paceline-benches --features memcached --bench memcached -- "${crit[@]}" >"$out/memcached.txt"
else
    echo "== memcached bench skipped: no memcached on PATH" >&2
    rm -f "$out/memcached.txt"
fi

if command -v redis-server >/dev/null 2>&1; then
    echo "== hot key through leases, Redis: three runs" >&2
    for n in 1 2 3; do
        cargo run -q --release -p paceline-benches --features redis,postgres --example hot_key -- \
            $([ $quick = yes ] && echo --secs 2) >"$out/hot_key-redis-$n.txt"
    done
fi
if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
    echo "== hot key through leases, PostgreSQL" >&2
    cargo run -q --release -p paceline-benches --features redis,postgres --example hot_key -- \
        --postgres $([ $quick = yes ] && echo --secs 2) >"$out/hot_key-postgres-1.txt"
fi

echo "== http bench: three runs" >&2
for run in 1 2 3; do
    cargo bench -p paceline-benches --features http --bench http -- "${crit[@]}" >"$out/http-$run.txt"
done
echo "== http layers in turn" >&2
cargo run -q --release -p paceline-benches --features http --example http_turns -- \
    $rounds $([ $quick = yes ] && echo 10000 || echo 100000) >"$out/http_turns.txt"
note_load "after http"

if [ -x "$target/far-side-venv/bin/python" ]; then
    echo "== a paced client reading a far side's budget (slowapi)" >&2
    cargo run -q --release -p paceline-benches --features far-side --example far_side -- \
        $([ $quick = yes ] && echo 4 || echo 10) >"$out/far_side.txt"
else
    echo "== far side skipped: no venv at $target/far-side-venv (bash scripts/far_side_venv.sh makes it)" >&2
    rm -f "$out/far_side.txt"
fi
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
    echo "== adaptive rate against nginx" >&2
    cargo run -q --release -p paceline-benches --features adaptive --example adaptive -- \
        $([ $quick = yes ] && echo --secs 3 --runs 1) >"$out/adaptive.txt"
else
    echo "== adaptive rate skipped: no nginx installed" >&2
    rm -f "$out/adaptive.txt"
fi

echo "== fast path, interleaved" >&2
cargo run -q --release -p paceline-benches --example fast_path -- \
    $([ $quick = yes ] && echo 11 || echo 101) >"$out/fast_path.txt"
echo "== a window key beside a pacing key, interleaved" >&2
cargo run -q --release -p paceline-benches --example window_path -- \
    $([ $quick = yes ] && echo 11 || echo 101) >"$out/window_path.txt"
echo "== contention" >&2
cargo run -q --release -p paceline-benches --example contention -- --rounds $rounds >"$out/contention.txt"
echo "== accuracy" >&2
cargo run -q --release -p paceline-benches --example accuracy -- "${acc[@]}" --plots "$plots" >"$out/accuracy.txt"
cargo run -q --release -p paceline-benches --example accuracy -- "${acc[@]}" --threads 1 --slack 10 >"$out/accuracy-slack.txt"
note_load "after accuracy"
echo "== tokio granularity" >&2
cargo run -q --release --features tokio --example tokio_granularity -- $tokio_secs >"$out/tokio.txt"
echo "== paceline-server under load (ShouldRateLimit at 1, 16, 256 streams)" >&2
cargo build -q --release -p paceline-server
cargo run -q --release -p paceline-benches --features rls --example rls_load -- \
    $([ $quick = yes ] && echo --secs 1 --runs 1 || echo --secs 3 --runs 3) --redis >"$out/rls_load.txt"
echo "== keyed state saved and loaded" >&2
cargo run -q --release -p paceline-benches --features persist --example persist -- \
    $([ $quick = yes ] && echo --runs 1) >"$out/persist.txt"
note_load "end"
echo "duration: $SECONDS s" >>"$out/machine.txt"

python3 benches/performance_doc.py "$out" >"$doc.tmp"
mv "$doc.tmp" "$doc"
echo "wrote $doc (raw outputs in $out)" >&2
