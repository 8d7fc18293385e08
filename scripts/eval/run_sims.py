#!/usr/bin/python3
"""Runs `igtcache sim` for every workload trace, cache size and policy.

Writes <dir>/results.json: {"workloads": {w: {"working_set": bytes,
"runs": [sim JSON, ...]}}}. The working set is the bytes of distinct cache
units (1 MiB, or whole small files) the trace touches. Standard library only.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

POLICIES = ["igt", "lru", "lfu", "fifo", "2random", "lru-readahead", "belady"]
# Extra rows: igt with the profile a user would pick for that job (the main
# row runs every workload with the default, `training`).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXTRA = {"c": [("igt, profile checkpoint-loading", os.path.join(ROOT, "examples", "policy-checkpoint-loading.yaml"))]}
# Extra rows on every workload: baselines with 64 KiB units, the piece igt
# fetches on a miss in a file it reads at random (a reviewer: (d)'s 64 KiB
# rows cost the 1 MiB-unit baselines 16x their bytes). Named "<policy> @64K".
SMALL_UNIT = "64K"
SMALL_UNIT_POLICIES = ["lru", "lfu", "belady"]
FRACTIONS = [0.10, 0.25, 0.50, 0.75]
UNIT = 1 << 20


def working_set(path):
    seen = set()
    total = 0
    with open(path) as f:
        for r in csv.DictReader(f):
            off, ln, fs = int(r["offset"]), int(r["length"]), int(r["file_size"])
            if ln == 0 or off >= fs:
                continue
            end = min(off + ln, fs)
            for i in range(off // UNIT, (end - 1) // UNIT + 1):
                k = (r["path"], i)
                if k not in seen:
                    seen.add(k)
                    total += min(UNIT, fs - i * UNIT)
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--jobs", type=int, default=2)  # the machine has 2 cores
    a = ap.parse_args()
    small = [f"{p} @{SMALL_UNIT}" for p in SMALL_UNIT_POLICIES]
    out = {"seed": a.seed, "fractions": FRACTIONS, "policies": POLICIES,
           "extra_policies": {w: [name for name, _ in EXTRA.get(w, [])] + small for w in "abcdefg"},
           "small_unit_policies": small, "workloads": {}}
    jobs = []
    for w in ["a", "b", "c", "d", "e", "f", "g"]:
        trace = os.path.join(a.dir, f"{w}.csv")
        ws = working_set(trace)
        out["workloads"][w] = {"working_set": ws, "runs": []}
        for fr in FRACTIONS:
            for p in POLICIES:
                jobs.append((w, trace, int(ws * fr), fr, p, None, None))
            for i, (name, policy_file) in enumerate(EXTRA.get(w, [])):
                cfg = os.path.join(a.dir, f"extra-{w}-{i}.yaml")
                with open(cfg, "w") as f:
                    f.write(f"policy:\n  file: {policy_file}\n")
                jobs.append((w, trace, int(ws * fr), fr, "igt", cfg, name))
            for p, name in zip(SMALL_UNIT_POLICIES, small):
                jobs.append((w, trace, int(ws * fr), fr, p, None, name, ["--unit-size", SMALL_UNIT]))

    def run(job):
        w, trace, size, fr, p, cfg, name, *extra = job
        # The data set's listing (every object, read or not), as a mount lists it.
        listing = trace[:-len(".csv")] + ".listing.csv"
        cmd = [a.bin, "sim", "--trace", trace, "--listing", listing, "--cache-size", str(size), "--policy", p]
        if cfg:
            cmd += ["--config", cfg]
        for args in extra:
            cmd += args
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"sim failed: {w} {name or p} {size}: {r.stderr}")
        j = json.loads(r.stdout)
        if name:
            j["policy"] = name
        j["fraction"] = fr
        return w, j

    with ThreadPoolExecutor(a.jobs) as ex:
        for w, j in ex.map(run, jobs):
            out["workloads"][w]["runs"].append(j)
            print(f"{w} {j['fraction']:.2f} {j['policy']:14s} bhr {j['byte_hit_ratio']:.3f} "
                  f"t {j['modeled_time_s']:.1f}", file=sys.stderr)
    with open(os.path.join(a.dir, "results.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
