#!/usr/bin/env bash
# A mix of jobs on a real mount that records its reads, each trace replayed
# by `igtcache sim`: does the simulator predict the live hit ratio? igt and
# lru. Not part of the test suite; builds nothing. Every process is stopped
# by pid and every mount is unmounted (tests/mount/harness.py). About a
# minute per cache size.
#   scripts/bench_sim_vs_live.sh [--sizes 64M,128M,256M] [--epochs N] [--reads N]
set -euo pipefail
cd "$(dirname "$0")/.."
export IGTCACHE_BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
export IGT_BUILD_DIR="${IGT_BUILD_DIR:-$PWD/build}"
[[ -x "$IGTCACHE_BIN" ]] || { echo "bench_sim_vs_live: $IGTCACHE_BIN not built (scripts/build.sh)" >&2; exit 1; }
exec /usr/bin/python3 scripts/bench/sim_vs_live.py "$@"
