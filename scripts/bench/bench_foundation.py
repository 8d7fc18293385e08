"""Foundation figures for docs/BENCHMARKS.md (run by scripts/bench_foundation.sh;
never by the test suite). Needs root (drops the page cache).

(a) Warm sequential read of a 1 GiB file through an igtcache mount (file://
    source, cache warm, page cache dropped) vs reading the cache's own unit
    files directly, both with `cat` (and with `dd bs=1M` for the mount).
(b) The seeded 2,000-object bucket (tests/mount/dataset.py) on s3rver:
    cold read, then warm re-read after a remount with the same cache dir, for
    igtcache, s3fs (use_cache) and rclone (--vfs-cache-mode full), reading all
    files with `find | xargs -P4 cat`.

Every process is started by this script and stopped by pid (tests/mount/
harness.py Session); every mount is unmounted, temp dirs removed.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(ROOT / "tests" / "mount"))

import harness  # noqa: E402
from dataset import ensure_dataset  # noqa: E402
from e2e_systems import cpu_model, mount_external, replace_section, version  # noqa: E402  (shared with the e2e benchmark)

BUCKET = "igt-bench"
GiB = 1 << 30
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
READERS = 4  # parallel readers for the many-object read


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def timed_shell(cmd: str) -> float:
    drop_caches()
    t0 = time.monotonic()
    r = subprocess.run(["bash", "-c", cmd], capture_output=True)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"`{cmd}` exited {r.returncode}: {r.stderr.decode(errors='replace')[-500:]}")
    return dt


def q(p) -> str:
    return "'" + str(p).replace("'", "'\\''") + "'"


def read_tree_cmd(mnt: Path) -> str:
    return f"find {q(mnt)} -type f -print0 | xargs -0 -P{READERS} -n 64 cat > /dev/null"


def fmt_ratio(a, b):
    return f"{a / b:.2f}" if b else "n/a"


def bench_sequential(s: harness.Session) -> dict:
    src = s.mkdir("seq-src")
    big = src / "one_gib.bin"
    harness.log("  (a) writing a 1 GiB source file ...")
    with open(big, "wb") as f:
        chunk = os.urandom(16 << 20)
        for i in range(GiB // len(chunk)):
            f.write(chunk[i % 7:] + chunk[:i % 7])  # not all chunks identical
    cache = s.mkdir("seq-cache")
    m = s.mount(f"file://{src}", cache_dir=cache, args=["--cache-size", "4G"])
    t_cold = timed_shell(f"cat {q(m.mountpoint / big.name)} > /dev/null")
    st = s.stats(m)
    harness.log(f"  (a) cold read {t_cold:.2f}s; stats {st}")
    # Unmount and remount: the warm pass starts from a new daemon, page cache dropped.
    s.unmount(m)
    m = s.mount(f"file://{src}", cache_dir=cache, args=["--cache-size", "4G"])
    units = cache / "units"
    n_files = sum(len(fs) for _, _, fs in os.walk(units))
    unit_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(units) for f in fs)
    res = {"mount_cat": [], "mount_dd": [], "units_cat": []}
    for _ in range(REPEATS):
        res["mount_cat"].append(timed_shell(f"cat {q(m.mountpoint / big.name)} > /dev/null"))
        res["mount_dd"].append(timed_shell(f"dd if={q(m.mountpoint / big.name)} of=/dev/null bs=1M status=none"))
        res["units_cat"].append(timed_shell(
            f"find {q(units)} -type f -print0 | sort -z | xargs -0 cat > /dev/null"))
    st = s.stats(m)
    s.unmount(m)
    med = {k: statistics.median(v) for k, v in res.items()}
    out = {
        "cold_s": t_cold, "n_unit_files": n_files, "unit_bytes": unit_bytes,
        "warm_backend_gets": st["backend_get_requests"], **{f"{k}_s": v for k, v in med.items()},
        "runs": res,
    }
    harness.log(f"  (a) {out}")
    return out


def bench_bucket(s: harness.Session) -> dict:
    ds = ensure_dataset()
    srv = s.start_s3rver(buckets=(BUCKET,))
    srv.upload_tree(BUCKET, ds.root, [e.path for e in ds.files])
    results = {"objects": len(ds.files), "bytes": ds.total_bytes()}

    # igtcache
    cache = s.mkdir("b-igt-cache")
    args = ["--endpoint", srv.endpoint, "--region", "us-east-1", "--cache-size", "4G"]
    m = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=args)
    cold = timed_shell(read_tree_cmd(m.mountpoint))
    s.unmount(m)
    m = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=args)
    warm = timed_shell(read_tree_cmd(m.mountpoint))
    st = s.stats(m)
    s.unmount(m)
    results["igtcache"] = {"cold_s": cold, "warm_s": warm, "warm_backend_gets": st["backend_get_requests"]}
    harness.log(f"  (b) igtcache {results['igtcache']}")

    # s3fs
    pw = s.tmp / "s3fs.passwd"
    pw.write_text(f"{harness.S3_ACCESS_KEY}:{harness.S3_SECRET_KEY}\n")
    os.chmod(pw, 0o600)
    s3fs_cache = s.mkdir("b-s3fs-cache")

    def s3fs_mount():
        mnt = s.mkdir(f"b-s3fs-mnt{len(s.mounts)}")
        return mount_external(s, "s3fs", [
            "s3fs", BUCKET, str(mnt), "-f", "-o", f"url={srv.endpoint}", "-o", "use_path_request_style",
            "-o", f"use_cache={s3fs_cache}", "-o", f"passwd_file={pw}", "-o", "ro"], mnt)

    m = s3fs_mount()
    cold = timed_shell(read_tree_cmd(m.mountpoint))
    s.unmount(m)
    m = s3fs_mount()
    warm = timed_shell(read_tree_cmd(m.mountpoint))
    s.unmount(m)
    results["s3fs"] = {"cold_s": cold, "warm_s": warm}
    harness.log(f"  (b) s3fs {results['s3fs']}")

    # rclone
    rc_cache = s.mkdir("b-rclone-cache")
    rc_conf = s.tmp / "rclone.conf"
    rc_conf.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env["RCLONE_CONFIG"] = str(rc_conf)

    def rclone_mount():
        mnt = s.mkdir(f"b-rclone-mnt{len(s.mounts)}")
        return mount_external(s, "rclone", [
            "rclone", "mount", f":s3:{BUCKET}", str(mnt), "--s3-provider", "Other",
            "--s3-endpoint", srv.endpoint, "--s3-access-key-id", harness.S3_ACCESS_KEY,
            "--s3-secret-access-key", harness.S3_SECRET_KEY, "--s3-force-path-style",
            "--vfs-cache-mode", "full", "--cache-dir", str(rc_cache), "--read-only"], mnt, env)

    m = rclone_mount()
    cold = timed_shell(read_tree_cmd(m.mountpoint))
    s.unmount(m)
    m = rclone_mount()
    warm = timed_shell(read_tree_cmd(m.mountpoint))
    s.unmount(m)
    results["rclone"] = {"cold_s": cold, "warm_s": warm}
    harness.log(f"  (b) rclone {results['rclone']}")
    return results


def render(a: dict, b: dict) -> str:
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    vers = {
        "igtcache": version([harness.igtcache_bin(), "--version"]),
        "s3fs": version(["s3fs", "--version"]),
        "rclone": version(["rclone", "version"]),
        "s3rver": version(["node", str(harness.S3RVER_JS), "--version"]),
        "kernel": platform.release(),
    }
    load = open("/proc/loadavg").read().split()[:3]
    gib = GiB / (1 << 20)
    L = []
    L.append("## Foundation figures (issue 2)\n")
    L.append(f"Produced by `scripts/bench_foundation.sh` on {now}. Machine: {os.cpu_count()} CPUs "
             f"({cpu_model()}), {round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GiB)} GiB RAM, "
             f"load average at the end {' '.join(load)} (a shared machine: figures are noisy). "
             f"Versions: " + "; ".join(f"{k} `{v}`" for k, v in vers.items()) + ".\n")
    if a is not None:
        render_a(L, a, gib)
    if b is not None:
        render_b(L, b)
    return "\n".join(L)


def render_a(L: list, a: dict, gib: float) -> None:
    L.append("### (a) Warm sequential read of a 1 GiB file\n")
    L.append("Source `file://` (local dir), default 1 MiB units. The cache is warmed by one read, the "
             "daemon restarted, then each run drops the page cache (`echo 3 > /proc/sys/vm/drop_caches`) "
             f"first. Median of {REPEATS} runs.\n")
    L.append("| read | seconds | MiB/s | ratio to unit files |")
    L.append("|---|---:|---:|---:|")
    base = a["units_cat_s"]
    for label, k in [("`cat` of the cache's unit files directly "
                      f"({a['n_unit_files']} files, {a['unit_bytes'] / (1 << 20):.0f} MiB incl. headers)", "units_cat_s"),
                     ("`cat` of the file through the mount", "mount_cat_s"),
                     ("`dd bs=1M` of the file through the mount", "mount_dd_s")]:
        L.append(f"| {label} | {a[k]:.2f} | {gib / a[k]:.0f} | {fmt_ratio(base, a[k])} |")
    L.append("")
    L.append(f"**Warm mount / direct unit files (cat): {fmt_ratio(base, a['mount_cat_s'])}** (throughput ratio; "
             f"aim >= 0.7). Backend GETs during the warm runs: {a['warm_backend_gets']}. "
             f"Cold first read through the mount: {a['cold_s']:.2f} s. "
             "All runs (s): " + "; ".join(f"{k} " + ", ".join(f"{x:.2f}" for x in v)
                                          for k, v in a["runs"].items()) + ".\n")


def render_b(L: list, b: dict) -> None:
    L.append("### (b) 2,000-object bucket on s3rver: cold read, warm re-read after a remount\n")
    L.append(f"The seeded test bucket of `tests/mount/dataset.py`: {b['objects']} objects, "
             f"{b['bytes'] / 1e6:.0f} MB (0 B .. 64 MiB, mostly small), served by s3rver on 127.0.0.1. "
             f"Each tool mounts with an empty cache dir, reads every file (`find -type f | xargs -0 "
             f"-P{READERS} -n 64 cat`), unmounts, mounts again with the same cache dir and reads "
             "everything again; page cache dropped before each pass. One run each, same session.\n")
    L.append("| tool | cold s | warm s | cold MB/s | warm MB/s | cold ratio (tool / igtcache) | warm ratio (tool / igtcache) |")
    L.append("|---|---:|---:|---:|---:|---:|---:|")
    ig = b["igtcache"]
    for tool, opts in [("igtcache", "defaults"), ("s3fs", "`use_cache`"), ("rclone", "`--vfs-cache-mode full`")]:
        r = b[tool]
        L.append(f"| {tool} ({opts}) | {r['cold_s']:.2f} | {r['warm_s']:.2f} | {b['bytes'] / 1e6 / r['cold_s']:.0f} | "
                 f"{b['bytes'] / 1e6 / r['warm_s']:.0f} | {fmt_ratio(r['cold_s'], ig['cold_s'])} | "
                 f"{fmt_ratio(r['warm_s'], ig['warm_s'])} |")
    L.append("")
    L.append(f"Ratios > 1 mean the other tool took longer than igtcache. igtcache backend GETs during "
             f"the warm pass: {ig['warm_backend_gets']} (from `igtcache stats`; the other tools' "
             "backend traffic is not measured here).\n")


def write_section(text: str) -> Path:
    doc = ROOT / "docs" / "BENCHMARKS.md"
    replace_section(doc, "<!-- foundation:begin -->", "<!-- foundation:end -->", text)
    return doc


def main():
    import argparse
    ap = argparse.ArgumentParser(description="igtcache foundation figures -> docs/BENCHMARKS.md")
    ap.add_argument("--parts", default="a,b", help="a (1 GiB sequential), b (bucket vs s3fs/rclone)")
    ap.add_argument("--no-doc", action="store_true", help="print only, leave docs/BENCHMARKS.md alone")
    opts = ap.parse_args()
    parts = set(opts.parts.split(","))
    if os.geteuid() != 0:
        sys.exit("bench_foundation: must run as root (drops the page cache)")
    a = b = None
    with harness.Session("bench") as s:
        if "a" in parts:
            a = bench_sequential(s)
        if "b" in parts:
            b = bench_bucket(s)
    text = render(a, b)
    if opts.no_doc:
        print(text)
        return
    doc = write_section(text)
    print(text)
    print(f"bench_foundation: wrote the foundation section of {doc}")


if __name__ == "__main__":
    main()
