#!/usr/bin/env bash
# Many small files through one mount: seconds per pass and daemon RSS per
# file against reading the source directory itself (scripts/bench/
# small_files.py says what is measured). Writes the "Many small files"
# section of docs/BENCHMARKS.md with --doc. Needs root (drops the page
# cache) and a built build/igtcache. Not part of the test suite. Every
# process it starts is stopped by pid and every mount is unmounted (see
# tests/mount/harness.py).
#   scripts/bench_small_files.sh [--files N] [--per-dir N] [--size BYTES] [--cache-size SIZE] [--lru] [--variant LABEL=KEY=VALUE] [--restart [--restart-cache-size SIZE]] [--compare LABEL=BINARY] [--doc [--section NAME]]
set -euo pipefail
cd "$(dirname "$0")/.."
export IGTCACHE_BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
export IGT_BUILD_DIR="${IGT_BUILD_DIR:-$PWD/build}"
[[ $(id -u) -eq 0 ]] || { echo "bench_small_files: run as root (it drops the page cache)" >&2; exit 1; }
[[ -x "$IGTCACHE_BIN" ]] || { echo "bench_small_files: $IGTCACHE_BIN not built (scripts/build.sh)" >&2; exit 1; }
exec /usr/bin/python3 scripts/bench/small_files.py "$@"
