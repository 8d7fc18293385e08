"""`igtcache warm` of one large file, over the emulated cloud (run by
scripts/bench_warm.sh; never by the test suite).

A checkpoint is often one large object. `igtcache warm` fetched each file
with one worker, a few units per request one after another: about one
connection's speed however many -j workers (a black-box test before
2026-11-29: a 1.5 GiB file in 29 s, `cat` of it on a fresh mount 5.4 s).
Measured here against `sha256sum` of the same file on a fresh mount (the
mount's own readahead: the baseline in the same run), for this build and
any --compare LABEL=BINARY, in alternation run by run.

Source: s3rver behind scripts/cloudproxy.py (25 ms to first byte, 90 MB/s
per connection; DESIGN.md sec. 8). Each run: a fresh cache dir and mount;
warm's time, then a read of the whole file through the mount checked by
sha256 and counted in backend GETs (0 new GETs: warm cached it all).

Every process is started through tests/mount/harness.py's Session and
stopped by pid; every mount is unmounted, temp dirs removed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True
sys.path.insert(0, str(ROOT / "tests" / "mount"))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import faultlib  # noqa: E402
import harness  # noqa: E402
from e2e_systems import compare_binaries, cpu_model  # noqa: E402

BUCKET = "ckpt"
KEY = "model/weights.bin"


def sha256_of(path: Path) -> tuple[str, float]:
    t0 = time.monotonic()
    r = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, timeout=1800, check=True)
    return r.stdout.split()[0], time.monotonic() - t0


def run_once(s: harness.Session, binary: str, proxy, want: str, how: str, tag: str) -> dict:
    os.environ["IGTCACHE_BIN"] = binary
    m = s.mount(f"s3://{BUCKET}", cache_dir=s.mkdir(f"cache_{tag}"), foreground=False,
                args=["--endpoint", proxy.endpoint, "--region", "us-east-1", "--cache-size", "8G"])
    try:
        path = m.mountpoint / KEY
        os.stat(path)  # the listing fetched before the clock starts
        if how == "warm":
            t0 = time.monotonic()
            r = subprocess.run([binary, "warm", "-q", str(path)], capture_output=True, text=True, timeout=1800)
            secs = time.monotonic() - t0
            if r.returncode != 0:
                raise harness.TestFailure(f"{tag}: warm exited {r.returncode}: {r.stderr[-500:]}")
            before = s.stats(m)["backend_get_requests"]
            got, _ = sha256_of(path)
            after_gets = s.stats(m)["backend_get_requests"] - before
        else:
            got, secs = sha256_of(path)
            after_gets = None
        if got != want:
            raise harness.TestFailure(f"{tag}: {KEY} read back wrong")
        return {"secs": secs, "gets_after": after_gets}
    finally:
        s.unmount(m)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--compare", action="append", default=[], metavar="LABEL=BINARY")
    a = ap.parse_args()
    systems = compare_binaries(a.compare, "bench_warm")
    body = os.urandom(a.size_mib << 20)  # incompressible
    want = hashlib.sha256(body).hexdigest()
    results: dict[tuple[str, str], list[dict]] = {}
    with harness.Session("bench_warm") as s:
        srv = s.start_s3rver(buckets=(BUCKET,))
        srv.request("PUT", f"/{BUCKET}/{KEY}", body)
        del body
        proxy = faultlib.start_proxy(s, srv.endpoint, ttfb_ms=25, bandwidth="90MB")
        n = 0
        for run in range(a.runs):
            for label, binary in (systems if run % 2 == 0 else list(reversed(systems))):
                for how in ("warm", "sha256sum"):
                    n += 1
                    r = run_once(s, binary, proxy, want, how, f"{n}_{how}")
                    harness.log(f"  run {run} {label} {how}: {r['secs']:.2f} s"
                                + (f", {r['gets_after']} GETs reading it after" if how == "warm" else ""))
                    results.setdefault((label, how), []).append(r)
    lines = [
        f"One {a.size_mib} MiB object in s3rver behind scripts/cloudproxy.py (25 ms to first byte, 90 MB/s per "
        f"connection); a fresh cache dir and mount per run; {a.runs} runs, the binaries in alternation. "
        f"Machine: {os.cpu_count()} CPUs ({cpu_model()}).",
        "",
        "| build | `igtcache warm` (s) | `sha256sum` on a fresh mount (s) | warm / sha256sum | GETs reading it after warm |",
        "|---|---|---|---:|---|",
    ]
    for label, _ in systems:
        w = [r["secs"] for r in results[(label, "warm")]]
        c = [r["secs"] for r in results[(label, "sha256sum")]]
        lines.append(f"| {label} | {' / '.join(f'{x:.2f}' for x in w)} | {' / '.join(f'{x:.2f}' for x in c)} | "
                     f"{sum(w) / sum(c):.2f} | {' / '.join(str(r['gets_after']) for r in results[(label, 'warm')])} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
