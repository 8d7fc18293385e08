"""One file scanned by one reader while four others read it at random, on a
real mount (run by scripts/bench_scan_beside_random_live.sh; never by the
test suite). The live twin of scripts/bench/scan_beside_random.py.

A 600 MiB file in a local directory (`file://`), a 64 MiB cache. Four
threads each make --reads reads of 100 B to 300 KB at Zipf(1.0)-popular
64 KiB rows (spread over the file by a fixed shuffle), 5 ms apart; one
more thread scans the file in 128 KiB reads over and over while they run:
1 ms apart ("paced"), or as fast as it can ("unthrottled"); "alone" has no
scanner. Every read is O_DIRECT: the page cache would hold the whole file
and answer the re-reads itself. Every 7th random read and every 50th scan
read is compared with the source, byte for byte.

Columns: the random readers' source bytes per byte they read, estimated as
(source bytes - the scanner's bytes) / random bytes (each scanned byte
fetched once: the scanner's readahead is ahead of it); all source bytes per
byte read; the byte hit ratio; the bytes the `(scan)` stream read (the
scanner's reads once split off, docs/POLICIES.md); the random readers'
mean read latency. igt on this build and each --compare LABEL=BINARY, and
lru on this build as the baseline of the same run.

Every process is started through tests/mount/harness.py's Session and
stopped by pid; every mount is unmounted, temp dirs removed.
"""

from __future__ import annotations

import argparse
import bisect
import os
import random
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True
sys.path.insert(0, str(ROOT / "tests" / "mount"))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import harness  # noqa: E402
from e2e_systems import compare_binaries, cpu_model  # noqa: E402

MIB = 1 << 20
SIZE = 600 * MIB
ROW = 64 << 10
MODES = {"paced": 1.0, "unthrottled": 0.0, "alone": None}  # the scanner's gap (ms), None: no scanner


