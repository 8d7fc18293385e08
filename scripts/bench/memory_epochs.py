"""The daemon's memory over many epochs of a data set of many small files
in many directories (run by scripts/bench_memory_epochs.sh; never by the
test suite).

--files files of 1-8 KiB in --dirs top-level directories of a local
directory (`file://`), a --cache-size cache that holds a fraction of them;
each epoch --threads threads read every file whole, in a fresh shuffled
order, the page cache dropped first. After each epoch: the daemon's RSS (VmRSS), the engine's ghosts
(`ghosts` in `igtcache stats --json`, where the build has it) and the
evictions so far. This build and each --compare LABEL=BINARY, one after the
other, each with a fresh cache dir. Every 13th file read is compared with
the source.

Every process is started through tests/mount/harness.py's Session and
stopped by pid; every mount is unmounted, temp dirs removed.
"""

from __future__ import annotations

import argparse
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

import faultlib  # noqa: E402
import harness  # noqa: E402
from e2e_systems import compare_binaries, cpu_model, drop_caches  # noqa: E402

MIB = 1 << 20


def epoch(mnt: Path, src: Path, names: list[str], threads: int, seed: int) -> list[str]:
    order = names[:]
    random.Random(seed).shuffle(order)
    bad: list[str] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        for i in range(k, len(order), threads):
            data = (mnt / order[i]).read_bytes()
            if i % 13 == 0 and data != (src / order[i]).read_bytes():
                with lock:
                    bad.append(order[i])

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--dirs", type=int, default=200)
    ap.add_argument("--cache-size", default="16M")
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compare", action="append", default=[], metavar="LABEL=BINARY")
    a = ap.parse_args()
    systems = compare_binaries(a.compare, "bench_memory_epochs")
    rows: dict[str, list[tuple[int, int | None, int, float]]] = {}
    with harness.Session("memory_epochs") as s:
        src = s.mkdir("src")
        rng = random.Random(3)
        names = []
        for i in range(a.files):
            d = src / f"d{i % a.dirs:04d}"
            d.mkdir(exist_ok=True)
            name = f"d{i % a.dirs:04d}/f{i:07d}.bin"
            (src / name).write_bytes(rng.randbytes(rng.randint(1024, 8192)))
            names.append(name)
        for n, (label, binary) in enumerate(systems):
            os.environ["IGTCACHE_BIN"] = binary
            m = s.mount(f"file://{src}", cache_dir=s.mkdir(f"cache_{n}"), foreground=False,
                        args=["--cache-size", a.cache_size])
            try:
                pid = s.stats(m)["pid"]
                for e in range(a.epochs):
                    drop_caches()  # else the kernel's page cache answers every epoch after the first
                    t0 = time.monotonic()
                    bad = epoch(m.mountpoint, src, names, a.threads, e)
                    secs = time.monotonic() - t0
                    if bad:
                        raise harness.TestFailure(f"{label}: wrong bytes in {bad[:5]}")
                    st = s.stats(m)
                    ghosts = st.get("engine", {}).get("ghosts")
                    rss = faultlib.rss_bytes(pid) // 1024
                    rows.setdefault(label, []).append((rss, ghosts, st["evictions"], secs))
                    harness.log(f"  {label} epoch {e + 1}: RSS {rss / 1024:.0f} MiB, {secs:.1f} s")
            finally:
                s.unmount(m)
    print(f"{a.files} files of 1-8 KiB in {a.dirs} directories, a {a.cache_size} cache, a local directory as the "
          f"source; {a.threads} threads read every file whole each epoch, shuffled. Machine: {os.cpu_count()} CPUs "
          f"({cpu_model()}).\n")
    labels = [l for l, _ in systems]
    print("| epoch | " + " | ".join(f"{l}: RSS MiB | ghosts | evictions | s" for l in labels) + " |")
    print("|---:|" + "---:|---:|---:|---:|" * len(labels))
    for e in range(a.epochs):
        cells = []
        for l in labels:
            rss, ghosts, ev, secs = rows[l][e]
            cells.append(f"{rss / 1024:.1f} | {'-' if ghosts is None else ghosts} | {ev} | {secs:.1f}")
        print(f"| {e + 1} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
