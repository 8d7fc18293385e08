#!/bin/bash
# Reproduces docs/EVALUATION.md and its plots: generates the seeded traces of
# scripts/gen_trace.py (workloads a-e, the mix f, and g: a over class
# directories), replays each through
# `igtcache sim` with igt and every baseline at 10/25/50/75% of the trace's
# working set, and writes the tables and PNGs. Also draws the per-class
# hit-ratio curves of docs/POLICIES.md.
#
#   scripts/eval.sh [--seed N] [--out DIR]     (default seed 7, DIR a temp dir)
#
# Needs build/igtcache (scripts/build.sh) and /usr/bin/python3 with matplotlib.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${IGTCACHE_BIN:-$ROOT/build/igtcache}"
SEED=7
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) SEED="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "usage: $0 [--seed N] [--out DIR]" >&2; exit 2 ;;
  esac
done
[ -x "$BIN" ] || { echo "eval: $BIN not built (scripts/build.sh)" >&2; exit 1; }
if [ -z "$OUT" ]; then OUT="$(mktemp -d /tmp/igt-eval.XXXXXX)"; fi
mkdir -p "$OUT"
for w in a b c d e f; do
  /usr/bin/python3 "$ROOT/scripts/gen_trace.py" --workload "$w" --seed "$SEED" --out "$OUT/$w.csv" \
    --listing-out "$OUT/$w.listing.csv"
done
# (g): (a) as torchvision's ImageFolder lays it out, 20,000 files over 1,000
# class directories.
/usr/bin/python3 "$ROOT/scripts/gen_trace.py" --workload a --seed "$SEED" --image-files 20000 \
  --image-classes 1000 --out "$OUT/g.csv" --listing-out "$OUT/g.listing.csv"
/usr/bin/python3 "$ROOT/scripts/eval/run_sims.py" --bin "$BIN" --dir "$OUT" --seed "$SEED"
/usr/bin/python3 "$ROOT/scripts/eval/report.py" --results "$OUT/results.json" --seed "$SEED" \
  --mix-trace "$OUT/f.csv" --md "$ROOT/docs/EVALUATION.md" --img "$ROOT/docs/img"
/usr/bin/python3 "$ROOT/scripts/eval/curves.py" --bin "$BIN" --dir "$OUT" --img "$ROOT/docs/img"
echo "eval: wrote docs/EVALUATION.md, docs/img/*.png (traces and raw results in $OUT)"
