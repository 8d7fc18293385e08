"""Data of the end-to-end benchmark (issue 5): the bytes of every object, the
layout of the bucket, seeding it into s3rver, and the manifest the workloads
check what they read against.

Every object's bytes are a pure function of its key and size: 64 KiB blocks,
each a 16-byte stamp (BLAKE2b of key and block index) followed by a slice of
a fixed pseudo-random pool at an offset that depends on key and index. So a
block served for the wrong key or the wrong offset never matches, and any
range can be recomputed (`expected_range`) without keeping the data around:
the workloads verify scattered 4 KiB / 64 KiB reads exactly, and whole files
by SHA-1 (computed here while seeding; SHA-1 is the fastest hash in hashlib
on this CPU and we only guard against bugs, not adversaries).

Used by bench_e2e.py (seeding, in the orchestrator) and by e2e_workloads.py
(verification, in the workload processes). Nothing here is thread-unsafe
except `seed_bucket`, which owns its worker threads.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

MiB = 1 << 20
GiB = 1 << 30
BLOCK = 64 << 10          # content block; also the skewed-read size
STAMP = 16                # bytes of per-block stamp
POOL_BYTES = 8 * MiB      # the pseudo-random pool blocks are sliced from
POOL_SEED = 20_250_505    # fixed: workloads regenerate the same pool
BUCKET = "e2e"

_pool: bytes | None = None


def pool() -> bytes:
    global _pool
    if _pool is None:
        _pool = np.random.default_rng(POOL_SEED).bytes(POOL_BYTES)
    return _pool


def _key_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def block(key: str, j: int, kh: int | None = None) -> bytes:
    """Block j (64 KiB, full length) of the object `key`."""
    p = pool()
    kh = _key_hash(key) if kh is None else kh
    stamp = hashlib.blake2b(f"{key}\0{j}".encode(), digest_size=STAMP).digest()
    off = (kh + j * 1_000_003) % (POOL_BYTES - BLOCK)
    return stamp + p[off:off + BLOCK - STAMP]


def expected_range(key: str, offset: int, length: int, size: int) -> bytes:
    """Bytes [offset, offset+length) of the object (clipped at its size)."""
    end = min(offset + length, size)
    if offset >= end:
        return b""
    kh = _key_hash(key)
    first, last = offset // BLOCK, (end - 1) // BLOCK
    buf = b"".join(block(key, j, kh) for j in range(first, last + 1))
    lo = offset - first * BLOCK
    return buf[lo:lo + (end - offset)]


def iter_object(key: str, size: int, chunk_blocks: int = 64):
    """The object's bytes in chunks of up to chunk_blocks * 64 KiB."""
    kh = _key_hash(key)
    nblocks = (size + BLOCK - 1) // BLOCK
    for j0 in range(0, nblocks, chunk_blocks):
        parts = [block(key, j, kh) for j in range(j0, min(j0 + chunk_blocks, nblocks))]
        buf = b"".join(parts)
        remaining = size - j0 * BLOCK
        yield buf if len(buf) <= remaining else buf[:remaining]


def object_bytes(key: str, size: int) -> bytes:
    return b"".join(iter_object(key, size))


