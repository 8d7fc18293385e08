"""The seeded test bucket shared by the real-mount tests.

`ensure_dataset()` returns a `Dataset`: a directory tree of a little over
2,000 files (0 B .. 64 MiB, ~250 MB in total: mostly small files, a few
multi-unit ones, three large ones), nested directories up to depth 8, names
with spaces, unicode (valid UTF-8) and URL-special characters, plus a manifest
(relative path, size, mtime in seconds, sha256 of every file).

The content of every file is a pure function of (SEED, path, size), see
`content()`, so any byte can be recomputed; the tree is generated once and
cached under $IGT_BUILD_DIR/testdata/dataset-v<VERSION>/ (manifest.json is
written last and marks a complete tree; generation holds a flock so parallel
tests do not race). Bump VERSION whenever the plan or content changes.

Thread-safety: ensure_dataset() is process-safe (flock); Dataset is read-only.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import harness

VERSION = 2
SEED = 20250612
KiB, MiB = 1 << 10, 1 << 20
UNIT = MiB          # igtcache's default cache unit; the edge sizes straddle it
MTIME_BASE = 1_600_000_000  # 2020-09-13: fixed, integral seconds

# Names that need URL encoding or exercise odd characters. '?', '#', '%', '+'
# and '&' are the classic S3 key-encoding traps.
SPECIAL_NAMES = [
    "a+b&c=d (1).bin",
    "it's #2.bin",
    "100% done 3.bin",
    "comma, semi; 4.bin",
    "tilde~bang! 5.bin",
    "at@dollar$ 6.bin",
    "brackets [7] {x}.bin",
    "emoji 🎉 8.bin",
    "question? 9.bin",
    " leading space 10.bin",
    "double  space 11.bin",
    "back`tick^caret 12.bin",
    "equals==plus++ 13.txt",
    "ümlaut Ä Ö Ü ß 14.txt",
    "中文 文件 15.txt",
]


@dataclass(frozen=True)
class Entry:
    path: str     # relative, '/'-separated, no leading slash
    size: int
    mtime: int    # seconds since the epoch
    sha256: str


@dataclass
class Dataset:
    root: Path                 # the tree (a file:// source, or what was uploaded)
    files: list[Entry]         # sorted by path

    def by_path(self) -> dict[str, Entry]:
        return {e.path: e for e in self.files}

    def dirs(self) -> set[str]:
        """Every directory implied by the file paths (excluding the root)."""
        out = set()
        for e in self.files:
            parts = e.path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                out.add("/".join(parts[:i]))
        return out

    def total_bytes(self) -> int:
        return sum(e.size for e in self.files)

    def source_path(self, rel: str) -> Path:
        return self.root / rel


def content(path: str, size: int) -> bytes:
    """The bytes of file `path`: a deterministic pseudo-random stream."""
    return random.Random(f"{SEED}:{VERSION}:{path}").randbytes(size)


def plan() -> list[tuple[str, int, int]]:
    """(path, size, mtime) of every file, deterministically from SEED."""
    rng = random.Random(SEED)
    out: list[tuple[str, int]] = []

    def small() -> int:
        r = rng.random()
        if r < 0.02:
            return 0
        if r < 0.97:  # log-uniform 1 B .. 256 KiB: mean ~21 KB
            return int(2 ** rng.uniform(0, 18))
        return rng.randint(256 * KiB, UNIT - 1)  # a few up to just below one unit

    for c in range(20):
        for i in range(60):
            out.append((f"train/class_{c:03d}/img_{i:05d}.jpg", small()))
    for s in range(5):
        for i in range(60):
            out.append((f"val/shard {s}/sample {i}.bin", small()))
    for i in range(100):
        out.append((f"ünïcödé/日本語 データ/ファイル_{i}.dat", small()))
    for i in range(50):
        out.append((f"ünïcödé/Ελληνικά/αρχείο {i}.txt", small()))
    for i in range(50):
        out.append((f"deep/a/b/c/d/e/f/g/leaf_{i}.bin", small()))
    out.append(("deep/a/b/shallow.bin", small()))
    for i, n in enumerate(SPECIAL_NAMES):
        out.append((f"special chars/{n}", small() if i % 3 else rng.randint(UNIT, 2 * UNIT + 99)))
    for i in range(300):
        out.append((f"flat_{i:05d}.bin", small()))
    edge = {
        "edge/empty.bin": 0, "edge/one_byte.bin": 1, "edge/unit_minus_1.bin": UNIT - 1,
        "edge/unit.bin": UNIT, "edge/unit_plus_1.bin": UNIT + 1, "edge/two_units.bin": 2 * UNIT,
        "edge/three_units_plus_17.bin": 3 * UNIT + 17, "edge/page_4095.bin": 4095,
        "edge/page_4097.bin": 4097,
    }
    out += list(edge.items())
    for i in range(30):
        out.append((f"medium/part-{i:04d}.bin", rng.randint(UNIT + 1, 3 * UNIT)))
    out += [
        ("big/big_64MiB.bin", 64 * MiB),
        ("big/big_40MiB_odd.bin", 40 * MiB + 12345),
        ("big/with space 20MiB.bin", 20 * MiB + 1),
    ]
    # s3rver 3.7.1 (FilesystemStore.listObjects with a delimiter) never
    # reports a common prefix whose directory holds only sub-directories
    # (it does not walk below a directory whose relative path contains the
    # delimiter), so "deep/" would be invisible in a delimited listing of
    # the root. Real S3 lists it. Every directory therefore gets at least one
    # object of its own. (test_local_mount checks directory-only levels on a
    # small tree of its own.)
    have = {p.rsplit("/", 1)[0] for p, _ in out if "/" in p}
    implied = {"/".join(p.split("/")[:i]) for p, _ in out for i in range(1, p.count("/") + 1)}
    for d in sorted(implied - have):
        out.append((f"{d}/_index.bin", small()))
    paths = [p for p, _ in out]
    assert len(set(paths)) == len(paths), "duplicate path in plan"
    assert len(out) >= 2000, len(out)
    return [(p, sz, MTIME_BASE + rng.randint(0, 86400 * 365)) for p, sz in out]


def _data_dir() -> Path:
    return harness.build_dir() / "testdata" / f"dataset-v{VERSION}"


def _load(d: Path) -> Dataset | None:
    mf = d / "manifest.json"
    if not mf.is_file():
        return None
    try:
        m = json.loads(mf.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if m.get("version") != VERSION or m.get("seed") != SEED:
        return None
    files = [Entry(**e) for e in m["files"]]
    root = d / "tree"
    # Cheap validity check: every file present with its size and mtime.
    for e in files:
        try:
            st = os.stat(root / e.path)
        except OSError:
            return None
        if st.st_size != e.size or int(st.st_mtime) != e.mtime:
            return None
    return Dataset(root, files)


def _generate(d: Path) -> Dataset:
    root = d / "tree"
    shutil.rmtree(d / "tree", ignore_errors=True)
    (d / "manifest.json").unlink(missing_ok=True)
    files = []
    for path, size, mtime in plan():
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        data = content(path, size)
        p.write_bytes(data)
        os.utime(p, ns=(mtime * 10**9, mtime * 10**9))
        files.append(Entry(path, size, mtime, hashlib.sha256(data).hexdigest()))
    files.sort(key=lambda e: e.path)
    tmp = d / "manifest.json.tmp"
    tmp.write_text(json.dumps({"version": VERSION, "seed": SEED,
                               "files": [e.__dict__ for e in files]}, ensure_ascii=False))
    os.replace(tmp, d / "manifest.json")
    return Dataset(root, files)


def ensure_dataset() -> Dataset:
    d = _data_dir()
    d.mkdir(parents=True, exist_ok=True)
    with open(d.parent / f"dataset-v{VERSION}.lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        ds = _load(d)
        if ds is None:
            harness.log(f"  generating dataset v{VERSION} under {d} ...")
            ds = _generate(d)
        harness.log(f"  dataset: {len(ds.files)} files, {len(ds.dirs())} dirs, "
                    f"{ds.total_bytes() / 1e6:.1f} MB at {ds.root}")
        return ds


if __name__ == "__main__":
    ensure_dataset()
