"""The backend disappears during a read-heavy run and comes back.

Two outages, both while 8 reader threads loop over cached ("hot") and
never-read ("cold") objects:
  1. the proxy refuses connections (connection refused / reset);
  2. s3rver itself is stopped by pid (the proxy answers 502), then restarted
     on the same port and data.
During each outage: every hot read returns the right bytes (cache), also
after the metadata TTL (1 s here) has expired — a stale listing is served
while the bucket cannot be asked; a cold read fails with EIO in bounded time,
never wrong bytes. After it: cold reads succeed again on the same mount (no
restart), and nothing read during the outage is wrong.

Then unmounting, and SIGTERM, while the bucket does not answer: the daemon
exits in seconds, not after its retry budget.

The outage lasts IGT_OUTAGE_S seconds (default 6 in the suite;
scripts/soak.sh runs it with 30).
"""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import errno
import os
import random
import signal
import subprocess
import threading
import time

import faultlib
import harness
from faultlib import content, errname, try_read
from harness import check, log

BUCKET = "igt-outage"
OUTAGE_S = float(os.environ.get("IGT_OUTAGE_S", "6"))
MAX_RETRIES = 2
REQUEST_TIMEOUT_MS = 5000  # a whole GET on a loaded machine; the outages here fail fast
CONNECT_TIMEOUT_MS = 500
TTL_MS = 1000
# A failing read may be retried by the kernel (readahead then the read
# itself) and spans at most two coalesced GETs: a generous bound.
FAIL_BOUND_S = 4 * (MAX_RETRIES + 1) * (REQUEST_TIMEOUT_MS + CONNECT_TIMEOUT_MS) / 1000 + 5


