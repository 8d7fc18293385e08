#!/usr/bin/env bash
# The daemon's memory over many epochs of many small files in many
# directories: RSS, the engine's ghosts and evictions per epoch, this build
# and each --compare LABEL=BINARY. Not part of the test suite; builds
# nothing. Every process is stopped by pid and every mount is unmounted
# (tests/mount/harness.py). About 2 minutes a build with the defaults.
#   scripts/bench_memory_epochs.sh [--files N] [--dirs N] [--cache-size S] [--epochs N] [--threads N] [--compare LABEL=BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
export IGTCACHE_BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
export IGT_BUILD_DIR="${IGT_BUILD_DIR:-$PWD/build}"
[[ -x "$IGTCACHE_BIN" ]] || { echo "bench_memory_epochs: $IGTCACHE_BIN not built (scripts/build.sh)" >&2; exit 1; }
exec /usr/bin/python3 scripts/bench/memory_epochs.py "$@"
