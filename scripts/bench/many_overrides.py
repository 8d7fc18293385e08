"""The cost of many policy-file overrides on every read (run by
scripts/bench_many_overrides.sh; never by the test suite).

3,000 files of 4 KiB in 10 directories of a local directory (`file://`); a
policy file with --overrides prefixes that match none of them (and, so that
each is looked at, share their first component), and one without any. Each
build mounts it and reads every file twice (a cold pass from the source, a
warm one from the cache), O_DIRECT, every file compared with the source.
Columns: seconds per pass, with and without the overrides, for this build
and each --compare LABEL=BINARY, in one run.

Every process is started through tests/mount/harness.py's Session and
stopped by pid; every mount is unmounted, temp dirs removed.
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
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import harness  # noqa: E402
from e2e_systems import compare_binaries, cpu_model  # noqa: E402


def one_pass(mnt: Path, src: Path, names: list[str]) -> float:
    t0 = time.monotonic()
    for n in names:
        fd = os.open(mnt / n, os.O_RDONLY | os.O_DIRECT)
        try:
            d = os.read(fd, 1 << 20)
        finally:
            os.close(fd)
        if d != (src / n).read_bytes():
            raise harness.TestFailure(f"{n}: wrong bytes")
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--overrides", type=int, default=20000)
    ap.add_argument("--compare", action="append", default=[], metavar="LABEL=BINARY")
    a = ap.parse_args()
    systems = compare_binaries(a.compare, "bench_many_overrides")
    rows = []
    with harness.Session("many_overrides") as s:
        src = s.mkdir("src")
        names = []
        for i in range(3000):
            d = src / f"d{i % 10}"
            d.mkdir(exist_ok=True)
            (d / f"f{i:05d}.bin").write_bytes(os.urandom(4096))
            names.append(f"d{i % 10}/f{i:05d}.bin")
        lines = ["profile: training", "overrides:"]
        lines += [f'  - {{prefix: "d{i % 10}/nomatch{i}/", pin: true}}' for i in range(a.overrides)]
        many = s.write_config("many.yaml", "\n".join(lines) + "\n")
        none = s.write_config("none.yaml", "profile: training\n")
        n = 0
        for label, binary in systems:
            os.environ["IGTCACHE_BIN"] = binary
            for pol, what in ((none, "none"), (many, f"{a.overrides:,}")):
                n += 1
                cfg = s.write_config(f"cfg{n}.yaml", f"policy:\n  file: {pol}\n")
                m = s.mount(f"file://{src}", cache_dir=s.mkdir(f"cache{n}"), foreground=False,
                            args=["--config", str(cfg), "--cache-size", "1G"])
                try:
                    os.listdir(m.mountpoint)
                    cold = one_pass(m.mountpoint, src, names)
                    warm = one_pass(m.mountpoint, src, names)
                finally:
                    s.unmount(m)
                harness.log(f"  {label}, {what} overrides: {cold:.2f} / {warm:.2f} s")
                rows.append((label, what, cold, warm))
    out = [f"3,000 files of 4 KiB in a local directory, read twice (cold, then from the cache), O_DIRECT, "
           f"one thread. Machine: {os.cpu_count()} CPUs ({cpu_model()}).", "",
           "| build | overrides | cold pass s | warm pass s |", "|---|---:|---:|---:|"]
    out += [f"| {l} | {w} | {c:.2f} | {h:.2f} |" for l, w, c, h in rows]
    print("\n".join(out))


if __name__ == "__main__":
    main()
