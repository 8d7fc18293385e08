#!/usr/bin/env bash
# Long reliability runs (issue 6) — the suite runs short versions of these:
#   test_load      64 readers for SOAK_LOAD_S seconds (default 600)
#   test_outage    backend gone for SOAK_OUTAGE_S seconds (default 30), twice
#                  (proxy refusing, then s3rver stopped by pid)
#   test_crash     SOAK_CRASH_ROUNDS kill -9 rounds (default 100), seed
#                  SOAK_SEED (default: random, printed)
#   test_faults    every fault kind through scripts/cloudproxy.py
# Usage: scripts/soak.sh [build-dir]   (default build/; builds nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
export IGTCACHE_BIN=${IGTCACHE_BIN:-$PWD/$BUILD/igtcache}
export IGT_BUILD_DIR=${IGT_BUILD_DIR:-$PWD/$BUILD}
[[ -x "$IGTCACHE_BIN" ]] || { echo "soak: $IGTCACHE_BIN not built (scripts/build.sh)" >&2; exit 2; }
seed=${SOAK_SEED:-$RANDOM$RANDOM}
echo "soak: binary $IGTCACHE_BIN, crash seed $seed"
fail=0
run() {  # name env...
  local name=$1
  shift
  local t0=$(date +%s)
  if env "$@" /usr/bin/python3 "tests/mount/$name.py"; then
    echo "soak: $name PASS ($(( $(date +%s) - t0 )) s)"
  else
    echo "soak: $name FAIL ($(( $(date +%s) - t0 )) s)"
    fail=1
  fi
}
run test_load IGT_LOAD_S="${SOAK_LOAD_S:-600}"
run test_outage IGT_OUTAGE_S="${SOAK_OUTAGE_S:-30}"
run test_crash IGT_CRASH_ROUNDS="${SOAK_CRASH_ROUNDS:-100}" IGT_CRASH_SEED="$seed"
run test_faults
exit $fail
