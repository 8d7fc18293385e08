#!/usr/bin/env bash
# Foundation benchmark (issue 2): warm sequential read through the mount vs
# the cache's own unit files, and cold/warm reads of the 2,000-object bucket
# on s3rver against s3fs and rclone. Writes the "Foundation figures" section
# of docs/BENCHMARKS.md. Needs root (drops the page cache), a built
# build/igtcache, s3rver in .deps (scripts/setup.sh), s3fs and rclone.
# Not part of the test suite. Every process it starts is stopped by pid and
# every mount is unmounted (see tests/mount/harness.py).
set -euo pipefail
cd "$(dirname "$0")/.."

export IGTCACHE_BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
export IGT_BUILD_DIR="${IGT_BUILD_DIR:-$PWD/build}"
[[ $(id -u) -eq 0 ]] || { echo "bench_foundation: run as root (it drops the page cache)" >&2; exit 1; }
[[ -x "$IGTCACHE_BIN" ]] || { echo "bench_foundation: $IGTCACHE_BIN not built (cmake --build build --target igtcache)" >&2; exit 1; }
for t in s3fs rclone node fusermount3; do
  command -v "$t" >/dev/null || { echo "bench_foundation: $t missing (scripts/setup.sh)" >&2; exit 1; }
done
exec /usr/bin/python3 scripts/bench/bench_foundation.py "$@"
