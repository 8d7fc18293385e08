"""Checks shared by the real-mount tests: tree shape (find/stat), whole-file
hashes, seeded random range reads (incl. at and past EOF), read-only errors.

Every function raises harness.TestFailure naming the first few mismatches and
prints one line per property checked. Reads run on a small thread pool (the
daemon is multithreaded; the machine has 2 cores).
"""

from __future__ import annotations

import errno
import os
import random
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import harness
from dataset import UNIT, Dataset, Entry
from harness import TestFailure, check, log

READ_THREADS = 4


def _fail_list(what: str, items: list) -> None:
    if items:
        shown = "\n    ".join(str(x) for x in items[:10])
        raise TestFailure(f"{what}: {len(items)} mismatches, first:\n    {shown}")


def find_listing(root: Path) -> dict[str, tuple[str, int | None]]:
    """`find ROOT -mindepth 1` -> {relative path: (type letter, size for files)}."""
    r = subprocess.run(["find", str(root), "-mindepth", "1", "-printf", r"%y\t%s\t%P\0"],
                       capture_output=True, timeout=300)
    if r.returncode != 0:
        raise TestFailure(f"find {root} exited {r.returncode}: {r.stderr.decode(errors='replace')[:500]}")
    out = {}
    for rec in r.stdout.split(b"\0"):
        if not rec:
            continue
        t, s, p = rec.split(b"\t", 2)
        path = p.decode("utf-8", "surrogateescape")
        out[path] = (t.decode(), int(s) if t == b"f" else None)
    return out


def check_tree(mnt: Path, ds: Dataset, mtime_mode: str) -> None:
    """find output (paths, types, sizes) and lstat (type, size, mtime) of every
    entry agree with the source. mtime_mode: 'exact' (seconds equal to the
    source file) or 'sane' (S3: an upload time, within a day of now)."""
    t0 = time.monotonic()
    got = find_listing(mnt)
    want = {e.path: ("f", e.size) for e in ds.files}
    want.update({d: ("d", None) for d in ds.dirs()})
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    _fail_list("find: paths missing from the mount", missing)
    _fail_list("find: unexpected paths in the mount", extra)
    wrong = [(p, want[p], got[p]) for p in sorted(want) if got[p] != want[p]]
    _fail_list("find: (type, size) differ (path, want, got)", wrong)
    check(True, f"find lists exactly the {len(ds.files)} files and {len(ds.dirs())} dirs with types and sizes")

    # The source tree itself as `find` sees it agrees too (guards the manifest).
    if ds.root.is_dir():
        src = find_listing(ds.root)
        _fail_list("find: source tree differs from mount", sorted(
            p for p in set(src) | set(got) if src.get(p) != got.get(p)))

    now = time.time()
    bad = []
    import stat as st_mod
    for e in ds.files:
        st = os.lstat(mnt / e.path)
        if not st_mod.S_ISREG(st.st_mode):
            bad.append((e.path, "not a regular file", oct(st.st_mode)))
        elif st.st_size != e.size:
            bad.append((e.path, "size", e.size, st.st_size))
        elif mtime_mode == "exact" and int(st.st_mtime) != e.mtime:
            bad.append((e.path, "mtime", e.mtime, int(st.st_mtime)))
        elif mtime_mode == "sane" and not (now - 86400 < st.st_mtime < now + 3600):
            bad.append((e.path, "mtime not within a day of now", st.st_mtime))
        elif st.st_mode & 0o444 == 0:
            bad.append((e.path, "not readable", oct(st.st_mode)))
    for d in ds.dirs():
        st = os.lstat(mnt / d)
        if not st_mod.S_ISDIR(st.st_mode):
            bad.append((d, "not a directory", oct(st.st_mode)))
    _fail_list("stat", bad)
    check(True, f"stat of every file: regular, size equal, mtime {mtime_mode}; every dir is a dir "
                f"({time.monotonic() - t0:.1f}s)")
    os.statvfs(mnt)
    check(True, "statvfs on the mount succeeds")


def check_whole_files(mnt: Path, ds: Dataset, entries: list[Entry] | None = None) -> int:
    """sha256 of every file read through the mount equals the manifest."""
    entries = entries if entries is not None else ds.files
    t0 = time.monotonic()

    def one(e: Entry):
        try:
            h = harness.sha256_file(mnt / e.path)
        except OSError as ex:
            return (e.path, f"read error {ex}")
        return None if h == e.sha256 else (e.path, "sha256 differs")

    with ThreadPoolExecutor(READ_THREADS) as ex:
        bad = [r for r in ex.map(one, entries) if r]
    _fail_list("whole-file reads", bad)
    total = sum(e.size for e in entries)
    dt = time.monotonic() - t0
    check(True, f"whole-file sha256 of {len(entries)} files ({total / 1e6:.1f} MB) byte-identical "
                f"({dt:.1f}s, {total / 1e6 / max(dt, 1e-6):.0f} MB/s)")
    return total