def load(path: Path, src: Path, reads: int, scan_gap_ms: float | None, seed: int) -> dict:
    """Runs the readers (and the scanner) on `path`; returns byte counts."""
    rows = SIZE // ROW
    perm = list(range(rows))
    random.Random(12345).shuffle(perm)
    cum, c = [], 0.0
    for k in range(rows):
        c += 1.0 / (k + 1)
        cum.append(c)
    lock = threading.Lock()
    out = {"rand": 0, "scan": 0, "bad": [], "lat": []}
    stop = threading.Event()
    src_fd = os.open(src, os.O_RDONLY)

    def check(fd_data: bytes, off: int, who: str) -> None:
        if os.pread(src_fd, len(fd_data), off) != fd_data:
            with lock:
                out["bad"].append(f"{who} at {off}, {len(fd_data)} bytes")

    def reader(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        n_bytes, lat = 0, []
        try:
            for n in range(reads):
                row = perm[min(bisect.bisect_left(cum, rng.random() * cum[-1]), rows - 1)]
                off = row * ROW + rng.randint(0, 4096)
                size = min(rng.randint(100, 300_000), SIZE - off)
                t0 = time.perf_counter()
                d = os.pread(fd, size, off)
                lat.append(time.perf_counter() - t0)
                if len(d) != size:
                    with lock:
                        out["bad"].append(f"reader {i}: short read at {off}")
                n_bytes += len(d)
                if n % 7 == 0:
                    check(d, off, f"reader {i}")
                time.sleep(0.005)
        finally:
            os.close(fd)
            with lock:
                out["rand"] += n_bytes
                out["lat"] += lat

    def scanner() -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        off = n = 0
        try:
            while not stop.is_set():
                d = os.pread(fd, 128 << 10, off)
                if n % 50 == 0:
                    check(d, off, "scanner")
                out["scan"] += len(d)
                n += 1
                off = 0 if off + len(d) >= SIZE or not d else off + len(d)
                if scan_gap_ms:
                    time.sleep(scan_gap_ms / 1000)
        finally:
            os.close(fd)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    sc = threading.Thread(target=scanner) if scan_gap_ms is not None else None
    t0 = time.monotonic()
    try:
        if sc:
            sc.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        stop.set()
        if sc:
            sc.join()
        os.close(src_fd)
    out["secs"] = time.monotonic() - t0
    return out


def run_once(s: harness.Session, binary: str, src: Path, a, mode: str, tag: str, lru: bool) -> dict:
    os.environ["IGTCACHE_BIN"] = binary
    args = ["--cache-size", "64M"]
    if lru:
        args += ["--config", str(s.write_config(f"lru_{tag}.yaml", "cache:\n  eviction: lru\n"))]
    m = s.mount(f"file://{src}", cache_dir=s.mkdir(f"cache_{tag}"), foreground=False, args=args)
    try:
        path = m.mountpoint / "data" / "big.bin"
        os.stat(path)
        before = s.stats(m)
        r = load(path, src / "data" / "big.bin", a.reads, MODES[mode], a.seed)
        after = s.stats(m)
        if r["bad"]:
            raise harness.TestFailure(f"{tag}: wrong bytes: {r['bad'][:5]}")
        r["fetched"] = after["backend_get_bytes"] - before["backend_get_bytes"]
        r["hit"] = after["cache_hit_bytes"] - before["cache_hit_bytes"]
        r["read"] = after["read_bytes"] - before["read_bytes"]
        r["scan_stream"] = sum(st.get("read_bytes", 0) for st in after.get("engine", {}).get("streams", [])
                               if st.get("stream") == "(scan)")
        return r
    finally:
        s.unmount(m)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reads", type=int, default=3000, help="per random reader")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--modes", default="paced,unthrottled,alone")
    ap.add_argument("--compare", action="append", default=[], metavar="LABEL=BINARY")
    a = ap.parse_args()
    modes = a.modes.split(",")
    for m in modes:
        if m not in MODES:
            print(f"bench_scan_beside_random_live: --modes: {m!r} is not one of {', '.join(MODES)}", file=sys.stderr)
            sys.exit(2)
    systems = compare_binaries(a.compare, "bench_scan_beside_random_live")
    base = "lru (this build)"
    results: dict[tuple[str, str], list[dict]] = {}
    with harness.Session("scan_beside_random_live") as s:
        src = s.mkdir("src")
        (src / "data").mkdir()
        with open(src / "data" / "big.bin", "wb") as f:
            for _ in range(SIZE // (8 * MIB)):  # 75 pieces: exactly SIZE
                f.write(os.urandom(8 * MIB))
        n = 0
        for run in range(a.runs):
            for mode in modes:
                order = systems if run % 2 == 0 else list(reversed(systems))
                for label, binary, lru in [(l, b, False) for l, b in order] + [(base, systems[0][1], True)]:
                    n += 1
                    r = run_once(s, binary, src, a, mode, str(n), lru)
                    harness.log(f"  run {run} {mode} {label}: {r['fetched'] / MIB:.0f} MiB fetched, {r['secs']:.1f} s")
                    results.setdefault((mode, label), []).append(r)
    lines = [
        f"A 600 MiB file, a 64 MiB cache, a local directory as the source; four Zipf readers making {a.reads} "
        "reads each, beside a scanner (paced: 128 KiB every 1 ms; unthrottled; alone: none); O_DIRECT; "
        f"{a.runs} run(s), a fresh cache dir each. Machine: {os.cpu_count()} CPUs ({cpu_model()}).",
        "",
        "| scanner | build | random readers' source / read | source / all read | byte hit | (scan) read MiB "
        "| random read ms | seconds |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode in modes:
        for label in [l for l, _ in systems] + [base]:
            rs = results[(mode, label)]

            def mean(f):
                return sum(f(r) for r in rs) / len(rs)

            lines.append(
                f"| {mode} | {label} | {mean(lambda r: (r['fetched'] - r['scan']) / max(1, r['rand'])):.2f}x "
                f"| {mean(lambda r: r['fetched'] / max(1, r['read'])):.2f}x | {mean(lambda r: r['hit'] / max(1, r['read'])):.3f} "
                f"| {mean(lambda r: r['scan_stream']) / MIB:.0f} "
                f"| {mean(lambda r: 1000 * sum(r['lat']) / max(1, len(r['lat']))):.1f} | {mean(lambda r: r['secs']):.1f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
