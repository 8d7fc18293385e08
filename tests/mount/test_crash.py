"""kill -9 of the daemon while it fills the cache, and damaged unit files.

Part 1 (ROUNDS rounds, seeded): mount a local source on the same cache dir,
start 6 readers over the files in a seeded order (the cache is smaller than
the data, so inserts and evictions both run), SIGKILL the daemon after a
seeded random delay, clean up the dead mount. After every remount, before
any read: the index and the unit files agree (`cache_units` less
`cache_inline_units` in stats equals the unit files on disk, nothing left in
tmp/) — no orphans piling up, no entry without its file; the 700-byte
objects are kept inline in the index (cache.inline_max_bytes), so kills
land in their record writes too. Every byte any reader got is checked. At the end
every file is read whole through a fresh mount, byte for byte, with
cache_corruptions == 0.

Part 2: damaged unit files — one swapped with another of the same size, one
with a flipped data byte, one truncated, one emptied: detected (at start or
on read), dropped, refetched, never served.
"""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import os
import random
import signal
import threading
import time
from pathlib import Path

import faultlib
import harness
from faultlib import content, try_read
from harness import check, log

ROUNDS = int(os.environ.get("IGT_CRASH_ROUNDS", "20"))
SEED = int(os.environ.get("IGT_CRASH_SEED", "606"))
MiB = 1 << 20


def unit_files(cache: Path) -> list[Path]:
    root = cache / "units"
    return sorted((Path(d) / f for d, _, fs in os.walk(root) for f in fs), key=str)


def file_units(st: dict) -> int:
    """Units the index holds as unit files (the 700-byte objects are kept
    inline in the index: cache.inline_max_bytes)."""
    return st["cache_units"] - st["cache_inline_units"]


def tmp_files(cache: Path) -> list[Path]:
    root = cache / "tmp"
    return [Path(d) / f for d, _, fs in os.walk(root) for f in fs] if root.is_dir() else []


