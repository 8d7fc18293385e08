"""A file scanned in reads smaller than a cache unit, repeatedly, with a
cache smaller than the file (run by scripts/bench_subunit_scan.sh; never by
the test suite).

The kernel reads a file in requests of its readahead size (128 KiB for a
file the mount has little of), and `dd bs=64K` reads 64 KiB at a time: each
1 MiB unit is read in several pieces. evict-behind took the unit a reader was
part-way through for the first victim, so each later piece of it fetched it
again (before 2026-11-29; a black-box test: 3 passes over a 48 MiB file with
a 16 MiB cache fetched 191 MiB, lru 144 MiB). With --readers N, N processes
read the file at once in each pass (ranks of a job loading one checkpoint;
before 2026-11-29 the tree told 4 readers of a file apart, and more made
every read a sample of its block: labelled skewed). Measured here: bytes fetched
from the source (`backend_get_bytes`) and the time of the passes, for this
build and any --compare LABEL=BINARY (in alternation run by run), and lru on
this build as the baseline of the same run.

Source: a local directory (`file://`); every byte read is checked (sha256).
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

import harness  # noqa: E402
from e2e_systems import compare_binaries, cpu_model  # noqa: E402


def run_once(s: harness.Session, binary: str, src: Path, want: str, a, tag: str, lru: bool) -> dict:
    os.environ["IGTCACHE_BIN"] = binary
    args = ["--cache-size", f"{a.cache_mib}M"]
    if lru:
        args += ["--config", str(s.write_config(f"lru_{tag}.yaml", "cache:\n  eviction: lru\n"))]
    m = s.mount(f"file://{src}", cache_dir=s.mkdir(f"cache_{tag}"), foreground=False, args=args)
    try:
        path = m.mountpoint / "shard.bin"
        os.stat(path)
        before = s.stats(m)["backend_get_bytes"]
        t0 = time.monotonic()
        for p in range(a.passes):
            # O_DIRECT: every read reaches the mount (no page cache between
            # passes). Readers after the first start --stagger-s apart.
            cmd = f"dd if='{path}' of=/dev/stdout bs={a.read_kib}K iflag=direct status=none | sha256sum"
            procs = []
            try:
                for i in range(a.readers):
                    if i:
                        time.sleep(a.stagger_s)
                    procs.append(subprocess.Popen(["bash", "-c", f"set -o pipefail; {cmd}"], stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, start_new_session=True))
                for i, pr in enumerate(procs):
                    out, err = pr.communicate(timeout=1800)
                    if pr.returncode != 0:
                        raise harness.TestFailure(f"{tag}: reader {i} exited {pr.returncode}: {err[-300:]!r}")
                    if out.split()[0].decode() != want:
                        raise harness.TestFailure(f"{tag}: pass {p} reader {i} read back wrong")
            finally:
                for pr in procs:
                    if pr.poll() is None:
                        os.killpg(pr.pid, 9)  # its own session: bash and its dd, by pid
                        pr.wait()
        secs = time.monotonic() - t0
        return {"secs": secs, "fetched": s.stats(m)["backend_get_bytes"] - before}
    finally:
        s.unmount(m)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=48)
    ap.add_argument("--cache-mib", type=int, default=16)
    ap.add_argument("--read-kib", type=int, default=64)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--readers", type=int, default=1, help="processes reading the file at once in each pass")
    ap.add_argument("--stagger-s", type=float, default=0.2, help="between the readers' starts")
    ap.add_argument("--compare", action="append", default=[], metavar="LABEL=BINARY")
    a = ap.parse_args()
    systems = compare_binaries(a.compare, "bench_subunit_scan")
    results: dict[str, list[dict]] = {}
    with harness.Session("subunit_scan") as s:
        src = s.mkdir("src")
        body = os.urandom(a.size_mib << 20)
        (src / "shard.bin").write_bytes(body)
        want = hashlib.sha256(body).hexdigest()
        n = 0
        for run in range(a.runs):
            order = systems if run % 2 == 0 else list(reversed(systems))
            for label, binary, lru in [(l, b, False) for l, b in order] + [("lru (this build)", systems[0][1], True)]:
                n += 1
                r = run_once(s, binary, src, want, a, f"{n}", lru)
                harness.log(f"  run {run} {label}: {r['fetched'] / 2**20:.0f} MiB fetched, {r['secs']:.2f} s")
                results.setdefault(label, []).append(r)
    base = "lru (this build)"
    ref = sum(r["fetched"] for r in results[base]) / len(results[base])
    lines = [
        f"A {a.size_mib} MiB file read {a.passes} times by `dd bs={a.read_kib}K iflag=direct` " +
        (f"({a.readers} processes at once in each pass, started {a.stagger_s} s apart) " if a.readers > 1 else "") +
        "through a mount of "
        f"a local directory with a {a.cache_mib} MiB cache (1 MiB units); a fresh cache dir per run; {a.runs} runs, "
        f"the binaries in alternation, lru on this build in each run. Machine: {os.cpu_count()} CPUs ({cpu_model()}).",
        "",
        f"| build | fetched (MiB) | / {base} | seconds |",
        "|---|---|---:|---|",
    ]
    for label in [l for l, _ in systems] + [base]:
        rs = results[label]
        mean = sum(r["fetched"] for r in rs) / len(rs)
        fetched = " / ".join(f"{r['fetched'] / 2**20:.0f}" for r in rs)
        secs = " / ".join(f"{r['secs']:.2f}" for r in rs)
        lines.append(f"| {label} | {fetched} | {mean / ref:.2f} | {secs} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
