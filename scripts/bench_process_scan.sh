#!/usr/bin/env bash
# A directory read by one process per file (a shell loop, find -exec) over
# the emulated cloud: seconds, backend GETs, hits and the directory's label,
# in listing order and shuffled (scripts/bench/process_scan.py says what is
# measured). Needs a built build/igtcache and s3rver (scripts/setup.sh). Not
# part of the test suite. Every process it starts is stopped by pid and
# every mount is unmounted (tests/mount/harness.py).
#   scripts/bench_process_scan.sh [--files N] [--size BYTES] [--runs N] [--compare LABEL=BINARY] [--at-root] [--doc]
set -euo pipefail
cd "$(dirname "$0")/.."
export IGTCACHE_BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
export IGT_BUILD_DIR="${IGT_BUILD_DIR:-$PWD/build}"
[[ -x "$IGTCACHE_BIN" ]] || { echo "bench_process_scan: $IGTCACHE_BIN not built (scripts/build.sh)" >&2; exit 1; }
exec /usr/bin/python3 scripts/bench/process_scan.py "$@"
