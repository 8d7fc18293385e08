#!/usr/bin/env bash
# The cost of many policy-file overrides on every read: 3,000 small files
# read twice with 20,000 overrides that match none, and with none; this
# build and each --compare. Not part of the test suite; builds nothing.
# Every process is stopped by pid and every mount is unmounted
# (tests/mount/harness.py). About a minute.
#   scripts/bench_many_overrides.sh [--overrides N] [--compare LABEL=BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
export IGTCACHE_BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
export IGT_BUILD_DIR="${IGT_BUILD_DIR:-$PWD/build}"
[[ -x "$IGTCACHE_BIN" ]] || { echo "bench_many_overrides: $IGTCACHE_BIN not built (scripts/build.sh)" >&2; exit 1; }
exec /usr/bin/python3 scripts/bench/many_overrides.py "$@"
