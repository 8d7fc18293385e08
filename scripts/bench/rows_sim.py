"""Files read at random in runs of a few blocks, and their look-alikes, in
`igtcache sim` (run by scripts/bench_rows.sh; never by the test suite).

Seeded traces, each replayed under igt, lru and lru-readahead at each cache
size, in the same run; the table gives modeled time and bytes fetched, and
igt's ratio to lru-readahead's (below 1: igt better). Workloads:

  rows4m       4 MiB rows of a 2 GiB file chosen uniformly, read in 1 MiB
               pieces (the kernel's reads), 2 ms between rows
  rows4m-128k  the same in 128 KiB pieces
  rows-zipf    4 MiB rows chosen by a Zipf law (s = 1), 1 MiB pieces
  rows8m-2r    8 MiB rows, two readers taking rows in turn
  tensors      a 2 GiB weights file of tensors of 1-7 MiB read whole in a
               shuffled order, 3 loads (a loader that sorts by name)
  parquet      16 files of 128 MiB, row groups of 16 MiB in 4 column chunks;
               each file: footer, then 2 of the 4 columns of every row group;
               files in a shuffled order, 2 epochs
  index-1m     single 1 MiB reads at random 4 KiB-aligned offsets of a 4 GiB
               file (each overlaps two units)
  pool-8x8m    4 files of 512 MiB each downloaded by 8 threads in 8 MiB
               chunks taken in turn, 1 MiB pieces, twice
  pool-3x8m    the same with 3 threads
  pool-4x1m-128k  4 threads taking 1 MiB chunks in turn (a DataLoader's
               workers taking batches), each read in 128 KiB pieces
  pool-8x1m-128k  the same with 8 threads
  pool-steal   the same 4 files, 8 threads each taking the next 8 MiB chunk
               from a queue when done (pieces of varying time)
  scan         the same 4 files read front to back by one reader, twice (a
               plain scan: the control)
  scan-late    4 files of 512 MiB read once by one reader in 1 MiB reads,
               each arriving up to 3 places late (FUSE threads delivering a
               scan's requests out of order)
  mmap-down    4 files of 256 MiB read once through mmap-like windows of 2
               MiB, each window's 128 KiB pieces arriving top piece first
  parquet-late the parquet files read in 128 KiB pieces with 1 MiB of the
               kernel's readahead past each column chunk (gaps of 3 MiB, as
               a tester saw live), each chunk's first piece arriving after
               its second (FUSE threads)
  lockstep     a 1 GiB file of two arrays of 1 MiB rows (an HDF5 file's x
               and y), x[i] then y[i] for i in order, 1 MiB pieces
  lockstep-128k  the same in 128 KiB pieces
  lockstep-4r-128k  the same, 4 readers each taking every 4th batch of 32
  lockstep3-4m-128k  a 1 GiB file of three arrays of 4 MiB rows (x, y, z),
               read in lockstep in 128 KiB pieces
  lockstep4-4m-128k  the same with four arrays
  parquet-1of4 the parquet files, 1 column chunk of 4 read in each row group
               (runs of 4 MiB 16 MiB apart: each a jump from the last)
  parquet-ragged the parquet files read in 1 MiB pieces, each chunk followed
               by 0-2 pieces of 128 KiB past its end (the kernel's readahead
               running into the gap by varying amounts)

Standard library only; the same seed gives the same traces.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


class Trace:
    def __init__(self) -> None:
        self.rows: list[tuple[int, int, str, int, int, int]] = []

    def read(self, t: int, pid: int, path: str, off: int, length: int, size: int) -> None:
        self.rows.append((t, pid, path, off, length, size))

    def pieces(self, t: int, pid: int, path: str, off: int, length: int, size: int, piece: int, gap_us: int) -> int:
        end = min(off + length, size)
        while off < end:
            n = min(piece, end - off)
            self.read(t, pid, path, off, n, size)
            t += gap_us
            off += n
        return t

    def write(self, path: Path) -> None:
        self.rows.sort(key=lambda r: r[0])
        with path.open("w") as f:
            f.write("time_us,pid,path,offset,length,file_size\n")
            for r in self.rows:
                f.write(",".join(str(x) for x in r) + "\n")


def rows(rng: random.Random, row_mib: int, piece: int, zipf: bool, readers: int, n_rows: int) -> Trace:
    tr, size = Trace(), 2048 * MiB
    count = size // (row_mib * MiB)
    weights = [1.0 / (i + 1) if zipf else 1.0 for i in range(count)]
    rng.shuffle(weights)  # the hot rows anywhere in the file
    picks = rng.choices(range(count), weights=weights, k=n_rows)
    t = 0
    for i, r in enumerate(picks):
        t = tr.pieces(t, 100 + i % readers, "emb/rows.bin", r * row_mib * MiB, row_mib * MiB, size, piece, 200)
        t += 2000
    return tr


def tensors(rng: random.Random) -> Trace:
    tr, sizes = Trace(), []
    total = 0
    while total < 2048 * MiB:
        sizes.append(rng.randint(1 * MiB, 7 * MiB) & ~4095)
        total += sizes[-1]
    offsets, o = [], 8 * 4096  # a header first
    for s in sizes:
        offsets.append(o)
        o += s
    size, t = o, 0
    for load in range(3):
        order = list(range(len(sizes)))
        rng.shuffle(order)
        t = tr.pieces(t, 200 + load, "models/w.safetensors", 0, 8 * 4096, size, MiB, 200)
        for k in order:
            t = tr.pieces(t, 200 + load, "models/w.safetensors", offsets[k], sizes[k], size, MiB, 200)
        t += 1_000_000
    return tr


def parquet(rng: random.Random, cols: tuple[int, ...] = (0, 2), piece: int = MiB, late_first: bool = False,
            ragged: bool = False) -> Trace:
    """16 files of 128 MiB, row groups of 16 MiB in 4 column chunks of 4 MiB;
    each file: its footer, then the columns `cols` of every row group in
    `piece` reads. late_first: each chunk's first piece after its second,
    and 1 MiB read past the chunk (the kernel's readahead); ragged: 0-2
    pieces of 128 KiB read past each chunk."""
    tr, size, group, t = Trace(), 128 * MiB, 16 * MiB, 0
    files = [f"pq/part-{i:05}.parquet" for i in range(16)]
    for epoch in range(2):
        order = files[:]
        rng.shuffle(order)
        for path in order:
            pid = 300 + epoch
            t = tr.pieces(t, pid, path, size - 64 * 1024, 64 * 1024, size, 64 * 1024, 200)
            for g in range(size // group):
                for col in cols:
                    start = g * group + col * 4 * MiB
                    offs = list(range(start, start + 4 * MiB, piece))
                    if late_first:
                        offs[0], offs[1] = offs[1], offs[0]
                        offs += list(range(start + 4 * MiB, start + 5 * MiB, 128 * 1024))
                    if ragged:
                        offs += [start + 4 * MiB + k * 128 * 1024 for k in range(rng.randrange(3))]
                    for o in offs:
                        tr.read(t, pid, path, o, piece if o < start + 4 * MiB else 128 * 1024, size)
                        t += 200
                t += 1000
    return tr


def index_reads(rng: random.Random) -> Trace:
    tr, size, t = Trace(), 4096 * MiB, 0
    for _ in range(3000):
        tr.read(t, 400, "idx/records.bin", rng.randrange(size - MiB) & ~4095, MiB, size)
        t += 3000
    return tr


def pool(rng: random.Random, threads: int, chunk_mib: int, scan: bool, piece: int = MiB) -> Trace:
    tr, size, t = Trace(), 512 * MiB, 0
    gap = 200 * piece // MiB
    for rnd in range(2):
        for f in range(4):
            path = f"dl/part{f}.bin"
            if scan:
                t = tr.pieces(t, 500 + rnd, path, 0, size, size, MiB, 200)
                continue
            for c in range(0, size, threads * chunk_mib * MiB):
                for p in range(0, chunk_mib * MiB, piece):
                    ks = list(range(threads))
                    rng.shuffle(ks)
                    for k in ks:
                        off = c + k * chunk_mib * MiB + p
                        if off < size:
                            tr.read(t, 600 + 10 * rnd + k, path, off, piece, size)
                            t += gap
    return tr


def pool_steal(rng: random.Random, threads: int, chunk_mib: int) -> Trace:
    """A work-stealing pool: each thread takes the next chunk from a shared
    queue when it is done with its last, each piece taking 150-450 us, so
    which thread reads which chunk varies."""
    tr, size, t = Trace(), 512 * MiB, 0
    for rnd in range(2):
        for f in range(4):
            path = f"dl/part{f}.bin"
            chunks = list(range(0, size // MiB, chunk_mib))
            clock = [t] * threads
            cur: list[list[int]] = [[] for _ in range(threads)]
            while chunks or any(cur):
                k = min((i for i in range(threads) if cur[i] or chunks), key=lambda i: clock[i])
                if not cur[k]:
                    c = chunks.pop(0)
                    cur[k] = list(range(c, min(c + chunk_mib, size // MiB)))
                b = cur[k].pop(0)
                tr.read(clock[k], 600 + 10 * rnd + k, path, b * MiB, MiB, size)
                clock[k] += rng.randint(150, 450) * threads
            t = max(clock) + 1000
    return tr


def lockstep(rng: random.Random, regions: int, row: int, piece: int, readers: int) -> Trace:
    """One file of `regions` arrays of rows (an HDF5 file's x, y, ...); row i
    of each array read in turn, `piece` reads, rows in order; with several
    readers, each takes every `readers`-th batch of 32 rows."""
    tr, t = Trace(), 0
    n = (1024 * MiB // regions) // row
    size = n * row * regions
    for b in range(0, n, 32):
        pid = 900 + (b // 32) % readers
        for i in range(b, min(b + 32, n)):
            for r in range(regions):
                t = tr.pieces(t, pid, "h5/data.h5", r * n * row + i * row, row, size, piece, 100)
        t += 500
    return tr


def scan_late(rng: random.Random) -> Trace:
    tr, size, t = Trace(), 512 * MiB, 0
    for f in range(4):
        order = sorted(range(size // MiB), key=lambda i: i + rng.uniform(0, 3))
        for i in order:
            tr.read(t, 700, f"sc/f{f}.bin", i * MiB, MiB, size)
            t += 200
    return tr


def mmap_down(rng: random.Random) -> Trace:
    tr, size, t, window, piece = Trace(), 256 * MiB, 0, 2 * MiB, 128 * 1024
    for f in range(4):
        for w in range(0, size, window):
            for off in range(w + window - piece, w - 1, -piece):
                tr.read(t, 800, f"mm/f{f}.bin", off, piece, size)
                t += 100
    return tr


WORKLOADS = {
    "rows4m": lambda rng: rows(rng, 4, MiB, False, 1, 3000),
    "rows4m-128k": lambda rng: rows(rng, 4, 128 * 1024, False, 1, 3000),
    "rows-zipf": lambda rng: rows(rng, 4, MiB, True, 1, 3000),
    "rows8m-2r": lambda rng: rows(rng, 8, MiB, False, 2, 1500),
    "tensors": tensors,
    "parquet": parquet,
    "parquet-1of4": lambda rng: parquet(rng, (1,)),
    "index-1m": index_reads,
    "pool-8x8m": lambda rng: pool(rng, 8, 8, False),
    "scan": lambda rng: pool(rng, 8, 8, True),
    "pool-3x8m": lambda rng: pool(rng, 3, 8, False),
    "pool-4x1m-128k": lambda rng: pool(rng, 4, 1, False, 128 * 1024),
    "pool-8x1m-128k": lambda rng: pool(rng, 8, 1, False, 128 * 1024),
    "pool-steal": lambda rng: pool_steal(rng, 8, 8),
    "lockstep": lambda rng: lockstep(rng, 2, MiB, MiB, 1),
    "lockstep-128k": lambda rng: lockstep(rng, 2, MiB, 128 * 1024, 1),
    "lockstep-4r-128k": lambda rng: lockstep(rng, 2, MiB, 128 * 1024, 4),
    "lockstep3-4m-128k": lambda rng: lockstep(rng, 3, 4 * MiB, 128 * 1024, 1),
    "lockstep4-4m-128k": lambda rng: lockstep(rng, 4, 4 * MiB, 128 * 1024, 1),
    "scan-late": scan_late,
    "mmap-down": mmap_down,
    "parquet-late": lambda rng: parquet(rng, piece=128 * 1024, late_first=True),
    "parquet-ragged": lambda rng: parquet(rng, ragged=True),
}


def sim(binary: str, trace: Path, cache: str, policy: str) -> dict:
    out = subprocess.run([binary, "sim", "--trace", str(trace), "--cache-size", cache, "--policy", policy],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "build" / "igtcache"))
    ap.add_argument("--cache", default="256M,1G", help="comma-separated cache sizes")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, of: " + ", ".join(WORKLOADS))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", help="write every result here too")
    args = ap.parse_args()
    names = args.workloads.split(",")
    bad = [w for w in names if w not in WORKLOADS]
    if bad:
        print(f"bench_rows: unknown workload {', '.join(bad)} (have: {', '.join(WORKLOADS)})", file=sys.stderr)
        return 2
    results = []
    print(f"{'workload':<12} {'cache':>5}  {'igt s':>7} {'lru s':>7} {'lru-ra s':>8} {'igt/ra':>6}   "
          f"{'igt MiB':>8} {'lru MiB':>8} {'ra MiB':>8} {'igt/ra':>6}  igt hit  ra hit")
    with tempfile.TemporaryDirectory(prefix="igt-bench-rows-") as d:
        for name in names:
            trace = Path(d) / f"{name}.csv"
            WORKLOADS[name](random.Random(args.seed)).write(trace)
            for cache in args.cache.split(","):
                r = {p: sim(args.bin, trace, cache, p) for p in ("igt", "lru", "lru-readahead")}
                results.append({"workload": name, "cache": cache, **r})
                ti, tl, ta = (r[p]["modeled_time_s"] for p in ("igt", "lru", "lru-readahead"))
                bi, bl, ba = (r[p]["backend_bytes"] / MiB for p in ("igt", "lru", "lru-readahead"))
                print(f"{name:<12} {cache:>5}  {ti:7.1f} {tl:7.1f} {ta:8.1f} {ti / ta:6.2f}   "
                      f"{bi:8.0f} {bl:8.0f} {ba:8.0f} {bi / ba:6.2f}  {r['igt']['byte_hit_ratio']:7.3f} "
                      f"{r['lru-readahead']['byte_hit_ratio']:7.3f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
