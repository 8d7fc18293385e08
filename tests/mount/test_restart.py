"""Persistence across a restart: mount the s3rver bucket, read every file,
unmount, remount with the same cache dir and read everything again. The
second pass must be served entirely from the SSD cache: zero backend GETs
(from `igtcache stats`) and byte-identical data, the small objects from
their records inline in the index. The first pass must fetch
each byte once (backend_get_bytes == dataset size)."""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import harness
import verify
from dataset import ensure_dataset
from harness import check, log

BUCKET = "igt-restart"


def main():
    ds = ensure_dataset()
    total = ds.total_bytes()
    with harness.Session("restart") as s:
        srv = s.start_s3rver(buckets=(BUCKET,))
        srv.upload_tree(BUCKET, ds.root, [e.path for e in ds.files])
        cache = s.mkdir("cache")
        args = ["--endpoint", srv.endpoint, "--region", "us-east-1", "--cache-size", "2G"]

        m1 = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=args)
        verify.check_whole_files(m1.mountpoint, ds)
        st1 = s.stats(m1)
        log(f"  pass 1 stats: {st1}")
        check(st1["backend_get_bytes"] >= total,
              f"pass 1 fetched at least the dataset ({st1['backend_get_bytes']} >= {total})")
        check(st1["backend_get_bytes"] == total,
              f"pass 1 fetched every byte exactly once (backend_get_bytes {st1['backend_get_bytes']} "
              f"== dataset {total})")
        check(st1["cache_used_bytes"] >= total,
              f"cache holds the dataset (cache_used_bytes {st1['cache_used_bytes']} >= {total})")
        check(st1["evictions"] == 0, "no evictions with a 2G limit")
        # Objects of at most cache.inline_max_bytes (4 KiB) are kept inline in
        # the index, not as unit files; they come back with it.
        small = sum(1 for e in ds.files if 0 < e.size <= 4096)
        check(small > 0 and st1["cache_inline_units"] >= small,
              f"the {small} objects of 1 B to 4 KiB kept inline ({st1['cache_inline_units']} inline units)")
        check(s.unmount(m1) == 0, "first daemon exited 0 after unmount")

        m2 = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=args)
        verify.check_tree(m2.mountpoint, ds, mtime_mode="sane")
        verify.check_whole_files(m2.mountpoint, ds)
        st2 = s.stats(m2)
        log(f"  pass 2 stats: {st2}")
        check(st2["backend_get_requests"] == 0,
              f"pass 2: zero backend GETs (got {st2['backend_get_requests']})")
        check(st2["backend_get_bytes"] == 0, f"pass 2: zero backend bytes (got {st2['backend_get_bytes']})")
        check(st2["cache_miss_bytes"] == 0, f"pass 2: zero cache-miss bytes (got {st2['cache_miss_bytes']})")
        check(st2["cache_hit_bytes"] >= total - sum(e.size for e in ds.files if e.size == 0),
              f"pass 2: cache hits cover the dataset ({st2['cache_hit_bytes']} bytes)")
        check(st2["cache_corruptions"] == 0, "pass 2: no corruptions")
        check(st2["cache_inline_units"] == st1["cache_inline_units"],
              f"pass 2: the inline units kept across the restart ({st2['cache_inline_units']})")
        log(f"  (info) pass 2 backend_list_requests={st2['backend_list_requests']} "
            f"backend_head_requests={st2['backend_head_requests']}")
        check(s.unmount(m2) == 0, "second daemon exited 0 after unmount")
        check("was last mounted with source" not in m2.proc.stderr_text(),
              "the same source again keeps its saved listings (no 'last mounted with source' warning)")

        # The same cache dir under another unit size would map unit indexes to
        # other bytes: the mount must refuse, naming the key and the dir.
        conf = s.mkdir("conf") / "unit2m.yaml"
        conf.write_text("cache:\n  unit_size_bytes: 2M\n")
        try:
            m3 = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=args + ["--config", str(conf)])
            s.unmount(m3)
            check(False, "a mount with another unit size on the same cache dir was refused")
        except harness.MountError as e:
            check(e.returncode not in (0, None) and "cache.unit_size_bytes" in e.stderr and str(cache) in e.stderr,
                  f"another unit size on the same cache dir is refused, naming key and dir: {e.stderr.strip()!r}")

        # The same cache dir mounted with another source: a bucket holding
        # some of the same names with other bytes, and a name of its own.
        # Before, the first bucket's saved listings were served for a TTL
        # (60 s): its names, and its cached bytes under the new names.
        other = BUCKET + "-b"
        srv.create_bucket(other)
        same_names = [e.path for e in ds.files if e.size > 0][:3]
        conn = srv.connection()
        want = {}
        for rel in same_names + ["only-in-b.txt"]:
            body = f"bucket b: {rel}\n".encode()
            st, _ = srv.request("PUT", f"/{other}/{harness.s3_quote(rel)}", body, conn)
            check(st == 200, f"PUT {rel} into {other}")
            want[rel] = body
        conn.close()
        m4 = s.mount(f"s3://{other}", cache_dir=cache, args=args)
        top = sorted(p.name for p in m4.mountpoint.iterdir())
        want_top = sorted({rel.split("/")[0] for rel in want})
        check(top == want_top, f"another source on the same cache dir lists its own names ({top} == {want_top})")
        for rel, body in want.items():
            got = m4.path(rel).read_bytes()
            check(got == body, f"{rel}: the new source's bytes ({got[:40]!r})")
        check(s.unmount(m4) == 0, "third daemon exited 0 after unmount")
        check("was last mounted with source" in m4.proc.stderr_text(),
              "the daemon logs that the cache dir's saved listings of the other source were dropped")


if __name__ == "__main__":
    harness.run_test("test_restart", main)
