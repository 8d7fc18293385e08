"""Real mount of a local directory (file://) holding the seeded dataset:
find/stat agree with the source (mtimes to the second), every file is
byte-identical by seeded random range reads (cold, then warm with O_DIRECT
when the kernel allows it) and by whole-file hashes, and writes get EROFS."""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import errno
import os
import signal
import subprocess
import time

import harness
import verify
from dataset import ensure_dataset


def main():
    ds = ensure_dataset()
    with harness.Session("local_mount") as s:
        m = s.mount(f"file://{ds.root}", args=["--cache-size", "2G"])
        verify.check_tree(m.mountpoint, ds, mtime_mode="exact")
        # Cold cache: random ranges first, so partial units are fetched.
        verify.check_random_reads(m.mountpoint, ds, seed=1)
        verify.check_whole_files(m.mountpoint, ds)
        # Warm cache: another seed; O_DIRECT bypasses the page cache so the
        # daemon serves every read from its unit files.
        big = next(e for e in ds.files if e.size > 2 * 1024 * 1024)
        direct = verify.direct_io_works(m.mountpoint / big.path)
        harness.log(f"  O_DIRECT on the mount: {'supported' if direct else 'not supported'}")
        verify.check_random_reads(m.mountpoint, ds, seed=2, direct=direct)
        verify.check_read_only(m.mountpoint, ds)
        st = s.stats(m)
        harness.log(f"  stats: {st}")
        harness.check("pid" in st and "source" in st and st["backend_get_requests"] > 0,
                      "stats has pid, source and counted backend GETs")
        rc = s.unmount(m)
        harness.check(rc == 0, f"daemon exited 0 after fusermount3 -u (rc={rc})")
        harness.check(not harness.is_mounted(m.mountpoint), "no mount left behind")

        # Directory-only levels (the shared dataset avoids them for s3rver's
        # sake) and an empty directory, which a local source can have.
        src = s.mkdir("dironly")
        (src / "x" / "y" / "z").mkdir(parents=True)
        (src / "x" / "y" / "z" / "leaf.txt").write_bytes(b"leaf\n")
        (src / "empty dir").mkdir()
        # An object named as the stats file: shadowed by it, and not listed.
        (src / ".igtcache.stats").write_bytes(b"an object\n")
        m = s.mount(f"file://{src}")
        got = verify.find_listing(m.mountpoint)
        want = {"x": ("d", None), "x/y": ("d", None), "x/y/z": ("d", None),
                "x/y/z/leaf.txt": ("f", 5), "empty dir": ("d", None)}
        harness.check(got == want, f"directory-only levels and an empty dir listed: {got}")
        harness.check((m.mountpoint / "x/y/z/leaf.txt").read_bytes() == b"leaf\n", "leaf readable")
        harness.check(b'"pid"' in (m.mountpoint / ".igtcache.stats").read_bytes(),
                      "the stats file shadows the object of its name")
        # readdir's d_ino is the inode stat gives (os.scandir, ls -i, find
        # agree with stat).
        mismatch = []
        for dirpath, _, _ in os.walk(m.mountpoint):
            with os.scandir(dirpath) as it:
                for e in it:
                    if e.inode() != e.stat(follow_symlinks=False).st_ino:
                        mismatch.append((e.path, e.inode(), e.stat(follow_symlinks=False).st_ino))
        harness.check(not mismatch, f"d_ino == st_ino for every entry (mismatches: {mismatch})")
        harness.check(s.unmount(m) == 0, "daemon exited 0")
        readdirplus(s)
        linked_names(s)

        # Daemon mode: returns 0 once mounted; the daemon (pid from stats)
        # serves reads and exits by itself after fusermount3 -u.
        m = s.mount(f"file://{src}", foreground=False)
        pid = m.daemon_pid
        harness.check(pid is not None and harness.pid_alive(pid),
                      f"daemon mode: mounted, daemon pid {pid} from stats is alive")
        harness.check((m.mountpoint / "x/y/z/leaf.txt").read_bytes() == b"leaf\n", "daemon mode: leaf readable")
        s.unmount(m)
        harness.check(not harness.pid_alive(pid) and not harness.is_mounted(m.mountpoint),
                      "daemon mode: daemon gone and mount gone after fusermount3 -u")

        # -o auto_unmount runs fusermount3 as a watchdog for the mount's
        # lifetime: the command still returns once mounted (it used to wait
        # for the watchdog, which held the status pipe), and the daemon does
        # not keep the caller's working directory busy.
        m = s.mount(f"file://{src}", foreground=False, args=["-o", "auto_unmount"])
        pid = m.daemon_pid
        harness.check(pid is not None and harness.is_mounted(m.mountpoint),
                      f"daemon mode with -o auto_unmount: returned once mounted (daemon pid {pid})")
        harness.check(os.readlink(f"/proc/{pid}/cwd") == "/", "daemon mode: the daemon works from /")
        s.unmount(m)
        harness.check(not harness.pid_alive(pid) and not harness.is_mounted(m.mountpoint),
                      "daemon mode with -o auto_unmount: daemon and mount gone after unmount")

        # -o max_read=N is fuse.max_read_bytes: the mount comes up with it
        # (passed to libfuse as it was, the kernel's INIT was refused after
        # the command had returned 0, and nothing was mounted).
        # Below fuse.random_readahead_bytes' 128K default too (taken down with it).
        for mr in (131072, 65536):
            m = s.mount(f"file://{src}", foreground=False, args=["-o", f"noatime,max_read={mr}"])
            harness.check(harness.is_mounted(m.mountpoint) and
                          (m.mountpoint / "x/y/z/leaf.txt").read_bytes() == b"leaf\n",
                          f"daemon mode with -o max_read={mr}: mounted and readable")
            opts = [l.split()[3] for l in open("/proc/mounts") if l.split()[1] == str(m.mountpoint)]
            harness.check(opts and f"max_read={mr}" in opts[0].split(","), f"max_read={mr} in /proc/mounts ({opts})")
            s.unmount(m)

        # -o rw is ignored with a warning: the mount is read-only (passed to
        # libfuse, /proc/mounts said rw while writes failed EROFS).
        m = s.mount(f"file://{src}", foreground=False, args=["-o", "rw,noatime"])
        opts = [l.split()[3] for l in open("/proc/mounts") if l.split()[1] == str(m.mountpoint)]
        harness.check(opts and "ro" in opts[0].split(",") and "rw" not in opts[0].split(","),
                      f"-o rw: /proc/mounts says ro ({opts})")
        # A name longer than 255 bytes: ENAMETOOLONG, as statfs's limit says
        # (FUSE passes names up to 1024 bytes; the lookup said ENOENT).
        try:
            os.stat(m.mountpoint / ("n" * 300))
            err = 0
        except OSError as ex:
            err = ex.errno
        harness.check(err == errno.ENAMETOOLONG, f"a 300-byte name: ENAMETOOLONG ({errno.errorcode.get(err, err)})")
        s.unmount(m)

        # SIGTERM and SIGINT to a foreground daemon: clean exit, mount removed.
        for sig in (signal.SIGTERM, signal.SIGINT):
            m = s.mount(f"file://{src}")
            m.proc.popen.send_signal(sig)
            try:
                rc = m.proc.popen.wait(30)
            except subprocess.TimeoutExpired:
                rc = None
            gone = not harness.is_mounted(m.mountpoint)
            m.unmounted = gone
            harness.check(rc == 0 and gone, f"{sig.name}: daemon exited 0 (rc={rc}) and removed its mount ({gone})")


