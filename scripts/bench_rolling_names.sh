#!/usr/bin/env bash
# Daemon memory while a bucket's names roll (a file per step, the old ones
# deleted): RSS, inodes, engine records and stream-tree nodes every N names
# (scripts/bench/rolling_names.py says what is measured). Needs a built
# build/igtcache. Not part of the test suite. Every process it starts is
# stopped by pid and every mount is unmounted (tests/mount/harness.py).
#   scripts/bench_rolling_names.sh [--names N] [--keep N] [--size BYTES] [--every N] [--compare LABEL=BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
export IGTCACHE_BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
export IGT_BUILD_DIR="${IGT_BUILD_DIR:-$PWD/build}"
[[ -x "$IGTCACHE_BIN" ]] || { echo "bench_rolling_names: $IGTCACHE_BIN not built (scripts/build.sh)" >&2; exit 1; }
exec /usr/bin/python3 scripts/bench/rolling_names.py "$@"
