"""Renders the results of bench_e2e.py into the e2e section of
docs/BENCHMARKS.md (between <!-- e2e:begin --> and <!-- e2e:end -->; the rest
of the file, e.g. the foundation section and hand-written notes, is left
alone) and PNG plots in docs/img/. Every number written comes from the
results dict; nothing is typed in by hand. Single-threaded.
"""

from __future__ import annotations

import json
from pathlib import Path

from e2e_systems import replace_section  # bench_e2e.py puts tests/mount (harness) on sys.path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "BENCHMARKS.md"
IMG = ROOT / "docs" / "img"
BEGIN, END = "<!-- e2e:begin -->", "<!-- e2e:end -->"
PEERS = ("s3fs", "rclone")
MiB = 1 << 20


def _get(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


class Dnf(float):
    """A time that is only a lower bound: the run was stopped at this many
    seconds (did not finish)."""


def _fmt_s(x):
    if x is None:
        return "—"
    if isinstance(x, Dnf):
        return f"> {float(x):.0f} (stopped)"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def _ratio(v, ig) -> str:
    """better-peer time / igtcache time, with '>' or '<' when a side is a
    lower bound."""
    if not v or not ig:
        return "—"
    r = float(v) / float(ig)
    if isinstance(ig, Dnf) and isinstance(v, Dnf):
        return "n/a (both stopped)"
    if isinstance(v, Dnf):
        return f"> {r:.2f}"
    if isinstance(ig, Dnf):
        return f"< {r:.2f}"
    return f"{r:.2f}"


def _mib(x):
    return f"{x / MiB:.0f} MiB" if x < (1 << 30) else f"{x / (1 << 30):.1f} GiB"


def headline(res: dict) -> list[tuple[str, str, dict]]:
    """(case, metric, {system: seconds}) — lower is better."""
    c = res["cases"]
    rows = []

    def per_sys(fn):
        out = {}
        for s in res["systems"]:
            try:
                v = fn(s)
            except (KeyError, TypeError, IndexError):
                v = None
            out[s] = v
        return out
    if "1" in c:
        for v in ("2x", "0.5x"):
            if v in c["1"]:
                rows.append(("1", f"training, dataset {v} cache: 3 epochs",
                             per_sys(lambda s: sum(e["s"] for e in c["1"][v][s]["epochs"]))))
        if "2x" in c["1"]:
            rows.append(("1", "training, dataset 2x cache: epochs 2+3",
                         per_sys(lambda s: sum(e["s"] for e in c["1"]["2x"][s]["epochs"][1:]))))
    if "2" in c:
        rows.append(("2", "tar shards: 2 epochs", per_sys(lambda s: sum(e["s"] for e in c["2"][s]["epochs"]))))
    if "3" in c:
        for part, temp in (("seq", "cold"), ("seq", "warm"), ("mmap", "cold"), ("mmap", "warm")):
            name = "sequential read" if part == "seq" else "mmap 4 KiB faults"
            rows.append(("3", f"model load, {name}, {temp}", per_sys(lambda s: c["3"][s][part][temp]["s"])))
    if "4" in c:
        rows.append(("4", "Zipf 64 KiB reads, large file: s per 1,000 reads",
                     per_sys(lambda s: 1000.0 / c["4"][s]["file"]["file"]["reads_per_s"])))
        rows.append(("4", "Zipf 64 KiB reads, small files: s per 1,000 reads",
                     per_sys(lambda s: 1000.0 / c["4"][s]["files"]["files"]["reads_per_s"])))
    if "5" in c:
        rows.append(("5", "mix: all jobs done (total)",
                     per_sys(lambda s: c["5"][s]["total_s"] if "total_s" in c["5"][s] else Dnf(c["5"][s]["total_dnf_s"]))))
    if "6" in c:
        def ls_time(s, p):
            d = c["6"][s][p]
            return d["ls_s"] if d.get("ls_s") is not None else Dnf(d["dnf_s"])
        rows.append(("6", "metadata: ls -lR, cold", per_sys(lambda s: ls_time(s, "cold"))))
        rows.append(("6", "metadata: ls -lR, after remount", per_sys(lambda s: ls_time(s, "remount"))))
    return rows


def best_peer(vals: dict) -> tuple[str | None, float | None]:
    cands = [(vals[p], p) for p in PEERS if vals.get(p) is not None]
    if not cands:
        return None, None
    v, p = min(cands)
    return p, v


def aims(res: dict, rows) -> list[tuple[str, str, str]]:
    """(aim, measured, verdict)."""
    out = []
    c = res["cases"]
    mix = next((r for r in rows if r[0] == "5"), None)
    if mix:
        p, v = best_peer(mix[2])
        ig = mix[2].get("igtcache")
        if ig and v:
            r = _ratio(v, ig)
            met = float(v) / float(ig) >= 2 and not isinstance(ig, Dnf)
            out.append(("Mix (case 5) at least 2x faster than the better peer",
                        f"{p} {_fmt_s(v)} s / igtcache {_fmt_s(ig)} s = {r}x", "met" if met else "missed"))
    worst = []
    for case, metric, vals in rows:
        p, v = best_peer(vals)
        ig = vals.get("igtcache")
        if ig and v:
            # igtcache slower by this factor (a stopped peer only makes it smaller)
            worst.append((float(ig) / float(v), case, metric, p))
    if worst:
        losers = [w for w in worst if w[0] > 1.10]
        if losers:
            meas = "; ".join(f"case {w[1]} {w[2]}: {w[0]:.2f}x the time of {w[3]}" for w in sorted(losers, reverse=True))
        else:
            w = max(worst)
            meas = f"worst: case {w[1]} {w[2]} at {w[0]:.2f}x the time of {w[3]}"
        out.append(("No case more than 10% slower than the better peer", meas, "missed" if losers else "met"))
    tr = _get(c, "1", "2x")
    if tr and _get(tr, "igtcache", "epochs"):
        parts, ok = [], True
        for ep in (1, 2):
            ig = tr["igtcache"]["epochs"][ep]["samples_per_s"] if len(tr["igtcache"]["epochs"]) > ep else None
            for p in PEERS:
                pe = _get(tr, p, "epochs")
                if ig is None or not pe or len(pe) <= ep:
                    continue
                ratio = ig / pe[ep]["samples_per_s"]
                ok &= ratio >= 1.5
                parts.append(f"epoch {ep + 1} vs {p}: {ratio:.2f}x")
        out.append(("Case 1, dataset 2x cache: epochs 2 and 3 at least 1.5x the samples/s of each peer",
                    "; ".join(parts), "met" if ok and parts else "missed"))
    return out


def plots(res: dict, rows) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    IMG.mkdir(parents=True, exist_ok=True)
    colors = {"igtcache": "#1f77b4", "s3fs": "#ff7f0e", "rclone": "#2ca02c"}
    systems = res["systems"]
    made = []
    c = res["cases"]
    if "1" in c:
        variants = [v for v in ("2x", "0.5x") if v in c["1"]]
        fig, axes = plt.subplots(1, len(variants), figsize=(5 * len(variants), 3.6), squeeze=False)
        for ax, v in zip(axes[0], variants):
            for i, s in enumerate(systems):
                eps = _get(c["1"][v], s, "epochs") or []
                xs = [k + 1 + (i - 1) * 0.27 for k in range(len(eps))]
                ax.bar(xs, [e["samples_per_s"] for e in eps], width=0.27, label=s, color=colors.get(s))
            ax.set_title(f"training, dataset = {v} cache")
            ax.set_xlabel("epoch")
            ax.set_ylabel("samples/s")
            ax.set_xticks(range(1, res["scale"]["train_epochs"] + 1))
            ax.legend()
        fig.tight_layout()
        fig.savefig(IMG / "e2e_training.png", dpi=110)
        plt.close(fig)
        made.append("e2e_training.png")
    if rows:
        fig, ax = plt.subplots(figsize=(8, 0.42 * len(rows) + 1.2))
        labels = [f"{r[0]}: {r[1]}" for r in rows][::-1]
        for i, s in enumerate(systems):
            vals = []
            for r in rows[::-1]:
                ig, v = r[2].get("igtcache"), r[2].get(s)
                vals.append(float(v) / float(ig) if ig and v else 0)
            ax.barh([k + (i - 1) * 0.27 for k in range(len(rows))], vals, height=0.27, label=s, color=colors.get(s))
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_xscale("log")
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_xlabel("time relative to igtcache (log scale; > 1: slower than igtcache)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(IMG / "e2e_cases.png", dpi=110)
        plt.close(fig)
        made.append("e2e_cases.png")
    if "5" in c:
        fig, ax = plt.subplots(figsize=(6, 3.4))
        jobs = ["train", "model", "skew"]
        for i, s in enumerate(systems):
            vals = [_get(c["5"], s, j, "done_s") or _get(c["5"], s, j, "dnf_s") or 0 for j in jobs] + \
                   [_get(c["5"], s, "total_s") or _get(c["5"], s, "total_dnf_s") or 0]
            ax.bar([k + (i - 1) * 0.27 for k in range(4)], vals, width=0.27, label=s, color=colors.get(s))
        ax.set_xticks(range(4))
        ax.set_xticklabels(jobs + ["total"])
        ax.set_ylabel("completion time, s")
        ax.set_title("case 5: the mix on one mount")
        ax.legend()
        fig.tight_layout()
        fig.savefig(IMG / "e2e_mix.png", dpi=110)
        plt.close(fig)
        made.append("e2e_mix.png")
    return made


def render(res: dict) -> str:
    sc, m, systems, c = res["scale"], res["machine"], res["systems"], res["cases"]
    rows = headline(res)
    imgs = plots(res, rows)
    L = []
    L.append("## End-to-end figures (issue 5)\n")
    L.append(f"Produced by `scripts/bench_e2e.sh{'' if sc['name'] == 'full' else ' --quick'}` on {res['date']} "
             f"(checkout at `{res.get('git', '?')}`; igtcache binary built "
             f"{_get(res, 'igtcache_binary', 'built') or '?'}), in {res.get('total_wall_s', 0) / 60:.0f} min. Machine: "
             f"{m['nproc']} CPUs ({m['cpu']}), {m['ram_gib']} GiB RAM, kernel {m['kernel']}; load average at the "
             f"end {' '.join(res.get('load_end', []))} (a machine shared with builds: single runs, noisy). "
             "Versions: " + "; ".join(f"{k} `{v}`" for k, v in res["versions"].items()) + ".\n")
    p = res["proxy"]
    L.append("**Emulated cloud.** s3rver on 127.0.0.1 behind `scripts/cloudproxy.py`: time to first byte "
             f"log-normal with median {p['ttfb_ms']} ms, sigma {p['ttfb_sigma']} (p99 about "
             f"{p['ttfb_ms'] * 4:.0f} ms, capped at {p['ttfb_max_ms']} ms), LIST pages {p['list_ttfb_ms']} ms, "
             f"{p['bandwidth']}B/s per connection. All three systems talk to the same proxy. Seeding "
             f"(straight to s3rver, 6 threads on kept-alive connections): {res['seed']['small_objects']} small "
             f"objects in {res['seed']['small_s']:.0f} s, {res['seed']['large_objects']} large objects "
             f"({_mib(res['seed']['large_bytes'])}) in {res['seed']['large_s']:.0f} s.\n")
    L.append("**Systems and equal cache limits.** Each run starts from an empty cache dir with the case's limit: "
             "igtcache `--cache-size` (defaults otherwise); s3fs `-o use_cache` with its defaults "
             "(parallel_count 5, multireq_max 20) — s3fs has no size limit, only `ensure_diskfree`, so its cache "
             "lives on a loop-mounted ext4 whose free space minus `ensure_diskfree` is the limit; rclone "
             "`--vfs-cache-mode full --vfs-cache-max-size <limit>B` with its defaults (--vfs-read-chunk-size 128M, "
             "--buffer-size 16M) and `--vfs-cache-poll-interval 1s` so the limit is enforced within our short runs "
             "(the `B` matters: rclone reads a bare number as KiB; runs before 2026-11-23 passed the limit that "
             "way, so rclone's cache was in effect unbounded there). "
             "Before every run the page cache is dropped (`echo 3 > /proc/sys/vm/drop_caches`), and every reader "
             "drops the pages it just read (`posix_fadvise(DONTNEED)`) so re-reads reach the file system under "
             "test on all three systems: with 24 GiB of RAM the data sets would otherwise be re-read from the "
             "kernel page cache and the figures would measure RAM, not each cache under its limit. Every "
             "workload checks every byte it read (SHA-1 of whole objects, exact bytes of scattered reads).\n")
    L.append(f"**Sizes ({sc['name']} scale; the cache-to-data ratios are what matter, the absolute sizes are "
             "set by a 2-core machine and a ~25-minute budget).**\n")
    L.append("| case | data | cache limit | access |")
    L.append("|---|---|---|---|")
    if "1" in c:
        for v in ("2x", "0.5x"):
            if v in c["1"]:
                L.append(f"| 1 training ({v}) | {c['1'][v]['files']} files of ~110 KB, {_mib(c['1'][v]['dataset_bytes'])}, "
                         f"image-folder layout | {_mib(sc['train_cache'])} | torch DataLoader, shuffle, 4 workers, batch 32, "
                         f"{sc['train_epochs']} epochs; `open().read()` per sample |")
    if "2" in c:
        L.append(f"| 2 shards | {c['2']['shards']} tar shards ({', '.join(str(x) for x in sc['shard_mib'])} MiB), "
                 f"{_mib(c['2']['dataset_bytes'])} | {_mib(sc['shard_cache'])} | whole shards, 1 MiB reads, shuffled "
                 f"shard order, {sc['shard_epochs']} epochs |")
    if "3" in c:
        L.append(f"| 3 model | one {_mib(sc['model_bytes'])} weights file | {_mib(sc['model_cache'])} | sequential "
                 f"1 MiB reads; separately {sc['mmap_faults']} random 4 KiB pages through mmap; each cold then warm |")
    if "4" in c:
        L.append(f"| 4 skewed | a {_mib(sc['skew_file_bytes'])} file; {c['4']['files']} files of 64 KiB "
                 f"({_mib(c['4']['files_bytes'])}) | {_mib(sc['skew_cache'])} | {sc['skew_reads']} Zipf(s={sc['zipf_s']}) "
                 f"64 KiB reads, 4 threads, each part on a fresh mount; no new read after {sc.get('skew_max_s', 0):.0f} s "
                 "(figure: time per 1,000 reads) |")
    if "5" in c:
        L.append(f"| 5 mix | cases 1 (2x set), 3 and 4 at once: {_mib(c['5']['train_bytes'])} + "
                 f"{_mib(c['5']['model_bytes'])} + {_mib(c['5']['skew_bytes'])} | {_mib(sc['mix_cache'])} | "
                 f"three processes on one mount; a job still running after {sc.get('mix_max_s', 0):.0f} s is stopped "
                 "(shown as > that) |")
    if "6" in c:
        L.append(f"| 6 metadata | {c['6']['objects']} objects in 20x10 directories | {_mib(c['6']['cache'])} | "
                 "`ls -lR`, then os.walk + lstat to check names and sizes; again after a remount; an `ls -lR` "
                 f"still running after {sc.get('meta_max_s', 0):.0f} s is stopped (shown as > that) |")
    L.append("")

    # Summary.
    L.append("### Summary: time per case (seconds, lower is better)\n")
    L.append("| case | metric | " + " | ".join(systems) + " | better peer / igtcache |")
    L.append("|---|---|" + "---:|" * len(systems) + "---:|")
    for case, metric, vals in rows:
        p, v = best_peer(vals)
        ig = vals.get("igtcache")
        ratio = f"**{_ratio(v, ig)}** ({p})" if ig and v else "—"
        L.append(f"| {case} | {metric} | " + " | ".join(_fmt_s(vals.get(s)) for s in systems) + f" | {ratio} |")
    L.append("")
    L.append("Ratio > 1: igtcache finished faster than the better of s3fs and rclone by that factor; < 1: slower.\n")
    if "e2e_cases.png" in imgs:
        L.append("![time relative to igtcache per case](img/e2e_cases.png)\n")

    L.append("### Aims of the issue\n")
    L.append("| aim | measured | verdict |")
    L.append("|---|---|---|")
    for a, meas, verdict in aims(res, rows):
        L.append(f"| {a} | {meas} | **{verdict}** |")
    L.append("")

    # Details.
    if "1" in c:
        L.append("### Case 1: training, samples/s per epoch\n")
        L.append("| dataset | system | " + " | ".join(f"epoch {k + 1}" for k in range(sc["train_epochs"])) +
                 " | listing s | backend GETs | backend MB |")
        L.append("|---|---|" + "---:|" * (sc["train_epochs"] + 3))
        for v in ("2x", "0.5x"):
            for s in systems:
                r = _get(c["1"], v, s) or {}
                if "epochs" not in r:
                    L.append(f"| {v} | {s} | failed: {r.get('error', '?')} |")
                    continue
                L.append(f"| {v} | {s} | " + " | ".join(f"{e['samples_per_s']:.0f}" for e in r["epochs"]) +
                         f" | {r['scan_s']:.2f} | {r['backend']['by_method'].get('GET', 0)} | "
                         f"{r['backend']['bytes'] / 1e6:.0f} |")
        L.append("")
        if "e2e_training.png" in imgs:
            L.append("![samples/s per epoch](img/e2e_training.png)\n")
    if "2" in c:
        L.append("### Case 2: tar shards, MB/s per epoch\n")
        L.append("| system | " + " | ".join(f"epoch {k + 1}" for k in range(sc["shard_epochs"])) + " | backend MB |")
        L.append("|---|" + "---:|" * (sc["shard_epochs"] + 1))
        for s in systems:
            r = c["2"].get(s) or {}
            if "epochs" not in r:
                L.append(f"| {s} | failed: {r.get('error', '?')} |")
                continue
            L.append(f"| {s} | " + " | ".join(f"{e['mb_per_s']:.0f}" for e in r["epochs"]) +
                     f" | {r['backend']['bytes'] / 1e6:.0f} |")
        L.append("")
    if "3" in c:
        L.append("### Case 3: model loading\n")
        L.append("| system | sequential cold MB/s | sequential warm MB/s | mmap cold faults/s | mmap warm faults/s | backend MB (seq) | backend MB (mmap) |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        for s in systems:
            r = c["3"].get(s) or {}
            sq, mm = r.get("seq") or {}, r.get("mmap") or {}
            f = lambda d, a, b: f"{d[a][b]:.0f}" if a in d else "failed"  # noqa: E731
            L.append(f"| {s} | {f(sq, 'cold', 'mb_per_s')} | {f(sq, 'warm', 'mb_per_s')} | "
                     f"{f(mm, 'cold', 'faults_per_s')} | {f(mm, 'warm', 'faults_per_s')} | "
                     f"{_get(sq, 'backend', 'bytes') / 1e6 if _get(sq, 'backend', 'bytes') is not None else 0:.0f} | "
                     f"{_get(mm, 'backend', 'bytes') / 1e6 if _get(mm, 'backend', 'bytes') is not None else 0:.0f} |")
        L.append("")
        fl = _get(c["3"], "igtcache", "seq", "fuse_limit")
        if fl and "error" not in fl:
            L.append("### The FUSE limit\n")
            L.append(f"Warm reads of the weights file through the igtcache mount against the same kind of reads of "
                     f"the cache's own unit files ({fl['unit_files']} files, {_mib(fl['unit_bytes'])}), page cache "
                     "dropped before each, single thread, no hashing.\n")
            L.append("| read | through the mount | unit files directly | ratio |")
            L.append("|---|---:|---:|---:|")
            L.append(f"| sequential, 1 MiB reads | {fl['seq_mount_mb_s']:.0f} MB/s | {fl['seq_units_mb_s']:.0f} MB/s | "
                     f"**{fl['seq_ratio']:.2f}** |")
            L.append(f"| random 4 KiB preads | {fl['rand_mount_iops']:.0f} /s | {fl['rand_units_iops']:.0f} /s | "
                     f"**{fl['rand_ratio']:.2f}** |")
            L.append("")
    if "4" in c:
        L.append("### Case 4: skewed inference reads\n")
        L.append("| system | part | reads/s | p50 ms | p99 ms | distinct items | backend GETs | backend MB |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|")
        for s in systems:
            for part in ("file", "files"):
                r = _get(c["4"], s, part) or {}
                d = r.get(part)
                if not d:
                    L.append(f"| {s} | {part} | failed: {r.get('error', '?')} |")
                    continue
                L.append(f"| {s} | {part} | {d['reads_per_s']:.0f} | {d['p50_ms']:.1f} | {d['p99_ms']:.1f} | "
                         f"{d['distinct']} | {r['backend']['by_method'].get('GET', 0)} | {r['backend']['bytes'] / 1e6:.0f} |")
        L.append("")
    if "5" in c:
        L.append("### Case 5: the mix — completion time of each job (s)\n")
        L.append("| system | training (3 epochs) | model (seq + mmap) | skewed (file + files) | total | backend MB |")
        L.append("|---|---:|---:|---:|---:|---:|")
        for s in systems:
            r = c["5"].get(s) or {}
            if "train" not in r:
                L.append(f"| {s} | failed: {r.get('error', '?')} |")
                continue
            job = lambda j: _fmt_s(r[j]["done_s"] if "done_s" in r[j] else Dnf(r[j]["dnf_s"]))  # noqa: E731
            tot = r["total_s"] if "total_s" in r else Dnf(r["total_dnf_s"])
            L.append(f"| {s} | {job('train')} | {job('model')} | {job('skew')} | "
                     f"**{_fmt_s(tot)}** | {r['backend']['bytes'] / 1e6:.0f} |")
        L.append("")
        if "e2e_mix.png" in imgs:
            L.append("![the mix](img/e2e_mix.png)\n")
    if "6" in c:
        L.append("### Case 6: metadata\n")
        L.append("| system | ls -lR cold s | os.walk+lstat right after s | ls -lR after remount s | backend requests (both passes) |")
        L.append("|---|---:|---:|---:|---:|")
        for s in systems:
            r = c["6"].get(s) or {}
            if "cold" not in r:
                L.append(f"| {s} | failed: {r.get('error', '?')} |")
                continue
            ls = lambda d: _fmt_s(d["ls_s"] if d.get("ls_s") is not None else Dnf(d["dnf_s"]))  # noqa: E731
            L.append(f"| {s} | {ls(r['cold'])} | {_fmt_s(r['cold'].get('walk_s'))} | {ls(r['remount'])} | "
                     f"{r['backend']['requests']} |")
        L.append("")

    # Correctness and limits.
    L.append("### Correctness and cache use\n")
    L.append("Wrong reads found by the checksums (0 everywhere is the requirement), and each cache's size on disk "
             "at the end of the run against its limit (igtcache: unit files + index; s3fs: its cache dir on the "
             "loop fs; rclone: its vfs cache dir).\n")
    L.append("| run | " + " | ".join(f"{s} wrong reads | {s} cache end / limit" for s in systems) + " |")
    L.append("|---|" + "---:|---:|" * len(systems))
    for label, getter, limit in _runs(res):
        cells = []
        for s in systems:
            r = getter(s) or {}
            if "error" in r:
                cells += [f"error: {r['error'][:80]}", "—"]
                continue
            cells.append(str(r.get("bad", "?")))
            cb = r.get("cache_bytes_end")
            cells.append(f"{cb / limit:.2f}" if cb is not None and cb >= 0 else "—")
        L.append(f"| {label} | " + " | ".join(cells) + " |")
    L.append("")
    return "\n".join(L)


def _runs(res: dict):
    c, sc = res["cases"], res["scale"]
    if "1" in c:
        for v in ("2x", "0.5x"):
            if v in c["1"]:
                yield f"1 training {v}", (lambda s, v=v: c["1"][v].get(s)), sc["train_cache"]
    if "2" in c:
        yield "2 shards", (lambda s: c["2"].get(s)), sc["shard_cache"]
    if "3" in c:
        for part in ("seq", "mmap"):
            yield f"3 model {part}", (lambda s, part=part: (c["3"].get(s) or {}).get(part)), sc["model_cache"]
    if "4" in c:
        for part in ("file", "files"):
            yield f"4 skewed {part}", (lambda s, part=part: (c["4"].get(s) or {}).get(part)), sc["skew_cache"]
    if "5" in c:
        yield "5 mix", (lambda s: c["5"].get(s)), sc["mix_cache"]
    if "6" in c:
        yield "6 metadata", (lambda s: c["6"].get(s)), c["6"]["cache"]


def write(res: dict) -> Path:
    text = render(res)
    replace_section(DOC, BEGIN, END, text)
    IMG.mkdir(parents=True, exist_ok=True)
    (IMG / "e2e_results.json").write_text(json.dumps(res, indent=1))
    print(text)
    print(f"bench_e2e: wrote the e2e section of {DOC} and plots in {IMG}")
    return DOC
