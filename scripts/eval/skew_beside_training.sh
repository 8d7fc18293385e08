#!/bin/sh
# A skewed job beside a training job, in the simulator (docs/POLICIES.md,
# "Why a shadow for skewed streams"): an image-folder DataLoader trace
# (2,400 files of ~80 KiB in 24 classes, 4 workers, 5 epochs) merged in time
# with a Zipf(1.1) reader of 300 small items (scripts/gen_trace.py, seed 3),
# replayed by igt and by lru at a 100 MiB cache. Prints, per policy, the
# byte hit ratio, backend bytes, makespan and each job's total stall, and the
# lru / igt ratios from the same run.
#   scripts/eval/skew_beside_training.sh [IGTCACHE_BINARY]
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$here/build/igtcache}
py=/usr/bin/python3
dir=$(mktemp -d /tmp/igt-skew.XXXXXX)
trap 'rm -rf "$dir"' EXIT
$py "$here/scripts/gen_trace.py" -w a --seed 3 -o "$dir/a.csv" --listing-out "$dir/a.lst" \
  --image-files 2400 --image-kib 80 --image-classes 24 --epochs 5 2>/dev/null
$py "$here/scripts/gen_trace.py" -w d --seed 3 -o "$dir/d.csv" --listing-out "$dir/d.lst" \
  --items 300 --requests 16000 --servers 2 --zipf-s 1.1 --embedding-mib 8 2>/dev/null
$py - "$dir" <<'PY'
import csv, sys
d = sys.argv[1]
rows = []
for f in ("a.csv", "d.csv"):
    with open(f"{d}/{f}") as fh:
        r = csv.reader(fh); next(r); rows += list(r)
rows.sort(key=lambda x: int(x[0]))  # stable: ties keep a's rows first
with open(f"{d}/m.csv", "w", newline="") as fh:
    w = csv.writer(fh, lineterminator="\n")
    w.writerow(["time_us", "pid", "path", "offset", "length", "file_size"]); w.writerows(rows)
with open(f"{d}/m.lst", "w") as out:
    out.write("path,size\n")
    for f in ("a.lst", "d.lst"):
        with open(f"{d}/{f}") as fh:
            next(fh); out.writelines(fh)
PY
for p in igt lru; do
  "$bin" sim --trace "$dir/m.csv" --listing "$dir/m.lst" --cache-size 100M --policy "$p" > "$dir/$p.json"
done
$py - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
r = {p: json.load(open(f"{d}/{p}.json")) for p in ("igt", "lru")}
def stall(j, top): return j["details"]["by_top_dir"][top]["stall_time_s"]
for p, j in r.items():
    print(f"{p:4} byte hit {j['byte_hit_ratio']:.3f}  backend {j['backend_bytes'] >> 20} MiB  "
          f"makespan {j['modeled_time_s']:.1f} s  stall: training {stall(j, 'images/'):.1f} s, "
          f"Zipf {stall(j, 'inference/'):.1f} s")
i, l = r["igt"], r["lru"]
print(f"lru / igt: backend {l['backend_bytes'] / i['backend_bytes']:.2f}x, makespan "
      f"{l['modeled_time_s'] / i['modeled_time_s']:.2f}x, training stall "
      f"{stall(l, 'images/') / stall(i, 'images/'):.2f}x, Zipf stall {stall(l, 'inference/') / stall(i, 'inference/'):.2f}x")
PY
