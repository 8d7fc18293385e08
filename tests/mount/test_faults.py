"""Backend faults through scripts/cloudproxy.py between igtcache and s3rver.

For every fault kind (503 SlowDown, 500, connection reset mid-body, stall past
the request timeout, truncated body, wrong Content-Length both ways, an S3
error document with status 200):
  * a short burst (fewer faults than the retry budget): every read returns
    exactly the object's bytes, and `igtcache stats` counts the retries;
  * a persistent fault: every read fails with EIO (never wrong bytes) within
    a bounded time; once the fault stops, the same reads return the right
    bytes without a remount (nothing wrong was cached, no error was cached).
Finally the proxy is taken down and the mount restarted on the same cache
dir (it comes up, with a warning), and every object read successfully
before is served from the cache, byte for byte (what was cached during the
faults is right), with cache_corruptions == 0; then restarted again with
the bucket stalled (one probe attempt, no retries before it comes up).

The retry budget is small (config below) so the failing phases stay short.
"""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import errno
import http.client
import os
import random
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import faultlib
import harness
from faultlib import content, errname, try_read
from harness import check, log

BUCKET = "igt-faults"
MiB = 1 << 20
MAX_RETRIES = 3
REQUEST_TIMEOUT_MS = 3000  # a whole GET on a loaded machine; under the stall fault's 20 s

# (name, rule) — `after_bytes` matters for the mid-body faults.
KINDS = [
    ("slowdown", {"kind": "status", "status": 503, "code": "SlowDown"}),
    ("internal", {"kind": "status", "status": 500, "code": "InternalError"}),
    ("reset", {"kind": "reset", "after_bytes": 70000}),
    # A stall mid-body, early: curl's speed is an average over its last ~5 s,
    # so with 30 KB sent first a stall was seen only after ~8 s, and two of
    # them could outrun the retry deadline on a slow machine.
    ("stall", {"kind": "stall", "after_bytes": 1000, "stall_s": 20}),
    ("truncate", {"kind": "truncate", "after_bytes": 50000}),
    ("short_length", {"kind": "bad_length", "length_delta": -7}),
    ("long_length", {"kind": "bad_length", "length_delta": 4096}),
    ("error_200", {"kind": "error_200", "code": "InternalError"}),
]
PERSISTENT = ["slowdown", "reset", "stall", "truncate", "short_length", "error_200"]


def objects_for(prefix: str) -> dict[str, bytes]:
    # A multi-unit object (coalesced ranged GETs), and small whole-unit ones.
    objs = {f"{prefix}/big.bin": content(prefix + "big", 2 * MiB + 12345)}
    for i, size in enumerate((150_000, 300_001, 90_000)):
        objs[f"{prefix}/small_{i}.bin"] = content(f"{prefix}{i}", size)
    return objs


def read_checked(mnt, key, want, rng):
    """Whole file, then two random ranges. Returns (ok, errno). Raises on a
    wrong byte: that must never happen, whatever the fault."""
    got, e = try_read(mnt / key)
    if got is not None and got != want:
        raise harness.TestFailure(f"{key}: WRONG BYTES ({len(got)} read, {len(want)} expected)")
    if e:
        return False, e
    for _ in range(2):
        off = rng.randrange(len(want))
        n = rng.randrange(1, 300_000)
        faultlib.drop_page_cache(mnt / key)
        got, e = try_read(mnt / key, off, n)
        if got is not None and got != want[off:off + n]:
            raise harness.TestFailure(f"{key} [{off}, +{n}): WRONG BYTES")
        if e:
            return False, e
    return True, 0


