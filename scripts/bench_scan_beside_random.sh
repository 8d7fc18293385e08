#!/usr/bin/env bash
# One file scanned by one reader while four others read it at random, in the
# simulator: igt, lru, and igt with the scan moved to a copy of the file (a
# split of the file's stream by reader would reach about that). Builds
# nothing; no mount.
#   scripts/bench_scan_beside_random.sh [--bin BINARY] [--seeds N]
set -euo pipefail
cd "$(dirname "$0")/.."
export IGTCACHE_BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
[[ -x "$IGTCACHE_BIN" ]] || { echo "bench_scan_beside_random: $IGTCACHE_BIN not built (scripts/build.sh)" >&2; exit 1; }
exec /usr/bin/python3 scripts/bench/scan_beside_random.py "$@"
