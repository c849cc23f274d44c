#!/usr/bin/env bash
# The whole test suite: every crate, every feature, doctests included; the
# CLI's tests (cli/tests, the real `paceline` binary) among them, since
# `--workspace` covers every member, default or not.
# The `redis` feature's tests start their own redis-server and fail loudly
# without one, so this installs it first when it is missing and we may.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
    else
        echo "redis-server is not on PATH and cannot be installed here:" >&2
        echo "install it (e.g. sudo apt-get install redis-server); the redis feature's tests need it." >&2
        exit 1
    fi
fi
exec cargo test --workspace --all-features "$@"
