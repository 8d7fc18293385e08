"""Objects overwritten or deleted in the bucket while mounted (docs/SEMANTICS.md).

With metadata.ttl_ms = TTL:
  * any read, at any time, returns bytes of exactly one version — never a
    mix — and while the TTL runs, that version may still be the old one;
  * once the TTL has passed, a new open sees the new version (also for an
    overwrite of the same size, which the kernel page cache must not hide)
    or ENOENT for a deleted object;
  * a file opened before the change keeps reading its version (pinned at
    open): bytes of the old version or EIO, never new bytes;
  * units of the old version are never served again: after a remount on
    the same cache dir every object reads as its new version;
  * a read that finds its object changed or deleted makes the next open see
    the new version (or ENOENT) at once, whatever the TTL.
"""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import errno
import os
import time

import faultlib
import harness
from faultlib import content, errname, try_read
from harness import check, log

BUCKET = "igt-changes"
MiB = 1 << 20
TTL_MS = 1500


def which(got, versions):
    for name, data in versions.items():
        if got == data:
            return name
    return None


def main():
    v1 = {"grow.bin": content("grow1", 2 * MiB + 500), "same.bin": content("same1", 700_000),
          "gone.bin": content("gone1", 1234), "pinned.bin": content("pinned1", 8 * MiB + 99),
          "dir/deep.bin": content("deep1", 3 * MiB), "shared.bin": content("shared1", 4 * MiB),
          "shrink.bin": content("shrink1", 8 * MiB + 99)}
    v2 = {"grow.bin": content("grow2", 3 * MiB + 17), "same.bin": content("same2", 700_000),
          "pinned.bin": content("pinned2", 8 * MiB + 99), "dir/deep.bin": content("deep2", 1000),
          "shared.bin": content("shared2", 4 * MiB), "shrink.bin": content("shrink2", 1000)}
    with harness.Session("changed") as s:
        srv = s.start_s3rver(buckets=(BUCKET,))
        faultlib.put_objects(srv, BUCKET, v1)
        cfg = faultlib.config(s, metadata={"ttl_ms": TTL_MS, "negative_ttl_ms": 500})
        args = ["--config", str(cfg), "--endpoint", srv.endpoint, "--region", "us-east-1"]
        cache = s.mkdir("cache")
        m = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=args)
        mnt = m.mountpoint
        for k, data in v1.items():
            if k in ("pinned.bin", "shrink.bin"):
                continue  # only its first MiB is read (below): the rest is uncached
            check(try_read(mnt / k)[0] == data, f"v1 of {k} read") if k == "grow.bin" else None
            if try_read(mnt / k)[0] != data:
                raise harness.TestFailure(f"{k}: v1 not read correctly")
        # Page cache populated for same.bin (keep it: no drop before the re-read).
        check(try_read(mnt / "same.bin")[0] == v1["same.bin"], "same.bin read twice (page cache warm)")

        # A reader that opened pinned.bin before the change, read part of it.
        fd = os.open(mnt / "pinned.bin", os.O_RDONLY)
        head = os.pread(fd, MiB, 0)
        check(head == v1["pinned.bin"][:MiB], "pinned.bin opened, first MiB is v1")

        # A reader of shrink.bin (overwritten below by a 1000-byte object)
        # that stays open across the change with most of v1 uncached.
        fd_shrink = os.open(mnt / "shrink.bin", os.O_RDONLY)
        check(os.pread(fd_shrink, MiB, 0) == v1["shrink.bin"][:MiB], "shrink.bin opened, first MiB is v1")

        # A reader of shared.bin that stays open across the change (all of
        # v1 is cached: it goes on reading v1).
        fd_old = os.open(mnt / "shared.bin", os.O_RDONLY)
        # A handle on gone.bin, deleted below: fstat keeps working, as on an
        # unlinked file (before, it failed with ENOENT once the TTL ran out).
        fd_gone = os.open(mnt / "gone.bin", os.O_RDONLY)
        # A directory handle kept open across the change (a daemon polling
        # with rewinddir): os.listdir(fd) reads it from where it was
        # rewound to, offset 0.
        fd_root = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
        check("gone.bin" in os.listdir(fd_root), "the root listed through a kept directory handle")

        faultlib.put_objects(srv, BUCKET, v2)
        faultlib.delete_object(srv, BUCKET, "gone.bin")
        t_change = time.monotonic()
        log("  overwrote grow.bin (new size), same.bin (same size), pinned.bin, dir/deep.bin; deleted gone.bin")

        # Within the TTL: whole reads are one version or the other, never a mix.
        for k in ("grow.bin", "same.bin", "dir/deep.bin"):
            got, e = try_read(mnt / k)
            w = which(got, {"v1": v1[k], "v2": v2[k]}) if got is not None else errname(e)
            if w is None:
                raise harness.TestFailure(f"{k}: a read right after the change MIXED versions or is wrong")
            log(f"  right after the change {k} reads as {w}")

        # The pinned reader: every further chunk is v1 or an error, never v2.
        outcomes = []
        for off in range(MiB, len(v1["pinned.bin"]), 512 * 1024):
            try:
                b = os.pread(fd, 512 * 1024, off)
                want = v1["pinned.bin"][off:off + 512 * 1024]
                if b != want:
                    raise harness.TestFailure(f"pinned.bin at {off}: not v1 bytes "
                                              f"({'v2!' if b == v2['pinned.bin'][off:off + len(b)] else 'garbage'})")
                outcomes.append("v1")
            except OSError as e:
                if e.errno not in (errno.EIO, errno.ESTALE):
                    raise
                outcomes.append(errname(e.errno))
            if off == 2 * MiB:
                time.sleep(max(0.0, TTL_MS / 1000 + 0.5 - (time.monotonic() - t_change)))
        os.close(fd)
        check("EIO" in outcomes, f"a handle opened before the change read only v1 bytes (cached "
                                 f"units) or EIO (the version it pinned is gone): {sorted(set(outcomes))}")

        # After the TTL: the new version, or ENOENT.
        time.sleep(max(0.0, TTL_MS / 1000 + 0.5 - (time.monotonic() - t_change)))
        # The first lookup past the TTL waits up to 1 s for the refresh, then
        # is answered from the stale listing while the LIST goes on: on a
        # loaded machine s3rver's LIST can take longer. Polled until the
        # refreshed listing is in.
        deadline = time.monotonic() + 30
        while ((os.stat(mnt / "shrink.bin").st_size != 1000 or os.stat(mnt / "dir/deep.bin").st_size != 1000)
               and time.monotonic() < deadline):  # the root's listing and dir/'s
            time.sleep(0.2)

        # The name now leads to the 1000-byte v2: a stat of the path and of the
        # old handle must not shrink what the old handle reads (before, the
        # old handle's inode took v2's size and its reads past 1000 bytes
        # were a silent EOF).
        st_gone = os.fstat(fd_gone)
        check(st_gone.st_size == len(v1["gone.bin"]),
              f"gone.bin: a handle opened before the delete still fstats ({st_gone.st_size} bytes)")
        os.close(fd_gone)
        st_path = os.stat(mnt / "shrink.bin")
        st_fd = os.fstat(fd_shrink)
        check(st_path.st_size == 1000, f"shrink.bin: the path stats as v2 ({st_path.st_size} bytes)")
        check(st_fd.st_size == len(v1["shrink.bin"]),
              f"shrink.bin: the old handle stats as the version it opened ({st_fd.st_size} bytes)")
        try:
            b = os.pread(fd_shrink, 512 * 1024, 4 * MiB)
            if b != v1["shrink.bin"][4 * MiB:4 * MiB + 512 * 1024]:
                raise harness.TestFailure(f"shrink.bin: the old handle read {len(b)} bytes at 4 MiB that are not v1 "
                                          f"({'EOF' if not b else 'wrong bytes'})")
            shrink_outcome = "v1"
        except OSError as e:
            if e.errno != errno.EIO:
                raise
            shrink_outcome = "EIO"
        check(True, f"shrink.bin: the old handle reads v1 bytes or EIO past v2's end, never EOF ({shrink_outcome})")
        os.close(fd_shrink)

        # Two versions open on one inode, whose page cache the kernel shares
        # between handles: the old handle's reads must not put v1 pages where
        # the new handle reads.
        fd_new = os.open(mnt / "shared.bin", os.O_RDONLY)
        old_bytes = os.pread(fd_old, 4 * MiB, 0)
        check(old_bytes == v1["shared.bin"], "shared.bin: the handle opened before the change reads v1 (cached)")
        new_bytes = os.pread(fd_new, 4 * MiB, 0)
        w = which(new_bytes, {"v1": v1["shared.bin"], "v2": v2["shared.bin"]})
        if w != "v2":
            raise harness.TestFailure(f"shared.bin: a handle opened after the change read {w or 'MIXED or WRONG'} "
                                      "bytes while the old handle was open")
        check(True, "shared.bin: the handle opened after the change reads v2 while the old one is open")
        os.close(fd_old)
        os.close(fd_new)
        for k in ("grow.bin", "same.bin", "pinned.bin", "dir/deep.bin", "shared.bin", "shrink.bin"):
            st = os.stat(mnt / k)
            got, e = try_read(mnt / k)
            if got != v2[k]:
                w = which(got, {"v1": v1[k]}) if got is not None else errname(e)
                raise harness.TestFailure(f"{k}: after the TTL read {w or 'WRONG BYTES'}, expected v2")
            check(st.st_size == len(v2[k]), f"after the TTL {k} is v2 ({len(v2[k])} bytes), stat agrees")
        got, e = try_read(mnt / "gone.bin")
        check(got is None and e == errno.ENOENT, f"deleted gone.bin: {errname(e)}")
        check("gone.bin" not in os.listdir(mnt), "gone.bin no longer listed")
        names = os.listdir(fd_root)
        os.close(fd_root)
        check("gone.bin" not in names and "grow.bin" in names,
              "rewinddir of a directory handle opened before the change lists the directory as it is now")
        st = s.stats(m)
        check(st["cache_corruptions"] == 0, "no corruption")
        check(s.unmount(m) == 0, "daemon exited 0")

        # Old units are never served again: a remount (listings re-fetched
        # once stale) reads v2 everywhere.
        time.sleep(TTL_MS / 1000)
        m = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=args)
        for k in v2:
            if try_read(m.mountpoint / k)[0] != v2[k]:
                raise harness.TestFailure(f"{k}: not v2 after a remount on the same cache")
        check(True, "remount on the same cache dir: every object reads as v2")
        check(not (m.mountpoint / "gone.bin").exists(), "gone.bin absent after the remount")
        check(s.unmount(m) == 0, "daemon exited 0")
        change_found_by_a_read(s, srv)
        rolling_names(s, srv)
        new_name_once_listed(s, srv)


