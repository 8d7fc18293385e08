"""Workload programs of the end-to-end benchmark, one subcommand each, run by
bench_e2e.py as separate processes under /usr/bin/python3 (Debian's torch)
so that several can run at once on one mount (case 5).

Each reads through a mount point, checks every byte it read against the
manifest (SHA-1 of whole objects) or against e2e_data.expected_range (exact
bytes of scattered reads), and prints ONE JSON object on its last stdout
line: timings, counts, and `bad` (the number of reads whose bytes were
wrong; a read error raises and the process exits non-zero).

Page cache: every reader drops the pages it has just read from the kernel
page cache (posix_fadvise DONTNEED, which works on FUSE files) so that
re-reads reach the file system being measured, on every system alike: with
24 GiB of RAM our data sets would otherwise be re-read from RAM, and the
benchmark would measure the page cache instead of each system's cache under
its size limit. The orchestrator also drops the whole page cache before each
run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import random
import sys
import threading
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e_data as D  # noqa: E402

CHUNK = 1 << 20


def dontneed(fd: int, off: int = 0, n: int = 0) -> None:
    try:
        os.posix_fadvise(fd, off, n, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass


def read_whole(path: str) -> tuple[str, int]:
    """Sequential 1 MiB reads of a whole file -> (sha1, bytes)."""
    h, n = hashlib.sha1(), 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            b = os.read(fd, CHUNK)
            if not b:
                break
            h.update(b)
            n += len(b)
        dontneed(fd)
    finally:
        os.close(fd)
    return h.hexdigest(), n


def emit(out: dict) -> None:
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------------------
# Case 1: PyTorch DataLoader over an image folder.

def cmd_train(a, man: D.Manifest) -> dict:
    import torch
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)
    root = Path(a.root)
    want = {k: man.objects[k]["sha1"] for k in man.sets[a.set]}
    t_scan = time.monotonic()
    # torchvision.datasets.ImageFolder-like scan: classes = sorted subdirs.
    classes = sorted(e.name for e in os.scandir(root / "train") if e.is_dir())
    if a.classes:
        classes = classes[:a.classes]
    samples = []
    for ci, c in enumerate(classes):
        for e in sorted(os.scandir(root / "train" / c), key=lambda e: e.name):
            if e.is_file():
                samples.append((f"train/{c}/{e.name}", ci))
    t_scan = time.monotonic() - t_scan
    keys = [k for k, _ in samples]
    if set(keys) != set(want):
        raise SystemExit(f"train: listing differs from the manifest: {len(keys)} files vs {len(want)}; "
                         f"missing {sorted(set(want) - set(keys))[:5]}, extra {sorted(set(keys) - set(want))[:5]}")

    class Folder(Dataset):
        def __len__(self):
            return len(samples)

        def __getitem__(self, i):
            key, label = samples[i]
            with open(root / key, "rb") as f:
                data = f.read()
                dontneed(f.fileno())
            ok = hashlib.sha1(data).hexdigest() == want[key]
            return torch.tensor([label, len(data), 0 if ok else 1], dtype=torch.int64)

    g = torch.Generator()
    g.manual_seed(a.seed)
    dl = DataLoader(Folder(), batch_size=a.batch, shuffle=True, num_workers=a.workers, generator=g)
    epochs, bad, t_all = [], 0, time.time()
    for ep in range(a.epochs):
        t0 = time.monotonic()
        n = nbytes = 0
        for batch in dl:
            n += batch.shape[0]
            nbytes += int(batch[:, 1].sum())
            bad += int(batch[:, 2].sum())
        dt = time.monotonic() - t0
        if n != len(samples):
            raise SystemExit(f"train: epoch {ep} saw {n} samples of {len(samples)}")
        epochs.append({"s": dt, "samples": n, "bytes": nbytes, "samples_per_s": n / dt})
        print(f"train epoch {ep + 1}: {n} samples in {dt:.1f}s ({n / dt:.0f}/s)", file=sys.stderr, flush=True)
    return {"scan_s": t_scan, "epochs": epochs, "bad": bad, "samples": len(samples),
            "t_start": t_all, "t_end": time.time()}


# ---------------------------------------------------------------------------
# Case 2: tar shards read sequentially in shuffled shard order.

def cmd_shards(a, man: D.Manifest) -> dict:
    shards = list(man.sets["shards"])
    rng = random.Random(a.seed)
    epochs, bad, t_all = [], 0, time.time()
    for ep in range(a.epochs):
        order = shards[:]
        rng.shuffle(order)
        t0, nbytes = time.monotonic(), 0
        for k in order:
            sha, n = read_whole(os.path.join(a.root, k))
            nbytes += n
            bad += sha != man.objects[k]["sha1"]
        dt = time.monotonic() - t0
        epochs.append({"s": dt, "bytes": nbytes, "mb_per_s": nbytes / 1e6 / dt})
        print(f"shards epoch {ep + 1}: {nbytes >> 20} MiB in {dt:.1f}s", file=sys.stderr, flush=True)
    return {"epochs": epochs, "bad": bad, "t_start": t_all, "t_end": time.time()}


# ---------------------------------------------------------------------------
# Case 3: model loading.

def model_seq(root: str, man: D.Manifest) -> dict:
    key = man.sets["model"][0]
    t0 = time.monotonic()
    sha, n = read_whole(os.path.join(root, key))
    dt = time.monotonic() - t0
    return {"s": dt, "bytes": n, "mb_per_s": n / 1e6 / dt, "bad": int(sha != man.objects[key]["sha1"])}


def model_mmap(root: str, man: D.Manifest, faults: int, seed: int) -> dict:
    """Touches `faults` random 4 KiB pages of the weights file through mmap
    (random order, like a safetensors loader materialising scattered
    tensors), then checks every page's bytes."""
    key = man.sets["model"][0]
    size = man.objects[key]["size"]
    pages = random.Random(seed).sample(range(size // 4096), faults)
    got = []
    t0 = time.monotonic()
    with open(os.path.join(root, key), "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        try:
            for p in pages:
                got.append(mm[p * 4096:(p + 1) * 4096])
        finally:
            mm.close()
        dt = time.monotonic() - t0
        dontneed(f.fileno())
    bad = sum(g != D.expected_range(key, p * 4096, 4096, size) for p, g in zip(pages, got))
    return {"s": dt, "faults": faults, "faults_per_s": faults / dt, "bad": bad}


def cmd_model(a, man: D.Manifest) -> dict:
    t_all = time.time()
    out = {}
    if a.part in ("seq", "both"):
        out["seq"] = model_seq(a.root, man)
    if a.part in ("mmap", "both"):
        out["mmap"] = model_mmap(a.root, man, a.faults, a.seed)
    out["bad"] = sum(v["bad"] for v in out.values())
    out["t_start"], out["t_end"] = t_all, time.time()
    return out


# ---------------------------------------------------------------------------
# Case 4: Zipf-popular 64 KiB reads.

def zipf_indices(n: int, reads: int, s: float, seed: int) -> list[int]:
    """`reads` draws of a bounded Zipf(s) over n items; popularity rank is
    mapped to items by a seeded permutation (hot items are not adjacent)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n + 1) ** s
    p /= p.sum()
    ranks = rng.choice(n, size=reads, p=p)
    perm = rng.permutation(n)
    return [int(perm[r]) for r in ranks]


def _parallel(items, threads: int, fn, max_s: float = 0) -> tuple[list[float], int]:
    """Runs fn(item) -> bad(0/1) over items with `threads` threads, issuing
    no new read after max_s seconds (0: no limit); returns per-read
    latencies and the number of bad reads."""
    stop_at = time.monotonic() + max_s if max_s > 0 else float("inf")
    lat: list[float] = []
    bad = [0]
    mu = threading.Lock()  # guards lat, bad
    errors = []

    def worker(part):
        mine, b = [], 0
        try:
            for it in part:
                t = time.monotonic()
                if t >= stop_at:
                    break
                b += fn(it)
                mine.append(time.monotonic() - t)
        except BaseException as e:  # report, do not hang the benchmark
            errors.append(e)
        with mu:
            lat.extend(mine)
            bad[0] += b
    ts = [threading.Thread(target=worker, args=(items[i::threads],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return lat, bad[0]


def _lat_summary(lat: list[float], dt: float) -> dict:
    lat = sorted(lat)
    q = lambda x: lat[min(len(lat) - 1, int(x * len(lat)))] * 1000 if lat else 0.0  # noqa: E731
    return {"s": dt, "reads": len(lat), "reads_per_s": len(lat) / dt if dt else 0.0,
            "p50_ms": q(0.5), "p99_ms": q(0.99)}


def skew_file(root: str, man: D.Manifest, reads: int, s: float, threads: int, seed: int, max_s: float) -> dict:
    key = man.sets["skew_file"][0]
    size = man.objects[key]["size"]
    blocks = zipf_indices(size // D.BLOCK, reads, s, seed)
    path = os.path.join(root, key)

    def one(b):
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.pread(fd, D.BLOCK, b * D.BLOCK)
            dontneed(fd, b * D.BLOCK, D.BLOCK)
        finally:
            os.close(fd)
        return int(data != D.expected_range(key, b * D.BLOCK, D.BLOCK, size))
    t0 = time.monotonic()
    lat, bad = _parallel(blocks, threads, one, max_s)
    out = _lat_summary(lat, time.monotonic() - t0)
    out["bad"], out["distinct"], out["planned"] = bad, len(set(blocks[:len(lat)])), reads
    return out


def skew_files(root: str, man: D.Manifest, reads: int, s: float, threads: int, seed: int, max_s: float) -> dict:
    keys = man.sets["infer"]
    picks = zipf_indices(len(keys), reads, s, seed + 1)

    def one(i):
        k = keys[i]
        with open(os.path.join(root, k), "rb") as f:
            data = f.read()
            dontneed(f.fileno())
        return int(hashlib.sha1(data).hexdigest() != man.objects[k]["sha1"])
    t0 = time.monotonic()
    lat, bad = _parallel(picks, threads, one, max_s)
    out = _lat_summary(lat, time.monotonic() - t0)
    out["bad"], out["distinct"], out["planned"] = bad, len(set(picks[:len(lat)])), reads
    return out


def cmd_skew(a, man: D.Manifest) -> dict:
    t_all = time.time()
    out = {}
    if a.part in ("file", "both"):
        out["file"] = skew_file(a.root, man, a.reads, a.zipf, a.threads, a.seed, a.max_seconds)
    if a.part in ("files", "both"):
        out["files"] = skew_files(a.root, man, a.reads, a.zipf, a.threads, a.seed, a.max_seconds)
    out["bad"] = sum(v["bad"] for v in out.values())
    out["t_start"], out["t_end"] = t_all, time.time()
    return out


# ---------------------------------------------------------------------------
# Case 6: metadata.

def cmd_meta(a, man: D.Manifest) -> dict:
    import subprocess
    root = os.path.join(a.root, "meta")
    t0 = time.monotonic()
    try:
        r = subprocess.run(["ls", "-lR", root], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=a.max_seconds or None)
    except subprocess.TimeoutExpired as e:
        n = (e.stdout or b"").count(b"\n")
        return {"ls_s": None, "dnf_s": a.max_seconds, "ls_lines_done": n, "walk_s": None, "objects": None, "bad": 0}
    t_ls = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"ls -lR exited {r.returncode}: {r.stderr[-500:]!r}")
    ls_lines = r.stdout.count(b"\n")
    t0 = time.monotonic()
    seen = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            seen[os.path.relpath(p, a.root)] = os.lstat(p).st_size
    t_walk = time.monotonic() - t0
    want = {k: man.objects[k]["size"] for k in man.sets["meta"]}
    bad = int(seen != want)
    if bad:
        miss = sorted(set(want) - set(seen))[:5]
        extra = sorted(set(seen) - set(want))[:5]
        wrong = [k for k in want if k in seen and seen[k] != want[k]][:5]
        print(f"meta: listing differs: missing {miss} extra {extra} wrong size {wrong}", file=sys.stderr)
    return {"ls_s": t_ls, "ls_lines": ls_lines, "walk_s": t_walk, "objects": len(seen), "bad": bad}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--root", required=True, help="mount point of the bucket")
    ap.add_argument("--seed", type=int, default=1)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--set", default="train_big")
    t.add_argument("--classes", type=int, default=0, help="first N classes only (0: all)")
    t.add_argument("--epochs", type=int, default=3)
    t.add_argument("--workers", type=int, default=4)
    t.add_argument("--batch", type=int, default=32)
    sh = sub.add_parser("shards")
    sh.add_argument("--epochs", type=int, default=2)
    m = sub.add_parser("model")
    m.add_argument("--part", choices=["seq", "mmap", "both"], default="both")
    m.add_argument("--faults", type=int, default=1000)
    k = sub.add_parser("skew")
    k.add_argument("--part", choices=["file", "files", "both"], default="both")
    k.add_argument("--reads", type=int, default=3000)
    k.add_argument("--zipf", type=float, default=1.1)
    k.add_argument("--threads", type=int, default=4)
    k.add_argument("--max-seconds", type=float, default=0, help="stop issuing reads after this (0: never)")
    me = sub.add_parser("meta")
    me.add_argument("--max-seconds", type=float, default=0, help="stop ls -lR after this (0: never)")
    a = ap.parse_args()
    man = D.Manifest.load(a.manifest)
    fn = {"train": cmd_train, "shards": cmd_shards, "model": cmd_model, "skew": cmd_skew, "meta": cmd_meta}[a.cmd]
    emit(fn(a, man))


if __name__ == "__main__":
    main()
