"""A directory scanned by one process per file, over the emulated cloud (run
by scripts/bench_process_scan.sh; never by the test suite).

`for f in DIR/*; do cat "$f"; done`, `find DIR -type f -exec cat {} \\;` and
`xargs -n1` start a process per file. Each file's reads come from a new pid,
so a detector that follows readers by pid saw no reader take a second step,
and the directory stayed "random" however orderly the scan (before
2026-11-29): no next-file prefetch, every file one cold GET behind the
other. Measured here, with a control that reads the same files one process
per file in a shuffled order (nothing to prefetch; a scan that is not one
must not be taken for one).

Source: s3rver behind scripts/cloudproxy.py (25 ms to first byte, 90 MB/s
per connection; DESIGN.md sec. 8). For each binary (this build, and any
--compare LABEL=BINARY, in alternation run by run so both see the same
machine), each order: a fresh cache dir, a mount, the loop timed, the
backend GETs and the directory's label from `igtcache stats`, the bytes
checked against the source (sha256 of the concatenation).

Every process is started through tests/mount/harness.py's Session and
stopped by pid; every mount is unmounted, temp dirs removed.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import random
import shlex
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
from e2e_systems import compare_binaries, cpu_model, replace_section  # noqa: E402

BUCKET = "scan"
DIR = "data"
# A process per file in listing order, the same shuffled (the control: no
# scan), and one process reading them all in listing order (the scan the
# detector always saw).
ORDERS = ("listing", "shuffled", "one process")


def seed(srv, n: int, size: int) -> tuple[list[str], dict[str, str]]:
    pool = random.Random(7).randbytes((1 << 20) + size)  # incompressible
    names, sums = [], {}
    for i in range(n):
        name = f"f{i:05d}.bin"
        body = pool[(i * 4099) % (1 << 20):][:size]
        srv.request("PUT", f"/{BUCKET}/{DIR}/{name}" if DIR else f"/{BUCKET}/{name}", body)
        names.append(name)
        sums[name] = hashlib.sha256(body).hexdigest()
    return names, sums


def run_once(s: harness.Session, binary: str, proxy, names: list[str], sums: dict[str, str], order: str,
             tag: str) -> dict:
    os.environ["IGTCACHE_BIN"] = binary
    m = s.mount(f"s3://{BUCKET}", cache_dir=s.mkdir(f"cache_{tag}"), foreground=False,
                args=["--endpoint", proxy.endpoint, "--region", "us-east-1"])
    try:
        d = m.mountpoint / DIR if DIR else m.mountpoint
        listed = sorted(os.listdir(d))  # the listing cached before the clock starts
        if listed != sorted(names):
            raise harness.TestFailure(f"{tag}: the mount lists {len(listed)} files, want {len(names)}")
        files = list(listed)
        if order == "shuffled":
            random.Random(11).shuffle(files)
        before = s.stats(m)
        # One process per file; each prints its file's sha256 (checked below).
        # "one process": the same listing-order scan by a single sha256sum.
        quoted = " ".join(shlex.quote(str(d / f)) for f in files)
        script = f"sha256sum {quoted}" if order == "one process" else f'for f in {quoted}; do sha256sum "$f"; done'
        t0 = time.monotonic()
        r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=1800)
        secs = time.monotonic() - t0
        if r.returncode != 0:
            raise harness.TestFailure(f"{tag}: the loop exited {r.returncode}: {r.stderr[-500:]}")
        got = {Path(line.split(None, 1)[1]).name: line.split()[0] for line in r.stdout.splitlines()}
        bad = [f for f in files if got.get(f) != sums[f]]
        if bad:
            raise harness.TestFailure(f"{tag}: {len(bad)} files read back wrong (first {bad[0]})")
        after = s.stats(m)
        label = next((x.get("label", x.get("pattern", "?")) for x in after.get("streams", [])
                      if x.get("path") in ((DIR + "/",) if DIR else ("", "/"))), "-")
        return {"secs": secs, "gets": after["backend_get_requests"] - before["backend_get_requests"],
                "hit_bytes": after["cache_hit_bytes"] - before["cache_hit_bytes"],
                "read_bytes": after["cache_hit_bytes"] + after["cache_miss_bytes"]
                - before["cache_hit_bytes"] - before["cache_miss_bytes"],
                "label": label}
    finally:
        s.unmount(m)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--size", type=int, default=64 * 1024)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--compare", action="append", default=[], metavar="LABEL=BINARY")
    ap.add_argument("--doc", action="store_true", help="append the table to docs/BENCHMARKS.md")
    ap.add_argument("--at-root", action="store_true",
                    help="the files at the mount's root (a mounted prefix's dataset), not in a directory")
    a = ap.parse_args()
    global DIR
    if a.at_root:
        DIR = ""
    systems = compare_binaries(a.compare, "process_scan")
    results: dict[tuple[str, str], list[dict]] = {}
    with harness.Session("process_scan") as s:
        srv = s.start_s3rver(buckets=(BUCKET,))
        names, sums = seed(srv, a.files, a.size)
        proxy = faultlib.start_proxy(s, srv.endpoint, ttfb_ms=25, bandwidth="90MB")
        n = 0
        for run in range(a.runs):
            for order in ORDERS:
                for label, binary in (systems if run % 2 == 0 else list(reversed(systems))):
                    n += 1  # a cache dir and mount point of its own
                    r = run_once(s, binary, proxy, names, sums, order, f"{n}_{order}")
                    harness.log(f"  run {run} {order:8} {label}: {r['secs']:.2f} s, {r['gets']} GETs, "
                                f"label {r['label']}")
                    results.setdefault((label, order), []).append(r)
    base = systems[-1][0] if len(systems) > 1 else systems[0][0]
    lines = [
        f"{a.files} files of {a.size} B in one directory of s3rver behind scripts/cloudproxy.py (25 ms to first "
        f"byte, 90 MB/s per connection), each read by its own process (`for f in ...; do sha256sum \"$f\"; done`), "
        f"in listing order and, as a control, shuffled; a fresh cache dir per run; median of {a.runs} runs, the "
        f"binaries in alternation. Machine: {os.cpu_count()} CPUs ({cpu_model()}).",
        "",
        f"| build | order | seconds (median) | / {base} | backend GETs | byte hit ratio | the directory's label |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for order in ORDERS:
        ref = sorted(r["secs"] for r in results[(base, order)])[len(results[(base, order)]) // 2]
        for label, _ in systems:
            rs = results[(label, order)]
            med = sorted(r["secs"] for r in rs)[len(rs) // 2]
            hit = sum(r["hit_bytes"] for r in rs) / max(1, sum(r["read_bytes"] for r in rs))
            lines.append(f"| {label} | {order} | {med:.2f} | {med / ref:.2f} | "
                         f"{'/'.join(str(r['gets']) for r in rs)} | {hit:.2f} | "
                         f"{'/'.join(sorted(set(r['label'] for r in rs)))} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.doc:
        section = (f"## A directory read by one process per file (`scripts/bench_process_scan.sh`, "
                   f"{datetime.date.today()})\n\n" + text)
        replace_section(ROOT / "docs" / "BENCHMARKS.md", "<!-- process-scan:begin -->", "<!-- process-scan:end -->",
                        section)


if __name__ == "__main__":
    main()
