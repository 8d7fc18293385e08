#!/usr/bin/env python3
"""What the emulated cloud's server costs per GET: s3rver's own CPU time per
request and per MiB served, from its /proc stat, for the request shapes of
the e2e benchmark (one 110 KB object per GET like the training set, 128 KiB
and 1/8 MiB ranges of a large object like faults and readahead, whole large
objects). Talks to s3rver directly (no proxy) over one kept-alive connection.

    /usr/bin/python3 scripts/bench/s3rver_cost.py      # ~1 min, prints a table

Explains why the e2e mix is bound by the server: docs/BENCHMARKS.md quotes
its output. Starts its own s3rver (harness.Session, stopped by pid on exit).
Not part of the test suite."""
from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True
sys.path.insert(0, str(ROOT / "tests" / "mount"))

import harness  # noqa: E402

MiB = 1 << 20
HZ = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def run(srv: harness.S3rver, name: str, reqs: list[tuple[str, str | None]]) -> None:
    conn = srv.connection()
    got = 0
    c0, t0 = cpu_s(srv.proc.pid), time.monotonic()
    for path, rng in reqs:
        conn.request("GET", path, headers={"Range": rng} if rng else {})
        r = conn.getresponse()
        body = r.read()
        if r.status not in (200, 206):
            raise RuntimeError(f"GET {path} {rng}: HTTP {r.status}")
        got += len(body)
    dt, cpu = time.monotonic() - t0, cpu_s(srv.proc.pid) - c0
    conn.close()
    print(f"| {name} | {len(reqs)} | {got / MiB:.0f} | {1000 * cpu / len(reqs):.2f} | "
          f"{1000 * cpu / max(1e-9, got / MiB):.2f} | {dt:.2f} |", flush=True)


def main() -> None:
    rng = random.Random(1)
    with harness.Session("s3rver-cost") as s:
        srv = s.start_s3rver(buckets=("b",))
        big = os.urandom(256 * MiB)
        small = rng.randbytes(112640)
        conn = srv.connection()
        for key, data in [("big", big)] + [(f"s{i}", small) for i in range(200)]:
            st, _ = srv.request("PUT", f"/b/{key}", body=data, conn=conn)
            if st != 200:
                raise RuntimeError(f"PUT {key}: HTTP {st}")
        conn.close()
        print(f"s3rver pid {srv.proc.pid}; CPU is its user+system time")
        print()
        print("| GETs | requests | MiB | s3rver CPU ms / request | s3rver CPU ms / MiB | wall s |")
        print("|---|---:|---:|---:|---:|---:|")
        run(srv, "110 KB objects, whole", [(f"/b/s{i % 200}", None) for i in range(1000)])
        run(srv, "128 KiB ranges of a 256 MiB object", [
            ("/b/big", f"bytes={o}-{o + 128 * 1024 - 1}")
            for o in (rng.randrange(0, 256 * MiB - 128 * 1024) for _ in range(1000))])
        for mb in (1, 8):
            run(srv, f"{mb} MiB ranges of a 256 MiB object", [
                ("/b/big", f"bytes={(i * mb * MiB) % (256 * MiB)}-{(i * mb * MiB) % (256 * MiB) + mb * MiB - 1}")
                for i in range(1024 // mb)])
        run(srv, "256 MiB object, whole", [("/b/big", None)] * 4)


if __name__ == "__main__":
    main()
