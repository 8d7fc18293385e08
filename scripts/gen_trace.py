#!/usr/bin/python3
"""Seeded generator of AI-workload read traces for igtcache (docs/TRACES.md).

Writes a CSV with the header `time_us,pid,path,offset,length,file_size`, one
row per read as the FUSE layer would see it, rows in non-decreasing time.
Standard library only. The same seed and options always give the same trace.

Workloads (each under its own top-level directory):
  a, images      image-classification training: a directory of many small
                 files, each read whole, a new shuffled order every epoch,
                 dealt in batches to several DataLoader worker pids (new
                 pids each epoch, which starts when the last worker of the
                 previous one ends)
  b, shards      shard training: large shard files, shard order shuffled per
                 epoch, each shard read front to back in --read-size reads
                 (worker pids as in a)
  c, models      model loading: large weight files read sequentially, file
                 after file in listing order, by several processes
  d, inference   skewed inference: Zipf-popular small item files and Zipf-
                 popular rows (byte ranges) of one large embedding file
  e, preprocess  preprocessing: one sequential scan of a directory in listing
                 order, files read front to back
  f, all         all of the above interleaved in time over one mount (each
                 workload's timeline is stretched to the same duration)

--listing-out writes every object of the generated data set, read or not
(CSV `path,size`, docs/TRACES.md): in (d) most item files are never read,
and `igtcache sim --listing` then lists them as a mount would.

Example:
  scripts/gen_trace.py --workload f --seed 7 --out /tmp/mixed.csv --listing-out /tmp/mixed.listing.csv
  igtcache classify --trace /tmp/mixed.csv
  igtcache sim --trace /tmp/mixed.csv --listing /tmp/mixed.listing.csv --cache-size 1G
"""

import argparse
import bisect
import csv
import heapq
import math
import random
import sys

KIB = 1024
MIB = 1024 * 1024


def read_cost_us(length, args):
    """Modelled time of one read: fixed latency plus transfer time."""
    return args.latency_us + (length * 1_000_000) // (args.bandwidth_mib_s * MIB)


def whole_file_reads(t, pid, path, size, args):
    """Rows reading `path` front to back in --read-size pieces from time t."""
    rows = []
    off = 0
    while True:
        length = min(args.read_size, size - off) if size > 0 else 0
        rows.append((t, pid, path, off, length, size))
        t += read_cost_us(length, args)
        off += length
        if off >= size:
            return rows, t


def zipf_sampler(n, s, rng):
    """Returns a function drawing ranks 0..n-1 with P(rank r) ~ (r+1)^-s."""
    cdf = []
    acc = 0.0
    for i in range(1, n + 1):
        acc += i ** -s
        cdf.append(acc)
    total = cdf[-1]
    return lambda: min(bisect.bisect_left(cdf, rng.random() * total), n - 1)


def small_size(rng, mean, lo, hi):
    """Log-normal size with the given mean (sigma 0.5), clamped to [lo, hi]."""
    sigma = 0.5
    mu = math.log(mean) - sigma * sigma / 2
    return int(min(hi, max(lo, rng.lognormvariate(mu, sigma))))


def epoch_pid(base, worker, epoch):
    """A worker's pid in an epoch: new each epoch, as a DataLoader without
    persistent_workers starts new worker processes. The replay (`igtcache
    sim`) starts a reader that began after others ended after them, so the
    epoch barrier holds there too; with one pid per worker for every epoch
    each worker ran on into the next epoch on its own clock (a review,
    2026-11-30: belady above its ceiling on (a))."""
    return base + worker + 10_000 * epoch


def gen_images(args, rng, objects):
    if args.image_classes > 0:  # an image-folder data set: train/<class>/<file>
        names = [f"images/train/n{i % args.image_classes:05d}/img_{i:07d}.jpg" for i in range(args.image_files)]
    else:
        names = [f"images/train/img_{i:07d}.jpg" for i in range(args.image_files)]
    sizes = {n: small_size(rng, args.image_kib * KIB, 4 * KIB, 4 * MIB) for n in names}
    objects.update(sizes)
    workers = []  # one row list per worker pid, each in its own time order
    clocks = [0] * args.workers
    per_worker = [[] for _ in range(args.workers)]
    for epoch in range(args.epochs):
        order = names[:]
        rng.shuffle(order)
        batches = [order[i:i + args.batch] for i in range(0, len(order), args.batch)]
        # Epoch barrier: every worker starts the epoch when the slowest ended.
        start = max(clocks)
        clocks = [start] * args.workers
        for b, batch in enumerate(batches):
            w = b % args.workers
            for path in batch:
                rows, clocks[w] = whole_file_reads(clocks[w], epoch_pid(2000, w, epoch), path, sizes[path], args)
                per_worker[w].extend(rows)
    workers.extend(per_worker)
    return workers


