#!/usr/bin/env bash
# A scan beside a cache mostly held by `igtcache warm` (docs/POLICIES.md,
# "Readahead beside a cache held by warm-ups and pins"): a local source,
# a 512M cache, 496 MiB of small files warmed, then a 700 MiB file read
# three times with dd (page cache dropped before each), against the same
# scans on a fresh cache, in the same run. Prints, per case, the source's
# bytes over the bytes read, the time, and the readahead evicted unread.
# Not part of the test suite; builds nothing; needs root (drop_caches).
#   scripts/bench_warm_scan.sh [LABEL=BINARY ...]   (default: new=build/igtcache)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[[ $# -gt 0 ]] || set -- "new=$ROOT/build/igtcache"
W=$(mktemp -d /tmp/igt-bench-warm-scan.XXXXXX)
BIN=
cleanup() {
  if mountpoint -q "$W/mnt" 2>/dev/null; then "$BIN" unmount "$W/mnt" >/dev/null 2>&1 || fusermount3 -u "$W/mnt"; fi
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/src/many" "$W/mnt"
/usr/bin/python3 - "$W/src" <<'PY'
import os, sys
src = sys.argv[1]
with open(f"{src}/shard.bin", "wb") as f:
    for _ in range(70): f.write(os.urandom(10 << 20))
    f.write(os.urandom(12345))
for i in range(31):
    with open(f"{src}/many/f{i:02d}.bin", "wb") as f: f.write(os.urandom((16 << 20) + i * 777))
PY
cp examples/policy-checkpoint-loading.yaml "$W/policy.yaml"; printf 'policy:\n  file: %s\n' "$W/policy.yaml" > "$W/cfg.yaml"
for spec in "$@"; do
  label=${spec%%=*}; BIN=${spec#*=}
  for mode in warm nowarm; do
    rm -rf "$W/cache"
    "$BIN" mount "file://$W/src" "$W/mnt" --config "$W/cfg.yaml" --cache-dir "$W/cache" --cache-size 512M --log-file "$W/d.log" >/dev/null
    [[ $mode == warm ]] && "$BIN" warm -q "$W/mnt/many" >/dev/null
    b0=$("$BIN" stats "$W/mnt" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["backend_get_bytes"])')
    t0=$(date +%s.%N)
    for _ in 1 2 3; do sync; echo 3 > /proc/sys/vm/drop_caches; dd if="$W/mnt/shard.bin" of=/dev/null bs=1M 2>/dev/null; done
    t1=$(date +%s.%N)
    "$BIN" stats "$W/mnt" --json | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin); b0 = int(sys.argv[1]); t = float(sys.argv[2]) - float(sys.argv[3])
n = 3 * ((700 << 20) + 12345)
ra = [s for s in d["engine"]["streams"] if s["stream"] == "(readahead)"]
src = (d["backend_get_bytes"] - b0) / n
wasted = (ra[0]["prefetch_wasted_bytes"] if ra else 0) / 1e6
print("%8s %6s: source/read %.2fx, %.1f s, readahead evicted unread %.0f MB" % (sys.argv[4], sys.argv[5], src, t, wasted))
' "$b0" "$t1" "$t0" "$label" "$mode"
    "$BIN" unmount "$W/mnt" >/dev/null
  done
done
