#!/usr/bin/env bash
# Command (1) of the README: sets up, builds, mounts the bundled example
# dataset (a local directory: no server, no credentials), reads it through
# the mount twice -- cold, then warm after a remount -- prints the cache
# stats, and unmounts. Everything it starts is stopped by pid.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
./scripts/setup.sh
./scripts/build.sh >/dev/null
BIN=$ROOT/build/igtcache

WORK=$ROOT/build/demo
rm -rf "$WORK"
mkdir -p "$WORK/bucket" "$WORK/mnt"
# The bucket: the bundled dataset plus a 64 MiB "model" file to show a
# sequential read of a large object in 1 MiB cache units.
cp -r examples/dataset/. "$WORK/bucket/"
mkdir -p "$WORK/bucket/models"
head -c $((64 << 20)) /dev/urandom > "$WORK/bucket/models/weights.bin"

MNT=$WORK/mnt
cleanup() {
  if mountpoint -q "$MNT" 2>/dev/null; then fusermount3 -u "$MNT" || fusermount3 -uz "$MNT" || true; fi
}
trap cleanup EXIT

mount_it() {
  "$BIN" mount "file://$WORK/bucket" "$MNT" --cache-dir "$WORK/cache" --cache-size 1G
}
read_all() {
  local t0 t1
  t0=$(date +%s.%N)
  find "$MNT" -type f -print0 | xargs -0 cat > /dev/null
  t1=$(date +%s.%N)
  echo "  read $(find "$MNT" -type f | wc -l) files, $(du -sb --apparent-size "$WORK/bucket" | cut -f1) bytes in $(/usr/bin/python3 -c "print(round($t1 - $t0, 3))") s"
}
show() {
  "$BIN" stats "$MNT" | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
keys = ["cache_hit_bytes", "cache_miss_bytes", "backend_get_requests", "backend_get_bytes",
        "backend_list_requests", "cache_used_bytes", "cache_limit_bytes", "evictions"]
for k in keys: print(f"  {k:24s} {s[k]:>14,}")'
}

echo "== mount file://$WORK/bucket on $MNT (cold cache)"
mount_it
read_all
show
fusermount3 -u "$MNT"

echo "== remount: the cache survives, the second pass is served from the SSD tier"
mount_it
read_all
show
fusermount3 -u "$MNT"
echo "== unmounted. Try: $BIN mount file://$WORK/bucket $MNT --cache-dir $WORK/cache"
