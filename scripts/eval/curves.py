#!/usr/bin/python3
"""Per-class hit-ratio curves for docs/POLICIES.md: the formulas next to
`igtcache sim` runs on small synthetic traces (eviction only: every prefetch
module set to `none`), igt against lru, at cache sizes 5..95% of the data.

Writes docs/img/policy_curves.png.
"""
import argparse
import json
import math
import os
import random
import subprocess

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

KIB, MIB = 1024, 1 << 20


def write(path, rows):
    with open(path, "w") as f:
        f.write("time_us,pid,path,offset,length,file_size\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")


def traces(d):
    rng = random.Random(3)
    # Uniform: 1000 one-unit files, 6 shuffled epochs.
    rows, t = [], 0
    names = [f"data/train/s_{i:05d}" for i in range(1000)]
    for _ in range(6):
        rng.shuffle(names)
        for n in names:
            rows.append((t, 1, n, 0, 256 * KIB, 256 * KIB))
            t += 1000
    write(os.path.join(d, "c_uniform.csv"), rows)
    # Sequential: one 400-unit file scanned 5 times.
    rows, t = [], 0
    for _ in range(5):
        for i in range(400):
            rows.append((t, 1, "ckpt/model.bin", i * MIB, MIB, 400 * MIB))
            t += 1000
    write(os.path.join(d, "c_seq.csv"), rows)
    # Skewed: Zipf(1.0) over 2000 one-unit files, 60000 reads.
    n, s = 2000, 1.0
    cdf, acc = [], 0.0
    for i in range(1, n + 1):
        acc += i ** -s
        cdf.append(acc)
    import bisect
    perm = list(range(n))
    rng.shuffle(perm)
    rows, t = [], 0
    for _ in range(60000):
        k = min(bisect.bisect_left(cdf, rng.random() * acc), n - 1)
        rows.append((t, 1, f"items/i_{perm[k]:05d}", 0, 256 * KIB, 256 * KIB))
        t += 1000
    write(os.path.join(d, "c_zipf.csv"), rows)
    return cdf, acc


def sim(binary, trace, size, policy, config):
    r = subprocess.run([binary, "sim", "--trace", trace, "--cache-size", str(size), "--policy", policy,
                        "--config", config], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["byte_hit_ratio"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--img", required=True)
    a = ap.parse_args()
    cdf, acc = traces(a.dir)
    pol = os.path.join(a.dir, "noprefetch.yaml")
    with open(pol, "w") as f:
        f.write("patterns:\n" + "".join(f"  {p}: {{prefetch: none}}\n" for p in
                                        ("sequential", "random", "skewed", "unknown")))
    cfg = os.path.join(a.dir, "noprefetch-config.yaml")
    with open(cfg, "w") as f:
        f.write(f"policy:\n  file: {pol}\n")
    fr = [0.05, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.95]

    def measured(ax, trace, d_bytes):
        """igt and lru in the simulator on `trace` (D = d_bytes) at each fraction."""
        for policy, fmt in (("igt", "C3o"), ("lru", "C0s")):
            ax.plot(fr, [sim(a.bin, os.path.join(a.dir, trace), int(d_bytes * f), policy, cfg) for f in fr],
                    fmt, label=f"{policy} (sim)")

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    xs = [x / 100 for x in range(1, 100)]
    # Uniform epochs (6 epochs: the first is cold, so measured = 5/6 of the steady state).
    ax = axes[0]
    ax.plot(xs, [x * 5 / 6 for x in xs], "C3-", label="keep: c/D (x 5/6 warm epochs)")
    ax.plot(xs, [(1 - (1 - x) + (1 - x) * math.log(1 - x)) * 5 / 6 for x in xs], "C0-",
            label="LRU: 1 - t + t ln t, t = 1 - c/D (x 5/6)")
    measured(ax, "c_uniform.csv", 1000 * 256 * KIB)
    ax.set_title("random (epoch-shuffled), D = 1000 items")
    # Sequential cyclic scan (5 passes, first cold: 4/5).
    ax = axes[1]
    ax.plot(xs, [x * 4 / 5 for x in xs], "C3-", label="evict-behind, kept prefix: c/D (x 4/5)")
    ax.plot(xs, [0 for _ in xs], "C0-", label="LRU: 0")
    measured(ax, "c_seq.csv", 400 * MIB)
    ax.set_title("sequential (a 400 MiB file scanned 5 times)")
    # Skewed.
    ax = axes[2]
    ax.plot(xs, [cdf[max(0, int(x * 2000) - 1)] / acc for x in xs], "C3-", label="top-k mass (LFU limit)")
    measured(ax, "c_zipf.csv", 2000 * 256 * KIB)
    ax.set_title("skewed (Zipf s = 1.0, 2000 items)")
    for ax in axes:
        ax.set_xlabel("cache size c / data size D")
        ax.set_ylabel("byte hit ratio")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7.5)
    fig.tight_layout()
    fig.savefig(os.path.join(a.img, "policy_curves.png"), dpi=90)


if __name__ == "__main__":
    main()
