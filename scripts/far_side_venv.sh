#!/usr/bin/env bash
# The far side the `reqwest` feature's budget tests and benches/examples/
# far_side.rs pace against: FastAPI with slowapi (X-RateLimit-* headers),
# served by uvicorn, from PyPI into a venv.
#
#   bash scripts/far_side_venv.sh [DIR]   # DIR: ${CARGO_TARGET_DIR:-target}/far-side-venv
#
# Does nothing when DIR already imports all three; else (re)creates it.
# The versions are pinned so that every machine serves the same headers.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-${CARGO_TARGET_DIR:-target}/far-side-venv}
packages=(fastapi==0.163.2 slowapi==0.1.10 limits==5.8.0 uvicorn==0.54.0)
if [ -x "$dir/bin/python" ] && "$dir/bin/python" -c 'import fastapi, slowapi, uvicorn' 2>/dev/null; then
    exit 0
fi
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
python3 -m venv "$dir"
"$dir/bin/python" -m pip install -q --disable-pip-version-check "${packages[@]}"
