"""16 threads read seeded, overlapping ranges of the same few files (two large
multi-unit objects, a few medium ones, small whole-unit ones) through an
s3rver-backed mount, all starting together. Checks: every read returns the
right bytes, and the backend saw each unit exactly once: the ranges together
cover every byte of every object in the bucket, so backend_get_bytes must
equal the sum of the object sizes (1 MiB units, small objects whole). Any unit
fetched twice (no single-flight) would push it above; the bucket holds only
these objects, so no prefetch can legitimately fetch anything else."""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import os
import random
import threading

import harness
from dataset import UNIT, ensure_dataset
from harness import check, log

BUCKET = "igt-concurrency"
THREADS = 16
SEED = 4242


def pick_files(ds):
    by = ds.by_path()
    names = ["big/big_64MiB.bin", "big/with space 20MiB.bin", "edge/three_units_plus_17.bin",
             "edge/unit.bin", "edge/unit_plus_1.bin", "edge/one_byte.bin"]
    names += [e.path for e in ds.files if e.path.startswith("medium/")][:4]
    # Small whole-unit objects at the root: s3rver 3.7.1 hides directories
    # that hold only sub-directories (see dataset.py), so the subset keeps
    # every directory with an object of its own.
    names += [e.path for e in ds.files if e.path.startswith("flat_") and e.size > 0][:6]
    return [by[n] for n in names]


def thread_plans(files, rng):
    """Per thread a shuffled list of (entry, offset, length). The union of all
    ranges covers every byte of every file; random extra ranges overlap them."""
    plans = [[] for _ in range(THREADS)]
    for e in files:
        # A coverage sweep in random-sized pieces, dealt to random threads.
        off = 0
        while off < e.size:
            ln = min(e.size - off, rng.randint(64 << 10, 3 * UNIT))
            plans[rng.randrange(THREADS)].append((e, off, ln))
            off += ln
        # Overlapping extras: every thread hits the same hot areas too.
        n_units = max(1, (e.size + UNIT - 1) // UNIT)
        for _ in range(5 * n_units + 16):
            o = rng.randrange(0, max(e.size, 1))
            plans[rng.randrange(THREADS)].append((e, o, rng.randint(1, 2 * UNIT)))
    hot = files[0]
    for t in range(THREADS):  # all threads start on the same unit of the big file
        plans[t].insert(0, (hot, rng.randrange(0, UNIT), rng.randint(1, 2 * UNIT)))
        rest = plans[t][1:]
        rng.shuffle(rest)
        plans[t][1:] = rest
    return plans


def main():
    ds = ensure_dataset()
    files = pick_files(ds)
    total = sum(e.size for e in files)
    units = sum(max(1, (e.size + UNIT - 1) // UNIT) for e in files)
    with harness.Session("concurrency") as s:
        srv = s.start_s3rver(buckets=(BUCKET,))
        srv.upload_tree(BUCKET, ds.root, [e.path for e in files])
        m = s.mount(f"s3://{BUCKET}", args=["--endpoint", srv.endpoint, "--region", "us-east-1",
                                             "--cache-size", "1G"])
        # Stat everything first so metadata traffic is done before the counters matter.
        for e in files:
            os.stat(m.mountpoint / e.path)
        before = s.stats(m)
        check(before["backend_get_requests"] == 0, "no data fetched before the reads start")

        plans = thread_plans(files, random.Random(SEED))
        errors, lock = [], threading.Lock()
        barrier = threading.Barrier(THREADS)
        src = {e.path: (ds.source_path(e.path)).read_bytes() for e in files}

        # Odd threads bypass the page cache (O_DIRECT) so their reads reach
        # the daemon even when another thread's read already filled the
        # page: more concurrent misses on the same units.
        direct = False
        try:
            fd = os.open(m.mountpoint / files[0].path, os.O_RDONLY | os.O_DIRECT)
            os.close(fd)
            direct = True
        except OSError:
            pass
        log(f"  O_DIRECT for odd threads: {'yes' if direct else 'not supported'}")

        def worker(t):
            fds = {}
            flags = os.O_RDONLY | (os.O_DIRECT if direct and t % 2 else 0)
            try:
                barrier.wait()
                for e, off, ln in plans[t]:
                    fd = fds.get(e.path)
                    if fd is None:
                        fd = fds[e.path] = os.open(m.mountpoint / e.path, flags)
                    got = os.pread(fd, ln, off)
                    want = src[e.path][off:off + ln]
                    if got != want:
                        with lock:
                            errors.append((t, e.path, off, ln, len(got), len(want)))
            except Exception as ex:  # reported below, never lost
                with lock:
                    errors.append((t, repr(ex)))
            finally:
                for fd in fds.values():
                    os.close(fd)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        n_reads = sum(len(p) for p in plans)
        check(not errors, f"{n_reads} overlapping reads by {THREADS} threads returned the right bytes"
                          + (f"; errors: {errors[:5]}" if errors else ""))
        after = s.stats(m)
        log(f"  stats: {after}")
        got_bytes = after["backend_get_bytes"] - before["backend_get_bytes"]
        got_reqs = after["backend_get_requests"] - before["backend_get_requests"]
        check(got_bytes == total,
              f"backend_get_bytes {got_bytes} == sum of the unit ranges touched {total} "
              f"({len(files)} objects, {units} units): each unit fetched once")
        check(0 < got_reqs <= units, f"backend GETs {got_reqs} <= units {units} (coalescing allowed)")
        log(f"  (info) singleflight_waits={after.get('singleflight_waits')} "
            f"cache_miss_units={after['cache_miss_units']} cache_hit_units={after['cache_hit_units']}")
        check(s.unmount(m) == 0, "daemon exited 0 after unmount")


if __name__ == "__main__":
    harness.run_test("test_concurrency", main)
