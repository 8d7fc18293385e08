#!/usr/bin/env bash
# Files read at random in runs of a few blocks (rows, tensors, parquet column
# chunks) and their look-alikes (single unaligned reads, a thread pool's
# chunks, a scan) in `igtcache sim`: igt against lru and lru-readahead in the
# same run (docs/POLICIES.md, "Runs in files read at random"). Not part of the
# test suite; builds nothing; starts no daemon.
#   scripts/bench_rows.sh [--cache 256M,1G] [--workloads rows4m,...] [--seed N] [--json FILE] [--bin BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
[[ -x "$BIN" ]] || { echo "bench_rows: $BIN not built (scripts/build.sh)" >&2; exit 1; }
exec /usr/bin/python3 scripts/bench/rows_sim.py --bin "$BIN" "$@"