def new_name_once_listed(s, srv):
    """A name a lookup was told does not exist opens once a relisting lists
    it: the kernel's negative entry is dropped. Before (a tester's finding),
    readdir listed it while open and stat said ENOENT until the negative
    entry's TTL ran out (60 s here)."""
    cfg = faultlib.config(s, name="igt-neg.yaml", metadata={"ttl_ms": 1000, "negative_ttl_ms": 60000})
    m = s.mount(f"s3://{BUCKET}", args=["--config", str(cfg), "--endpoint", srv.endpoint,
                                         "--region", "us-east-1"])
    mnt = m.mountpoint
    faultlib.put_objects(srv, BUCKET, {"neg/old.bin": content("neg-old", 100)})
    check(os.listdir(mnt / "neg") == ["old.bin"], "neg/ lists old.bin")
    check(not (mnt / "neg/marker.bin").exists(), "neg/marker.bin: absent (a negative entry for 60 s)")
    data = content("neg-marker", 1234)
    faultlib.put_objects(srv, BUCKET, {"neg/marker.bin": data})
    # The relisting comes from a lookup of the other name once the TTL is
    # past (a readdir could replace the kernel's entries itself, with
    # readdirplus); the drop is sent by a notifier thread. Polled, for far
    # less than the 60 s of the negative entry.
    time.sleep(1.2)
    deadline = time.monotonic() + 15
    while True:
        os.stat(mnt / "neg/old.bin")
        got, e = try_read(mnt / "neg/marker.bin")
        if got == data or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    check(got == data, f"neg/marker.bin: opens and reads once relisted ({errname(e) if got is None else 'read'})")
    check("marker.bin" in os.listdir(mnt / "neg"), "neg/marker.bin: listed")
    check(s.unmount(m) == 0, "daemon exited 0")


