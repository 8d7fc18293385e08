"""`mount -t fuse.igtcache` and /etc/fstab lines, the three ways mount(8)
can reach igtcache (see docs/CLI.md, "mount(8) and /etc/fstab"):

1. `mount.fuse3 'igtcache#SOURCE' DIR -o OPTS` — what mount(8) runs for
   type fuse.igtcache when no dedicated helper is installed; mount.fuse3
   then runs `igtcache SOURCE DIR -o OPTS` from PATH.
2. `mount.fuse.igtcache SOURCE DIR -n -o OPTS` — the dedicated helper (a
   symlink to the igtcache binary), called exactly as mount(8) calls it;
   `-f` (fake) mounts nothing; a bad option is a usage error.
3. The real mount(8): `mount -T FSTAB DIR` with an fstab line, and
   `mount -t fuse.igtcache SOURCE DIR -o OPTS`, then `umount`. mount(8) only
   looks for helpers in /sbin, so this part runs in a private mount
   namespace (unshare -m, root only) where an overlay adds the helper
   symlink to /usr/sbin — the host's /usr/sbin is never touched.

Every mount is checked (type fuse.igtcache, contents identical to the
source, options reached the daemon: cache dir and size from `-o`) and
unmounted with `igtcache unmount` or umount(8); the daemon must be gone."""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import harness
from harness import check, log

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "examples" / "dataset"


def tree(root: Path) -> dict:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.startswith(".igtcache"):
                continue
            p = Path(d) / f
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def check_mount(mnt: Path, cache: Path, limit: int) -> int:
    """Checks a live mount; returns its daemon pid."""
    check(harness.is_mounted(mnt), f"{mnt} is mounted")
    types = [l.split(" - ")[1].split()[0] for l in harness.mount_entries(mnt)]
    check("fuse.igtcache" in types, f"mount type is fuse.igtcache ({types})")
    check(tree(mnt) == tree(SRC), "contents identical to the source")
    r = subprocess.run([harness.igtcache_bin(), "stats", str(mnt)], capture_output=True, text=True, timeout=60)
    st = json.loads(r.stdout)
    check(st["cache_limit_bytes"] == limit, f"cache_size from -o reached the daemon ({st['cache_limit_bytes']})")
    check(any(cache.iterdir()), f"cache_dir from -o is used ({cache})")
    return int(st["pid"])


def wait_gone(pid: int, what: str) -> None:
    deadline = time.monotonic() + harness.UNMOUNT_WAIT_S
    while harness.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    check(not harness.pid_alive(pid), f"{what}: daemon pid {pid} exited")


def unmount(mnt: Path, pid: int) -> None:
    r = subprocess.run([harness.igtcache_bin(), "unmount", str(mnt)], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"igtcache unmount {mnt} ({r.stderr.strip()!r})")
    check(not harness.pid_alive(pid), "daemon gone when unmount returns")


def inner(tmp: Path) -> None:
    """Part 3, run as root inside `unshare -m --propagation private`."""
    helper_dir = tmp / "sbin-extra"
    helper_dir.mkdir()
    (helper_dir / "mount.fuse.igtcache").symlink_to(harness.igtcache_bin())
    r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={helper_dir}:/usr/sbin", "/usr/sbin"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"SKIP overlay on /usr/sbin not possible here: {r.stderr.strip()}", flush=True)
        return
    check(os.path.exists("/sbin/mount.fuse.igtcache"), "helper visible as /sbin/mount.fuse.igtcache (namespace only)")
    env = dict(os.environ, PATH="/usr/sbin:/usr/bin:/sbin:/bin")  # as at boot: igtcache is not on PATH

    # (a) an fstab line, mounted by its mount point.
    mnt, cache = tmp / "fstab-mnt", tmp / "fstab-cache"
    mnt.mkdir(), cache.mkdir()
    fstab = tmp / "fstab"
    fstab.write_text(f"# test fstab\nfile://{SRC} {mnt} fuse.igtcache "
                     f"noauto,nofail,_netdev,cache_dir={cache},cache_size=96M 0 0\n")
    r = subprocess.run(["mount", "-T", str(fstab), str(mnt)], capture_output=True, text=True, env=env, timeout=60)
    check(r.returncode == 0, f"mount -T fstab {mnt} ({r.stderr.strip()!r})")
    pid = check_mount(mnt, cache, 96 << 20)
    print(f"DAEMON {pid}", flush=True)
    unmount(mnt, pid)

    # (b) mount -t fuse.igtcache ... and umount(8).
    mnt, cache = tmp / "t-mnt", tmp / "t-cache"
    mnt.mkdir(), cache.mkdir()
    r = subprocess.run(["mount", "-t", "fuse.igtcache", f"file://{SRC}", str(mnt), "-o",
                        f"cache_dir={cache},cache_size=80M,allow_other"],
                       capture_output=True, text=True, env=env, timeout=60)
    check(r.returncode == 0, f"mount -t fuse.igtcache ({r.stderr.strip()!r})")
    pid = check_mount(mnt, cache, 80 << 20)
    print(f"DAEMON {pid}", flush=True)
    r = subprocess.run(["umount", str(mnt)], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"umount {mnt} ({r.stderr.strip()!r})")
    wait_gone(pid, "umount(8)")


