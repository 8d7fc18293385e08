#!/usr/bin/python3
"""One file scanned by one reader while others read it at random (Zipf), in
`igtcache sim` (docs/POLICIES.md, "Known limit: one file scanned and read at
random at once"). Standard library only.

For each case: a 600 MiB file, four readers each making 3,000 reads of 100 B
to 300 KB at Zipf-popular 64 KiB rows (s = 1.0), one reader scanning the
file in 128 KiB reads over and over while they run, a 64 MiB cache. Rows:
  igt, lru          the mix as it is;
  igt, scan apart   the same reads with the scan on a copy of the file: what
                    a split of the file's stream by reader could reach;
  igt, no scan      the random readers alone.
Columns: bytes fetched from the source per byte read, byte hit ratio,
modeled time.
  scripts/bench_scan_beside_random.sh [--bin BINARY] [--seeds N]
"""
import argparse
import bisect
import json
import os
import random
import subprocess
import tempfile

MIB = 1 << 20
SIZE = 600 * MIB
ROW = 64 << 10
# (gap between a random reader's reads, gap between the scanner's reads), us
CASES = [(5000, 1000), (10000, 2000), (20000, 3000), (30000, 4000), (10000, 8000), (2000, 1000)]


def trace(seed, gap, scan_gap, scan):
    """rows of (t, pid, path, off, len); scan: None, 'same' or 'apart'"""
    rng = random.Random(seed)
    rows = SIZE // ROW
    perm = list(range(rows))
    rng.shuffle(perm)
    cum, c = [], 0.0
    tot = sum(1.0 / (i + 1) for i in range(rows))
    for i in range(rows):
        c += 1.0 / (i + 1) / tot
        cum.append(c)
    ev = []
    for r in range(4):
        t = 0
        for _ in range(3000):
            t += gap
            row = perm[min(bisect.bisect_left(cum, rng.random()), rows - 1)]
            off = row * ROW + rng.randint(0, 4096)
            ev.append((t, 100 + r, "data/big.bin", off, min(rng.randint(100, 300000), SIZE - off)))
    if scan:
        end, t = max(e[0] for e in ev), 0
        path = "data/big.bin" if scan == "same" else "data/copy.bin"
        while t < end:
            for off in range(0, SIZE, 128 << 10):
                t += scan_gap
                if t >= end:
                    break
                ev.append((t, 200, path, off, 128 << 10))
    ev.sort()
    return ev


def sim(binary, path, policy):
    r = subprocess.run([binary, "sim", "--trace", path, "--cache-size", "64M", "--policy", policy],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("IGTCACHE_BIN", "build/igtcache"))
    ap.add_argument("--seeds", type=int, default=1)
    a = ap.parse_args()
    rows = [("igt", "same", "igt"), ("lru", "same", "lru"), ("igt, scan apart", "apart", "igt"),
            ("igt, no scan", None, "igt")]
    print("| random gap / scan gap (ms) | run | source / read | byte hit | modeled s |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="igt-scan-random-") as d:
        for gap, scan_gap in CASES:
            for name, scan, policy in rows:
                src = hit = secs = 0.0
                for seed in range(1, a.seeds + 1):
                    ev = trace(seed, gap, scan_gap, scan)
                    p = os.path.join(d, "t.csv")
                    with open(p, "w") as f:
                        f.write("time_us,pid,path,offset,length,file_size\n")
                        for t, pid, path, off, ln in ev:
                            f.write(f"{t},{pid},{path},{off},{ln},{SIZE}\n")
                    j = sim(a.bin, p, policy)
                    src += j["backend_bytes"] / sum(e[4] for e in ev)
                    hit += j["byte_hit_ratio"]
                    secs += j["modeled_time_s"]
                n = a.seeds
                print(f"| {gap / 1000:g} / {scan_gap / 1000:g} | {name} | {src / n:.2f}x | {hit / n:.3f} | {secs / n:.1f} |")


if __name__ == "__main__":
    main()
