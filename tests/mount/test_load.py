"""64 concurrent readers over mixed files (short in the suite; long in
scripts/soak.sh via IGT_LOAD_S).

A bucket on s3rver of small, medium and large objects, larger than the cache
(so inserts and evictions run all the time). 64 reader threads pick seeded
random objects and read them whole or at random (offset, length), checking
every byte. Sampled once a second: the daemon's RSS and its open file
descriptors. Checks: no wrong byte, no error, no reader stalled (deadlock
watchdog), RSS below RSS_BOUND (docs/RELIABILITY.md derives it), the fd count
back to its warm level once idle (no leak).
"""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import os
import random
import threading
import time
from pathlib import Path

import faultlib
import harness
from faultlib import content, rss_bytes
from harness import check, log

BUCKET = "igt-load"
MiB = 1 << 20
READERS = 64
DURATION_S = float(os.environ.get("IGT_LOAD_S", "25"))
STALL_S = 60          # a reader without progress for this long = deadlock
# Bound on the daemon's RSS (docs/RELIABILITY.md, "Memory"): 16 FUSE
# threads x 1 MiB read buffers + 64 in-flight coalesced GETs x 8 MiB
# (max_request_bytes) + RocksDB/allocator/curl overhead (~100 MiB).
RSS_BOUND = (16 * 1 + 64 * 8 + 128) * MiB
FD_SLACK = 8
# Open fds beyond the warm level: the HTTP pool's handles (backend.
# max_connections = 32), 3 fds each (the TCP socket and the socketpair
# libcurl keeps per handle to wake its event loop: seen with ss -xp; a
# reader's runs are fetched at once, so all 32 can be in use), one unit
# file per FUSE worker (fuse.threads = 16)
# and per prefetcher thread (8) being read or written at once, RocksDB
# table/WAL files (~10), and slack for libfuse's own (8). Unit files the
# store keeps open after a write or read (stats open_unit_files, at most 4096) are
# counted apart: fds below are the process's minus those (fd_kinds).
FD_GROWTH = 3 * 32 + 16 + 8 + 10 + 8
OPEN_UNIT_FILES_MAX = 4096
INDEX_OPEN_FILES_MAX = 256  # the RocksDB index's max_open_files (block_store.cc)


def fd_kinds(pid: int, cache_dir: Path) -> tuple[int, int, int, int]:
    """One pass over the process's fds: (fds other than unit files, sockets,
    files of the RocksDB index, unit files). Unit files (kept open by the
    store, bounded on their own) are told apart by path, not by subtracting
    the stats' open_unit_files, which changes between two reads under churn. The index
    keeps its table files open (at most max_open_files, 256), and its 4 MiB
    memtable flushes new ones under churn."""
    units, index = str(cache_dir / "units") + "/", str(cache_dir / "index")
    others = sockets = idx = unit = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith(units):
            unit += 1
            continue
        others += 1
        sockets += target.startswith("socket:")
        idx += target == index or target.startswith(index + "/")
    return others, sockets, idx, unit


