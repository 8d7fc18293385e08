#!/usr/bin/python3
"""Writes docs/EVALUATION.md and its PNG plots from run_sims.py's results."""
import argparse
import csv
import datetime
import heapq
import json
import os
import platform
import random
import subprocess

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NAMES = {"a": "(a) image training, shuffled epochs", "b": "(b) shard training",
         "c": "(c) model loading", "d": "(d) skewed inference", "e": "(e) preprocessing scan",
         "f": "(f) all interleaved (the mix)", "g": "(g) image training over 1,000 class directories"}
BASELINES = ["lru", "lfu", "fifo", "2random", "lru-readahead"]
# Fixed colours: igt red and thick, belady black dashed, baselines never red.
STYLE = {"igt": dict(lw=2.5, color="C3"), "belady": dict(ls="--", color="k"), "lru": dict(color="C0"),
         "lfu": dict(color="C1"), "fifo": dict(color="C2"), "2random": dict(color="C4"),
         "lru-readahead": dict(color="C9")}


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.node() or 'host'}: {cpu}, {os.cpu_count()} cores, Linux {platform.release()}"


def gib(b):
    return f"{b / 2**30:.2f} GiB"


def table(w, data, fractions, policies):
    runs = {(r["policy"], r["fraction"]): r for r in data["runs"]}
    head = "| policy | " + " | ".join(f"{int(f * 100)}% ({gib(data['working_set'] * f)})" for f in fractions) + " |"
    sep = "|---|" + "---|" * len(fractions)
    lines = [
        "Byte hit ratio / request hit ratio / modeled time (s) / total reader stall (s):", "",
        head, sep]
    for p in policies:
        cells = []
        for f in fractions:
            r = runs.get((p, f))
            if not r:
                cells.append("-")
                continue
            cells.append(f"{r['byte_hit_ratio']:.3f} / {r['hit_ratio']:.3f} / {r['modeled_time_s']:.1f} / "
                         f"{r['details']['stall_time_s']:.0f}")
        name = f"**{p}**" if p == "igt" else p
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_grid(res, img, metric, ylabel, fname, ylim):
    """One panel per workload: `metric` of every policy against cache size."""
    fractions = res["fractions"]
    fig, axes = plt.subplots(2, 4, figsize=(20, 8.5))
    for ax in axes.flat[len(NAMES):]:
        ax.set_visible(False)
    for ax, w in zip(axes.flat, sorted(NAMES)):
        runs = res["workloads"][w]["runs"]
        for p in res["policies"]:
            ys = [next(r[metric] for r in runs if r["policy"] == p and r["fraction"] == f) for f in fractions]
            ax.plot([f * 100 for f in fractions], ys, marker="o", label=p, **STYLE.get(p, {}))
        ax.set_title(NAMES[w], fontsize=10)
        ax.set_xlabel("cache size (% of working set)")
        ax.set_ylabel(ylabel)
        ax.set_ylim(**ylim)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(img, fname), dpi=90)
    plt.close(fig)


def plots(res, img):
    plot_grid(res, img, "byte_hit_ratio", "byte hit ratio", "eval_hit_ratio.png", {"bottom": 0, "top": 1.02})
    plot_grid(res, img, "modeled_time_s", "modeled time (s)", "eval_time.png", {"bottom": 0})


