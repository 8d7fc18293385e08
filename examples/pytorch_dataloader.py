#!/usr/bin/python3
"""Train a small classifier with a PyTorch DataLoader reading an image-folder
dataset through an igtcache mount, and print samples/s per epoch and the
cache's stats after each epoch.

    igtcache mount s3://my-bucket/imagenet-mini /mnt/data --cache-size 50G
    /usr/bin/python3 examples/pytorch_dataloader.py --data /mnt/data/train --epochs 3

The dataset layout is torchvision's ImageFolder: DATA/<class>/<file>. Nothing
here is igtcache-specific except reading `igtcache stats --json` for the
report: the DataLoader just opens and reads files. Epoch 1 is cold (every
file fetched from the bucket), later epochs are served from the SSD cache
(or the page cache). Needs python3-torch (Debian) and, to decode real images,
python3-pil; files that do not decode (the bundled demo dataset holds random
bytes) are turned into a byte histogram so the example still runs.
"""

import argparse
import io
import json
import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

try:
    from PIL import Image
except ImportError:  # decoding is optional; see ImageFolderBytes.load
    Image = None

SIDE = 32  # decoded images are resized to SIDE x SIDE grey levels


class ImageFolderBytes(Dataset):
    """DATA/<class>/<file> -> (features, class index). Reads each file whole."""

    def __init__(self, root: str):
        self.classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        if not self.classes:
            raise SystemExit(f"{root}: no class directories (expected DATA/<class>/<file>)")
        self.items = [(os.path.join(root, c, f), i)
                      for i, c in enumerate(self.classes)
                      for f in sorted(os.listdir(os.path.join(root, c)))
                      if os.path.isfile(os.path.join(root, c, f))]

    def __len__(self):
        return len(self.items)

    @staticmethod
    def load(data: bytes) -> torch.Tensor:
        if Image is not None:
            try:
                img = Image.open(io.BytesIO(data)).convert("L").resize((SIDE, SIDE))
                return torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).float().div(255)
            except Exception:
                pass
        # Not an image: a normalized byte histogram, padded to the same size.
        hist = torch.bincount(torch.frombuffer(bytearray(data or b"\0"), dtype=torch.uint8).long(), minlength=256)
        feat = torch.zeros(SIDE * SIDE)
        feat[:256] = hist.float() / max(1, len(data))
        return feat

    def __getitem__(self, i):
        path, label = self.items[i]
        with open(path, "rb") as f:
            data = f.read()
        return self.load(data), label


def igtcache_stats(path: str) -> dict | None:
    """The stats of the igtcache mount holding `path`, or None if it is not one.

    Read from the mount's `.igtcache.stats` file, the JSON `igtcache stats
    --json` prints: no igtcache binary is needed on PATH.
    """
    p = os.path.abspath(path)
    while True:
        f = os.path.join(p, ".igtcache.stats")
        if os.path.exists(f):
            try:
                with open(f, "rb") as fh:
                    return json.loads(fh.read())
            except (OSError, ValueError) as e:
                print(f"igtcache stats unreadable ({f}: {e}); no cache report", file=sys.stderr)
                return None
        if p == "/":
            return None
        p = os.path.dirname(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="image-folder root (DATA/<class>/<file>)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=4, help="DataLoader worker processes")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    ds = ImageFolderBytes(a.data)
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                        persistent_workers=a.workers > 0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(SIDE * SIDE, 64), nn.ReLU(), nn.Linear(64, len(ds.classes)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    print(f"dataset: {len(ds)} samples, {len(ds.classes)} classes from {a.data}")

    before = igtcache_stats(a.data)
    if before is None:
        print("note: --data is not inside an igtcache mount; no cache stats will be shown")
    for epoch in range(1, a.epochs + 1):
        t0 = time.monotonic()
        n, total_loss = 0, 0.0
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            n += len(y)
            total_loss += loss.item() * len(y)
        dt = time.monotonic() - t0
        line = f"epoch {epoch}: {n} samples in {dt:.2f} s = {n / dt:.1f} samples/s, loss {total_loss / n:.3f}"
        st = igtcache_stats(a.data)
        if st is not None and before is not None:
            hit = st["cache_hit_bytes"] - before["cache_hit_bytes"]
            miss = st["cache_miss_bytes"] - before["cache_miss_bytes"]
            fetched = st["backend_get_bytes"] - before["backend_get_bytes"]
            ratio = f"{100 * hit / (hit + miss):.1f}%" if hit + miss else "n/a (all from the page cache)"
            line += (f" | cache: hit {hit} B, miss {miss} B, byte hit ratio {ratio}, "
                     f"fetched from backend {fetched} B")
            before = st
        print(line, flush=True)

    st = igtcache_stats(a.data)
    if st is not None:
        keys = ["cache_hit_bytes", "cache_miss_bytes", "backend_get_requests", "backend_get_bytes",
                "cache_used_bytes", "cache_limit_bytes", "evictions"]
        print("igtcache stats (since mount): " + json.dumps({k: st.get(k) for k in keys}))
        for s in st.get("streams", []):
            print(f"  stream {s.get('path') or '/'}: {s.get('label', s.get('pattern'))} "
                  f"({s.get('granularity')}, {s.get('samples')} samples)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