def gen_shards(args, rng, objects):
    names = [f"shards/train-{i:05d}.tar" for i in range(args.shards)]
    size = args.shard_mib * MIB
    objects.update((n, size) for n in names)
    clocks = [0] * args.workers
    per_worker = [[] for _ in range(args.workers)]
    for epoch in range(args.epochs):
        order = names[:]
        rng.shuffle(order)
        start = max(clocks)
        clocks = [start] * args.workers
        for i, path in enumerate(order):
            w = min(range(args.workers), key=lambda k: clocks[k])  # next free worker
            rows, clocks[w] = whole_file_reads(clocks[w], epoch_pid(3000, w, epoch), path, size, args)
            per_worker[w].extend(rows)
    return per_worker


def gen_models(args, rng, objects):
    names = [f"models/llm/model-{i + 1:05d}-of-{args.models:05d}.safetensors" for i in range(args.models)]
    size = args.model_mib * MIB
    objects.update((n, size) for n in names)
    streams = []
    for p in range(args.loaders):
        t = p * rng.randint(0, 2_000_000)  # loaders start up to 2 s apart
        rows = []
        for path in names:
            r, t = whole_file_reads(t, 4000 + p, path, size, args)
            rows.extend(r)
        streams.append(rows)
    return streams


def gen_inference(args, rng, objects):
    items = [f"inference/items/item_{i:06d}.bin" for i in range(args.items)]
    item_size = {n: small_size(rng, 16 * KIB, 1 * KIB, 256 * KIB) for n in items}
    item_rank = zipf_sampler(args.items, args.zipf_s, rng)
    item_perm = list(range(args.items))
    rng.shuffle(item_perm)  # popularity is not listing order
    emb = "inference/embeddings.bin"
    emb_size = args.embedding_mib * MIB
    objects.update(item_size)
    objects[emb] = emb_size
    n_rows = emb_size // args.embedding_row
    row_rank = zipf_sampler(min(n_rows, 200_000), args.zipf_s, rng)
    row_perm = rng.sample(range(n_rows), min(n_rows, 200_000))  # hot rows, hashed over the file
    streams = []
    for p in range(args.servers):
        t = 0
        rows = []
        for _ in range(args.requests // args.servers):
            path = items[item_perm[item_rank()]]
            rows.append((t, 5000 + p, path, 0, item_size[path], item_size[path]))
            t += read_cost_us(item_size[path], args)
            row = row_perm[row_rank()]
            rows.append((t, 5000 + p, emb, row * args.embedding_row, args.embedding_row, emb_size))
            t += read_cost_us(args.embedding_row, args) + rng.randint(0, 2000)  # think time
        streams.append(rows)
    return streams


def gen_preprocess(args, rng, objects):
    names = sorted(f"raw/docs/doc_{i:06d}.json" for i in range(args.raw_files))
    t = 0
    rows = []
    for path in names:
        size = small_size(rng, args.raw_kib * KIB, 1 * KIB, 8 * MIB)
        objects[path] = size
        r, t = whole_file_reads(t, 6000, path, size, args)
        rows.extend(r)
    return [rows]


GENERATORS = {
    "a": gen_images, "images": gen_images,
    "b": gen_shards, "shards": gen_shards,
    "c": gen_models, "models": gen_models,
    "d": gen_inference, "inference": gen_inference,
    "e": gen_preprocess, "preprocess": gen_preprocess,
}


def stretch(streams, duration_us):
    """Scales a workload's timeline linearly to span `duration_us`."""
    end = max((s[-1][0] for s in streams if s), default=0)
    if end == 0:
        return streams
    f = duration_us / end
    return [[(int(r[0] * f),) + r[1:] for r in s] for s in streams]


def generate(args, objects):
    """The rows, merged in time order; `objects` gets every object (path -> size)."""
    rng = random.Random(args.seed)
    if args.workload in ("f", "all"):
        streams = []
        for key in ("a", "b", "c", "d", "e"):
            sub = random.Random(f"{args.seed}-{key}")  # each workload independent of the others
            streams.extend(stretch(GENERATORS[key](args, sub, objects), args.duration_s * 1_000_000))
    else:
        streams = GENERATORS[args.workload](args, rng, objects)
    # Each stream is time-ordered; merge them (stable for equal times).
    return heapq.merge(*streams, key=lambda r: r[0])


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", "-w", required=True, choices=sorted(GENERATORS) + ["f", "all"],
                    help="which workload (letter or name)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    ap.add_argument("--out", "-o", default="-", help="output CSV path, '-' = stdout (default)")
    ap.add_argument("--listing-out", default="",
                    help="also write every object of the data set, read or not (CSV path,size)")
    g = ap.add_argument_group("common")
    g.add_argument("--epochs", type=int, default=3, help="training epochs for a, b (default 3)")
    g.add_argument("--workers", type=int, default=4, help="DataLoader worker pids for a, b (default 4)")
    g.add_argument("--read-size", type=int, default=MIB, help="bytes per read of a large file (default 1 MiB)")
    g.add_argument("--latency-us", type=int, default=200, help="modelled fixed cost of one read (default 200)")
    g.add_argument("--bandwidth-mib-s", type=int, default=500, help="modelled read bandwidth (default 500)")
    g.add_argument("--duration-s", type=int, default=120, help="f: each workload is stretched to this (default 120)")
    g = ap.add_argument_group("a: images")
    g.add_argument("--image-files", type=int, default=3000, help="files in the directory (default 3000)")
    g.add_argument("--image-kib", type=int, default=110, help="mean file size in KiB (default 110)")
    g.add_argument("--batch", type=int, default=32, help="files per DataLoader batch (default 32)")
    g.add_argument("--image-classes", type=int, default=0,
                   help="spread the files over this many class directories, as torchvision's ImageFolder "
                        "reads them (default 0: one flat directory)")
    g = ap.add_argument_group("b: shards")
    g.add_argument("--shards", type=int, default=32, help="shard files (default 32)")
    g.add_argument("--shard-mib", type=int, default=64, help="shard size in MiB (default 64)")
    g = ap.add_argument_group("c: models")
    g.add_argument("--models", type=int, default=4, help="weight files (default 4)")
    g.add_argument("--model-mib", type=int, default=256, help="weight file size in MiB (default 256)")
    g.add_argument("--loaders", type=int, default=3, help="processes loading the model (default 3)")
    g = ap.add_argument_group("d: inference")
    g.add_argument("--items", type=int, default=5000, help="small item files (default 5000)")
    g.add_argument("--requests", type=int, default=12000, help="requests, each 1 item + 1 embedding row (default 12000)")
    g.add_argument("--servers", type=int, default=2, help="server pids (default 2)")
    g.add_argument("--zipf-s", type=float, default=0.9, help="Zipf exponent of popularity (default 0.9)")
    g.add_argument("--embedding-mib", type=int, default=2048, help="embedding file size in MiB (default 2048)")
    g.add_argument("--embedding-row", type=int, default=64 * KIB, help="bytes per embedding row read (default 65536)")
    g = ap.add_argument_group("e: preprocess")
    g.add_argument("--raw-files", type=int, default=1500, help="files scanned (default 1500)")
    g.add_argument("--raw-kib", type=int, default=512, help="mean file size in KiB (default 512)")
    args = ap.parse_args(argv)
    for name in ("epochs", "workers", "read_size", "image_files", "image_kib", "batch", "shards", "shard_mib",
                 "models", "model_mib", "loaders", "items", "requests", "servers", "embedding_mib",
                 "embedding_row", "raw_files", "raw_kib", "bandwidth_mib_s", "duration_s"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be > 0")
    if args.image_classes < 0:
        ap.error("--image-classes must be >= 0")
    if not 1 <= args.workers <= 999:
        ap.error("--workers must be 1 to 999 (the pids of a and b would collide)")
    if args.latency_us < 0 or args.zipf_s <= 0:
        ap.error("--latency-us must be >= 0 and --zipf-s > 0")
    if args.embedding_row > args.embedding_mib * MIB:
        ap.error("--embedding-row must not exceed the embedding file")

    out = sys.stdout if args.out == "-" else open(args.out, "w", newline="")
    try:
        w = csv.writer(out, lineterminator="\n")
        w.writerow(["time_us", "pid", "path", "offset", "length", "file_size"])
        n = 0
        objects = {}
        for row in generate(args, objects):
            w.writerow(row)
            n += 1
    finally:
        if out is not sys.stdout:
            out.close()
    if args.listing_out:
        with open(args.listing_out, "w", newline="") as lf:
            lw = csv.writer(lf, lineterminator="\n")
            lw.writerow(["path", "size"])
            for path in sorted(objects):
                lw.writerow([path, objects[path]])
    print(f"gen_trace: {n} rows ({args.workload}, seed {args.seed})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
