#!/usr/bin/env bash
# End-to-end benchmark (issue 5): igtcache vs s3fs (use_cache) vs rclone
# (--vfs-cache-mode full) on an emulated cloud (s3rver behind
# scripts/cloudproxy.py), six AI-workload cases with a real PyTorch
# DataLoader, plus the FUSE limit. One command: starts everything, seeds the
# bucket, runs every case on every system with equal cache limits, checks
# every byte read, tears everything down by pid, and writes the e2e section of
# docs/BENCHMARKS.md and plots in docs/img/.
#
#   sudo scripts/bench_e2e.sh            # full scale (~25 min)
#   sudo scripts/bench_e2e.sh --quick    # every case at small scale (a few min)
#   options: --cases 1,3 --systems igtcache,rclone --no-doc --render-only FILE
#
# Needs root (drops the page cache, loop-mounts s3fs's cache fs), a built
# build/igtcache, s3rver in .deps (scripts/setup.sh), s3fs, rclone and
# Debian's python3-torch / python3-matplotlib under /usr/bin/python3.
# Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

export IGTCACHE_BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
export IGT_BUILD_DIR="${IGT_BUILD_DIR:-$PWD/build}"
if [[ " $* " != *" --render-only "* ]]; then
  [[ $(id -u) -eq 0 ]] || { echo "bench_e2e: run as root (it drops the page cache)" >&2; exit 1; }
  [[ -x "$IGTCACHE_BIN" ]] || { echo "bench_e2e: $IGTCACHE_BIN not built (cmake --build build --target igtcache)" >&2; exit 1; }
  for t in s3fs rclone node fusermount3 mkfs.ext4 losetup; do
    command -v "$t" >/dev/null || { echo "bench_e2e: $t missing (scripts/setup.sh)" >&2; exit 1; }
  done
  /usr/bin/python3 -c 'import torch, matplotlib, numpy' 2>/dev/null \
    || { echo "bench_e2e: /usr/bin/python3 needs python3-torch, python3-matplotlib, python3-numpy" >&2; exit 1; }
fi
exec /usr/bin/python3 scripts/bench/bench_e2e.py "$@"