def change_found_by_a_read(s, srv):
    """A read that finds its object changed (EIO) or deleted makes the next
    open see the bucket as it is, without waiting out the TTL (10 minutes
    here): before, every open until the TTL reached the old version's inode
    and got EIO on its uncached parts."""
    ttl_ms = 600_000
    size = 16 * MiB
    v1 = {"now/a.bin": content("now-a1", size), "now/gone.bin": content("now-gone1", size)}
    v2 = content("now-a2", size)
    faultlib.put_objects(srv, BUCKET, v1)
    faultlib.put_objects(srv, BUCKET, {"now/b.bin": content("now-b1", 1000), "now/c.bin": content("now-c1", 1000)})
    cfg = faultlib.config(s, name="igt-long-ttl.yaml", metadata={"ttl_ms": ttl_ms, "negative_ttl_ms": 500})
    m = s.mount(f"s3://{BUCKET}", args=["--config", str(cfg), "--endpoint", srv.endpoint,
                                         "--region", "us-east-1"])
    mnt = m.mountpoint
    far = size - 64 * 1024  # far from what the first read brings in (and any readahead)
    check(os.stat(mnt / "now/b.bin").st_size == 1000, "now/b.bin: stat before the change")
    check(os.stat(mnt / "now/c.bin").st_size == 1000, "now/c.bin: stat before the change")
    fds = {k: os.open(mnt / k, os.O_RDONLY) for k in v1}
    for k, fd in fds.items():
        check(os.pread(fd, 4096, 0) == v1[k][:4096], f"{k}: first 4 KiB read (v1)")
    faultlib.put_objects(srv, BUCKET, {"now/a.bin": v2})
    faultlib.delete_object(srv, BUCKET, "now/gone.bin")
    faultlib.put_objects(srv, BUCKET, {"now/b.bin": content("now-b2", 2000),   # changed, never read
                                       "now/c.bin": content("now-c2", 3000)})
    for k, fd in fds.items():
        try:
            b = os.pread(fd, 4096, far)
            raise harness.TestFailure(f"{k}: the old handle read {'v1' if b == v1[k][far:far + 4096] else 'WRONG'} "
                                      "bytes at its end: cached before the change, the test cannot see the change")
        except OSError as e:
            check(e.errno == errno.EIO, f"{k}: the old handle's uncached read fails with EIO ({errname(e.errno)})")
        os.close(fd)
    # The failed read has the directory listed again at once, in the
    # background: the other changes reach stat with no lookup there (before
    # 2026-11-28 only the next lookup relisted, and until then stat of
    # now/c.bin kept the old size, for up to the TTL). Polled.
    deadline = time.monotonic() + 30
    while os.stat(mnt / "now/c.bin").st_size != 3000 and time.monotonic() < deadline:
        time.sleep(0.1)
    check(os.stat(mnt / "now/c.bin").st_size == 3000,
          "now/c.bin: stat gives the new size after the failed read of another name, with no lookup there")
    # The next opens: v2, and ENOENT. Polled: the kernel's entry is dropped
    # by a notification sent right after the failed read.
    deadline = time.monotonic() + 30
    while True:
        got, e = try_read(mnt / "now/a.bin")
        gone = not (mnt / "now/gone.bin").exists()
        if (got == v2 and gone) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    w = which(got, {"v1": v1["now/a.bin"], "v2": v2}) if got is not None else errname(e)
    check(got == v2, f"now/a.bin: reopened after the failed read, reads {w} (TTL {ttl_ms // 1000} s)")
    check(gone, "now/gone.bin: absent after the failed read")
    # The relisting's other changes reach stat as they reach readdir: the
    # kernel's entries of changed names are dropped too (before 2026-11-28
    # stat kept the old size for the rest of the TTL, readdir the new).
    deadline = time.monotonic() + 30
    while os.stat(mnt / "now/b.bin").st_size != 2000 and time.monotonic() < deadline:
        time.sleep(0.1)
    check(os.stat(mnt / "now/b.bin").st_size == 2000, "now/b.bin: stat gives the relisted size, as readdir does")
    check(try_read(mnt / "now/b.bin")[0] == content("now-b2", 2000), "now/b.bin: reads its new bytes")
    check(s.unmount(m) == 0, "daemon exited 0")