def linked_names(s):
    """A Hugging Face cache in a file:// source: snapshots/ names are links
    into blobs/, and a whole snapshot directory may be a link too. Each blob
    is fetched and cached once, whichever name reads it (a tester saw a blob
    warmed through blobs/ fetched again through its snapshot link), also
    after a remount that serves the saved listings."""
    src = s.mkdir("hf")
    blobs = src / "models--x--y" / "blobs"
    snap = src / "models--x--y" / "snapshots" / "abc"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    a, b = os.urandom(3 << 20), os.urandom(5 << 19)
    (blobs / "5f3e").write_bytes(a)
    (blobs / "9c1d").write_bytes(b)
    (snap / "model.bin").symlink_to("../../blobs/5f3e")
    (snap / "config.json").symlink_to("../../blobs/9c1d")
    (src / "models--x--y" / "snapshots" / "main").symlink_to("abc")  # a linked directory
    cache = s.mkdir("hf-cache")
    names = ["models--x--y/snapshots/abc/model.bin", "models--x--y/snapshots/main/model.bin"]
    for round_ in ("first mount", "remount"):
        m = s.mount(f"file://{src}", cache_dir=cache, args=["--cache-size", "64M"])
        st0 = s.stats(m)
        harness.check((m.mountpoint / "models--x--y/blobs/5f3e").read_bytes() == a, f"{round_}: the blob reads")
        for n in names:
            harness.check((m.mountpoint / n).read_bytes() == a, f"{round_}: {n} reads as its target")
        harness.check((m.mountpoint / "models--x--y/snapshots/main/config.json").read_bytes() == b,
                      f"{round_}: a link in a linked directory reads as its target")
        st1 = s.stats(m)
        fetched = st1["backend_get_bytes"] - st0["backend_get_bytes"]
        want = len(a) + len(b) if round_ == "first mount" else 0
        harness.check(fetched == want, f"{round_}: each blob fetched once whatever its names: {fetched} B, want {want}")
        harness.check(st1["cache_used_bytes"] < 2 * len(a), f"{round_}: cached once: {st1['cache_used_bytes']} B")
        harness.check(s.unmount(m) == 0, "daemon exited 0")
    # A link turned to another file after it was listed, read before the
    # listing's TTL: fetched by its name, the change is seen (its first read
    # fails and its directory is listed again), and the next open reads the
    # new target (fetched by the target, the old one's bytes were served).
    (snap / "latest").symlink_to("../../blobs/5f3e")
    m = s.mount(f"file://{src}", cache_dir=s.mkdir("hf-cache2"), args=["--cache-size", "64M"])
    harness.check("latest" in os.listdir(m.mountpoint / "models--x--y/snapshots/abc"), "the link is listed")
    (snap / "latest").unlink()
    (snap / "latest").symlink_to("../../blobs/9c1d")
    try:
        first = (m.mountpoint / "models--x--y/snapshots/abc/latest").read_bytes()
    except OSError:
        first = None
    harness.check(first != a, "a retargeted link: the old target's bytes are not served")
    harness.check((m.mountpoint / "models--x--y/snapshots/abc/latest").read_bytes() == b,
                  "a retargeted link: the next open reads the new target")
    harness.check(s.unmount(m) == 0, "daemon exited 0")


