"""A corrupted unit file in the cache dir is detected, dropped and refetched.

Mount a small local source, read it all, unmount. Flip one byte in the data
of one full unit file under <cache-dir>/units/, remount, re-read: the bytes
are correct, `igtcache stats` shows cache_corruptions >= 1 and exactly that
unit (1 MiB) fetched again. A third mount sees a healthy cache (no GETs).
Then a header byte flip and a truncated unit file: still correct bytes,
refetched."""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import harness
from dataset import UNIT, content
from harness import check, log

FILES = {"big/blob.bin": 3 * UNIT + UNIT // 2 + 100, "small one.txt": 5000}


def unit_files(cache: Path) -> list[Path]:
    root = cache / "units"
    return sorted((Path(d) / f for d, _, fs in os.walk(root) for f in fs
                   if not f.startswith(".") and not f.endswith(".tmp")), key=str)


def read_all(s, m, want):
    for rel, data in want.items():
        got = (m.mountpoint / rel).read_bytes()
        if got != data:
            raise harness.TestFailure(f"{rel}: {len(got)} bytes read, sha {hashlib.sha256(got).hexdigest()[:12]} "
                                      f"!= {hashlib.sha256(data).hexdigest()[:12]} ({len(data)} bytes)")
    check(True, f"read {len(want)} files through the mount: byte-identical")
    return s.stats(m)


def main():
    with harness.Session("corruption") as s:
        src = s.mkdir("src")
        want = {}
        for rel, size in FILES.items():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            want[rel] = content(rel, size)
            (src / rel).write_bytes(want[rel])
        total = sum(FILES.values())
        n_units = sum((sz + UNIT - 1) // UNIT for sz in FILES.values())
        cache = s.mkdir("cache")
        source = f"file://{src}"

        m = s.mount(source, cache_dir=cache)
        st = read_all(s, m, want)
        check(st["backend_get_bytes"] == total, f"first pass fetched {st['backend_get_bytes']} == {total} bytes")
        check(s.unmount(m) == 0, "daemon exited 0")

        units = unit_files(cache)
        log(f"  {len(units)} unit files under {cache / 'units'}: sizes {sorted(p.stat().st_size for p in units)}")
        check(len(units) == n_units, f"one unit file per unit ({n_units})")
        full = [p for p in units if p.stat().st_size > UNIT]  # header + 1 MiB of data
        check(len(full) >= 3, "the three full 1 MiB units are there")

        # 1) One flipped data byte (the last byte of the file is data: the
        # header is at the start).
        victim = full[1]
        with open(victim, "r+b") as f:
            f.seek(-1, os.SEEK_END)
            b = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([b[0] ^ 0x5A]))
        log(f"  flipped the last byte of {victim.relative_to(cache)}")
        m = s.mount(source, cache_dir=cache)
        st = read_all(s, m, want)
        log(f"  stats: {st}")
        check(st["cache_corruptions"] >= 1, f"cache_corruptions {st['cache_corruptions']} >= 1")
        check(st["backend_get_requests"] >= 1 and st["backend_get_bytes"] == UNIT,
              f"exactly the corrupted unit refetched (backend_get_bytes {st['backend_get_bytes']} == {UNIT}, "
              f"requests {st['backend_get_requests']})")
        check(s.unmount(m) == 0, "daemon exited 0")

        m = s.mount(source, cache_dir=cache)
        st = read_all(s, m, want)
        check(st["backend_get_requests"] == 0 and st["cache_corruptions"] == 0,
              f"next mount: healthy cache, no GETs ({st['backend_get_requests']}), "
              f"no corruptions ({st['cache_corruptions']})")
        check(s.unmount(m) == 0, "daemon exited 0")

        # 2) A flipped header byte and a truncated unit file.
        units = [p for p in unit_files(cache) if p.stat().st_size > UNIT]
        with open(units[0], "r+b") as f:
            f.seek(8)
            b = f.read(1)
            f.seek(8)
            f.write(bytes([b[0] ^ 0xFF]))
        with open(units[2], "r+b") as f:
            f.truncate(units[2].stat().st_size // 2)
        log(f"  flipped header byte 8 of {units[0].relative_to(cache)}, truncated {units[2].relative_to(cache)}")
        m = s.mount(source, cache_dir=cache)
        st = read_all(s, m, want)
        log(f"  stats: {st}")
        check(st["backend_get_bytes"] == 2 * UNIT,
              f"both damaged units refetched, nothing else (backend_get_bytes {st['backend_get_bytes']} "
              f"== {2 * UNIT})")
        log(f"  (info) cache_corruptions={st['cache_corruptions']} cache_read_errors={st.get('cache_read_errors')}")
        check(s.unmount(m) == 0, "daemon exited 0")

        # 3) The cache dir deleted under a live mount (a cleanup script, a
        # wrong rm -rf): every read still right, from the source, and the
        # log says what happened.
        cache2 = s.mkdir("cache2")
        m = s.mount(source, cache_dir=cache2)
        first = sorted(want)[0]
        check((m.mountpoint / first).read_bytes() == want[first], f"{first} read before the deletion")
        # The daemon may write into it meanwhile (a temp file, tmp/ made
        # again): what rmtree finds non-empty is removed on the next pass.
        for _ in range(20):
            shutil.rmtree(cache2, ignore_errors=True)
            if not cache2.exists():
                break
            time.sleep(0.1)
        check(not cache2.exists(), "cache dir deleted under the live mount")
        st = read_all(s, m, want)
        check(st["cache_write_errors"] >= 1, f"cache_write_errors {st['cache_write_errors']} >= 1")
        # The gone units are no longer counted, and once the deletion is
        # seen no insert is tried again (before 2026-11-28 the stats kept
        # the old units and every miss counted a write error).
        errors = st["cache_write_errors"]
        check(st["cache_dir_gone"] == 1, f"cache_dir_gone {st['cache_dir_gone']} == 1")
        check(st["cache_units"] == 0 and st["cache_used_bytes"] == 0,
              f"no units counted once the dir is gone ({st['cache_units']} units, {st['cache_used_bytes']} bytes)")
        check(st["engine"]["cached_units"] == 0, f"the engine holds none ({st['engine']['cached_units']})")
        st = read_all(s, m, want)
        check(st["cache_write_errors"] == errors,
              f"no insert tried after the deletion was seen ({st['cache_write_errors']} == {errors} write errors)")
        # `igtcache warm` says nothing was cached (it went by write errors
        # alone, which no longer grow).
        w = subprocess.run([harness.igtcache_bin(), "warm", str(m.mountpoint)], capture_output=True, text=True,
                           timeout=120, env=s.igt_env())
        check(w.returncode == 1 and "cache dir was deleted under it" in w.stderr,
              f"warm exits 1 and says why ({w.returncode}: {w.stderr.strip()[-200:]!r})")
        check(s.unmount(m) == 0, "daemon exited 0")
        said = [ln for ln in m.proc.stderr_text().splitlines() if "was deleted while mounted" in ln]
        check(len(said) == 1, f"the log says the cache dir was deleted, once ({said[:1]!r})")

        # 4) The same with every read a hit: nothing failed an insert, so
        # nothing noticed (cache_dir_gone 0, the gone units counted and
        # their files held open) until the next miss. The daemon now looks
        # every second.
        cache3 = s.mkdir("cache3")
        m = s.mount(source, cache_dir=cache3)
        read_all(s, m, want)
        before = read_all(s, m, want)
        check(before["cache_units"] > 0, f"all cached ({before['cache_units']} units)")
        for _ in range(20):
            shutil.rmtree(cache3, ignore_errors=True)
            if not cache3.exists():
                break
            time.sleep(0.1)
        deadline = time.monotonic() + 30
        st = s.stats(m)
        while st["cache_dir_gone"] != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
            st = s.stats(m)
        check(st["cache_dir_gone"] == 1 and st["cache_units"] == 0 and st["backend_get_bytes"] ==
              before["backend_get_bytes"],
              f"no miss after the deletion, and it is seen: cache_dir_gone {st['cache_dir_gone']}, "
              f"{st['cache_units']} units")
        check(s.unmount(m) == 0, "daemon exited 0")


if __name__ == "__main__":
    harness.run_test("test_corruption", main)
