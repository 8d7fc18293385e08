"""Rolling names: daemon memory while a bucket's names roll (run by
scripts/bench_rolling_names.sh; never by the test suite).

A job writes a new file per step (a checkpoint, a log shard) into a local
directory mounted as the bucket (`file://`), reads it through the mount, and
deletes the file written KEEP steps before. Listings are trusted for 0 ms
(metadata.ttl_ms: 0), so each lookup relists the directory and sees the
deletions at once; with the default TTL the same happens once per TTL.
Recorded per binary, every --every names: the daemon's RSS (VmRSS from
/proc/<pid>/status) and what `igtcache stats` counts (inodes, the engine's
file records, stream tree nodes). The memory a daemon keeps per name ever
seen shows as RSS growing with the names; memory bounded by what exists
(KEEP names) and what is cached stays flat.

--compare LABEL=BINARY adds another binary (e.g. an older build) to the same
run, in alternation with this build's, so both see the same machine.

Every process is started through tests/mount/harness.py's Session and stopped
by pid; every mount is unmounted, temp dirs removed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True
sys.path.insert(0, str(ROOT / "tests" / "mount"))

import harness  # noqa: E402
from e2e_systems import compare_binaries  # noqa: E402


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def run(binary: str, names: int, keep: int, size: int, every: int) -> list[dict]:
    os.environ["IGTCACHE_BIN"] = binary
    rows = []
    with harness.Session("rolling") as s:
        src = s.mkdir("src")
        cfg = s.write_config("c.yaml", "metadata:\n  ttl_ms: 0\n  negative_ttl_ms: 0\n")
        m = s.mount(f"file://{src}", args=["--cache-size", "64M", "--config", str(cfg)])
        payload = os.urandom(size)
        t0 = time.monotonic()
        for i in range(names + 1):
            p = src / f"step-{i:08d}.bin"
            p.write_bytes(payload)
            with open(m.path(p.name), "rb") as f:
                while f.read(1 << 20):
                    pass
            if i >= keep:
                (src / f"step-{i - keep:08d}.bin").unlink()
            if i % every == 0:
                st = s.stats(m)
                eng = st.get("engine", {})
                rows.append({"names": i, "rss_kib": rss_kib(m.proc.pid), "inodes": st["inodes"],
                             "engine_files": eng.get("files", "-"), "tree_nodes": st["stream_tree_nodes"],
                             "s": time.monotonic() - t0})
        s.unmount(m)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--names", type=int, default=10000, help="names written, read and deleted (default 10000)")
    ap.add_argument("--keep", type=int, default=10, help="names alive at a time (default 10)")
    ap.add_argument("--size", type=int, default=64 * 1024, help="bytes per file (default 65536)")
    ap.add_argument("--every", type=int, default=2000, help="a row every this many names (default 2000)")
    ap.add_argument("--compare", action="append", default=[], metavar="LABEL=BINARY",
                    help="another binary in the same run")
    a = ap.parse_args()
    systems = compare_binaries(a.compare, "rolling_names")
    results = {label: run(binary, a.names, a.keep, a.size, a.every) for label, binary in systems}
    print(f"\n{a.names} names of {a.size} B, {a.keep} alive at a time, file:// source, ttl_ms 0\n")
    print("| binary | names | RSS MiB | inodes | engine files | tree nodes | s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, rows in results.items():
        for r in rows:
            print(f"| {label} | {r['names']:,} | {r['rss_kib'] / 1024:.1f} | {r['inodes']:,} | {r['engine_files']} "
                  f"| {r['tree_nodes']:,} | {r['s']:.1f} |")
    for label, rows in results.items():
        if len(rows) >= 3:
            a0, a1 = rows[1], rows[-1]  # from the second row: start-up settled
            per = (a1["rss_kib"] - a0["rss_kib"]) * 1024 / max(1, a1["names"] - a0["names"])
            print(f"{label}: RSS {a0['rss_kib'] / 1024:.1f} -> {a1['rss_kib'] / 1024:.1f} MiB from "
                  f"{a0['names']:,} to {a1['names']:,} names: {per:.0f} B per name")
    return 0


if __name__ == "__main__":
    sys.exit(main())
