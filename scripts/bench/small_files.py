"""Many small files through one mount: time per file and daemon memory per
file (run by scripts/bench_small_files.sh; never by the test suite). Needs
root (drops the page cache).

A local directory of N small files (1,000 per directory, an image-folder
layout; --per-dir changes that) is mounted as the bucket (`file://`) with an empty cache large enough
for all of it. One process lists it (`find`), then lists it again with a stat
per file (`ls -lR`, the page cache dropped first; the baseline is `ls -lR` of
the source directory in the same run), then reads every file whole in
a new shuffled order each time with 4 threads, twice (epoch 1 cold, epoch 2 from the
cache), the page cache dropped before each pass. The baseline is the same
reads of the source directory itself, in the same run. Recorded per binary:
seconds per pass, the daemon's CPU seconds, and its RSS after start-up, after
the listing and after each epoch (from /proc/<pid>/status).

With --restart, each binary then mounts its filled cache dir again (page
cache dropped first) and reads a third epoch: recorded are the seconds until
the mount is ready against the first mount of the empty cache dir in the same
run, the start-up phases the daemon logs, RSS after start-up, and the epoch.
--restart-cache-size mounts it again with a smaller limit instead, so the
start-up also evicts the excess.

Every process is started through tests/mount/harness.py's Session and stopped
by pid; every mount is unmounted, temp dirs removed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True
sys.path.insert(0, str(ROOT / "tests" / "mount"))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import harness  # noqa: E402
import re  # noqa: E402
from e2e_systems import cpu_model, drop_caches, replace_section  # noqa: E402

READERS = 4
PER_DIR = 1000


def make_files(root: Path, n: int, size: int) -> list[str]:
    rels = []
    # Incompressible, as image files are (the cache's index compresses
    # what it holds, and a repeating pattern would flatter units kept
    # inline there): each file a slice of 1 MiB of seeded random bytes.
    pool = random.Random(12345).randbytes((1 << 20) + size)
    for i in range(n):
        d = root / f"class_{i // PER_DIR:04d}"
        if i % PER_DIR == 0:
            d.mkdir()
        rel = f"class_{i // PER_DIR:04d}/img_{i:07d}.jpg"
        with open(root / rel, "wb") as f:
            at = (i * 7919) % (1 << 20)
            f.write(pool[at:at + size])
        rels.append(rel)
    return rels


def read_pass(base: Path, rels: list[str]) -> tuple[float, int]:
    drop_caches()
    t0 = time.monotonic()

    def part(k: int) -> int:
        got = 0
        for rel in rels[k::READERS]:
            with open(base / rel, "rb") as f:
                got += len(f.read())
        return got

    with ThreadPoolExecutor(READERS) as ex:
        got = sum(ex.map(part, range(READERS)))
    return time.monotonic() - t0, got


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ls_lr(root: Path) -> float:
    drop_caches()
    t0 = time.monotonic()
    subprocess.run(["ls", "-lR", str(root)], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def disk_use(d: Path) -> int:
    """Bytes a directory tree takes on its volume (allocated blocks, as du)."""
    total = 0
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def variant_args(s: harness.Session, i: int, setting: tuple[str, str] | None) -> list[str]:
    """--config of a YAML file setting one dotted key (none: no args)."""
    if setting is None:
        return []
    key, value = setting
    *sections, leaf = key.split(".")
    yaml = "".join(f"{'  ' * d}{sec}:\n" for d, sec in enumerate(sections)) + f"{'  ' * len(sections)}{leaf}: {value}\n"
    return ["--config", str(s.write_config(f"variant-{i}.yaml", yaml))]


def timed_mount(s: harness.Session, src: Path, cache_dir: Path, args: list[str]) -> tuple[harness.Mount, float]:
    drop_caches()
    t0 = time.monotonic()
    m = s.mount(f"file://{src}", cache_dir=cache_dir, args=args)
    return m, time.monotonic() - t0


def run_mount(s: harness.Session, label: str, binary: str, src: Path, orders: list[list[str]], total: int,
              cache_size: str, extra: list[str], restart: str | None) -> dict:
    os.environ["IGTCACHE_BIN"] = binary
    cache_dir = s.mkdir(f"cache-{len(s.mounts)}")
    m, mount_s = timed_mount(s, src, cache_dir, ["--cache-size", cache_size] + extra)
    pid = m.pid
    r = {"label": label, "binary": binary, "rss_start": rss_kib(pid), "mount_s": mount_s}
    drop_caches()
    t0 = time.monotonic()
    subprocess.run(["find", str(m.mountpoint), "-type", "f"], check=True, stdout=subprocess.DEVNULL)
    r["list_s"] = time.monotonic() - t0
    # `ls -lR` once the listings are in (find read them): a name and a stat
    # per file, the page cache (and the kernel's entries) dropped first.
    r["lslr_s"] = ls_lr(m.mountpoint)
    r["rss_listed"] = rss_kib(pid)
    for ep in (1, 2):
        c0 = cpu_s(pid)
        dt, got = read_pass(m.mountpoint, orders[ep - 1])
        if got != total:
            raise RuntimeError(f"{label} epoch {ep}: read {got} bytes, expected {total}")
        r[f"ep{ep}_s"], r[f"ep{ep}_cpu"], r[f"rss_ep{ep}"] = dt, cpu_s(pid) - c0, rss_kib(pid)
        harness.log(f"  {label} epoch {ep}: {dt:.1f} s, daemon cpu {r[f'ep{ep}_cpu']:.1f} s, rss {r[f'rss_ep{ep}']} KiB")
    st = s.stats(m)
    r["gets"], r["units"] = st["backend_get_requests"], st["cache_units"]
    r["inline_units"], r["used_bytes"] = st.get("cache_inline_units", 0), st["cache_used_bytes"]
    r["disk_bytes"] = disk_use(cache_dir)
    hits, misses = st["cache_hit_units"], st["cache_miss_units"]
    r["hit_ratio"] = hits / (hits + misses) if hits + misses else 0.0
    s.unmount(m)
    if restart:
        m, r["remount_s"] = timed_mount(s, src, cache_dir, ["--cache-size", restart] + extra)
        r["rss_remount"] = rss_kib(m.pid)
        phases = re.search(r"units checked in .*", m.proc.stderr_text())
        r["phases"] = phases.group(0) if phases else "(not logged by this build)"
        dt, got = read_pass(m.mountpoint, orders[2])
        if got != total:
            raise RuntimeError(f"{label} epoch 3: read {got} bytes, expected {total}")
        r["ep3_s"] = dt
        harness.log(f"  {label} restart: mounted in {r['remount_s']:.1f} s ({r['phases']}), epoch 3 {dt:.1f} s")
        s.unmount(m)
    return r


def render(n: int, size: int, cache_size: str, base: dict, runs: list[dict], when: str, head: str,
           restart_size: str | None) -> str:
    title = f"Many small files ({n:,})" + ("" if cache_size == "8G" else f", cache {cache_size}")
    L = [f"## {title} (`scripts/bench_small_files.sh`)", ""]
    restarted = all("remount_s" in r for r in runs)
    flags = (" --restart" + (f" --restart-cache-size {restart_size}" if restart_size else "")) if restarted else ""
    L.append(f"Produced by `scripts/bench_small_files.sh --files {n} --size {size} --cache-size {cache_size}{flags} ...` on {when} "
             f"(checkout `{head}`). "
             f"Machine: {os.cpu_count()} CPUs ({cpu_model()}); a shared machine, single runs: noisy.")
    L.append("")
    L.append(f"{n} files of {size} B in directories of {PER_DIR} on the local disk, mounted as `file://` with an empty "
             f"cache of {cache_size}. `find` lists the mount, `ls -lR` lists it again with a stat per file, then {READERS} threads read every file whole in a shuffled "
             "order, twice, a new order each epoch (seeded: the same for every run), as a DataLoader with shuffle does; the page cache is dropped before each pass. The baseline reads the source directory "
             "itself the same way in the same run. RSS is the daemon's VmRSS.")
    L.append("")
    for r in runs:
        if r.get("setting"):
            L.append(f"\"{r['label']}\": the same build with `{r['setting'][0]}: {r['setting'][1]}`.")
            L.append("")
    L.append("| run | list s | ls -lR s | ls -lR / source | epoch 1 s | epoch 2 s | epoch 1 / source | epoch 2 / source "
             "| daemon CPU ep 1 / ep 2 s | RSS start / listed / ep 1 / ep 2 MiB | RSS per file after ep 2 |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    L.append(f"| source directory (baseline) | - | {base['lslr_s']:.2f} | 1.00 | {base['ep1_s']:.1f} | "
             f"{base['ep2_s']:.1f} | 1.00 | 1.00 | - | - | - |")
    for r in runs:
        per_file = (r["rss_ep2"] - r["rss_start"]) * 1024 / n
        L.append(f"| {r['label']} | {r['list_s']:.1f} | {r['lslr_s']:.2f} | {r['lslr_s'] / base['lslr_s']:.1f} | "
                 f"{r['ep1_s']:.1f} | {r['ep2_s']:.1f} | "
                 f"{r['ep1_s'] / base['ep1_s']:.1f} | {r['ep2_s'] / base['ep2_s']:.1f} | "
                 f"{r['ep1_cpu']:.1f} / {r['ep2_cpu']:.1f} | "
                 f"{r['rss_start'] / 1024:.0f} / {r['rss_listed'] / 1024:.0f} / {r['rss_ep1'] / 1024:.0f} / "
                 f"{r['rss_ep2'] / 1024:.0f} | {per_file:.0f} B |")
    L.append("")
    if restarted:
        smaller = (f" with `--cache-size {restart_size}`, so start-up first evicts what does not fit"
                   if restart_size and restart_size != cache_size else "")
        L.append("Restart (`--restart`): each run's cache dir, now holding every file, is mounted again with the page "
                 f"cache dropped{smaller}; the baseline is the same run's first mount, of the empty cache dir. Then a "
                 f"third epoch reads everything through the mount (source directory, same order: {base['ep3_s']:.1f} s).")
        L.append("")
        L.append("| run | mount, empty cache s | mount, filled cache s | filled / empty | start-up phases (daemon log) "
                 "| RSS after start-up MiB | epoch 3 s | epoch 3 / source |")
        L.append("|---|---:|---:|---:|---|---:|---:|---:|")
        for r in runs:
            L.append(f"| {r['label']} | {r['mount_s']:.1f} | {r['remount_s']:.1f} | "
                     f"{r['remount_s'] / r['mount_s']:.1f} | {r['phases']} | {r['rss_remount'] / 1024:.0f} | "
                     f"{r['ep3_s']:.1f} | {r['ep3_s'] / base['ep3_s']:.1f} |")
        L.append("")
    L.append("Backend GETs, cached units and unit hit ratio over both epochs (`igtcache stats`), and the cache "
             "dir's disk use after them (allocated blocks of its unit files, index and directories, as `du`) against "
             "what the limit counts (`cache_used_bytes`): " +
             "; ".join(f"{r['label']}: {r['gets']} GETs, {r['units']} units ({r['inline_units']} inline), hit ratio "
                       f"{r['hit_ratio']:.2f}, on disk {r['disk_bytes'] / 2**20:.0f} MiB, counted "
                       f"{r['used_bytes'] / 2**20:.0f} MiB"
                       for r in runs) + ".")
    return "\n".join(L)


def main() -> int:
    global PER_DIR
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=100000)
    ap.add_argument("--per-dir", type=int, default=PER_DIR,
                    help="files per directory (default 1000; --files for one flat directory)")
    ap.add_argument("--size", type=int, default=2048, help="bytes per file")
    ap.add_argument("--compare", action="append", default=[], metavar="LABEL=BINARY",
                    help="also run another igtcache binary (e.g. an older build), same data, same run")
    ap.add_argument("--cache-size", default="8G", help="the mount's --cache-size (default 8G: everything fits)")
    ap.add_argument("--lru", action="store_true", help="also run the build with cache.eviction: lru (no policy engine)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=KEY=VALUE",
                    help="also run the build with one config key set (e.g. 'files only=cache.inline_max_bytes=0')")
    ap.add_argument("--restart", action="store_true",
                    help="then mount each filled cache dir again: start-up time and a third epoch")
    ap.add_argument("--restart-cache-size", metavar="SIZE",
                    help="with --restart: mount again with this --cache-size (smaller: start-up evicts the excess)")
    ap.add_argument("--doc", action="store_true", help="write the section of docs/BENCHMARKS.md")
    ap.add_argument("--section", default="small-files", help="the marked section --doc writes")
    a = ap.parse_args()
    # (label, binary, config key -> value or None)
    binaries = [("igtcache", harness.igtcache_bin(), None)] + [(*c.split("=", 1), None) for c in a.compare]
    if a.lru:
        binaries.append(("igtcache, cache.eviction lru", harness.igtcache_bin(), ("cache.eviction", "lru")))
    for v in a.variant:
        label, key, value = v.split("=", 2)
        binaries.append((label, harness.igtcache_bin(), (key, value)))
    head = subprocess.run(["git", "-C", str(ROOT), "log", "--oneline", "-1"], capture_output=True,
                          text=True).stdout.strip()[:80]
    with harness.Session("bench-small-files") as s:
        src = s.mkdir("src")
        t0 = time.monotonic()
        PER_DIR = max(1, a.per_dir)
        rels = make_files(src, a.files, a.size)
        harness.log(f"  made {a.files} files in {time.monotonic() - t0:.0f} s")
        orders = []
        for seed in (7, 8, 9):  # one order per epoch, the same for every run
            orders.append(rels[:])
            random.Random(seed).shuffle(orders[-1])
        total = a.files * a.size
        base = {"lslr_s": ls_lr(src)}
        for ep in (1, 2, 3) if a.restart else (1, 2):
            base[f"ep{ep}_s"], got = read_pass(src, orders[ep - 1])
            if got != total:
                raise RuntimeError(f"source: read {got} bytes, expected {total}")
        harness.MOUNT_DEADLINE_S = 1800.0  # a restart over a million cached units took 85 s before 2026-11-24
        runs = [run_mount(s, label, binary, src, orders, total, a.cache_size, variant_args(s, i, setting),
                          (a.restart_cache_size or a.cache_size) if a.restart else None)
                for i, (label, binary, setting) in enumerate(binaries)]
        for r, (_, _, setting) in zip(runs, binaries):
            r["setting"] = setting
    text = render(a.files, a.size, a.cache_size, base, runs, datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), head,
                  a.restart_cache_size)
    print(text)
    if a.doc:
        replace_section(ROOT / "docs" / "BENCHMARKS.md", f"<!-- {a.section}:begin -->", f"<!-- {a.section}:end -->", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
