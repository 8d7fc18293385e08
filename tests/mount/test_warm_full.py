"""`igtcache warm` stops early when the mount's cache takes no writes.

The cache dir is on a small tmpfs of our own (root), filled by another file,
so every insert fails. The bucket is s3rver behind the project's cloud proxy
at 512 KB/s per connection, so warming 64 MiB takes several seconds. warm looks at the mount's
counters every second: two seconds or more without an insert, in which GETs
ended and writes failed, stop it. It must exit 1 saying it stopped early, and
leave most of the data unread. Before (a black-box tester's finding), warm
read everything from the source for nothing.
"""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import os
import re
import subprocess
import time

import faultlib
import harness
from faultlib import content
from harness import check, log

BUCKET = "igt-warmfull"
MiB = 1 << 20


def main():
    if os.geteuid() != 0:
        raise harness.TestFailure("needs root (mounts a tmpfs for the cache dir)")
    objs = {f"data/f{i:02d}.bin": content(f"wf{i}", MiB) for i in range(64)}
    with harness.Session("warm_full") as s:
        srv = s.start_s3rver(buckets=(BUCKET,))
        faultlib.put_objects(srv, BUCKET, objs)
        proxy = faultlib.start_proxy(s, srv.endpoint, ttfb_ms=20, bandwidth="512K")
        vol = s.mkdir("vol")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(vol)], check=True)
        m = None
        try:
            os.chmod(vol, 0o700)
            cfg = faultlib.config(s, cache={"max_bytes": "80M", "min_free_ratio": 0.02})
            m = s.mount(f"s3://{BUCKET}", cache_dir=vol / "cache",
                        args=["--config", str(cfg), "--endpoint", proxy.endpoint, "--region", "us-east-1"])
            faultlib.fill(vol / "filler")  # the volume full to the last byte
            t0 = time.monotonic()
            r = subprocess.run([harness.igtcache_bin(), "warm", "-q", str(m.mountpoint / "data")],
                               capture_output=True, text=True, env=s.igt_env(), timeout=300)
            took = time.monotonic() - t0
            log(f"  warm: exit {r.returncode} in {took:.1f} s: {r.stderr.strip()[-300:]!r}")
            st = s.stats(m)
            fetched = st["backend_get_bytes"]
            check(r.returncode == 1 and "stopped early" in r.stderr,
                  f"warm onto a full cache volume exits 1 saying it stopped early (exit {r.returncode})")
            # The summary counts each file once: read, failed or not read
            # (before, files not read were counted as read too).
            summary = re.search(r"warm: read (\d+) files?,.*?(?:, (\d+) failed)?(?:, (\d+) not read)?;", r.stdout)
            check(summary is not None, f"warm prints its summary ({r.stdout.strip()[-300:]!r})")
            counts = [int(g or 0) for g in summary.groups()]
            check(sum(counts) == 64 and counts[2] > 0,
                  f"the summary's read, failed and not-read files add up to the 64 files ({r.stdout.strip()!r})")
            check(fetched < 48 * MiB, f"much of the 64 MiB was not read for nothing ({fetched / MiB:.1f} MiB fetched)")
            check(st["cache_insert_units"] == 0, "nothing was cached (the volume is full)")
        finally:
            if m is not None:
                s.unmount(m, quiet=True)
            subprocess.run(["umount", str(vol)], capture_output=True)


if __name__ == "__main__":
    harness.run_test("test_warm_full", main)