def tar_shard(key: str, target_bytes: int, sample_bytes: int = 110_000) -> bytes:
    """A WebDataset-like tar shard: sampleNNNNNN.jpg (~110 KB, generated
    bytes) + sampleNNNNNN.cls (a label) pairs, about target_bytes long."""
    out = io.BytesIO()
    rng = np.random.default_rng(_key_hash(key) & 0xFFFFFFFF)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        i = 0
        while out.tell() < target_bytes - sample_bytes - 4096:
            n = int(rng.integers(sample_bytes * 8 // 10, sample_bytes * 12 // 10))
            for name, data in ((f"sample{i:06d}.jpg", object_bytes(f"{key}/{i}", n)),
                               (f"sample{i:06d}.cls", str(i % 1000).encode())):
                ti = tarfile.TarInfo(name)
                ti.size, ti.mtime, ti.mode = len(data), 1_700_000_000, 0o644
                tf.addfile(ti, io.BytesIO(data))
            i += 1
    return out.getvalue()


# ---------------------------------------------------------------------------
# Layout.

@dataclass
class Scale:
    """Every size of one run. `full` is what docs/BENCHMARKS.md reports;
    `quick` exercises every code path in a few minutes."""
    name: str
    train_cache: int            # case 1 cache limit
    train_classes: int          # image-folder classes (dirs) of the 2x dataset
    train_files: int            # files of the 2x dataset (~110 KB each)
    small_classes: int          # first N classes form the 0.5x dataset
    train_epochs: int
    shard_mib: list[int]        # case 2 shard sizes
    shard_cache: int
    shard_epochs: int
    model_bytes: int            # case 3 weights file
    model_cache: int
    mmap_faults: int
    skew_file_bytes: int        # case 4 large file
    infer_files: int            # case 4 many small files (64 KiB each)
    skew_cache: int
    skew_reads: int
    zipf_s: float
    skew_max_s: float           # a skewed-read part stops issuing reads after this
    mix_cache: int              # case 5
    mix_max_s: float            # a mix job still running after this is stopped (reported as > this)
    meta_objects: int           # case 6
    meta_max_s: float           # an `ls -lR` still running after this is stopped (> this)
    fuse_rand_reads: int        # FUSE-limit 4 KiB random reads


FULL = Scale("full", train_cache=96 * MiB, train_classes=48, train_files=1824, small_classes=12,
             train_epochs=3, shard_mib=[64, 96, 128, 192, 256], shard_cache=512 * MiB, shard_epochs=2,
             model_bytes=2 * GiB, model_cache=3 * GiB, mmap_faults=500,
             skew_file_bytes=1 * GiB, infer_files=4000, skew_cache=128 * MiB, skew_reads=2000, zipf_s=1.1,
             skew_max_s=60, mix_cache=1 * GiB, mix_max_s=200, meta_objects=20_000, meta_max_s=60,
             fuse_rand_reads=20_000)

# s3fs refuses to start with less free cache space than 5 x 10 MB (its
# parallel_count x multipart_size): no cache limit below 64 MiB.
QUICK = Scale("quick", train_cache=64 * MiB, train_classes=16, train_files=1200, small_classes=4,
              train_epochs=3, shard_mib=[64, 64], shard_cache=96 * MiB, shard_epochs=2,
              model_bytes=256 * MiB, model_cache=384 * MiB, mmap_faults=200,
              skew_file_bytes=256 * MiB, infer_files=2000, skew_cache=64 * MiB, skew_reads=600, zipf_s=1.1,
              skew_max_s=20, mix_cache=192 * MiB, mix_max_s=90, meta_objects=2_000, meta_max_s=40,
              fuse_rand_reads=5_000)


@dataclass
class Manifest:
    """key -> (size, sha1) of every object, and the named sets of keys."""
    objects: dict[str, dict] = field(default_factory=dict)
    sets: dict[str, list[str]] = field(default_factory=dict)

    def add(self, key: str, size: int, sha1: str) -> None:
        self.objects[key] = {"size": size, "sha1": sha1}

    def save(self, path) -> None:
        with open(path, "w") as f:
            json.dump({"bucket": BUCKET, "objects": self.objects, "sets": self.sets}, f)

    @staticmethod
    def load(path) -> "Manifest":
        with open(path) as f:
            d = json.load(f)
        return Manifest(d["objects"], d["sets"])

    def total(self, set_name: str) -> int:
        return sum(self.objects[k]["size"] for k in self.sets[set_name])


def plan(sc: Scale) -> tuple[list[tuple[str, int]], list[tuple[str, int]], dict[str, list[str]]]:
    """(small objects (key, size), large objects (key, size|-shard), sets)."""
    rng = np.random.default_rng(7)
    small: list[tuple[str, int]] = []
    sets: dict[str, list[str]] = {"train_big": [], "train_small": [], "infer": [], "meta": [], "shards": []}
    per_class = sc.train_files // sc.train_classes
    for c in range(sc.train_classes):
        for i in range(per_class):
            key = f"train/n{c:05d}/img_{c:05d}_{i:05d}.jpg"
            size = int(rng.integers(90_000, 130_000))   # ~110 KB mean, like ImageNet JPEGs
            small.append((key, size))
            sets["train_big"].append(key)
            if c < sc.small_classes:
                sets["train_small"].append(key)
    for i in range(sc.infer_files):
        key = f"infer/emb/{i // 500:03d}/item_{i:06d}.bin"
        small.append((key, BLOCK))
        sets["infer"].append(key)
    # Metadata tree: meta/dNN/sNN/fNNNN.txt, plus one object per directory
    # (s3rver 3.7.1 does not report prefixes that hold only sub-prefixes).
    n_top = 20
    n_sub = 10
    per_dir = max(1, sc.meta_objects // (n_top * n_sub))
    n = 0
    for d in range(n_top):
        key = f"meta/d{d:02d}/index.txt"
        small.append((key, 64))
        sets["meta"].append(key)
        n += 1
        for s_ in range(n_sub):
            for f in range(per_dir):
                if n >= sc.meta_objects:
                    break
                key = f"meta/d{d:02d}/s{s_:02d}/f{f:05d}.txt"
                small.append((key, int(rng.integers(16, 2048))))
                sets["meta"].append(key)
                n += 1
    # s3rver 3.7.1 does not report a prefix that holds only sub-prefixes (no
    # object directly in it) as a directory: give every such level a small
    # object, as real buckets written by tools usually have anyway.
    has_file, dirs = set(), set()
    for key, _ in small:
        parts = key.split("/")[:-1]
        has_file.add("/".join(parts))
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    for d in sorted(dirs - has_file):
        key = f"{d}/_index.txt"
        small.append((key, 128))
        if d.startswith("meta"):
            sets["meta"].append(key)
    large: list[tuple[str, int]] = []
    for i, mib in enumerate(sc.shard_mib):
        key = f"shards/shard-{i:04d}.tar"
        large.append((key, -mib * MiB))   # negative: a tar shard of about that size
        sets["shards"].append(key)
    large.append(("model/weights.safetensors", sc.model_bytes))
    large.append(("skew/table.bin", sc.skew_file_bytes))
    sets["model"] = ["model/weights.safetensors"]
    sets["skew_file"] = ["skew/table.bin"]
    return small, large, sets


# ---------------------------------------------------------------------------
# Seeding (straight to s3rver, not through the latency proxy).

def _put(conn: http.client.HTTPConnection, bucket: str, key: str, chunks, size: int) -> None:
    from harness import s3_quote  # tests/mount/harness.py, on sys.path of the orchestrator
    conn.putrequest("PUT", f"/{bucket}/{s3_quote(key)}")
    conn.putheader("Content-Length", str(size))
    conn.putheader("Content-Type", "application/octet-stream")
    conn.endheaders()
    for c in chunks:
        conn.send(c)
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        raise RuntimeError(f"PUT {key}: HTTP {r.status} {body[:300]!r}")


def seed_bucket(srv, sc: Scale, threads: int = 6, log=print) -> tuple[Manifest, dict]:
    """Creates the bucket's objects on s3rver (`srv`: harness.S3rver) over
    kept-alive connections, `threads` at a time for the small objects.
    Returns the manifest and timing figures."""
    small, large, sets = plan(sc)
    man = Manifest(sets=sets)
    lock = threading.Lock()  # guards man.objects
    t0 = time.monotonic()

    def put_small(items):
        conn = srv.connection()
        try:
            for key, size in items:
                data = object_bytes(key, size)
                for attempt in range(3):
                    try:
                        _put(conn, BUCKET, key, [data], size)
                        break
                    except (http.client.HTTPException, ConnectionError):
                        if attempt == 2:
                            raise
                        conn.close()
                        conn = srv.connection()
                with lock:
                    man.add(key, size, hashlib.sha1(data).hexdigest())
        finally:
            conn.close()

    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(put_small, [small[i::threads] for i in range(threads)]))
    t_small = time.monotonic() - t0
    log(f"  seeded {len(small)} small objects in {t_small:.1f}s ({len(small) / t_small:.0f}/s)")

    def put_large(item):
        key, size = item
        conn = srv.connection()
        try:
            if size < 0:
                data = tar_shard(key, -size)
                _put(conn, BUCKET, key, [data], len(data))
                with lock:
                    man.add(key, len(data), hashlib.sha1(data).hexdigest())
                return len(data)
            h = hashlib.sha1()

            def chunks():
                for c in iter_object(key, size, chunk_blocks=256):
                    h.update(c)
                    yield c
            _put(conn, BUCKET, key, chunks(), size)
            with lock:
                man.add(key, size, h.hexdigest())
            return size
        finally:
            conn.close()

    t1 = time.monotonic()
    with ThreadPoolExecutor(2) as ex:
        big_bytes = sum(ex.map(put_large, large))
    t_large = time.monotonic() - t1
    log(f"  seeded {len(large)} large objects, {big_bytes / MiB:.0f} MiB in {t_large:.1f}s")
    return man, {"small_objects": len(small), "small_s": t_small, "large_objects": len(large),
                 "large_bytes": big_bytes, "large_s": t_large}