def main():
    with harness.Session("fstab") as s:
        bindir = s.mkdir("bin")
        (bindir / "igtcache").symlink_to(harness.igtcache_bin())
        (bindir / "mount.fuse.igtcache").symlink_to(harness.igtcache_bin())
        env = s.igt_env({"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"})

        # 1. mount.fuse3 'igtcache#SOURCE' DIR -o ...
        mnt, cache = s.mkdir("m1"), s.mkdir("c1")
        s.mounts.append(harness.Mount(mnt, cache, None, None, "m1"))  # cleanup on failure
        r = subprocess.run(["mount.fuse3", f"igtcache#file://{SRC}", str(mnt), "-o",
                            f"cache_dir={cache},cache_size=64M,nofail,_netdev"],
                           capture_output=True, text=True, env=env, timeout=60)
        check(r.returncode == 0, f"mount.fuse3 igtcache#... ({r.stderr.strip()!r})")
        pid = check_mount(mnt, cache, 64 << 20)
        s.mounts[-1].daemon_pid = pid
        unmount(mnt, pid)
        s.mounts[-1].unmounted = True

        # 2. the dedicated helper, as mount(8) calls it.
        helper = str(bindir / "mount.fuse.igtcache")
        mnt, cache = s.mkdir("m2"), s.mkdir("c2")
        r = subprocess.run([helper, f"file://{SRC}", str(mnt), "-f", "-o", f"cache_dir={cache}"],
                           capture_output=True, text=True, env=env, timeout=60)
        check(r.returncode == 0 and not harness.is_mounted(mnt), "-f (fake): exit 0, nothing mounted")
        r = subprocess.run([helper, f"file://{SRC}", str(mnt), "-o", "cache_dir"], capture_output=True, text=True,
                           env=env, timeout=60)
        check(r.returncode == 2 and "cache_dir" in r.stderr, f"option without a value: usage error ({r.stderr.strip()!r})")
        for flag, named in (("--foo", "unknown mount flag '--foo' (mount.fuse.igtcache takes"),
                            ("-nx", "unknown mount flag -x in '-nx'")):
            r = subprocess.run([helper, f"file://{SRC}", str(mnt), flag, "-o", f"cache_dir={cache}"],
                               capture_output=True, text=True, env=env, timeout=60)
            check(r.returncode == 2 and named in r.stderr and not harness.is_mounted(mnt),
                  f"unknown flag {flag}: usage error naming it ({r.stderr.strip()!r})")
        s.mounts.append(harness.Mount(mnt, cache, None, None, "m2"))
        r = subprocess.run([helper, f"file://{SRC}", str(mnt), "-n", "-o",
                            f"rw,noauto,cache_dir={cache},cache_size=72M,x-systemd.automount,comment=x"],
                           capture_output=True, text=True, env=env, timeout=60)
        check(r.returncode == 0, f"mount.fuse.igtcache SOURCE DIR -n -o ... ({r.stderr.strip()!r})")
        pid = check_mount(mnt, cache, 72 << 20)
        s.mounts[-1].daemon_pid = pid
        check("ro" in harness.mount_entries(mnt)[0].split()[5].split(","), "mounted read-only despite 'rw'")
        unmount(mnt, pid)
        s.mounts[-1].unmounted = True

        # 3. the real mount(8), in a private mount namespace.
        if os.geteuid() != 0 or not shutil.which("unshare"):
            log("  (skip) part 3 needs root and unshare(1)")
            return
        tmp = s.mkdir("ns")
        p = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, __file__, "--inner", str(tmp)],
                           capture_output=True, text=True, timeout=300, env=env)
        out = p.stdout
        log("  namespace part:\n    " + out.strip().replace("\n", "\n    "))
        for line in out.splitlines():  # never leave a daemon behind, even in that namespace
            if line.startswith("DAEMON "):
                dpid = int(line.split()[1])
                if harness.pid_alive(dpid):
                    log(f"  warn: daemon {dpid} still alive; SIGTERM")
                    os.kill(dpid, 15)
        if "SKIP" in out:
            log("  (skip) part 3: " + out.strip())
            return
        check(p.returncode == 0, f"namespace part passed (stderr {p.stderr.strip()[-2000:]!r})")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--inner":
        t = Path(sys.argv[2])
        try:
            inner(t)
        except BaseException as e:
            print(f"FAIL {type(e).__name__}: {e}", flush=True)
            sys.exit(1)
        finally:  # a failed check must not leave a mount (and its daemon) in the namespace
            for d in ("fstab-mnt", "t-mnt"):
                if harness.is_mounted(t / d):
                    subprocess.run(["fusermount3", "-uz", str(t / d)], capture_output=True)
        sys.exit(0)
    harness.run_test("test_fstab", main)