def main():
    rng = random.Random(30)
    hot = {f"hot/f{i:03d}.bin": content(f"hot{i}", rng.choice([3000, 70_000, 600_000, 1_500_000]))
           for i in range(40)}
    # Per outage: objects the readers may touch once ("cold"), and probes
    # nobody else reads (so they are certainly uncached when probed).
    cold = {f"cold{o}/c{i:03d}.bin": content(f"cold{o}.{i}", rng.choice([5000, 200_000, 1_100_000]))
            for o in range(2) for i in range(300)}
    probes = {f"probe{o}/p{i}.bin": content(f"probe{o}.{i}", 150_000) for o in range(2) for i in range(40)}
    with harness.Session("outage") as s:
        srv = s.start_s3rver(buckets=(BUCKET,))
        faultlib.put_objects(srv, BUCKET, {**hot, **cold, **probes})
        proxy = faultlib.start_proxy(s, srv.endpoint, ttfb_ms=2)
        cfg = faultlib.config(
            s, backend={"max_retries": MAX_RETRIES, "retry_base_ms": 50, "retry_deadline_ms": 5000,
                        "request_timeout_ms": REQUEST_TIMEOUT_MS, "connect_timeout_ms": CONNECT_TIMEOUT_MS},
            metadata={"ttl_ms": TTL_MS, "negative_ttl_ms": 500})
        m = s.mount(f"s3://{BUCKET}", args=["--config", str(cfg), "--endpoint", proxy.endpoint,
                                             "--region", "us-east-1"])
        mnt = m.mountpoint
        for k, v in hot.items():
            got, e = try_read(mnt / k)
            if got != v:
                raise harness.TestFailure(f"warm-up read of {k}: {errname(e) if e else 'wrong bytes'}")
        check(True, f"{len(hot)} hot objects read and cached")

        cold_keys = []
        lock = threading.Lock()
        state = {"phase": "up"}
        events = []  # (phase, kind, key, ok, errno, seconds)
        stop = threading.Event()

        def take_cold():
            with lock:
                return cold_keys.pop() if cold_keys else None

        def reader(seed):
            r = random.Random(seed)
            while not stop.is_set():
                k = take_cold() if r.random() < 0.3 else None
                if k is None:
                    kind, k = "hot", r.choice(sorted(hot))
                    want = hot[k]
                else:
                    kind, want = "cold", cold[k]
                time.sleep(0.002)  # ~500 reads/s per reader: a busy job, not a spin
                faultlib.drop_page_cache(mnt / k)
                with lock:
                    phase = state["phase"]
                t0 = time.monotonic()
                got, e = try_read(mnt / k)
                dt = time.monotonic() - t0
                with lock:
                    phase_end = state["phase"]
                if got is not None and got != want:
                    events.append((phase, kind, k, "WRONG", 0, dt))
                else:
                    # A read that straddles a phase change is not judged.
                    events.append((phase if phase == phase_end else "edge", kind, k, got is not None, e, dt))

        def outage(label, o, go_down, go_up):
            threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(8)]
            probe_keys = sorted(k for k in probes if k.startswith(f"probe{o}/"))
            with lock:
                cold_keys[:] = sorted((k for k in cold if k.startswith(f"cold{o}/")), reverse=True)
            events.clear()
            stop.clear()
            for t in threads:
                t.start()
            time.sleep(1.5)
            with lock:
                state["phase"] = "down"
            go_down()
            # Deterministic probes while down: a hot file, a cold file.
            time.sleep(OUTAGE_S / 2)
            k = probe_keys.pop()
            t0 = time.monotonic()
            got, e = try_read(mnt / k)
            took = time.monotonic() - t0
            if got is not None and got != probes[k]:
                raise harness.TestFailure(f"{label}: WRONG BYTES for {k} while the backend is down")
            check(got is None and e in (errno.EIO, errno.ENOENT) and took < FAIL_BOUND_S,
                  f"{label}: uncached read while down fails cleanly ({errname(e) if e else 'ok?'}) "
                  f"in {took:.1f}s < {FAIL_BOUND_S:.0f}s")
            time.sleep(max(0.0, OUTAGE_S / 2 - took))
            with lock:
                state["phase"] = "recovering"
            go_up()
            # Recovery: the same mount serves new objects again.
            deadline = time.monotonic() + 60
            while True:
                k = probe_keys.pop()
                got, e = try_read(mnt / k)
                if got is not None:
                    if got != probes[k]:
                        raise harness.TestFailure(f"{label}: WRONG BYTES for {k} after recovery")
                    break
                if time.monotonic() > deadline:
                    raise harness.TestFailure(f"{label}: no recovery within 60 s ({errname(e)})")
                time.sleep(0.2)
            with lock:
                state["phase"] = "up"
            time.sleep(2)
            stop.set()
            for t in threads:
                t.join(120)
                if t.is_alive():
                    raise harness.TestFailure(f"{label}: a reader is stuck (deadlock?)")
            wrong = [ev for ev in events if ev[3] == "WRONG"]
            if wrong:
                raise harness.TestFailure(f"{label}: WRONG BYTES: {wrong[:5]}")
            down = [ev for ev in events if ev[0] == "down"]
            hot_down = [ev for ev in down if ev[1] == "hot"]
            hot_bad = [ev for ev in hot_down if ev[3] is not True]
            check(hot_down and not hot_bad,
                  f"{label}: {len(hot_down)} cached reads during the outage all byte-exact "
                  f"({[(k, errname(e)) for _, _, k, _, e, _ in hot_bad[:3]]})")
            cold_down = [ev for ev in down if ev[1] == "cold"]
            cold_errs = sorted({errname(ev[4]) for ev in cold_down if ev[3] is not True})
            slow = max((ev[5] for ev in cold_down), default=0)
            check(all(ev[3] is True or ev[4] in (errno.EIO, errno.ENOENT) for ev in cold_down)
                  and slow < FAIL_BOUND_S,
                  f"{label}: {len(cold_down)} uncached reads during the outage: correct or clean "
                  f"errors {cold_errs}, slowest {slow:.1f}s")
            after = [ev for ev in events if ev[0] == "up"]
            bad_after = [ev for ev in after if ev[3] is not True]
            check(after and not bad_after,
                  f"{label}: {len(after)} reads after recovery all byte-exact, no restart "
                  f"({[(k, errname(e)) for _, _, k, _, e, _ in bad_after[:3]]})")

        # 2) s3rver stopped by pid and restarted on the same port and data.
        port, data = srv.port, srv.data_dir
        holder = {}

        def kill_s3rver():
            srv.proc.stop()

        def restart_s3rver():
            argv = ["node", "--openssl-legacy-provider", str(harness.S3RVER_JS), "-d", str(data),
                    "-a", "127.0.0.1", "-p", str(port), "--silent"]
            p = s.spawn("s3rver", argv)
            deadline = time.monotonic() + harness.S3RVER_DEADLINE_S
            while not harness.port_answers("127.0.0.1", port):
                if p.popen.poll() is not None or time.monotonic() > deadline:
                    raise harness.TestFailure(f"s3rver did not restart: {p.stderr_text()[-500:]}")
                time.sleep(0.1)
            holder["p"] = p

        try:
            outage(f"proxy refusing for {OUTAGE_S:.0f}s", 0, proxy.down, proxy.up)
            outage(f"s3rver stopped for {OUTAGE_S:.0f}s", 1, kill_s3rver, restart_s3rver)
        finally:
            stop.set()  # readers must not outlive a failure
        st = s.stats(m)
        log(f"  stats: retries {st['backend_retries']} backend_errors {st['backend_errors']} "
            f"read_errors {st['read_errors']} corruptions {st['cache_corruptions']}")
        check(st["backend_retries"] > 0 and st["cache_corruptions"] == 0,
              "retries counted, no corruption")
        check(s.unmount(m) == 0, "daemon exited 0")
        shutdown_during_outage(s, proxy, hot, probes)


