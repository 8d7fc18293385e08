"""The Prometheus endpoint (--metrics-addr) during a real mount of a small
generated local dataset: every documented family is served, and the values
move the way the reads say they must (misses then hits, bytes fetched,
backend requests and their latency histogram, cache gauges, streams by
label), agreeing with `igtcache stats`. Also: the endpoint is off by default,
and a bad or busy address fails the mount with an error naming the key and
leaves nothing mounted."""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import os
import random
import re
import subprocess
import socket
import urllib.request
from pathlib import Path

import harness
from harness import check, log

ROOT = Path(__file__).resolve().parents[2]

# Every family docs/METRICS.md documents must appear in a scrape.
DOC = ROOT / "docs" / "METRICS.md"


def scrape(port: int) -> dict:
    """{(name, frozenset(labels)): value} of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        check(r.status == 200, "scrape answered 200")
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        if not m:
            raise harness.TestFailure(f"unparsable exposition line: {line!r}")
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def val(s: dict, name: str, **labels) -> float:
    key = (name, frozenset(labels.items()))
    if key not in s:
        raise harness.TestFailure(f"series {name}{labels} missing from the scrape")
    return s[key]


def documented_families() -> list[str]:
    text = DOC.read_text()
    return sorted(set(re.findall(r"^\| `(igtcache_[a-z0-9_]+)`", text, re.M)))


def make_dataset(root: Path) -> int:
    rnd = random.Random(7)
    total = 0
    for i in range(8):
        d = root / f"part{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        n = rnd.randrange(1, 200_000) if i else 3 * (1 << 20) + 123  # one multi-unit file
        (d / f"f{i}.bin").write_bytes(rnd.randbytes(n))
        total += n
    return total


def read_all(mnt: Path) -> int:
    n = 0
    for dirpath, _, files in os.walk(mnt):
        for f in sorted(files):
            if f.startswith(".igtcache"):
                continue
            n += len(harness.pread_exact(os.path.join(dirpath, f), 0, 1 << 30, os.O_DIRECT))
    return n


def main():
    fams = documented_families()
    check(len(fams) >= 20, f"docs/METRICS.md documents the families ({len(fams)})")
    with harness.Session("metrics") as s:
        src = s.mkdir("src")
        total = make_dataset(src)
        for attempt in range(3):  # the free port can be taken between probe and bind
            port = harness.free_port()
            try:
                m = s.mount(f"file://{src}", args=["--metrics-addr", f"127.0.0.1:{port}", "--cache-size", "256M"])
                break
            except harness.MountError as e:
                if "Address already in use" not in e.stderr or attempt == 2:
                    raise
                log(f"  port {port} was taken before the daemon bound it; another port")

        check(s.stats(m).get("metrics_addr") == f"127.0.0.1:{port}", "stats names the endpoint (metrics_addr)")
        s0 = scrape(port)
        names = {k[0].removesuffix("_bucket").removesuffix("_count").removesuffix("_sum") for k in s0}
        missing = [f for f in fams if f not in names]
        check(not missing, f"every documented family is served (missing: {missing})")
        check(val(s0, "igtcache_cache_miss_bytes_total") == 0, "no misses before any read")
        check(val(s0, "igtcache_backend_requests_total", op="probe", status="ok") == 1,
              "the start-up probe is counted as one backend request")

        got = read_all(m.mountpoint)
        check(got == total, f"read the whole dataset through the mount ({got} bytes)")
        s1 = scrape(port)
        st1 = s.stats(m)
        check(val(s1, "igtcache_cache_miss_bytes_total") == st1["cache_miss_bytes"] > 0,
              f"miss bytes moved and agree with stats ({st1['cache_miss_bytes']})")
        check(val(s1, "igtcache_fetched_bytes_total") == total,
              f"fetched bytes == dataset size ({total})")
        gets = val(s1, "igtcache_backend_requests_total", op="get", status="ok")
        check(gets == st1["backend_get_requests"] > 0, f"backend GETs by outcome agree with stats ({gets:.0f})")
        check(val(s1, "igtcache_backend_request_duration_seconds_count", op="get") == gets,
              "the GET latency histogram counts every GET")
        check(val(s1, "igtcache_backend_request_duration_seconds_bucket", op="get", le="+Inf") == gets,
              "the +Inf bucket holds every GET")
        check(val(s1, "igtcache_backend_request_duration_seconds_sum", op="get") > 0, "GET latency sum > 0")
        check(val(s1, "igtcache_backend_requests_total", op="list", status="ok") >= 1, "LISTs counted")
        check(val(s1, "igtcache_cache_used_bytes") == st1["cache_used_bytes"] >= total,
              "cache_used_bytes gauge agrees with stats")
        check(val(s1, "igtcache_cache_limit_bytes") == 256 << 20, "cache limit gauge = --cache-size")
        check(val(s1, "igtcache_cache_insert_bytes_total") >= total, "insert bytes moved")
        pf = st1["engine"]["prefetcher"]
        check(all(val(s1, f"igtcache_prefetcher_{k}") == v for k, v in pf.items()),
              f"the prefetcher's numbers are served as igtcache_prefetcher_* ({sorted(pf)})")
        n_streams = sum(v for (n, l), v in s1.items() if n == "igtcache_streams")
        check(n_streams == len(st1["streams"]), f"streams by label sum to the streams in stats ({n_streams:.0f})")

        got = read_all(m.mountpoint)  # O_DIRECT: the daemon sees every byte again
        s2 = scrape(port)
        check(val(s2, "igtcache_cache_hit_bytes_total") - val(s1, "igtcache_cache_hit_bytes_total") == total,
              "second pass: hit bytes grew by the dataset size")
        check(val(s2, "igtcache_fetched_bytes_total") == total, "second pass: nothing fetched")
        check(val(s2, "igtcache_read_requests_total") > val(s1, "igtcache_read_requests_total"),
              "read requests moved")
        check(val(s2, "igtcache_errors_total", op="read") == 0, "no read errors")
        # Connections that send nothing (a port scan, a stuck client) do not
        # keep scrapes out: with two server threads, four of them left every
        # scrape unanswered for a minute.
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=15) as r:
                body = r.read().decode()
            check("igtcache_cache_hit_bytes_total" in body, "a scrape is answered beside 8 idle connections")
        finally:
            for c in idle:
                c.close()
        check(s.unmount(m) == 0, "daemon exited 0")

        # Off by default: a mount without the flag listens on nothing new.
        held = harness.HeldPort()  # bound, not listening: nothing else takes it meanwhile
        port2 = held.port
        m2 = s.mount(f"file://{src}")
        check(not harness.port_answers("127.0.0.1", port2), "no endpoint without --metrics-addr")
        s.unmount(m2)

        # Bad address and busy port: usage error / runtime error naming the key, nothing mounted.
        for addr, code in (("localhost", 2), (f"127.0.0.1:{port2}", 1)):
            busy = None
            if code == 1:
                busy = held
                busy.listen()
            mnt = s.mkdir(f"bad-{code}")
            r = subprocess.run([harness.igtcache_bin(), "mount", f"file://{src}", str(mnt), "--cache-dir",
                                str(s.mkdir(f"bad-cache-{code}")), "--metrics-addr", addr],
                               capture_output=True, text=True, timeout=60, env=s.igt_env())
            if busy:
                busy.close()
            log(f"  {addr}: rc {r.returncode}, stderr {r.stderr.strip()!r}")
            check(r.returncode == code, f"--metrics-addr {addr}: exit {code}")
            check("metrics.addr" in r.stderr and r.stderr.count("\n") == 1, "one-line error naming metrics.addr")
            if code == 1:
                check("Address already in use" in r.stderr, "the busy port is called that")
            check(not harness.is_mounted(mnt), "nothing left mounted")


if __name__ == "__main__":
    harness.run_test("test_metrics", main)
