"""The three systems of the end-to-end benchmark, mounted the same way for
every case: the same bucket through the same latency proxy, each with its own
empty cache directory and the same cache size limit.

- igtcache: `--cache-size LIMIT` (cache.max_bytes), everything else default.
- s3fs: `use_cache`, its defaults otherwise (parallel_count 5, multireq_max
  20, multipart_size 10 MB). s3fs has no cache size option, only
  `ensure_diskfree` (free space it keeps on the cache's file system), so its
  cache dir is a loop-mounted ext4 image whose free space is LIMIT +
  ensure_diskfree: s3fs can then hold at most LIMIT bytes of cache.
- rclone: `--vfs-cache-mode full --vfs-cache-max-size LIMITB`, defaults
  otherwise (--vfs-read-chunk-size 128M, --buffer-size 16M), and
  `--vfs-cache-poll-interval 1s` instead of 1m, or the size limit would not
  be enforced during most of our (short) runs. (10s until 2026-11-24: case
  1's epochs at 2x last a few seconds each, and whether a poll fell inside
  one decided whether rclone read its third epoch from a cache of the whole
  data set: 209, 525 and 1518 samples/s in three runs; 140 with 1s.) The limit carries a `B`
  suffix: rclone reads a bare number as KiB, so `--vfs-cache-max-size
  100663296` is a 96 GiB limit (the benchmark passed it that way until
  2026-11-23, and rclone's caches grew to 2-3x the intended limit).

A `Running` object is one mounted system; `unmount()` and `destroy()` (cache
gone) are idempotent. Everything is registered on the harness Session (mounts,
processes by pid) plus our own loop mounts, which `cleanup_loops()` removes.
Used from the orchestrator's main thread only.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import harness

SYSTEMS = ("igtcache", "s3fs", "rclone")
MiB = 1 << 20
RCLONE_POLL = "1s"

_loops: list[Path] = []   # loop-mounted s3fs cache file systems we own


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def replace_section(doc: Path, begin: str, end: str, text: str) -> None:
    """Puts `text` between the markers `begin` and `end` of `doc`
    (docs/BENCHMARKS.md), or appends the marked block if they are missing."""
    block = f"{begin}\n{text}\n{end}"
    old = doc.read_text() if doc.exists() else "# Benchmarks\n\nFigures, never gates. Each section says which script produced it.\n"
    if begin in old and end in old:
        new = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, old, flags=re.S)
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(new)


def compare_binaries(values: list[str], prog: str) -> list[tuple[str, str]]:
    """("this build", build/igtcache) and each --compare LABEL=BINARY, checked
    (a label and an executable); exits 2 naming a bad one."""
    systems = [("this build", harness.igtcache_bin())]
    for c in values:
        label, _, binary = c.partition("=")
        if not label or not binary or not os.access(binary, os.X_OK):
            print(f"{prog}: --compare {c!r}: want LABEL=BINARY, an executable", file=sys.stderr)
            sys.exit(2)
        systems.append((label, binary))
    return systems


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def version(argv) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, timeout=30)
        return (r.stdout or r.stderr).decode(errors="replace").strip().splitlines()[0]
    except Exception as e:
        return f"unknown ({e})"


def versions() -> dict:
    return {
        "igtcache": version([harness.igtcache_bin(), "--version"]),
        "s3fs": version(["s3fs", "--version"]),
        "rclone": version(["rclone", "version"]),
        "s3rver": version(["node", str(harness.S3RVER_JS), "--version"]),
        "torch": version(["/usr/bin/python3", "-c", "import torch; print(torch.__version__)"]),
    }


def dir_bytes(path: Path) -> int:
    """Bytes allocated under path (du -s -B1: sparse files count what they hold)."""
    r = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True)
    try:
        return int(r.stdout.split()[0])
    except (IndexError, ValueError):
        return -1


def mount_external(s: harness.Session, name: str, argv: list[str], mnt: Path, env=None) -> harness.Mount:
    p = s.spawn(name, argv, env)
    m = harness.Mount(mnt, None, p, None, name)
    s.mounts.append(m)
    deadline = time.monotonic() + harness.MOUNT_DEADLINE_S
    while time.monotonic() < deadline:
        if p.popen.poll() is not None:
            raise RuntimeError(f"{name} exited {p.popen.returncode}: {p.stderr_text()[-2000:]}")
        if harness.is_mounted(mnt):
            return m
        time.sleep(0.05)
    raise RuntimeError(f"{name}: not mounted after {harness.MOUNT_DEADLINE_S}s: {p.stderr_text()[-2000:]}")


def _loop_fs(s: harness.Session, name: str, limit: int) -> tuple[Path, int]:
    """An ext4 image mounted on a fresh dir; returns (dir, ensure_diskfree MB)
    such that free space minus ensure_diskfree == limit (to the MB)."""
    reserve = 64 * MiB
    img = s.tmp / f"{name}.img"
    mnt = s.mkdir(name)
    size = limit + reserve + limit // 16 + 48 * MiB   # ext4 metadata overhead
    with open(img, "wb") as f:
        f.truncate(size)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(img)], check=True, capture_output=True)
    subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=True, capture_output=True)
    _loops.append(mnt)
    st = os.statvfs(mnt)
    avail = st.f_bavail * st.f_frsize
    if avail < limit + MiB:
        raise RuntimeError(f"loop fs for s3fs too small: {avail} < {limit}")
    return mnt, (avail - limit) // MiB


def _umount_loop(mnt: Path) -> None:
    if harness.is_mounted(mnt):
        r = subprocess.run(["umount", str(mnt)], capture_output=True)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
    with contextlib.suppress(ValueError):
        _loops.remove(mnt)


def cleanup_loops() -> None:
    for m in list(_loops):
        _umount_loop(m)


class Running:
    """One system mounted on the bucket with a cache dir and a size limit."""

    def __init__(self, s: harness.Session, system: str, endpoint: str, bucket: str, limit: int, tag: str):
        self.s, self.system, self.endpoint, self.bucket, self.limit = s, system, endpoint, bucket, limit
        self.tag = tag
        self.mount: harness.Mount | None = None
        self.loop: Path | None = None
        self.ensure_diskfree_mb = 0
        if system == "s3fs":
            self.loop, self.ensure_diskfree_mb = _loop_fs(s, f"{tag}-s3fs-cachefs", limit)
            self.cache_dir = self.loop / "cache"
            self.cache_dir.mkdir()
        else:
            self.cache_dir = s.mkdir(f"{tag}-{system}-cache")
        self.n = 0
        self.do_mount()

    @property
    def root(self) -> Path:
        return self.mount.mountpoint

    def do_mount(self) -> None:
        s, ep = self.s, self.endpoint
        mnt = s.mkdir(f"{self.tag}-{self.system}-mnt{self.n}")
        self.n += 1
        if self.system == "igtcache":
            self.mount = s.mount(f"s3://{self.bucket}", cache_dir=self.cache_dir, mountpoint=mnt,
                                 args=["--endpoint", ep, "--region", "us-east-1",
                                       "--cache-size", str(self.limit), "--log-level", "warn"])
        elif self.system == "s3fs":
            pw = s.tmp / "s3fs.passwd"
            pw.write_text(f"{harness.S3_ACCESS_KEY}:{harness.S3_SECRET_KEY}\n")
            os.chmod(pw, 0o600)
            self.mount = mount_external(s, "s3fs", [
                "s3fs", self.bucket, str(mnt), "-f", "-o", f"url={ep}", "-o", "use_path_request_style",
                "-o", f"use_cache={self.cache_dir}", "-o", f"ensure_diskfree={self.ensure_diskfree_mb}",
                "-o", f"passwd_file={pw}", "-o", "ro"], mnt)
        elif self.system == "rclone":
            conf = s.tmp / "rclone.conf"
            conf.write_text("")
            env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
            env["RCLONE_CONFIG"] = str(conf)
            self.mount = mount_external(s, "rclone", [
                "rclone", "mount", f":s3:{self.bucket}", str(mnt), "--s3-provider", "Other",
                "--s3-endpoint", ep, "--s3-access-key-id", harness.S3_ACCESS_KEY,
                "--s3-secret-access-key", harness.S3_SECRET_KEY, "--s3-force-path-style",
                "--vfs-cache-mode", "full", "--cache-dir", str(self.cache_dir),
                "--vfs-cache-max-size", f"{self.limit}B", "--vfs-cache-poll-interval", RCLONE_POLL,
                "--read-only"], mnt, env)
        else:
            raise ValueError(self.system)

    def stats(self) -> dict | None:
        if self.system != "igtcache" or self.mount is None or self.mount.unmounted:
            return None
        try:
            return self.s.stats(self.mount)
        except Exception as e:
            return {"error": str(e)}

    def cache_bytes(self) -> int:
        return dir_bytes(self.cache_dir)

    def alive(self) -> bool:
        return self.mount is not None and self.mount.proc is not None and self.mount.proc.popen.poll() is None

    def unmount(self) -> int | None:
        if self.mount is None or self.mount.unmounted:
            return None
        rc = self.s.unmount(self.mount)
        return rc

    def remount(self) -> None:
        self.unmount()
        self.do_mount()

    def destroy(self) -> None:
        self.unmount()
        if self.loop is not None:
            _umount_loop(self.loop)
            with contextlib.suppress(OSError):
                (self.s.tmp / f"{self.tag}-s3fs-cachefs.img").unlink()
            self.loop = None
        else:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