def direct_io_works(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return False
    try:
        os.pread(fd, 10, 1)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def read_plan(e: Entry, rng: random.Random, n_random: int) -> list[tuple[int, int]]:
    """(offset, length) reads for one file: random ones inside, ones straddling
    unit boundaries, and ones at, across and past EOF."""
    s = e.size
    reads = []
    for _ in range(n_random):
        off = rng.randrange(0, max(s, 1))
        ln = rng.choice([1, rng.randint(1, 4096), rng.randint(1, 256 << 10), rng.randint(1, 3 * UNIT)])
        reads.append((off, ln))
    if s > UNIT:  # straddle a unit boundary
        k = rng.randrange(1, (s - 1) // UNIT + 1)
        reads.append((k * UNIT - rng.randint(1, 5000), rng.randint(2, 20000)))
    reads += [
        (max(0, s - rng.randint(1, 5000)), rng.randint(1, 10000)),  # across EOF
        (s, rng.randint(1, 4096)),                                   # at EOF: 0 bytes
        (s + rng.randint(1, 3 * UNIT), rng.randint(1, 4096)),        # past EOF: 0 bytes
        (0, s + 100),                                                # whole + past EOF
    ]
    return reads


def check_random_reads(mnt: Path, ds: Dataset, seed: int, n_random: int = 3,
                       direct: bool = False, entries: list[Entry] | None = None) -> int:
    """Seeded random pread()s through the mount compared to the same pread()s
    on the source file (the expected bytes, incl. short reads at EOF)."""
    entries = entries if entries is not None else ds.files
    flags = os.O_DIRECT if direct else 0
    t0 = time.monotonic()
    plans = []
    for e in entries:
        # Big files get more reads: they hold most of the units.
        rng = random.Random(f"{seed}:{e.path}")
        plans.append((e, read_plan(e, rng, n_random + min(40, e.size // (2 * UNIT)))))

    def one(item):
        e, reads = item
        errs = []
        try:
            fd = os.open(mnt / e.path, os.O_RDONLY | flags)
        except OSError as ex:
            return [(e.path, f"open: {ex}")]
        try:
            with open(ds.source_path(e.path), "rb") as src:
                for off, ln in reads:
                    want = os.pread(src.fileno(), ln, off) if off < e.size else b""
                    # Expected: a full read up to EOF. A POSIX reader may get a
                    # short read; FUSE without direct_io returns full reads, so
                    # a single pread must already return everything.
                    try:
                        got = os.pread(fd, ln, off)
                    except OSError as ex:
                        errs.append((e.path, off, ln, f"pread: {ex}"))
                        continue
                    if got != want:
                        errs.append((e.path, off, ln, f"got {len(got)} bytes, want {len(want)}"
                                     + ("" if len(got) != len(want) else " (content differs)")))
        finally:
            os.close(fd)
        return errs

    with ThreadPoolExecutor(READ_THREADS) as ex:
        bad = [x for r in ex.map(one, plans) for x in r]
    _fail_list(f"random reads (seed {seed}{', O_DIRECT' if direct else ''}) (path, off, len, what)", bad)
    n = sum(len(r) for _, r in plans)
    check(True, f"{n} seeded random preads (seed {seed}{', O_DIRECT' if direct else ''}) incl. at/"
                f"across/past EOF byte-identical ({time.monotonic() - t0:.1f}s)")
    return n


def check_read_only(mnt: Path, ds: Dataset) -> None:
    """Every modifying call fails with EROFS."""
    f = next(e for e in ds.files if e.size > 0)
    d = next(iter(sorted(ds.dirs())))
    fp, dp = mnt / f.path, mnt / d
    ops = {
        "open O_WRONLY": lambda: os.close(os.open(fp, os.O_WRONLY)),
        "open O_RDWR": lambda: os.close(os.open(fp, os.O_RDWR)),
        "open O_TRUNC": lambda: os.close(os.open(fp, os.O_WRONLY | os.O_TRUNC)),
        "create new file": lambda: os.close(os.open(mnt / "new_file.txt", os.O_WRONLY | os.O_CREAT, 0o644)),
        "mkdir": lambda: os.mkdir(mnt / "new_dir"),
        "unlink": lambda: os.unlink(fp),
        "rmdir": lambda: os.rmdir(dp),
        "rename": lambda: os.rename(fp, mnt / "renamed.bin"),
        "truncate": lambda: os.truncate(fp, 0),
        "chmod": lambda: os.chmod(fp, 0o777),
        "utime": lambda: os.utime(fp, (0, 0)),
        "symlink": lambda: os.symlink("x", mnt / "new_link"),
        "link": lambda: os.link(fp, mnt / "new_hardlink"),
        "setxattr": lambda: os.setxattr(fp, "user.igt", b"1"),
    }
    bad = []
    for name, op in ops.items():
        try:
            op()
            bad.append((name, "succeeded"))
        except OSError as ex:
            if ex.errno != errno.EROFS:
                bad.append((name, f"errno {errno.errorcode.get(ex.errno, ex.errno)} ({ex.strerror}), want EROFS"))
    _fail_list("read-only", bad)
    check(True, f"{len(ops)} modifying calls ({', '.join(ops)}) all fail with EROFS")
    check(harness.sha256_file(fp) == f.sha256, f"{f.path} unchanged after the write attempts")