def main():
    rng = random.Random(6)
    with harness.Session("faults") as s:
        srv = s.start_s3rver(buckets=(BUCKET,))
        objs = {}
        for name, _ in KINDS:
            objs.update(objects_for(f"burst_{name}"))
        for name in PERSISTENT:
            objs.update(objects_for(f"persist_{name}"))
        cold = "cold/never_read.bin"  # listed, never read before part 3
        objs[cold] = content("cold", 200_000)
        faultlib.put_objects(srv, BUCKET, objs)
        proxy = faultlib.start_proxy(s, srv.endpoint, ttfb_ms=1)
        # The proxy's own soundness: a request on a kept-alive connection the
        # upstream closed while idle (Node closes them after ~5 s) is sent
        # again, not answered 502 (which a client counts as a backend
        # failure: a metrics tester's 45 spurious retries in one mount).
        host, port = proxy.endpoint.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            codes = []
            for i in range(2):
                if i:
                    time.sleep(6)
                conn.request("HEAD", f"/{BUCKET}/{cold}")
                r = conn.getresponse()
                r.read()
                codes.append(r.status)
        finally:
            conn.close()
        errors = proxy.stats()["upstream_errors"]
        check(502 not in codes and errors == 0,
              f"proxy: a request after the upstream closed an idle connection is answered ({codes}, "
              f"{errors} upstream errors)")
        cfg = faultlib.config(
            s, backend={"max_retries": MAX_RETRIES, "retry_base_ms": 20, "retry_deadline_ms": 60000,
                        "request_timeout_ms": REQUEST_TIMEOUT_MS, "connect_timeout_ms": 1000},
            metadata={"ttl_ms": 600000})
        cache = s.mkdir("cache")
        args = ["--config", str(cfg), "--endpoint", proxy.endpoint, "--region", "us-east-1"]
        m = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=args)
        mnt = m.mountpoint
        listed = {str(p.relative_to(mnt)) for p in mnt.rglob("*") if p.is_file()}
        check(listed == set(objs), f"{len(objs)} objects listed through the proxy")

        good = set()  # keys read correctly at least once (so cached)
        # 1) Bursts shorter than the retry budget: correct bytes, retries counted.
        for name, rule in KINDS:
            before = s.stats(m)
            proxy.faults(dict(rule, count=MAX_RETRIES - 1, methods=["GET"],
                              path_contains=f"burst_{name}/"))
            keys = sorted(k for k in objs if k.startswith(f"burst_{name}/"))
            t0 = time.monotonic()
            for k in keys:
                ok, e = read_checked(mnt, k, objs[k], rng)
                if not ok:
                    raise harness.TestFailure(f"{name}: {k} failed with {errname(e)} during a burst of "
                                              f"{MAX_RETRIES - 1} faults (retry budget {MAX_RETRIES})")
                good.add(k)
            after = s.stats(m)
            fired = proxy.control("GET", "/faults")["rules"][0].get("fired", 0)
            retries = after["backend_retries"] - before["backend_retries"]
            check(fired >= 1 and retries >= fired,
                  f"{name}: {len(keys)} objects byte-exact through a burst of {fired} faults, "
                  f"{retries} retries counted in stats ({time.monotonic() - t0:.1f}s)")
        proxy.clear()

        # 2) Persistent faults: EIO within a bounded time, never wrong bytes;
        # right bytes as soon as the fault stops (no remount).
        for name in PERSISTENT:
            rule = dict(KINDS)[name]
            keys = sorted(k for k in objs if k.startswith(f"persist_{name}/"))
            proxy.faults(dict(rule, count=-1, methods=["GET"], path_contains=f"persist_{name}/"))
            before = s.stats(m)
            t0 = time.monotonic()
            with ThreadPoolExecutor(4) as ex:
                res = list(ex.map(lambda k: try_read(mnt / k), keys))
            took = time.monotonic() - t0
            errs = sorted({errname(e) for _, e in res})
            wrong = [k for k, (b, _) in zip(keys, res) if b is not None and b != objs[k]]
            if wrong:
                raise harness.TestFailure(f"{name}: WRONG BYTES served for {wrong}")
            check(all(b is None and e == errno.EIO for b, e in res),
                  f"{name}: all {len(keys)} reads failed with EIO ({errs}) in {took:.1f}s")
            # Bound: each GET has at most MAX_RETRIES+1 attempts of at most
            # REQUEST_TIMEOUT_MS, plus backoff; readers run 4 at a time and the
            # kernel may retry a failed readahead once with a plain read.
            bound = 2 * len(keys) * (MAX_RETRIES + 1) * (REQUEST_TIMEOUT_MS / 1000 + 0.5)
            check(took < bound, f"{name}: failing took {took:.1f}s < {bound:.0f}s")
            # The kernel reads a page of a failed readahead again at once: that
            # read fails without asking the bucket (else it would wait out the
            # retry budget a second time).
            now = s.stats(m)
            repeated = now["read_failures_repeated"] - before["read_failures_repeated"]
            check(repeated >= 1, f"{name}: {repeated} kernel retries of a failed page failed at once")
            # Each reader saw one EIO: read_errors counts it once, not again
            # for the kernel's retry (a tester: 10 failed reads counted 20).
            errors = now["read_errors"] - before["read_errors"]
            check(1 <= errors <= len(keys), f"{name}: {errors} read errors counted for {len(keys)} failed reads")
            proxy.clear()
            for k in keys:
                ok, e = read_checked(mnt, k, objs[k], rng)
                check(ok, f"{name}: {k} byte-exact once the fault stopped") if k == keys[0] else None
                if not ok:
                    raise harness.TestFailure(f"{name}: {k} still fails ({errname(e)}) after the fault stopped")
                good.add(k)
        st = s.stats(m)
        log(f"  stats: retries {st['backend_retries']} backend_errors {st['backend_errors']} "
            f"read_errors {st['read_errors']} corruptions {st['cache_corruptions']}")
        check(st["backend_errors"] > 0 and st["read_errors"] > 0, "failures counted in stats")
        check(st["cache_corruptions"] == 0 and st["cache_write_errors"] == 0,
              "no cache corruption or write error")
        pstats = proxy.stats()
        log(f"  proxy: {pstats['requests']} requests, faults {pstats['faults']}")
        check(s.unmount(m) == 0, "daemon exited 0")

        # 3) Restart on the same cache with the backend gone (a crash or a
        # reboot during an outage): the mount comes up on what the cache dir
        # holds, says so, and everything read before is served from the
        # cache, byte-exact.
        proxy.down()
        m = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=args)
        warned = [ln for ln in m.proc.stderr_text().splitlines() if "did not answer" in ln]
        check(len(warned) == 1, f"mounted with the backend down, with a warning ({warned[-1:]!r})")
        bad = []
        for k in sorted(good):
            got, e = try_read(m.mountpoint / k)
            if got != objs[k]:
                bad.append((k, errname(e) if e else f"{len(got)} wrong bytes"))
        check(not bad, f"backend down: all {len(good)} objects served from the cache byte-exact ({bad[:3]})")
        st = s.stats(m)
        check(st["cache_corruptions"] == 0 and st["backend_get_requests"] == 0,
              f"cache verified clean (corruptions {st['cache_corruptions']}, "
              f"GETs {st['backend_get_requests']})")
        # What is not cached fails after one attempt (outage mode), not
        # after the retry budget; the first answer ends outage mode.
        check(st["backend_outage"] == 1, "outage mode from the start (stats backend_outage 1)")
        got, e = try_read(m.mountpoint / cold)
        st = s.stats(m)
        check(got is None and e == errno.EIO and st["backend_retries"] == 0,
              f"backend down: an uncached object fails with EIO after one attempt, no retries "
              f"({errname(e) if e else 'read'}, {st['backend_retries']} retries)")
        proxy.up()
        # Another process: this one's failed read is remembered for 3 s.
        r = subprocess.run(["cat", str(m.mountpoint / cold)], capture_output=True)
        check(r.returncode == 0 and r.stdout == objs[cold],
              f"backend back: the uncached object is read (cat exit {r.returncode} {r.stderr[-200:]!r})")
        check(s.stats(m)["backend_outage"] == 0, "outage mode ended by the first answer")
        check(s.unmount(m) == 0, "daemon exited 0")

        # 4) Restart with the bucket stalled (it accepts, then never answers):
        # one short probe, no retries, then the mount comes up on the cache
        # (it waited out the whole retry budget first).
        proxy.faults({"kind": "stall", "after_bytes": 0, "stall_s": 20, "count": -1})
        m = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=args)
        warned = [ln for ln in m.proc.stderr_text().splitlines() if "did not answer" in ln]
        check(len(warned) == 1, f"mounted with the bucket stalled, with a warning ({warned[-1:]!r})")
        st = s.stats(m)  # before any lookup: only the probe has asked the bucket
        check(st["backend_retries"] == 0, f"one probe attempt, no retries ({st['backend_retries']})")
        k = sorted(good)[0]
        got, e = try_read(m.mountpoint / k)
        check(got == objs[k], f"bucket stalled: {k} served from the cache ({errname(e) if e else 'ok'})")
        proxy.clear()
        check(s.unmount(m) == 0, "daemon exited 0")

        # 5) A listing reply one byte longer than its Content-Length says (a
        # proxy or server that miscounts): the listing is retried, and the
        # byte left on the connection never reaches another request. Its
        # connection was reused before 2026-11-30: the next request on it
        # (the retry, or any GET) read that byte as its reply ("Received
        # HTTP/0.9") and failed at once with EIO (a tester's finding).
        short_ttl = faultlib.config(
            s, "igt-short-ttl.yaml", backend={"max_retries": MAX_RETRIES, "retry_base_ms": 20, "retry_deadline_ms": 60000,
                        "request_timeout_ms": REQUEST_TIMEOUT_MS, "connect_timeout_ms": 1000},
            metadata={"ttl_ms": 1000})
        short_args = ["--config", str(short_ttl), "--endpoint", proxy.endpoint, "--region", "us-east-1"]
        for i in range(4):
            m = s.mount(f"s3://{BUCKET}", cache_dir=s.mkdir(f"cache-list{i}"), args=short_args)
            time.sleep(1.3)  # past the TTL: the next lookup refreshes the root's listing
            proxy.faults({"kind": "bad_length", "length_delta": -1, "count": 1, "methods": ["GET"],
                          "path_contains": "list-type"})
            names, failed = set(), []
            for d in ("cold", "persist_reset", "burst_slowdown"):  # `ls cold` first: a lookup in the root
                try:
                    names |= {f"{d}/{n}" for n in os.listdir(m.mountpoint / d)}
                except OSError as e:
                    failed.append(f"ls {d}: {errname(e.errno)}")
            for k in ("cold/never_read.bin", "burst_slowdown/big.bin"):
                got, e = try_read(m.mountpoint / k)
                if got != objs[k]:
                    failed.append(f"{k}: {errname(e) if e else 'wrong bytes'}")
            fired = proxy.control("GET", "/faults")["rules"][0].get("fired", 0)
            check(fired == 1 and not failed and cold in names,
                  f"round {i}: a listing one byte short of its reply: listings and reads whole ({failed})")
            proxy.clear()
            check(s.unmount(m) == 0, "daemon exited 0")


if __name__ == "__main__":
    harness.run_test("test_faults", main)