def main():
    rng = random.Random(SEED)
    files = {}
    for i in range(120):
        size = rng.choice([700, 20_000, 180_000, 900_000, MiB + 3, 2 * MiB + 777, 3 * MiB])
        files[f"d{i % 7}/f{i:03d}.bin"] = content(f"crash{i}", size)
    total = sum(len(v) for v in files.values())
    with harness.Session("crash") as s:
        src = s.mkdir("src")
        for k, v in files.items():
            (src / k).parent.mkdir(parents=True, exist_ok=True)
            (src / k).write_bytes(v)
        cache = s.mkdir("cache")
        limit = total * 2 // 3  # evictions happen too
        args = ["--cache-size", str(limit)]
        source = f"file://{src}"
        log(f"  {len(files)} files, {total / 1e6:.1f} MB; cache limit {limit / 1e6:.1f} MB; "
            f"{ROUNDS} rounds, seed {SEED}")
        keys = sorted(files)
        kills_mid_fill = 0
        for rnd in range(ROUNDS):
            m = s.mount(source, cache_dir=cache, args=args)
            st = s.stats(m)
            on_disk = len(unit_files(cache))
            if file_units(st) != on_disk or tmp_files(cache):
                raise harness.TestFailure(
                    f"round {rnd}: after restart the index has {file_units(st)} unit files "
                    f"({st['cache_inline_units']} more units inline) but {on_disk} unit files are on disk, "
                    f"{len(tmp_files(cache))} temp files")
            if st["cache_used_bytes"] > limit:
                raise harness.TestFailure(f"round {rnd}: cache_used_bytes {st['cache_used_bytes']} > {limit}")
            order = keys[:]
            rng.shuffle(order)
            stop = threading.Event()
            wrong = []
            done = [0]

            def reader(part):
                # Loops until the kill: the cache is smaller than the data,
                # so every pass inserts and evicts.
                for k in part * 100:
                    if stop.is_set():
                        return
                    got, e = try_read(m.mountpoint / k)
                    if got is not None:
                        if got != files[k]:
                            wrong.append(k)
                        done[0] += 1
                    elif e:
                        return  # the daemon is gone (ENOTCONN/EIO): expected after the kill

            threads = [threading.Thread(target=reader, args=(order[i::6],)) for i in range(6)]
            for t in threads:
                t.start()
            # Wait (bounded) until the daemon has started inserting, then kill
            # it at a random moment: on a loaded machine the first fetches of
            # a round can take longer than any fixed pre-kill sleep.
            deadline = time.monotonic() + 30
            while True:
                pre = s.stats(m)
                busy = pre["cache_insert_units"] + pre["evictions"]
                if busy > 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.5))
            os.kill(m.pid, signal.SIGKILL)
            stop.set()
            for t in threads:
                t.join(60)
                if t.is_alive():
                    raise harness.TestFailure(f"round {rnd}: a reader hangs after the daemon was killed")
            rc = s.unmount(m, quiet=True)
            if rc != -signal.SIGKILL:
                raise harness.TestFailure(f"round {rnd}: daemon exit {rc}, expected SIGKILL")
            if wrong:
                raise harness.TestFailure(f"round {rnd}: WRONG BYTES read from {wrong[:5]}")
            if busy > 0:
                kills_mid_fill += 1
            log(f"  round {rnd}: killed after {done[0]} whole-file reads; {on_disk} unit files and "
                f"{st['cache_inline_units']} inline units at start, "
                f"{pre['cache_insert_units']} inserts and {pre['evictions']} evictions so far")
        check(True, f"{ROUNDS} kill -9 rounds: every remount found index == unit files, no temp "
                    f"files; no wrong byte read ({kills_mid_fill} kills mid-fill)")
        # Every round checks index, files and bytes; most kills must also land while
        # the daemon is inserting/evicting.
        check(kills_mid_fill >= ROUNDS * 3 // 4,
              f"{kills_mid_fill} of {ROUNDS} kills hit a daemon busy inserting/evicting (>= 3/4)")

        m = s.mount(source, cache_dir=cache, args=args)
        st0 = s.stats(m)
        check(file_units(st0) == len(unit_files(cache)),
              f"final remount: index {file_units(st0)} == {len(unit_files(cache))} unit files")
        check(st0["cache_inline_units"] > 0, f"the small files' units inline ({st0['cache_inline_units']})")
        bad = [k for k in keys if try_read(m.mountpoint / k)[0] != files[k]]
        st = s.stats(m)
        check(not bad, f"every file byte-exact after {ROUNDS} crashes ({bad[:3]})")
        check(st["cache_corruptions"] == 0 and st["cache_read_errors"] == 0,
              f"no corrupt unit found (corruptions {st['cache_corruptions']}, "
              f"read errors {st['cache_read_errors']})")
        check(s.unmount(m) == 0, "daemon exited 0")

        # Part 2: damaged unit files.
        units = unit_files(cache)
        by_size = {}
        for p in units:
            by_size.setdefault(p.stat().st_size, []).append(p)
        pair = next(v for v in by_size.values() if len(v) >= 2)
        a, b = pair[0], pair[1]
        tmp = a.with_name(a.name + ".swap")
        os.rename(a, tmp)
        os.rename(b, a)
        os.rename(tmp, b)
        others = [p for p in units if p not in (a, b) and p.stat().st_size > 4096]
        flip, trunc, empty = others[0], others[1], others[2]
        with open(flip, "r+b") as f:
            f.seek(-100, os.SEEK_END)
            x = f.read(1)
            f.seek(-100, os.SEEK_END)
            f.write(bytes([x[0] ^ 0x01]))
        os.truncate(trunc, trunc.stat().st_size - 1)
        os.truncate(empty, 0)
        log(f"  swapped {a.name} <-> {b.name}; flipped a bit in {flip.name}; truncated {trunc.name}; "
            f"emptied {empty.name}")
        # A cache larger than the data from here on: no eviction, so every
        # damaged unit is either dropped at start or read (and caught).
        args = ["--cache-size", str(total * 2)]
        m = s.mount(source, cache_dir=cache, args=args)
        st0 = s.stats(m)
        bad = [k for k in keys if try_read(m.mountpoint / k)[0] != files[k]]
        st = s.stats(m)
        check(not bad, f"every file byte-exact with damaged unit files ({bad[:3]})")
        log(f"  units at start {st0['cache_units']} (was {len(units)}); corruptions found on read "
            f"{st['cache_corruptions']}")
        check(len(units) - file_units(st0) == 4,
              "swapped, truncated and emptied units dropped at start-up (header / size check)")
        check(st["cache_corruptions"] == 1, "the flipped bit caught by the data checksum on read")
        check(s.unmount(m) == 0, "daemon exited 0")
        # And the refetched units are healthy: a last mount reads them from the cache.
        m = s.mount(source, cache_dir=cache, args=args)
        for k in keys:
            if try_read(m.mountpoint / k)[0] != files[k]:
                raise harness.TestFailure(f"{k}: wrong bytes on the last mount")
        st = s.stats(m)
        check(st["cache_corruptions"] == 0, "last mount: no corruption left")
        check(s.unmount(m) == 0, "daemon exited 0")


if __name__ == "__main__":
    harness.run_test("test_crash", main)