def aims(res):
    runs = res["workloads"]["f"]["runs"]
    get = lambda p, f: next(r for r in runs if r["policy"] == p and r["fraction"] == f)  # noqa: E731
    out = []
    for f in (0.25, 0.50):
        ratio = get("igt", f)["byte_hit_ratio"] / max(1e-9, get("lru", f)["byte_hit_ratio"])
        out.append((f"igt byte hit ratio >= 1.56x lru at {int(f * 100)}%", ratio >= 1.56, f"{ratio:.2f}x"))

    def above(baselines):
        """Whether igt reads more from the cache than each of `baselines` at every size, and the figures."""
        ok, worst = True, []
        for f in res["fractions"]:
            igt = get("igt", f)["byte_hit_ratio"]
            best = max(baselines, key=lambda p: get(p, f)["byte_hit_ratio"])
            ok = ok and igt > get(best, f)["byte_hit_ratio"]
            worst.append(f"{int(f * 100)}%: {igt:.3f} vs {best} {get(best, f)['byte_hit_ratio']:.3f}")
        return ok, "; ".join(worst)

    out.append(("igt byte hit ratio higher than every baseline at every size", *above(BASELINES)))
    # The same with the baselines at 64 KiB units (not belady: a reference).
    small = [p for p in res.get("small_unit_policies", []) if not p.startswith("belady")]
    if small:
        out.append(("(also) igt byte hit ratio higher than lru and lfu with 64 KiB units", *above(small)))
    t_ok = True
    parts = []
    s_parts = []
    for f in res["fractions"]:
        r = get("lru", f)["modeled_time_s"] / max(1e-9, get("igt", f)["modeled_time_s"])
        s = get("lru", f)["details"]["stall_time_s"] / max(1e-9, get("igt", f)["details"]["stall_time_s"])
        t_ok = t_ok and r >= 2
        parts.append(f"{int(f * 100)}%: {r:.2f}x")
        s_parts.append(f"{int(f * 100)}%: {s:.2f}x")
    out.append(("modeled time >= 2x lower than lru (makespan)", t_ok, "; ".join(parts)))
    out.append(("(for reference) total reader stall, lru / igt", None, "; ".join(s_parts)))
    # No policy can finish before every reader's own trace time (all reads
    # hits): lru's time over that bound is the largest ratio any policy can reach.
    b_parts = [f"{int(f * 100)}%: {get('lru', f)['modeled_time_s'] / max(1e-9, get('lru', f)['details']['no_stall_time_s']):.2f}x"
               for f in res["fractions"]]
    out.append(("(bound) lru / makespan with no stall at all, the best ratio any policy can reach", None,
                "; ".join(b_parts)))
    # What Belady's MIN over whole units (demand caching) reaches: the rest of
    # a 2x takes prefetching (the inference readers set the makespan at 10-25%).
    o_parts = [f"{int(f * 100)}%: {get('lru', f)['modeled_time_s'] / max(1e-9, get('belady', f)['modeled_time_s']):.2f}x"
               for f in res["fractions"]]
    out.append(("(for reference) lru / belady (Belady's MIN over whole units, demand fetches only) makespan", None,
                "; ".join(o_parts)))
    return out


def makespan_note(res):
    """Where the mix's makespan goes, for the modeled-time aim (computed)."""
    runs = res["workloads"]["f"]["runs"]
    get = lambda p, f: next(r for r in runs if r["policy"] == p and r["fraction"] == f)  # noqa: E731
    rows = ["Modeled time on the mix against belady's makespan (Belady's MIN over whole units, demand "
            "fetches only: a strong reference for caches that do not prefetch) and the no-stall bound:", "",
            "| cache | igt s | belady s | 2x lru needs s | no stall s | igt's largest stall, by top directory |",
            "|---|---:|---:|---:|---:|---|"]
    for f in res["fractions"]:
        igt, bel = get("igt", f), get("belady", f)
        top = max(igt["details"]["by_top_dir"].items(), key=lambda kv: kv[1]["stall_time_s"])
        rows.append(f"| {int(f * 100)}% | {igt['modeled_time_s']:.1f} | {bel['modeled_time_s']:.1f} | "
                    f"{get('lru', f)['modeled_time_s'] / 2:.1f} | {igt['details']['no_stall_time_s']:.1f} | "
                    f"`{top[0]}`: {top[1]['stall_time_s']:.0f} of {igt['details']['stall_time_s']:.0f} s |")
    return "\n".join(rows) + "\n"


