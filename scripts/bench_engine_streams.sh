#!/usr/bin/env bash
# The policy engine's own time with many streams: `igtcache sim` (the real
# engine and tree over a modeled backend) on a trace of files spread over
# many directories, each a stream of its own, read in shuffled passes with a
# cache much smaller than the data (every read evicts). Prints the wall time
# of igt and of lru (the same replay with one flat LRU) and their ratio; with
# --compare, the same for another binary, runs alternating. Not part of the
# test suite; builds nothing, mounts nothing.
#   scripts/bench_engine_streams.sh [--dirs N] [--files N] [--passes N] [--cache SIZE] [--runs N] [--compare LABEL=BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${IGTCACHE_BIN:-$PWD/build/igtcache}"
DIRS=8000 FILES=16000 PASSES=2 CACHE=256M RUNS=1 COMPARE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dirs) DIRS="$2"; shift 2 ;;
    --files) FILES="$2"; shift 2 ;;
    --passes) PASSES="$2"; shift 2 ;;
    --cache) CACHE="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --compare) COMPARE="$2"; shift 2 ;;
    *) echo "usage: $0 [--dirs N] [--files N] [--passes N] [--cache SIZE] [--runs N] [--compare LABEL=BINARY]" >&2; exit 2 ;;
  esac
done
[ -x "$BIN" ] || { echo "bench_engine_streams: $BIN not built (scripts/build.sh)" >&2; exit 1; }
TMP="$(mktemp -d /tmp/igt-bench-streams.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
/usr/bin/python3 - "$TMP/t.csv" "$DIRS" "$FILES" "$PASSES" <<'PY'
import random, sys
out, dirs, files, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(7)
names = [f"d{i % dirs:05d}/f{i:06d}.bin" for i in range(files)]
rows, t = ["time_us,pid,path,offset,length,file_size"], 0
for p in range(passes):
    rng.shuffle(names)
    for n in names:
        t += 1000
        rows.append(f"{t},{100 + p},{n},0,1048576,1048576")
open(out, "w").write("\n".join(rows) + "\n")
PY
echo "trace: $FILES files of 1 MiB in $DIRS directories, $PASSES shuffled passes ($((FILES * PASSES)) reads), cache $CACHE"
one() {  # label binary policy -> prints "label policy seconds"
  local s e
  s=$(date +%s.%N)
  "$2" sim --trace "$TMP/t.csv" --cache-size "$CACHE" --policy "$3" > "$TMP/out.json" 2>/dev/null
  e=$(date +%s.%N)
  /usr/bin/python3 - "$TMP/out.json" "$1" "$3" "$s" "$e" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
streams = len(d["details"].get("engine", {}).get("streams", []))
print(f"{sys.argv[2]:>10} {sys.argv[3]:>4}  {float(sys.argv[5]) - float(sys.argv[4]):7.2f} s wall  "
      f"byte hit {d['byte_hit_ratio']:.3f}  streams {streams}")
PY
}
for r in $(seq 1 "$RUNS"); do
  one this "$BIN" igt
  one this "$BIN" lru
  if [ -n "$COMPARE" ]; then
    one "${COMPARE%%=*}" "${COMPARE#*=}" igt
    one "${COMPARE%%=*}" "${COMPARE#*=}" lru
  fi
done
