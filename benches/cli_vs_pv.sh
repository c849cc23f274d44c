#!/usr/bin/env bash
# The `paceline` command beside `pv -l -L` (Debian's pv), in one run:
# unpaced ceiling, rate error at 1k and 100k lines/s, bursts, CPU.
# Installs pv when missing (as root, with apt-get), builds the release
# binary and benches/examples/cli_vs_pv.rs, and prints a Markdown report
# (also kept in $CARGO_TARGET_DIR/perf/cli_vs_pv.md).
#
#   bash benches/cli_vs_pv.sh              # 3 rounds of 5 s runs: about 2 minutes
#   bash benches/cli_vs_pv.sh --runs 5 --secs 10
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v pv >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq pv >/dev/null
    else
        echo "pv is not on PATH and cannot be installed here (apt-get install pv)" >&2
        exit 1
    fi
fi
target=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p paceline-cli
cargo build --release -q -p paceline-benches --example cli_vs_pv
mkdir -p "$target/perf"
{
    echo "<!-- $(date -u +%FT%TZ), $(pv --version | head -1), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs -->"
    "$target/release/examples/cli_vs_pv" --paceline "$target/release/paceline" "$@"
} | tee "$target/perf/cli_vs_pv.md"
