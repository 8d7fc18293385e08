"""End-to-end benchmark (issue 5): igtcache vs s3fs (use_cache) vs rclone
(--vfs-cache-mode full) on an emulated cloud, six AI-workload cases plus the
FUSE limit. Run by scripts/bench_e2e.sh (root: it drops the page cache and
loop-mounts s3fs's cache file system); never by the test suite.

Flow: s3rver (127.0.0.1) is seeded directly (threads, kept-alive
connections), then every system talks to it through scripts/cloudproxy.py
(time to first byte log-normal, median 25 ms, sigma 0.6, LIST 100 ms;
90 MB/s per connection). For each case and system: a fresh empty cache dir
with the case's cache limit, a mount, the page cache dropped, the workload
process(es) from e2e_workloads.py (which check every byte they read), proxy
counters, igtcache stats, the cache's size on disk, unmount, cache removed.
Results go to JSON and, through e2e_report.py, to the e2e section of
docs/BENCHMARKS.md (between <!-- e2e:begin --> and <!-- e2e:end -->) and
PNG plots in docs/img/.

Everything started here is stopped by pid and every mount is unmounted
(tests/mount/harness.py Session + e2e_systems.cleanup_loops), on success,
failure and Ctrl-C alike.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(ROOT / "tests" / "mount"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import faultlib  # noqa: E402
import e2e_data as D  # noqa: E402
import e2e_systems as S  # noqa: E402

WORKLOADS = Path(__file__).resolve().parent / "e2e_workloads.py"
PY = "/usr/bin/python3"   # Debian's python with python3-torch
PROXY_ARGS = {"ttfb_ms": 25, "ttfb_sigma": 0.6, "ttfb_max_ms": 1000, "list_ttfb_ms": 100, "bandwidth": "90M"}
SEED = 42

log = harness.log


class Ctx:
    def __init__(self, s: harness.Session, sc: D.Scale, man_path: Path, man: D.Manifest,
                 proxy: faultlib.Proxy, systems: list[str], timeout: float):
        self.s, self.sc, self.man_path, self.man, self.proxy = s, sc, man_path, man, proxy
        self.systems, self.timeout = systems, timeout


def workload_argv(ctx: Ctx, root: Path, *args: str) -> list[str]:
    return [PY, str(WORKLOADS), "--manifest", str(ctx.man_path), "--root", str(root),
            "--seed", str(SEED), *args]


_workloads: list[subprocess.Popen] = []   # every workload we started (main thread only)


def start_workload(ctx: Ctx, root: Path, *args: str) -> subprocess.Popen:
    # Own session: on a timeout we kill the workload's process group (its id
    # is the pid we started), DataLoader workers included.
    p = subprocess.Popen(workload_argv(ctx, root, *args), stdout=subprocess.PIPE, stderr=None,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    _workloads.append(p)
    return p


def stop_workloads() -> None:
    """Kills the process group of every workload of ours still running."""
    for p in _workloads:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                log(f"  warn: workload pid {p.pid} did not exit after SIGKILL (stuck on a mount?)")


def finish_workload(ctx: Ctx, p: subprocess.Popen, what: str, deadline: float, dnf_s: float = 0) -> dict:
    """The workload's JSON result. Past the deadline it is killed: with
    dnf_s > 0 that is a result ({"dnf_s": dnf_s}: did not finish within),
    otherwise an error (a hang)."""
    try:
        out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            log(f"  warn: {what} pid {p.pid} still there 60s after SIGKILL (stuck on the mount)")
        if dnf_s:
            log(f"   {what}: stopped after {dnf_s:.0f}s (did not finish)")
            return {"dnf_s": dnf_s, "bad": 0}
        raise RuntimeError(f"{what}: no result after {ctx.timeout:.0f}s (hang?)")
    if p.returncode != 0:
        raise RuntimeError(f"{what}: exited {p.returncode}: {out.decode(errors='replace')[-1000:]}")
    lines = out.decode().strip().splitlines()
    return json.loads(lines[-1])


def run_workload(ctx: Ctx, root: Path, *args: str) -> dict:
    t0 = time.monotonic()
    p = start_workload(ctx, root, *args)
    r = finish_workload(ctx, p, " ".join(args), time.monotonic() + ctx.timeout)
    r["wall_s"] = time.monotonic() - t0
    return r


def on_system(ctx: Ctx, system: str, tag: str, limit: int, body) -> dict:
    """Mounts `system` with an empty cache of `limit` bytes, runs body(r) ->
    dict, adds backend (proxy) traffic, igtcache stats and cache bytes on
    disk, tears down. A failure is recorded, not fatal."""
    log(f"-- {tag} on {system} (cache limit {limit >> 20} MiB)")
    r = None
    try:
        r = S.Running(ctx.s, system, ctx.proxy.endpoint, D.BUCKET, limit, tag)
        ctx.proxy.control("POST", "/reset-stats", {})
        S.drop_caches()
        res = body(r)
        ps = ctx.proxy.stats()
        res["backend"] = {"requests": ps["requests"], "bytes": ps["response_bytes"],
                          "by_method": ps.get("requests_by_method", {})}
        res["igt_stats"] = r.stats()
        res["cache_bytes_end"] = r.cache_bytes()
        if not r.alive():
            res["error"] = f"{system} daemon exited during the run: {r.mount.proc.stderr_text()[-800:]}"
        log(f"   {tag}/{system}: {json.dumps(summary(res))[:600]}")
        return res
    except Exception as e:
        tb = traceback.format_exc()
        log(f"   {tag}/{system} FAILED: {e}\n{tb}")
        err = {"error": f"{type(e).__name__}: {e}"}
        if r is not None and r.mount is not None and r.mount.proc is not None:
            err["daemon_stderr_tail"] = r.mount.proc.stderr_text()[-1500:]
        return err
    finally:
        if r is not None:
            try:
                r.destroy()
            except Exception as e:
                log(f"   teardown of {system}: {e}")


def summary(res: dict) -> dict:
    return {k: v for k, v in res.items() if k not in ("igt_stats",)}


# ---------------------------------------------------------------------------
# Cases.

def case1(ctx: Ctx) -> dict:
    sc, out = ctx.sc, {}
    for variant, cls, set_name in (("2x", 0, "train_big"), ("0.5x", sc.small_classes, "train_small")):
        out[variant] = {"dataset_bytes": ctx.man.total(set_name), "files": len(ctx.man.sets[set_name]),
                        "cache": sc.train_cache}
        for system in ctx.systems:
            out[variant][system] = on_system(
                ctx, system, f"c1-{variant}", sc.train_cache,
                lambda r: run_workload(ctx, r.root, "train", "--set", set_name, "--classes", str(cls),
                                       "--epochs", str(sc.train_epochs)))
    return out


def case2(ctx: Ctx) -> dict:
    sc = ctx.sc
    out = {"dataset_bytes": ctx.man.total("shards"), "shards": len(ctx.man.sets["shards"]), "cache": sc.shard_cache}
    for system in ctx.systems:
        out[system] = on_system(ctx, system, "c2", sc.shard_cache,
                                lambda r: run_workload(ctx, r.root, "shards", "--epochs", str(sc.shard_epochs)))
    return out


def fuse_limit(ctx: Ctx, r: S.Running) -> dict:
    """Warm reads of the weights file through the igtcache mount vs the same
    reads of the cache's own unit files (no hashing: raw read speed)."""
    key = ctx.man.sets["model"][0]
    size = ctx.man.objects[key]["size"]
    units = sorted(str(p) for p in (r.cache_dir / "units").rglob("*") if p.is_file())
    unit_sizes = [os.path.getsize(u) for u in units]

    def seq(paths):
        S.drop_caches()
        t0, n = time.monotonic(), 0
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            try:
                while True:
                    b = os.read(fd, 1 << 20)
                    if not b:
                        break
                    n += len(b)
            finally:
                os.close(fd)
        return n, time.monotonic() - t0

    rng = random.Random(SEED)
    n_rand = ctx.sc.fuse_rand_reads

    def rand_mount():
        offs = [rng.randrange(size // 4096) * 4096 for _ in range(n_rand)]
        S.drop_caches()
        fd = os.open(str(r.root / key), os.O_RDONLY)
        try:
            t0 = time.monotonic()
            for o in offs:
                os.pread(fd, 4096, o)
            return time.monotonic() - t0
        finally:
            os.close(fd)

    def rand_units():
        picks = []
        for _ in range(n_rand):
            i = rng.randrange(len(units))
            picks.append((i, rng.randrange(max(1, unit_sizes[i] // 4096)) * 4096))
        S.drop_caches()
        fds = [os.open(u, os.O_RDONLY) for u in units]
        try:
            t0 = time.monotonic()
            for i, o in picks:
                os.pread(fds[i], 4096, o)
            return time.monotonic() - t0
        finally:
            for fd in fds:
                os.close(fd)

    n_m, t_m = seq([str(r.root / key)])
    n_u, t_u = seq(units)
    tr_m, tr_u = rand_mount(), rand_units()
    out = {"unit_files": len(units), "unit_bytes": sum(unit_sizes),
           "seq_mount_mb_s": n_m / 1e6 / t_m, "seq_units_mb_s": n_u / 1e6 / t_u,
           "rand_mount_iops": n_rand / tr_m, "rand_units_iops": n_rand / tr_u}
    out["seq_ratio"] = out["seq_mount_mb_s"] / out["seq_units_mb_s"]
    out["rand_ratio"] = out["rand_mount_iops"] / out["rand_units_iops"]
    log(f"   FUSE limit: {out}")
    return out


def case3(ctx: Ctx, want_fuse: bool) -> dict:
    sc = ctx.sc
    out = {"model_bytes": sc.model_bytes, "cache": sc.model_cache, "faults": sc.mmap_faults}

    def seq_body(r):
        cold = run_workload(ctx, r.root, "model", "--part", "seq")
        S.drop_caches()
        warm = run_workload(ctx, r.root, "model", "--part", "seq")
        res = {"cold": cold["seq"], "warm": warm["seq"], "bad": cold["bad"] + warm["bad"]}
        if r.system == "igtcache" and want_fuse:
            try:
                res["fuse_limit"] = fuse_limit(ctx, r)
            except Exception as e:
                res["fuse_limit"] = {"error": f"{type(e).__name__}: {e}"}
        return res

    def mmap_body(r):
        cold = run_workload(ctx, r.root, "model", "--part", "mmap", "--faults", str(sc.mmap_faults))
        S.drop_caches()
        warm = run_workload(ctx, r.root, "model", "--part", "mmap", "--faults", str(sc.mmap_faults))
        return {"cold": cold["mmap"], "warm": warm["mmap"], "bad": cold["bad"] + warm["bad"]}

    for system in ctx.systems:
        out[system] = {"seq": on_system(ctx, system, "c3-seq", sc.model_cache, seq_body),
                       "mmap": on_system(ctx, system, "c3-mmap", sc.model_cache, mmap_body)}
    return out


def case4(ctx: Ctx) -> dict:
    sc = ctx.sc
    out = {"file_bytes": sc.skew_file_bytes, "files": len(ctx.man.sets["infer"]),
           "files_bytes": ctx.man.total("infer"), "cache": sc.skew_cache, "reads": sc.skew_reads,
           "zipf_s": sc.zipf_s}
    for system in ctx.systems:
        out[system] = {}
        for part in ("file", "files"):
            out[system][part] = on_system(
                ctx, system, f"c4-{part}", sc.skew_cache,
                lambda r: run_workload(ctx, r.root, "skew", "--part", part, "--reads", str(sc.skew_reads),
                                       "--zipf", str(sc.zipf_s), "--max-seconds", str(sc.skew_max_s)))
    return out


def case5(ctx: Ctx) -> dict:
    sc = ctx.sc
    out = {"cache": sc.mix_cache, "train_bytes": ctx.man.total("train_big"), "model_bytes": sc.model_bytes,
           "skew_bytes": sc.skew_file_bytes + ctx.man.total("infer")}

    def body(r):
        t_launch = time.time()
        deadline = time.monotonic() + sc.mix_max_s
        jobs = {
            "train": start_workload(ctx, r.root, "train", "--set", "train_big", "--epochs", str(sc.train_epochs)),
            "model": start_workload(ctx, r.root, "model", "--part", "both", "--faults", str(sc.mmap_faults)),
            "skew": start_workload(ctx, r.root, "skew", "--part", "both", "--reads", str(sc.skew_reads),
                                   "--zipf", str(sc.zipf_s), "--max-seconds", str(sc.mix_max_s)),
        }
        res, err = {}, None
        for name, p in jobs.items():
            try:
                res[name] = finish_workload(ctx, p, f"mix/{name}", deadline, dnf_s=sc.mix_max_s)
                if "dnf_s" not in res[name]:
                    res[name]["done_s"] = res[name]["t_end"] - t_launch
            except Exception as e:
                err = err or e
                for q in jobs.values():  # do not leave the others running
                    if q.poll() is None:
                        try:
                            os.killpg(q.pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
        if err:
            raise err
        if all("done_s" in v for v in res.values()):
            res["total_s"] = max(v["done_s"] for v in res.values())
        else:
            res["total_dnf_s"] = sc.mix_max_s
        res["bad"] = sum(v["bad"] for v in res.values() if isinstance(v, dict))
        return res

    for system in ctx.systems:
        out[system] = on_system(ctx, system, "c5", sc.mix_cache, body)
    return out


def case6(ctx: Ctx) -> dict:
    sc = ctx.sc
    out = {"objects": len(ctx.man.sets["meta"]), "cache": sc.train_cache}

    def body(r):
        cold = run_workload(ctx, r.root, "meta", "--max-seconds", str(sc.meta_max_s))
        r.remount()
        S.drop_caches()
        again = run_workload(ctx, r.root, "meta", "--max-seconds", str(sc.meta_max_s))
        return {"cold": cold, "remount": again, "bad": cold["bad"] + again["bad"]}

    for system in ctx.systems:
        out[system] = on_system(ctx, system, "c6", sc.train_cache, body)
    return out


# ---------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description="igtcache end-to-end benchmark -> docs/BENCHMARKS.md (e2e section)")
    ap.add_argument("--quick", action="store_true", help="small scale, a few minutes (for development)")
    ap.add_argument("--cases", default="1,2,3,4,5,6", help="comma list of 1..6 (FUSE limit runs with 3)")
    ap.add_argument("--systems", default=",".join(S.SYSTEMS))
    ap.add_argument("--no-doc", action="store_true", help="leave docs/ alone (results JSON only)")
    ap.add_argument("--results", default="", help="results JSON path (default build/bench-e2e/results-<scale>.json)")
    ap.add_argument("--render-only", default="", help="render docs from an existing results JSON")
    opts = ap.parse_args()
    import e2e_report
    if opts.render_only:
        res = json.loads(Path(opts.render_only).read_text())
        e2e_report.write(res)
        return
    if os.geteuid() != 0:
        sys.exit("bench_e2e: must run as root (drops the page cache, loop-mounts s3fs's cache fs)")
    sc = D.QUICK if opts.quick else D.FULL
    cases = [c.strip() for c in opts.cases.split(",") if c.strip()]
    systems = [x for x in opts.systems.split(",") if x]
    t_start = time.monotonic()
    res = {"scale": sc.__dict__, "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
           "machine": {"nproc": os.cpu_count(), "cpu": S.cpu_model(),
                       "ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / D.GiB),
                       "kernel": platform.release()},
           "versions": S.versions(), "proxy": PROXY_ARGS, "systems": systems, "cases": {}}
    try:
        st = os.stat(harness.igtcache_bin())
        res["igtcache_binary"] = {"path": harness.igtcache_bin(),
                                  "built": datetime.datetime.fromtimestamp(st.st_mtime).strftime("%Y-%m-%d %H:%M")}
    except OSError:
        pass
    try:
        res["git"] = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"],
                                    capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    with harness.Session("bench-e2e") as s:
        try:
            srv = s.start_s3rver(buckets=(D.BUCKET,))
            log(f"== seeding ({sc.name} scale)")
            man, seed_info = D.seed_bucket(srv, sc, log=log)
            res["seed"] = seed_info
            man_path = s.tmp / "manifest.json"
            man.save(man_path)
            pa = PROXY_ARGS
            proxy = faultlib.start_proxy(s, srv.endpoint, ttfb_ms=pa["ttfb_ms"], bandwidth=pa["bandwidth"],
                                         extra=["--ttfb-sigma", str(pa["ttfb_sigma"]), "--ttfb-max-ms",
                                                str(pa["ttfb_max_ms"]), "--list-ttfb-ms", str(pa["list_ttfb_ms"]),
                                                "--seed", "1"])
            ctx = Ctx(s, sc, man_path, man, proxy, systems, timeout=1800 if sc.name == "full" else 600)
            fns = {"1": case1, "2": case2, "3": lambda c: case3(c, True), "4": case4, "5": case5, "6": case6}
            for c in cases:
                log(f"== case {c}")
                t0 = time.monotonic()
                res["cases"][c] = fns[c](ctx)
                res["cases"][c]["case_wall_s"] = time.monotonic() - t0
                log(f"== case {c} done in {time.monotonic() - t0:.0f}s")
        finally:
            stop_workloads()
            S.cleanup_loops()
    res["total_wall_s"] = time.monotonic() - t_start
    res["load_end"] = open("/proc/loadavg").read().split()[:3]
    out = Path(opts.results) if opts.results else ROOT / "build" / "bench-e2e" / f"results-{sc.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    log(f"bench_e2e: results in {out} ({res['total_wall_s']:.0f}s)")
    if not opts.no_doc:
        e2e_report.write(res)


if __name__ == "__main__":
    main()