def readdirplus(s):
    """`ls -l` of a large directory gets each entry's attributes with its
    name (readdirplus: no lookup per entry). Every entry handed over so is a
    lookup the kernel forgets later: once the kernel drops its dentries and
    inodes, the daemon's inode count is back where it was, the daemon alive
    (a count that went below zero aborts it), and `ls -l` again agrees."""
    src = s.mkdir("plus")
    many = src / "many"
    many.mkdir()
    want = {}
    for i in range(3000):
        name = f"f{i:05d}.bin"
        (many / name).write_bytes(b"p" * (i % 700))
        want[name] = i % 700
    (many / "sub").mkdir()
    m = s.mount(f"file://{src}")
    st0 = s.stats(m)
    before = st0["inodes"]

    def ls_l() -> dict[str, int]:
        r = subprocess.run(["ls", "-l", "--time-style=+", str(m.mountpoint / "many")], capture_output=True,
                           timeout=120, check=True)
        got = {}
        for line in r.stdout.decode().splitlines()[1:]:  # "total N" first
            f = line.split()
            if f[0].startswith("-"):
                got[f[-1]] = int(f[4])
        return got

    harness.check(ls_l() == want, "ls -l of 3,000 files: every name and size as in the source")
    st1 = s.stats(m)
    after_ls = st1["inodes"]
    plus = st1["readdirplus_entries"] - st0["readdirplus_entries"]
    lookups = st1["lookups"] - st0["lookups"]
    harness.check(after_ls >= 3000, f"the entries have inodes: {after_ls}")
    harness.check(plus >= 3000 and lookups < 300,
                  f"they came with the listing (readdirplus): {plus} entries, {lookups} lookups")
    with open("/proc/sys/vm/drop_caches", "w") as f:  # the kernel forgets its dentries and inodes
        f.write("2\n")
    deadline = time.monotonic() + 20
    while s.stats(m)["inodes"] > before + 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    left = s.stats(m)["inodes"]
    harness.check(left <= before + 2, f"after the kernel dropped them: {left} inodes (before ls: {before})")
    harness.check(m.proc.popen.poll() is None, "the daemon is alive (no lookup count went below zero)")
    harness.check(ls_l() == want, "ls -l again: every name and size")
    harness.check(s.unmount(m) == 0, "daemon exited 0")

    # fuse.readdirplus: `always` serves a listing-then-stat tool too (find
    # -ls reads the whole directory before its stats); `off` never.
    for mode in ("always", "off"):
        cfg = s.write_config(f"rdp-{mode}.yaml", f"fuse:\n  readdirplus: {mode}\n")
        m = s.mount(f"file://{src}", args=["--config", str(cfg)])
        st0 = s.stats(m)
        r = subprocess.run(["find", str(m.mountpoint / "many"), "-type", "f", "-printf", "%s %f\\n"],
                           capture_output=True, timeout=120, check=True)
        got = {ln.split(" ", 1)[1]: int(ln.split(" ", 1)[0]) for ln in r.stdout.decode().splitlines()}
        st1 = s.stats(m)
        plus = st1["readdirplus_entries"] - st0["readdirplus_entries"]
        lookups = st1["lookups"] - st0["lookups"]
        harness.check(got == want, f"readdirplus {mode}: find -printf %s: every name and size")
        if mode == "always":
            harness.check(plus >= 3000 and lookups < 300, f"readdirplus always: {plus} entries, {lookups} lookups")
        else:
            harness.check(plus == 0 and lookups >= 3000, f"readdirplus off: {plus} entries, {lookups} lookups")
        harness.check(s.unmount(m) == 0, "daemon exited 0")


if __name__ == "__main__":
    harness.run_test("test_local_mount", main)
