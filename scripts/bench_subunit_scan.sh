#!/usr/bin/env bash
# A file read repeatedly in pieces smaller than a unit, cache smaller than
# the file (a local directory as the source). Not part of the test
# suite; builds nothing. Every process is stopped by pid and every mount is
# unmounted (tests/mount/harness.py).
#   scripts/bench_subunit_scan.sh [--readers N] [--stagger-s S] [--size-mib N] [--cache-mib N] [--read-kib N] [--passes N] [--runs N] [--compare LABEL=BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
export IGTCACHE_BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
export IGT_BUILD_DIR="${IGT_BUILD_DIR:-$PWD/build}"
[[ -x "$IGTCACHE_BIN" ]] || { echo "bench_subunit_scan: $IGTCACHE_BIN not built (scripts/build.sh)" >&2; exit 1; }
exec /usr/bin/python3 scripts/bench/subunit_scan.py "$@"