def shutdown_during_outage(s, proxy, hot, probes):
    """3) Unmounting, or SIGTERM, while the bucket does not answer ends in
    seconds. The retry budget here is 10 minutes: before, the daemon held its
    exit until the listing or read retrying in it gave up."""
    cfg = faultlib.config(
        s, name="igt-long-retries.yaml",
        backend={"max_retries": 100, "retry_base_ms": 500, "retry_deadline_ms": 600_000,
                 "request_timeout_ms": REQUEST_TIMEOUT_MS, "connect_timeout_ms": CONNECT_TIMEOUT_MS},
        metadata={"ttl_ms": TTL_MS, "negative_ttl_ms": 500})
    args = ["--config", str(cfg), "--endpoint", proxy.endpoint, "--region", "us-east-1"]
    bound_s = 30
    igt = harness.igtcache_bin()

    # a) `igtcache unmount` while a background refresh of a listing retries.
    m = s.mount(f"s3://{BUCKET}", args=args)
    os.listdir(m.mountpoint / "hot")
    proxy.down()
    try:
        time.sleep(TTL_MS / 1000 + 0.3)
        names = os.listdir(m.mountpoint / "hot")  # stale: the refresh retries in the background
        check(len(names) == len(hot), f"stale listing while down ({len(names)} names)")
        retries0 = s.stats(m)["backend_retries"]
        deadline = time.monotonic() + 20
        while s.stats(m)["backend_retries"] == retries0 and time.monotonic() < deadline:
            time.sleep(0.2)
        check(s.stats(m)["backend_retries"] > retries0, "the refresh is retrying")
        t0 = time.monotonic()
        r = subprocess.run([igt, "unmount", str(m.mountpoint), "--timeout", str(bound_s)],
                           capture_output=True, env=s.igt_env(), timeout=bound_s + 30)
        took = time.monotonic() - t0
        check(r.returncode == 0 and m.proc.popen.wait(5) == 0,
              f"unmount during the outage: daemon exited 0 in {took:.1f}s < {bound_s}s "
              f"({r.stderr.decode(errors='replace').strip()})")
        m.unmounted = True
    finally:
        proxy.up()

    # b) SIGTERM while a reader waits for an uncached object.
    m = s.mount(f"s3://{BUCKET}", args=args)
    key = sorted(probes)[0]
    os.listdir(m.mountpoint / key.split("/")[0])
    proxy.down()
    try:
        got = {}

        def read():
            try:
                got["r"] = try_read(m.mountpoint / key)
            except OSError as e:  # close() on a mount gone away
                got["r"] = (None, e.errno)

        t = threading.Thread(target=read, daemon=True)
        t.start()
        time.sleep(1.0)  # the read is in its retries
        check(t.is_alive(), "an uncached read waits while the bucket is down")
        t0 = time.monotonic()
        os.kill(m.proc.pid, signal.SIGTERM)
        try:
            rc = m.proc.popen.wait(bound_s)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.monotonic() - t0
        check(rc == 0, f"SIGTERM during the outage: daemon exited {rc} in {took:.1f}s < {bound_s}s")
        s.unmount(m, quiet=True)  # the mount point, if the daemon left it mounted
        t.join(bound_s)
        data, e = got.get("r", (None, -1))
        check(not t.is_alive() and (data is None or data == probes[key]),
              f"the waiting reader got {errname(e) if data is None else 'the right bytes'}, never wrong bytes")
    finally:
        proxy.up()


if __name__ == "__main__":
    harness.run_test("test_outage", main)
