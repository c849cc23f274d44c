#!/usr/bin/env bash
# The whole test suite: every crate, every feature, doctests included.
# The `redis` and `postgres` features' tests start their own redis-server and
# PostgreSQL (initdb + postgres in a temporary directory) and fail loudly
# without them, so this installs them first when missing and we may.
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
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
    else
        echo "PostgreSQL (initdb, postgres) is not installed and cannot be installed here:" >&2
        echo "install it (e.g. sudo apt-get install postgresql); the postgres feature's tests need it." >&2
        exit 1
    fi
fi
exec cargo test --workspace --all-features "$@"