def first_reads(trace, latency_s=0.025, bandwidth=90e6, piece=64 << 10, top=3):
    """Per reader of a trace: its reads that need bytes no reader read before
    (in trace order, 64 KiB pieces), and what they cost if each is one
    demand GET of those pieces under the simulator's model. Only prefetching
    bytes nobody asked for yet avoids that wait."""
    seen = set()
    per = {}
    with open(trace) as f:
        for row in csv.DictReader(f):
            off, n = int(row["offset"]), int(row["length"])
            if n == 0:
                continue
            new = [k for k in range(off // piece, (off + n - 1) // piece + 1) if (row["path"], k) not in seen]
            r = per.setdefault(row["pid"], {"dir": row["path"].split("/")[0] + "/", "reads": 0, "first": 0,
                                            "stall": 0.0, "end": 0.0, "by_file": {}})
            r["reads"] += 1
            r["end"] = int(row["time_us"]) / 1e6
            if new:
                seen.update((row["path"], k) for k in new)
                fsz = int(row["file_size"])
                cost = latency_s + sum(min(fsz, (k + 1) * piece) - k * piece for k in new) / bandwidth
                r["first"] += 1
                r["stall"] += cost
                bf = r["by_file"].setdefault(row["path"], [0, 0.0])
                bf[0] += 1
                bf[1] += cost
    return sorted(per.items(), key=lambda kv: -(kv[1]["end"] + kv[1]["stall"]))[:top]


def first_reads_note(res, trace):
    runs = res["workloads"]["f"]["runs"]
    lru = {r["fraction"]: r["modeled_time_s"] for r in runs if r["policy"] == "lru"}
    needs = ", ".join(f"{lru[f] / 2:.1f} s at {int(f * 100)}%" for f in res["fractions"])
    rows = ["First reads on the mix: for the readers that would end last if they waited for each "
            "read of bytes no reader read before (counted from the trace, in its order, by 64 KiB "
            "pieces; each such read one GET at 25 ms + bytes / 90 MB/s). Any cache, of any size, "
            "waits for these unless it prefetched those bytes before anyone asked for them. "
            f"For 2x lru the makespan must be at most {needs}.", "",
            "| reader (pid) | top directory | reads | first reads | their wait, s | of which in one file | "
            "trace end, s | end with that wait, s |",
            "|---|---|---:|---:|---:|---|---:|---:|"]
    for pid, r in first_reads(trace):
        path, (n, w) = max(r["by_file"].items(), key=lambda kv: kv[1][1])
        rows.append(f"| {pid} | `{r['dir']}` | {r['reads']} | {r['first']} | {r['stall']:.1f} | "
                    f"{n} reads, {w:.1f} s in `{path}` | {r['end']:.1f} | {r['end'] + r['stall']:.1f} |")
    return "\n".join(rows) + "\n"


def replay_small_files(readers, order, sizes, latency_s, bandwidth, connections):
    """Replays one directory's readers (pid -> [(trace time, path)]) while all
    `connections` prefetch its files in `order` from t=0 (skipping files
    already fetched); a miss gets a connection of its own at once; the cache
    keeps everything; the readers' other reads cost only their trace gaps.
    Returns {pid: (stall_s, end of its last read in the directory, s)}."""
    get = lambda path, t: t + latency_s + sizes[path] / bandwidth  # noqa: E731
    ready, conns, nxt = {}, [0.0] * connections, 0
    events = [(v[0][0], pid, 0) for pid, v in readers.items()]
    heapq.heapify(events)
    res, stall = {}, dict.fromkeys(readers, 0.0)
    while events:
        t, pid, i = heapq.heappop(events)
        while nxt < len(order) and conns[0] <= t:  # connections freed by now take the next files
            path = order[nxt]
            nxt += 1
            if path not in ready:
                ready[path] = get(path, heapq.heappop(conns))
                heapq.heappush(conns, ready[path])
        v = readers[pid]
        path = v[i][1]
        done = max(t, ready[path]) if path in ready else get(path, t)
        ready.setdefault(path, done)
        stall[pid] += done - t
        if i + 1 < len(v):
            heapq.heappush(events, (done + v[i + 1][0] - v[i][0], pid, i + 1))
        else:
            res[pid] = (stall[pid], done)
    return res


def small_file_best(trace, listing, latency_s=0.025, bandwidth=90e6, connections=16, shuffles=20, seed=1):
    """For each directory of small files (every read of them reads a whole
    file): how early its readers can end under the simulator's backend
    model, with every resource on their side (replay_small_files), for
    prefetch orders a policy can choose without knowing which file a reader
    asks for next: listing order, smallest file first, and `shuffles`
    random orders. The generator shuffles its read orders and popularity
    over names, so every order of files of equal size is as good in
    expectation; one trace is one draw, so a lucky order can do a little
    better than the mean. Returns {dir: {"files": n, "readers": n,
    "stall": (min, max) over readers in listing order, "listing": end,
    "smallest": end, "mean": mean end over the shuffles, "best": earliest
    end over all orders tried}}."""
    rows, sizes, whole = {}, {}, {}
    with open(trace) as f:
        for r in csv.DictReader(f):
            path, off, n, size = r["path"], int(r["offset"]), int(r["length"]), int(r["file_size"])
            d = path.rsplit("/", 1)[0] + "/"
            whole[d] = whole.get(d, True) and off == 0 and n >= size
            sizes[path] = size
            rows.setdefault(d, {}).setdefault(int(r["pid"]), []).append((int(r["time_us"]) / 1e6, path))
    names = {}
    with open(listing) as f:
        for r in csv.DictReader(f):
            names.setdefault(r["path"].rsplit("/", 1)[0] + "/", []).append(r["path"])
            sizes.setdefault(r["path"], int(r["size"]))
    rng = random.Random(seed)
    out = {}
    for d, readers in sorted(rows.items()):
        if not whole[d] or len(names.get(d, [])) < 2:
            continue
        run = lambda order: replay_small_files(readers, order, sizes, latency_s, bandwidth, connections)  # noqa: E731
        end = lambda res: max(e for _, e in res.values())  # noqa: E731
        base = run(names[d])
        smallest = end(run(sorted(names[d], key=lambda p: (sizes[p], p))))
        ends = []
        for _ in range(shuffles):
            order = names[d][:]
            rng.shuffle(order)
            ends.append(end(run(order)))
        out[d] = {"files": len(names[d]), "readers": len(readers),
                  "stall": (min(s for s, _ in base.values()), max(s for s, _ in base.values())),
                  "listing": end(base), "smallest": smallest, "mean": sum(ends) / len(ends),
                  "best": min([end(base), smallest] + ends)}
    return out


def small_file_note(res, trace, listing):
    runs = res["workloads"]["f"]["runs"]
    lru = {r["fraction"]: r["modeled_time_s"] for r in runs if r["policy"] == "lru"}
    rows = ["Small-file directories of the mix, with every resource on their side (`small_file_best` in "
            "scripts/eval/report.py): when their readers' last read there ends if all 16 connections prefetch that directory "
            "alone from t=0, every miss gets a connection of its own at once, the cache keeps everything "
            "and the readers' other reads never wait; the prefetch order is one a policy can choose without "
            "knowing which file a reader asks for next (the generator shuffles orders and popularity over "
            "names): listing order, smallest first, and 20 random orders. This estimates the best such a "
            "policy can expect at any cache size; it is not a bound for this one trace, where a lucky order "
            "can do a little better. 2x lru needs a makespan of at most "
            + ", ".join(f"{lru[f] / 2:.1f} s at {int(f * 100)}%" for f in res["fractions"]) + ".", "",
            "| directory | files listed | readers | their stall, listing order, s | their last read there "
            "ends, listing order, s | smallest first, s | mean of 20 random orders, s | earliest of all, s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for d, b in small_file_best(trace, listing).items():
        rows.append(f"| `{d}` | {b['files']} | {b['readers']} | {b['stall'][0]:.2f}-{b['stall'][1]:.2f} | "
                    f"{b['listing']:.2f} | {b['smallest']:.2f} | {b['mean']:.2f} | {b['best']:.2f} |")
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--md", required=True)
    ap.add_argument("--img", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--mix-trace", help="the mix's trace CSV, for the first-read table")
    a = ap.parse_args()
    with open(a.results) as f:
        res = json.load(f)
    os.makedirs(a.img, exist_ok=True)
    plots(res, a.img)
    try:
        rev = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        rev = "?"
    policies = res["policies"]
    md = [f"""# Evaluation: igtcache's policies against the baselines, in the simulator

Generated by `scripts/eval.sh` (seed {a.seed}) on {datetime.date.today().isoformat()}, commit {rev},
on {machine()}. Every number below comes from `igtcache sim` runs of that script; re-run it to
reproduce them (under a minute on two cores):

```
scripts/build.sh && scripts/eval.sh            # rewrites this file and docs/img/eval_*.png
```

## What is compared

- **igt**: igtcache itself: the access stream tree labels every stream, and the policy modules
  chosen by label (profile `training`, docs/POLICIES.md) drive prefetching, eviction and the
  split of space.
- Baselines on the same engine, unit size and backend model: `lru` (the eviction of Alluxio-like
  frameworks), `lfu` (in-cache counts, ties by recency), `fifo`, `2random` (JuiceFS's default:
  evict the less recently used of two distinct random units), `lru-readahead` (LRU plus a
  readahead of 8 units after a sequential read that doubles at each further one up to 64 units
  and starts over after a jump, as mountpoint-s3's and the kernel's windows ramp), and `belady`
  (Belady's MIN with bypass over whole units, demand fetches only: a unit's next use is its
  first touch, in trace order, that the replay has not reached yet. MIN is optimal for the count
  of misses over equal-size items in a fixed order; units here differ in size and the
  closed-loop replay reorders readers, so it is a strong reference, not a bound on bytes or
  time; igt's 64 KiB sub-unit misses can beat it by bytes).
  `lru-readahead`'s readahead not yet read is held to a quarter of the cache, as igt's is.
- **`lru @64K`, `lfu @64K`, `belady @64K`**: the same baselines with 64 KiB units
  (`sim --unit-size 64K`), the piece igt fetches on a miss in a file it reads at random: with
  1 MiB units a baseline fetches a whole unit for each 64 KiB row of (d) (a reviewer's finding,
  2026-11-30). Small units cost sequential reads a GET per 64 KiB, so neither size is best for
  every workload; the tables show both. Cache sizes stay those of the 1 MiB working set.
- Workloads: `scripts/gen_trace.py --seed {a.seed}` with its defaults, (a)-(e) and the mix (f),
  where every workload is stretched to 120 s and all run at once on one mount; and (g), (a)
  with 20,000 files spread over 1,000 class directories (`--image-files 20000 --image-classes
  1000`), the layout torchvision's ImageFolder reads. Each run gets the
  data set's listing (`--listing-out`, `sim --listing`): every object, read or not, as a mount
  lists it (in (d) 5000 item files, of which the trace reads about 3000).
- Cache sizes: 10, 25, 50 and 75% of each trace's working set (distinct 1 MiB units it touches).

## Simulator model (src/sim/simulator.h)

- A byte is a hit only if it was in the cache when the read was issued; a unit still being
  fetched (by a prefetch or another reader) is a miss that waits for that fetch.
- Backend: 16 connections; a GET delivers its k-th byte 25 ms + k / (90 MB/s) after it starts
  on a free connection; GETs of at most 8 MiB; adjacent missing units of one read are one GET.
  A prefetch range goes out in GETs of (its bytes + the prefetch bytes in flight) / 14 (the
  connections prefetching may use), at least 2 units: a window's batch is spread over the idle
  connections as the live prefetcher spreads it over its threads (before 2026-12-02, GETs of
  8 MiB: a batch of 32 units took four connections and 118 ms).
  Each prefetch GET runs only on a connection that is idle at that moment while another idle one
  remains for demand reads, and with at most `cache.prefetch_budget_bytes` (128 MiB) in flight; the rest of a plan is dropped. A
  fill (whole, or partial up to a byte limit the engine renews on every read of the file) is
  queued instead and pumped after every read while 3 connections are idle.
  A miss in a file igt reads as sub-units (random or skewed) fetches the 64 KiB pieces it covers.
- Listings: the engine's directory plans (a warm-up, an epoch's unread items, the next files of
  a scan) see the listing of every object. Before, the simulator listed only the files the trace
  reads, which told igt which item files would be read: with the full listing, igt on (d) at
  10% went from 89.6 to 94.3 s and the mix at 50% from 126.8 to 128.9 s (the baselines do not
  use listings).
- Time: each reader (pid) is a closed loop: it issues its next read when the previous one
  completed plus the gap between the two in the trace (the generator models that gap as a local
  read plus compute); all readers share the cache and the connections, in order of issue time.
  A reader whose first read comes after other readers' last reads in the trace starts after
  they end in the replay, with the same gap (its start moves by the largest delay of theirs):
  a DataLoader without persistent workers makes new processes each epoch, and started at
  their trace times they overlapped the previous epoch whenever the replay ran slower than
  the recording. Readers that overlap in the trace keep their own clocks.
  **modeled time** is when the last reader finishes (the makespan); **stall** is the sum over
  all reads of the time the reader waited for data.

## Aims (issue 4), on the mix (f)

| aim | met | figures |
|---|---|---|
"""]
    for name, ok, fig in aims(res):
        md.append(f"| {name} | {'yes' if ok else ('no' if ok is not None else '-')} | {fig} |\n")
    md.append("\n" + makespan_note(res) + "\n")
    if a.mix_trace:
        md.append(first_reads_note(res, a.mix_trace) + "\n")
        listing = os.path.splitext(a.mix_trace)[0] + ".listing.csv"  # as scripts/eval.sh names it
        if os.path.exists(listing):
            md.append(small_file_note(res, a.mix_trace, listing) + "\n")
    md.append("""
![byte hit ratio](img/eval_hit_ratio.png)

![modeled time](img/eval_time.png)

""")
    for w in sorted(NAMES):
        d = res["workloads"][w]
        md.append(f"## {NAMES[w]}\n\nWorking set {gib(d['working_set'])}.\n\n")
        md.append(table(w, d, res["fractions"], policies + res.get("extra_policies", {}).get(w, [])) + "\n\n")
        # Per-workload breakdown for the mix.
        if w == "f":
            runs = {(r["policy"], r["fraction"]): r for r in d["runs"]}
            md.append("Per workload of the mix at 25%: byte hit ratio (stall s).\n\n")
            dirs = sorted(runs[("igt", 0.25)]["details"]["by_top_dir"])
            md.append("| policy | " + " | ".join(dirs) + " |\n|---|" + "---|" * len(dirs) + "\n")
            for p in policies:
                bt = runs[(p, 0.25)]["details"]["by_top_dir"]
                md.append(f"| {p} | " + " | ".join(
                    f"{bt[x]['byte_hit_ratio']:.2f} ({bt[x]['stall_time_s']:.0f})" for x in dirs) + " |\n")
            md.append("\n")
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes.md")) as f:
        md.append(f.read())
    with open(a.md, "w") as f:
        f.write("".join(md))


if __name__ == "__main__":
    main()
