"""The cache volume fills up, or turns read-only, while mounted.

The cache dir lives on a small loop-mounted ext4 volume of our own (this
test runs as root).
  1. Another process fills the volume: every read still returns the right
     bytes (from the backend), failed inserts are counted
     (cache_write_errors), the daemon logs ONE warning about it, not one per
     insert.
  2. The space comes back (the filler is deleted): caching resumes without a
     restart (inserts counted, re-reads are cache hits).
  3. The volume turns read-only (ext4 abort): reads keep working, cached
     units are still served; once the volume is back (fsck, mount), a new
     mount on the same cache dir caches again.
New directories are listed in every phase, so the metadata writes to the
index (RocksDB) hit the full / read-only volume too.
"""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import os
import subprocess
from pathlib import Path

import faultlib
import harness
from faultlib import content, try_read
from harness import check, log

MiB = 1 << 20
FS_SIZE = 48 * MiB


def sh(*argv):
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if r.returncode != 0:
        raise harness.TestFailure(f"{' '.join(argv)}: {r.stderr.strip()}")


def warnings(proc: harness.Proc) -> list[str]:
    return [ln for ln in proc.stderr_text().splitlines()
            if "[warning]" in ln and "cache" in ln.lower()]


def main():
    if os.geteuid() != 0:
        raise harness.TestFailure("needs root (mounts a tmpfs for the cache dir)")
    with harness.Session("disk_full") as s:
        src = s.mkdir("src")
        files = {}
        for phase in ("warm", "full", "back", "ro", "rw"):
            for d in range(3):
                for i in range(4):
                    k = f"{phase}/d{d}/f{i}.bin"
                    files[k] = content(k, [300_000, MiB + 5, 2 * MiB, 40_000][i])
                    (src / k).parent.mkdir(parents=True, exist_ok=True)
                    (src / k).write_bytes(files[k])
        vol = s.mkdir("cachevol")
        img = s.tmp / "cachevol.img"
        with open(img, "wb") as f:
            f.truncate(FS_SIZE)
        sh("mkfs.ext4", "-q", "-F", "-m", "0", str(img))  # no root reserve: full is full
        sh("mount", "-o", "loop", str(img), str(vol))  # the loop device auto-detaches at umount
        os.chmod(vol, 0o700)
        m = None
        try:
            cfg = faultlib.config(s, cache={"min_free_ratio": 0.02, "max_bytes": "1G"})
            m = s.mount(f"file://{src}", cache_dir=vol / "cache", args=["--config", str(cfg)])

            def read_phase(phase, twice=False):
                keys = sorted(k for k in files if k.startswith(phase + "/"))
                for rnd in range(2 if twice else 1):
                    for k in keys:
                        faultlib.drop_page_cache(m.mountpoint / k)
                        got, e = try_read(m.mountpoint / k)
                        if got != files[k]:
                            raise harness.TestFailure(
                                f"{phase}: {k}: {faultlib.errname(e) if e else 'WRONG BYTES'}")
                return s.stats(m)

            st = read_phase("warm")
            check(st["cache_insert_units"] > 0 and st["cache_write_errors"] == 0, "warm-up: units cached")
            # Free the warm units' space the hard way, so the filler takes it
            # all and the cache cannot evict its way out. The daemon keeps
            # unit files open, which would keep their space, so it is
            # restarted around the removal (units gone behind its back are
            # then dropped at start-up).
            s.unmount(m)
            sh("rm", "-rf", str(vol / "cache" / "units"), str(vol / "cache" / "tmp"))
            sh("mkdir", "-m", "0700", str(vol / "cache" / "units"), str(vol / "cache" / "tmp"))
            m = s.mount(f"file://{src}", cache_dir=vol / "cache", args=["--config", str(cfg)])
            n = faultlib.fill(vol / "filler")
            log(f"  filled the cache volume with {n / 1e6:.1f} MB; free {os.statvfs(vol).f_bavail * 4096} B")
            before = s.stats(m)
            w0 = len(warnings(m.proc))
            st = read_phase("full", twice=True)
            errs = st["cache_write_errors"] - before["cache_write_errors"]
            check(errs > 0, f"volume full: every read byte-exact; {errs} failed inserts counted")
            new_w = warnings(m.proc)[w0:]
            for ln in new_w:
                log(f"    {ln[-200:]}")
            check(1 <= len(new_w) <= 2, f"{len(new_w)} warning(s) logged for {errs} failed inserts")

            os.unlink(vol / "filler")
            os.sync()  # the abort below must not bring the filler back
            before = st
            st = read_phase("back", twice=True)
            ins = st["cache_insert_units"] - before["cache_insert_units"]
            hits = st["cache_hit_units"] - before["cache_hit_units"]
            check(ins > 0 and hits > 0 and st["cache_write_errors"] == before["cache_write_errors"],
                  f"space back: caching resumed without a restart ({ins} inserts, {hits} hits, "
                  f"no new write errors)")

            # Read-only: ext4's "abort" turns the volume read-only at once, as
            # errors=remount-ro does after an I/O error (a plain remount,ro is
            # refused while RocksDB holds files open for writing).
            os.sync()
            sh("mount", "-o", "remount,abort", str(vol))
            before = st
            w0 = len(warnings(m.proc))
            st = read_phase("ro", twice=True)
            errs = st["cache_write_errors"] - before["cache_write_errors"]
            check(errs > 0, f"read-only cache volume: every read byte-exact; {errs} failed inserts counted")
            hits = st["cache_hit_units"] - before["cache_hit_units"]
            new_w = warnings(m.proc)[w0:]
            for ln in new_w:
                log(f"    {ln[-200:]}")
            check(len(new_w) <= 3, f"{len(new_w)} warning(s) logged for {errs} failed inserts")
            # A warm-up that caches nothing says so (it said it had warmed).
            r = subprocess.run([harness.igtcache_bin(), "warm", str(m.mountpoint / "ro")], capture_output=True,
                               text=True, env=s.igt_env(), timeout=120)
            check(r.returncode == 1 and "cache writes failed" in r.stderr,
                  f"igtcache warm onto the read-only volume: exit {r.returncode}, says the writes failed "
                  f"({r.stderr.strip()[-160:]!r})")
            st = read_phase("back")
            check(st["cache_hit_units"] > before["cache_hit_units"],
                  "read-only volume: units cached before are still served from it")
            rc = s.unmount(m)
            check(rc is not None and rc >= 0, f"daemon exited by itself ({rc}) on a read-only cache volume")
            # The volume comes back (after fsck, as an admin would): a new
            # mount on the same cache dir caches again.
            sh("umount", str(vol))
            subprocess.run(["e2fsck", "-f", "-y", str(img)], capture_output=True)
            sh("mount", "-o", "loop", str(img), str(vol))
            m = s.mount(f"file://{src}", cache_dir=vol / "cache", args=["--config", str(cfg)])
            before = s.stats(m)
            st = read_phase("rw", twice=True)
            ins = st["cache_insert_units"] - before["cache_insert_units"]
            hits = st["cache_hit_units"] - before["cache_hit_units"]
            check(ins > 0 and hits > 0 and st["cache_corruptions"] == 0,
                  f"volume writable again: caching resumed ({ins} inserts, {hits} hits), no corruption")
            st = read_phase("back")
            log(f"  units cached while space was back, after the remount: {st['cache_hit_units'] - hits} hits")
            check(s.unmount(m) == 0, "daemon exited 0")
            m = None

            # A mount on a cache volume full to the last byte: a clean error
            # (or a mount), never an abort. RocksDB's own LOG file in the
            # index dir failed to write in DB::Open's recovery and its next
            # write hit an assertion (SIGABRT, "the mount daemon exited").
            n = faultlib.fill(vol / "filler")
            log(f"  filled the cache volume again ({n / 1e6:.1f} MB); free {os.statvfs(vol).f_bavail * 4096} B")
            try:
                m = s.mount(f"file://{src}", cache_dir=vol / "cache", args=["--config", str(cfg)])
                st = read_phase("back")
                log("  mounted on the full volume")
                check(s.unmount(m) == 0, "full volume: daemon exited 0")
            except harness.MountError as e:
                log(f"  full volume: mount refused ({e.returncode}): {e.stderr.strip()[-300:]}")
                check(e.returncode == 1 and "Assertion" not in e.stderr and "space" in e.stderr.lower(),
                      f"full volume: the mount fails with exit 1 naming the lack of space, no abort "
                      f"(exit {e.returncode})")
            m = None
            os.unlink(vol / "filler")
            m = s.mount(f"file://{src}", cache_dir=vol / "cache", args=["--config", str(cfg)])
            before = s.stats(m)
            check(before["cache_units"] > 0, f"space back: the cache is still there ({before['cache_units']} units)")
            st = read_phase("back")
            check(st["cache_hit_units"] > before["cache_hit_units"], "space back: its units are served")
            check(s.unmount(m) == 0, "daemon exited 0")
            m = None

            # cache.max_bytes (1G) over the volume (48 MiB): the mount says
            # the cache is limited to what the volume holds, and the cache
            # evicts within it. Before, the limit was never reached: every
            # insert met the volume's floor, which stopped at the policy's
            # next victim whenever that was an inline unit (a small file):
            # write errors, nothing cached. Small files first (inline
            # units), then more than the volume in large ones, twice.
            big = {}
            for i in range(40):
                k = f"small/s{i:02d}.bin"
                big[k] = content(k, 2000)
            for i in range(16):
                k = f"big/b{i:02d}.bin"
                big[k] = content(k, 4 * MiB)
            for k, v in big.items():
                (src / k).parent.mkdir(parents=True, exist_ok=True)
                (src / k).write_bytes(v)
            sh("rm", "-rf", str(vol / "cache"))
            m = s.mount(f"file://{src}", cache_dir=vol / "cache", args=["--config", str(cfg)])
            check("the cache is limited to" in m.proc.stderr_text(),
                  "cache.max_bytes over the volume: the mount says the cache is limited to what it holds")
            before = s.stats(m)
            check(before["cache_limit_bytes"] < FS_SIZE,
                  f"cache_limit_bytes {before['cache_limit_bytes']} is within the volume ({FS_SIZE})")
            for rnd in range(2):
                for k in sorted(big):
                    faultlib.drop_page_cache(m.mountpoint / k)
                    got, e = try_read(m.mountpoint / k)
                    if got != big[k]:
                        raise harness.TestFailure(f"over the volume: {k}: {faultlib.errname(e) if e else 'WRONG BYTES'}")
            st = s.stats(m)
            errs = st["cache_write_errors"] - before["cache_write_errors"]
            check(errs == 0 and st["evictions"] > before["evictions"],
                  f"reading {sum(map(len, big.values())) * 2 // MiB} MiB through a 48 MiB volume: the cache "
                  f"evicts ({st['evictions'] - before['evictions']} evictions), {errs} write errors")
            # The last file read is served from the cache.
            last = sorted(big)[-1]
            before = s.stats(m)
            faultlib.drop_page_cache(m.mountpoint / last)
            got, _ = try_read(m.mountpoint / last)
            st = s.stats(m)
            check(got == big[last] and st["backend_get_bytes"] == before["backend_get_bytes"],
                  "the last file read is served from the cache")
            check(s.unmount(m) == 0, "daemon exited 0")
            m = None
        finally:
            if m is not None:
                s.unmount(m, quiet=True)
            subprocess.run(["umount", str(vol)], capture_output=True)


if __name__ == "__main__":
    harness.run_test("test_disk_full", main)
