"""Does `igtcache sim` predict the live mount? (run by
scripts/bench_sim_vs_live.sh; never by the test suite).

A mix of three jobs runs at once on a real mount that records its reads
(`--trace-out`), of s3rver behind scripts/cloudproxy.py (25 ms to first
byte, 90 MB/s per connection: the simulator's default model) or, with
--source local, of a local directory (`file://`; the replay then models a
store with --local-latency-ms and 2 GB/s):
- training: --epochs epochs over 1,500 files of 32-96 KiB in 10 class
  directories (train0 ... train9), each epoch in a fresh shuffled order, whole-file reads, two
  threads;
- model: a 192 MiB file read from start to end in 1 MiB reads, twice;
- embedding: two threads making --reads Zipf(1.1)-popular 64 KiB reads
  each of a 256 MiB file (rows spread by a fixed shuffle).
Every read is O_DIRECT (the page cache would answer re-reads itself); every
9th read is compared with the source.

Then the recorded trace is replayed by `igtcache sim` with the data set's
listing, the same cache size and the default unit (1 MiB, as the mount's),
under igt and under lru. For each live policy and cache size the table
gives the live byte hit ratio
(`cache_hit_bytes / read_bytes` of `igtcache stats`) and bytes fetched
from the source beside the simulator's on that run's own trace. A live run
under `cache.eviction: lru` (this build) is the baseline of the same run.

Every process is started through tests/mount/harness.py's Session and
stopped by pid; every mount is unmounted, temp dirs removed.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True
sys.path.insert(0, str(ROOT / "tests" / "mount"))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import faultlib  # noqa: E402
import harness  # noqa: E402
from e2e_systems import cpu_model  # noqa: E402

MIB = 1 << 20
MODEL = 192 * MIB
EMB = 256 * MIB
ROW = 64 << 10
FILES = 1500
POLICIES = ("igt", "lru")
BUCKET = "mix"


def make_data(src: Path) -> int:
    rng = random.Random(7)
    total = 0
    for i in range(FILES):
        # Two levels at most: s3rver 3.7.1 lists no common prefix for keys
        # nested deeper than a directory with no object of its own.
        d = src / f"train{i % 10}"
        d.mkdir(parents=True, exist_ok=True)
        n = rng.randint(32 << 10, 96 << 10)
        (d / f"img{i:05d}.jpg").write_bytes(os.urandom(n))
        total += n
    (src / "models").mkdir()
    for name, size in (("models/weights.bin", MODEL), ("emb.bin", EMB)):
        with open(src / name, "wb") as f:
            for _ in range(size // (8 * MIB)):
                f.write(os.urandom(8 * MIB))
        total += size
    return total


def read_all(path: Path, chunk: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        parts = []
        while True:
            d = os.read(fd, chunk)
            if not d:
                return b"".join(parts)
            parts.append(d)
    finally:
        os.close(fd)


def load(mnt: Path, src: Path, a) -> dict:
    """The three jobs at once; returns wrong reads and seconds per job."""
    lock = threading.Lock()
    out: dict = {"bad": [], "secs": {}}
    names = sorted(str(p.relative_to(src)) for p in src.glob("train*/*.jpg"))

    def bad(what: str) -> None:
        with lock:
            out["bad"].append(what)

    def training() -> None:
        t0 = time.monotonic()
        for e in range(a.epochs):
            order = names[:]
            random.Random(100 + e).shuffle(order)

            def worker(k: int) -> None:
                for i in range(k, len(order), 2):
                    d = read_all(mnt / order[i], 1 << 20)
                    if i % 9 == 0 and d != (src / order[i]).read_bytes():
                        bad(order[i])

            ts = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        out["secs"]["training"] = time.monotonic() - t0

    def model() -> None:
        t0 = time.monotonic()
        for _ in range(2):
            fd = os.open(mnt / "models/weights.bin", os.O_RDONLY | os.O_DIRECT)
            sfd = os.open(src / "models/weights.bin", os.O_RDONLY)
            try:
                off = n = 0
                while off < MODEL:
                    d = os.pread(fd, MIB, off)
                    if not d:
                        bad(f"weights.bin: short at {off}")
                        break
                    if n % 9 == 0 and d != os.pread(sfd, len(d), off):
                        bad(f"weights.bin at {off}")
                    off += len(d)
                    n += 1
            finally:
                os.close(fd)
                os.close(sfd)
        out["secs"]["model"] = time.monotonic() - t0

    def embedding() -> None:
        rows = EMB // ROW
        perm = list(range(rows))
        random.Random(12345).shuffle(perm)
        cum, c = [], 0.0
        for k in range(rows):
            c += 1.0 / (k + 1) ** 1.1
            cum.append(c)
        t0 = time.monotonic()

        def reader(i: int) -> None:
            rng = random.Random(a.seed * 1000 + i)
            fd = os.open(mnt / "emb.bin", os.O_RDONLY | os.O_DIRECT)
            sfd = os.open(src / "emb.bin", os.O_RDONLY)
            try:
                for n in range(a.reads):
                    off = perm[min(bisect.bisect_left(cum, rng.random() * cum[-1]), rows - 1)] * ROW
                    d = os.pread(fd, ROW, off)
                    if len(d) != ROW or (n % 9 == 0 and d != os.pread(sfd, ROW, off)):
                        bad(f"emb.bin at {off}")
            finally:
                os.close(fd)
                os.close(sfd)

        ts = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out["secs"]["embedding"] = time.monotonic() - t0

    def guarded(f) -> None:
        try:
            f()
        except Exception as e:  # a failed read is a failed run, said once all jobs end
            bad(f"{f.__name__}: {e!r}")

    jobs = [threading.Thread(target=guarded, args=(f,)) for f in (training, model, embedding)]
    t0 = time.monotonic()
    for t in jobs:
        t.start()
    for t in jobs:
        t.join()
    out["secs"]["all"] = time.monotonic() - t0
    return out


def sim(trace: Path, listing: Path, size: str, policy: str, model: list[str]) -> dict:
    argv = [harness.igtcache_bin(), "sim", "--trace", str(trace), "--listing", str(listing), "--cache-size", size,
            "--policy", policy, *model]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise harness.TestFailure(f"{' '.join(argv)} exited {r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout)


def run_once(s: harness.Session, src: Path, source: list[str], model: list[str], listing: Path, size: str,
             policy: str, tag: str, a) -> dict:
    trace = s.tmp / f"trace_{tag}.csv"
    args = [*source[1:], "--cache-size", size, "--trace-out", str(trace)]
    if policy == "lru":
        args += ["--config", str(s.write_config(f"lru_{tag}.yaml", "cache:\n  eviction: lru\n"))]
    m = s.mount(source[0], cache_dir=s.mkdir(f"cache_{tag}"), foreground=False, args=args)
    try:
        before = s.stats(m)
        r = load(m.mountpoint, src, a)
        after = s.stats(m)
    finally:
        s.unmount(m)  # flushes the trace
    if r["bad"]:
        raise harness.TestFailure(f"{tag}: wrong bytes: {r['bad'][:5]}")
    read = after["read_bytes"] - before["read_bytes"]
    r["live_hit"] = (after["cache_hit_bytes"] - before["cache_hit_bytes"]) / max(1, read)
    r["live_fetched"] = after["backend_get_bytes"] - before["backend_get_bytes"]
    r["read"] = read
    r["sim"] = {p: sim(trace, listing, size, p, model) for p in POLICIES}
    trace.unlink()
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="64M,128M,256M", help="cache sizes, comma-separated")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--reads", type=int, default=3000, help="per embedding reader")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--source", choices=("cloud", "local"), default="cloud")
    ap.add_argument("--local-latency-ms", default="0.1", help="the replay's latency with --source local")
    a = ap.parse_args()
    sizes = a.sizes.split(",")
    rows = []
    with harness.Session("sim_vs_live") as s:
        src = s.mkdir("src")
        total = make_data(src)
        listing = s.tmp / "objects.csv"
        with open(listing, "w") as f:
            f.write("path,size\n")
            for p in sorted(src.rglob("*")):
                if p.is_file():
                    f.write(f"{p.relative_to(src)},{p.stat().st_size}\n")
        if a.source == "local":
            source = [f"file://{src}"]
            model = ["--latency-ms", a.local_latency_ms, "--bandwidth", "2000000000"]
            where = f"a local directory (replayed with {a.local_latency_ms} ms to first byte, 2 GB/s)"
        else:
            srv = s.start_s3rver(buckets=(BUCKET,))
            faultlib.put_objects(srv, BUCKET, {str(p.relative_to(src)): p.read_bytes()
                                               for p in sorted(src.rglob("*")) if p.is_file()})
            proxy = faultlib.start_proxy(s, srv.endpoint, ttfb_ms=25, bandwidth="90MB")
            source = [f"s3://{BUCKET}", "--endpoint", proxy.endpoint, "--region", "us-east-1"]
            model = []
            where = "s3rver behind scripts/cloudproxy.py (25 ms to first byte, 90 MB/s per connection)"
        n = 0
        for size in sizes:
            for policy in POLICIES:
                n += 1
                r = run_once(s, src, source, model, listing, size, policy, str(n), a)
                harness.log(f"  {size} live {policy}: hit {r['live_hit']:.3f}, sim igt "
                            f"{r['sim']['igt']['byte_hit_ratio']:.3f} lru {r['sim']['lru']['byte_hit_ratio']:.3f}, "
                            f"{r['secs']['all']:.1f} s")
                rows.append((size, policy, r))
    lines = [
        f"A data set of {total / MIB:.0f} MiB in {where} (1,500 files of 32-96 KiB read for {a.epochs} shuffled epochs "
        f"by two threads, a 192 MiB file read twice in 1 MiB reads, two threads making {a.reads} Zipf(1.1) 64 KiB "
        "reads each of a 256 MiB file), the three jobs at once, O_DIRECT; each live run recorded with "
        "`--trace-out` and its own trace replayed by `igtcache sim` with the listing, the same cache size, "
        f"igt and lru, {' '.join(model) or 'the default model'}. Machine: {os.cpu_count()} CPUs ({cpu_model()}).",
        "",
        "| cache | live policy | live byte hit | sim igt byte hit | sim lru byte hit | live MiB fetched "
        "| sim igt MiB | sim lru MiB | live s (train / model / emb) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for size, policy, r in rows:
        sec = r["secs"]
        lines.append(
            f"| {size} | {policy} | {r['live_hit']:.3f} | {r['sim']['igt']['byte_hit_ratio']:.3f} "
            f"| {r['sim']['lru']['byte_hit_ratio']:.3f} | {r['live_fetched'] / MIB:.0f} "
            f"| {r['sim']['igt']['backend_bytes'] / MIB:.0f} | {r['sim']['lru']['backend_bytes'] / MIB:.0f} "
            f"| {sec['training']:.1f} / {sec['model']:.1f} / {sec['embedding']:.1f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
