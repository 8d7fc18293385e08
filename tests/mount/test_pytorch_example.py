"""examples/pytorch_dataloader.py as a new user runs it: over a real mount of
a small generated image-folder dataset (real PNGs when python3-pil is
present), 2 epochs with 2 DataLoader workers. It must print samples/s for
every epoch and the cache stats; epoch 1 fetches the dataset from the
backend, epoch 2 fetches nothing. Skipped (with a note) when python3-torch is
not installed (scripts/setup.sh installs it)."""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import random
import re
import subprocess
from pathlib import Path

import harness
from harness import check, log

ROOT = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3"


def make_images(root: Path) -> int:
    rnd = random.Random(3)
    try:
        from PIL import Image
    except ImportError:
        Image = None
    total = 0
    for c in ("cat", "dog", "bird"):
        (root / c).mkdir(parents=True)
        for i in range(20):
            p = root / c / f"{c}_{i:03}.png"
            if Image:
                img = Image.new("RGB", (48, 48), (rnd.randrange(256), rnd.randrange(256), rnd.randrange(256)))
                img.putpixel((rnd.randrange(48), rnd.randrange(48)), (0, 0, 0))
                img.save(p)
            else:
                p.write_bytes(rnd.randbytes(2000))
            total += p.stat().st_size
    return total


def main():
    r = subprocess.run([PY, "-c", "import torch"], capture_output=True)
    if r.returncode != 0:
        log("  (skip) python3-torch is not installed; run scripts/setup.sh")
        return
    with harness.Session("pytorch") as s:
        src = s.mkdir("src")
        total = make_images(src / "train")
        m = s.mount(f"file://{src}")
        r = subprocess.run([PY, str(ROOT / "examples" / "pytorch_dataloader.py"), "--data",
                            str(m.mountpoint / "train"), "--epochs", "2", "--workers", "2", "--batch-size", "16"],
                           capture_output=True, text=True, timeout=300, env=s.igt_env())
        log("  output:\n    " + r.stdout.strip().replace("\n", "\n    "))
        check(r.returncode == 0, f"example exited 0 (stderr {r.stderr.strip()[-1500:]!r})")
        check("dataset: 60 samples, 3 classes" in r.stdout, "found the 60 samples in 3 classes")
        ep = re.findall(r"^epoch (\d+): 60 samples in [0-9.]+ s = [0-9.]+ samples/s.*fetched from backend (\d+) B$",
                        r.stdout, re.M)
        check([e[0] for e in ep] == ["1", "2"], "samples/s and cache figures printed for each epoch")
        check(int(ep[0][1]) == total, f"epoch 1 fetched the dataset from the backend ({ep[0][1]} == {total})")
        check(int(ep[1][1]) == 0, "epoch 2 fetched nothing")
        check("igtcache stats (since mount):" in r.stdout, "final cache stats printed")
        check(s.unmount(m) == 0, "daemon exited 0")


if __name__ == "__main__":
    harness.run_test("test_pytorch_example", main)