def rolling_names(s, srv):
    """Names that roll (a checkpoint per step, the old ones deleted): once a
    relisting finds a name gone, its kernel entry is dropped (the kernel then
    forgets its inode) and the policy engine and the stream tree forget it.
    Before, every name ever opened kept an inode, an engine record and a
    tree node for good (a soak test: about 1.5 MB per 1,000 names)."""
    steps, keep = 150, 5
    cfg = faultlib.config(s, name="igt-roll.yaml", metadata={"ttl_ms": 0, "negative_ttl_ms": 0})
    m = s.mount(f"s3://{BUCKET}", args=["--config", str(cfg), "--endpoint", srv.endpoint,
                                         "--region", "us-east-1", "--cache-size", "64M"])
    mnt = m.mountpoint
    name = lambda i: f"roll/step-{i:04d}.bin"  # noqa: E731
    for i in range(steps):
        data = content(f"roll{i}", 64 * 1024 + i)
        faultlib.put_objects(srv, BUCKET, {name(i): data})
        got, e = try_read(mnt / name(i))
        if got != data:
            raise harness.TestFailure(f"{name(i)}: read {len(got) if got else errname(e)} instead of its bytes")
        if i >= keep:
            faultlib.delete_object(srv, BUCKET, name(i - keep))
    check(True, f"{steps} rolling names read right, each deleted {keep} steps later")
    listed = sorted(os.listdir(mnt / "roll"))
    check(listed == [name(i)[5:] for i in range(steps - keep, steps)], f"roll/ lists the {keep} live names")
    check(not (mnt / name(0)).exists(), "a deleted name is absent")
    # The kernel's forgets arrive after the invalidations: polled.
    deadline = time.monotonic() + 20
    while True:
        st = s.stats(m)
        if st["inodes"] <= keep + 4 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    eng = st["engine"]
    log(f"  inodes {st['inodes']}, engine files {eng['files']} (gone {eng['gone_files']}), "
        f"tree nodes {st['stream_tree_nodes']}, cached units {st['cache_units']}")
    check(st["inodes"] <= keep + 4, f"inodes: {st['inodes']} after {steps} names (root, roll/, {keep} live, "
          "the 'changed' test's leftovers at most)")
    check(eng["gone_files"] >= steps - keep, f"engine told of {eng['gone_files']} gone names")
    check(eng["files"] <= st["cache_units"] + keep + 2,
          f"engine records: {eng['files']} (live names, and gone ones whose units are still cached)")
    check(st["stream_tree_nodes"] <= keep + 8, f"stream tree nodes: {st['stream_tree_nodes']}")
    check(s.unmount(m) == 0, "daemon exited 0")


if __name__ == "__main__":
    harness.run_test("test_changed_objects", main)