def main():
    rng = random.Random(64)
    objs = {}
    for i in range(200):
        objs[f"small/s{i:03d}.bin"] = content(f"ls{i}", rng.randint(1, 200_000))
    for i in range(24):
        objs[f"medium/m{i:02d}.bin"] = content(f"lm{i}", rng.randint(MiB, 3 * MiB))
    for i in range(2):
        objs[f"large/l{i}.bin"] = content(f"ll{i}", 24 * MiB + i)
    total = sum(map(len, objs.values()))
    keys = sorted(objs)
    with harness.Session("load") as s:
        srv = s.start_s3rver(buckets=(BUCKET,))
        faultlib.put_objects(srv, BUCKET, objs)
        limit = total // 2
        m = s.mount(f"s3://{BUCKET}", args=["--endpoint", srv.endpoint, "--cache-size", str(limit)])
        cache_dir = Path(m.cache_dir)
        mnt = m.mountpoint
        log(f"  {len(objs)} objects, {total / 1e6:.0f} MB; cache limit {limit / 1e6:.0f} MB; "
            f"{READERS} readers for {DURATION_S:.0f}s")
        # Warm level of fds: after a first pass of concurrent reads.
        for k in keys[::10]:
            faultlib.try_read(mnt / k)
        fd0 = fd_kinds(m.pid, cache_dir)[0]

        stop = threading.Event()
        lock = threading.Lock()
        progress = [time.monotonic()] * READERS
        counts = [0] * READERS
        bytes_read = [0] * READERS
        failures = []

        def reader(i):
            r = random.Random(1000 + i)
            while not stop.is_set():
                k = r.choice(keys)
                want = objs[k]
                try:
                    with open(mnt / k, "rb", buffering=0) as f:
                        if r.random() < 0.5:  # half the reads bypass the page cache
                            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                        if r.random() < 0.3 or len(want) < 4096:
                            got = f.read()
                            exp = want
                        else:
                            off = r.randrange(len(want))
                            n = r.randint(1, 2 * MiB)
                            f.seek(off)
                            got = f.read(n)
                            exp = want[off:off + n]
                    if got != exp:
                        with lock:
                            failures.append(f"{k}: WRONG BYTES ({len(got)} vs {len(exp)})")
                        return
                    bytes_read[i] += len(got)
                except OSError as e:
                    with lock:
                        failures.append(f"{k}: {faultlib.errname(e.errno)}")
                    return
                counts[i] += 1
                progress[i] = time.monotonic()

        threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(READERS)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        rss_max, fd_max, samples = 0, 0, []
        try:
            while time.monotonic() - t0 < DURATION_S and not failures:
                time.sleep(1)
                rss, (fds, sockets, index, units) = rss_bytes(m.pid), fd_kinds(m.pid, cache_dir)
                rss_max, fd_max = max(rss_max, rss), max(fd_max, fds)
                samples.append((round(time.monotonic() - t0), rss // MiB, fds, sockets, index, units))
                stalled = [i for i in range(READERS) if time.monotonic() - progress[i] > STALL_S]
                if stalled:
                    raise harness.TestFailure(f"{len(stalled)} readers made no progress for {STALL_S}s "
                                              f"(deadlock?); samples {samples[-5:]}")
        finally:
            stop.set()
        for t in threads:
            t.join(STALL_S)
        hung = sum(t.is_alive() for t in threads)
        elapsed = time.monotonic() - t0
        log(f"  samples (s, RSS MiB, fds but unit files, sockets, index files, unit files): {samples[:3]} ... {samples[-3:]}")
        check(not failures, f"no wrong bytes, no errors ({failures[:3]})")
        check(hung == 0, "every reader finished (no deadlock)")
        n, b = sum(counts), sum(bytes_read)
        st = s.stats(m)
        check(n > READERS, f"{n} reads, {b / 1e6:.0f} MB in {elapsed:.0f}s ({b / 1e6 / elapsed:.0f} MB/s); "
                           f"{st['evictions']} evictions, {st['singleflight_waits']} single-flight waits")
        check(rss_max < RSS_BOUND, f"peak RSS {rss_max / MiB:.0f} MiB < bound {RSS_BOUND / MiB:.0f} MiB")
        time.sleep(2)  # idle: handles released
        fd_end, sockets_end, index_end, _ = fd_kinds(m.pid, cache_dir)
        check(st.get("open_unit_files", 0) <= OPEN_UNIT_FILES_MAX,
              f"unit files kept open: {st.get('open_unit_files')} <= {OPEN_UNIT_FILES_MAX}")
        # Kept open, plus one being read or written per FUSE worker (16) and
        # prefetcher thread (8).
        check(max(x[5] for x in samples) <= OPEN_UNIT_FILES_MAX + 16 + 8,
              f"unit file fds bounded: peak {max(x[5] for x in samples)} <= {OPEN_UNIT_FILES_MAX} + 16 + 8")
        # The HTTP pool keeps up to backend.max_connections (32) handles open.
        # The pool's handles may still be growing a quarter into the run
        # (each reader's runs of misses are fetched at once): the leak check
        # is on the fds other than sockets, which are bounded on their own.
        fd_quarter, sockets_quarter, index_quarter = samples[len(samples) // 4][2:5]
        check(max(x[3] for x in samples) <= 3 * 32 + FD_SLACK,
              f"sockets bounded: peak {max(x[3] for x in samples)} <= 3 x 32 pooled handles + {FD_SLACK}")
        check(fd_max <= fd0 + FD_GROWTH, f"fds bounded: peak {fd_max} <= warm {fd0} + {FD_GROWTH}")
        check(max(x[4] for x in samples) <= INDEX_OPEN_FILES_MAX + FD_SLACK,
              f"index files bounded: peak {max(x[4] for x in samples)} <= {INDEX_OPEN_FILES_MAX} + {FD_SLACK}")
        others_end, others_quarter = fd_end - sockets_end - index_end, fd_quarter - sockets_quarter - index_quarter
        check(others_end <= others_quarter + FD_SLACK,
              f"fds other than sockets and index files stable: {others_end} once idle vs "
              f"{others_quarter} a quarter into the run (no leak)")
        check(st["cache_corruptions"] == 0 and st["read_errors"] == 0, "no corruption, no read error")
        check(s.unmount(m) == 0, "daemon exited 0")


if __name__ == "__main__":
    harness.run_test("test_load", main)
