#!/usr/bin/env bash
# One file scanned by one reader while four others read it at random, on a
# real mount (the live twin of bench_scan_beside_random.sh): igt against
# lru in the same run. Not part of the test suite; builds nothing. Every
# process is stopped by pid and every mount is unmounted
# (tests/mount/harness.py). About 25 s a run.
#   scripts/bench_scan_beside_random_live.sh [--reads N] [--runs N] [--modes paced,unthrottled,alone] [--compare LABEL=BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
export IGTCACHE_BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
export IGT_BUILD_DIR="${IGT_BUILD_DIR:-$PWD/build}"
[[ -x "$IGTCACHE_BIN" ]] || { echo "bench_scan_beside_random_live: $IGTCACHE_BIN not built (scripts/build.sh)" >&2; exit 1; }
exec /usr/bin/python3 scripts/bench/scan_beside_random_live.py "$@"
