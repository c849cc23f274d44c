#!/usr/bin/env bash
# The whole test suite: every crate, every feature, doctests included; the
# CLI's tests (cli/tests, the real `paceline` binary) among them, since
# `--workspace` covers every member, default or not.
# The `redis`, `postgres` and `memcached` features' tests start their own
# redis-server, PostgreSQL (initdb + postgres in a temporary directory) and
# memcached, the `tower`
# feature's page tests their own headless chromium and check its /metrics
# with promtool (Debian's prometheus); the `reqwest` feature's far sides
# are nginx (the adaptive rate's tests) and FastAPI with slowapi under
# uvicorn, from PyPI into a venv under the target directory
# (scripts/far_side_venv.sh, which needs python3's venv); all fail loudly
# without them, so this installs what is missing first, when we may.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v memcached >/dev/null 2>&1 || missing+=(memcached)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
    missing+=(postgresql)
fi
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "${missing[*]} not on PATH and cannot be installed here:" >&2
        echo "install (e.g. sudo apt-get install ${missing[*]}); the redis feature's tests need" >&2
        echo "redis-server, the postgres feature's PostgreSQL, the memcached feature's memcached," >&2
        echo "the tower feature's page Debian's chromium and promtool (prometheus), the reqwest" >&2
        echo "feature's far sides nginx and python3 with venv." >&2
        exit 1
    fi
fi
bash scripts/far_side_venv.sh
exec cargo test --workspace --all-features "$@"
