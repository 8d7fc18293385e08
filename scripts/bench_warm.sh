#!/usr/bin/env bash
# `igtcache warm` of one large file against a plain read of it, over the
# emulated cloud (s3rver behind scripts/cloudproxy.py). Not part of the test
# suite; builds nothing. Every process is stopped by pid and every mount is
# unmounted (tests/mount/harness.py).
#   scripts/bench_warm.sh [--size-mib N] [--runs N] [--compare LABEL=BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
export IGTCACHE_BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
export IGT_BUILD_DIR="${IGT_BUILD_DIR:-$PWD/build}"
[[ -x "$IGTCACHE_BIN" ]] || { echo "bench_warm: $IGTCACHE_BIN not built (scripts/build.sh)" >&2; exit 1; }
exec /usr/bin/python3 scripts/bench/warm_large.py "$@"
