"""Live policy engine (issue 4) on a real local mount with cache.eviction: igt.

1. Streams: a sequential scan of a large file and a shuffled small-file epoch
   run at the same time against one small cache (48 MiB for 96 + 25 MiB of
   data). Checked through `igtcache stats`: the tree labels the file
   sequential and the directory random, the engine reports per-stream cached
   bytes within the cache limit, and readahead produced prefetch hits; the
   data read is byte-identical to the source. SIGHUP reloads the policy file
   (the new eviction module applies, the cache keeps its units); a bad file
   is refused and the mount keeps running.
   A directory scanned file by file: next files prefetched from the listing.
   Per-file kernel readahead: a file read through scattered mmap faults is
   labelled random and its next open gets 128 KiB readahead (root only).
2. Memory: 64 files read sequentially at once. The daemon's RSS (sampled
   from /proc every 20 ms) stays under its idle RSS + the configured
   prefetch budget (cache.prefetch_budget_bytes, 32 MiB here) + a constant
   of 160 MiB: the FUSE workers' read buffers (fuse.threads 16 x 1 MiB max_read,
   and a copy each), the prefetcher's GET bodies (4 threads x 8 MiB
   max_request) and allocator slack. Without a budget the readahead of 64
   files (up to 32 units each) alone could hold 2 GiB.

Reads use O_DIRECT when the mount allows it, so re-reads reach the daemon
instead of the page cache.
"""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import hashlib
import mmap
import os
import random
import signal
import subprocess
import threading
import time

import harness

MIB = 1 << 20


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def direct_flags(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            os.pread(fd, 4096, 0)
        finally:
            os.close(fd)
        return os.O_DIRECT
    except OSError:
        return 0


def read_whole(path, flags, chunk=MIB):
    """Reads front to back in `chunk` reads into a page-aligned buffer (an
    unaligned O_DIRECT buffer makes the kernel split each read in two FUSE
    requests that may arrive out of order)."""
    fd = os.open(path, os.O_RDONLY | flags)
    h = hashlib.sha256()
    buf = mmap.mmap(-1, chunk)
    try:
        off = 0
        while True:
            n = os.preadv(fd, [buf], off)
            if n <= 0:
                break
            h.update(buf[:n])
            off += n
    finally:
        os.close(fd)
        buf.close()
    return h.hexdigest()


def wait_stats(s, m, pred, deadline_s=30.0):
    end = time.monotonic() + deadline_s
    while True:
        j = s.stats(m)
        if pred(j) or time.monotonic() > end:
            return j
        time.sleep(0.2)


def streams_part(s):
    src = s.mkdir("src1")
    rng = random.Random(4)
    (src / "seq").mkdir()
    with open(src / "seq" / "big.bin", "wb") as f:
        for i in range(96):
            f.write(rng.randbytes(MIB))
    big_sha = hashlib.sha256((src / "seq" / "big.bin").read_bytes()).hexdigest()
    (src / "epoch" / "train").mkdir(parents=True)
    names = [f"s_{i:04d}.bin" for i in range(400)]
    for n in names:
        (src / "epoch" / "train" / n).write_bytes(rng.randbytes(64 * 1024))
    pol = s.write_config("policy.yaml", "profile: training\n")
    cfg = s.write_config("igt.yaml", f"cache:\n  eviction: igt\n  max_bytes: 48M\npolicy:\n  file: {pol}\n")
    m = s.mount(f"file://{src}", args=["--config", str(cfg)])
    flags = direct_flags(m.mountpoint / "seq" / "big.bin")
    harness.log(f"  O_DIRECT: {'yes' if flags else 'no'}")

    errors = []
    shas = []

    def scan():
        try:
            shas.append(read_whole(m.mountpoint / "seq" / "big.bin", flags))
        except Exception as e:  # noqa: BLE001
            errors.append(f"scan: {e}")

    def epochs():
        try:
            r = random.Random(9)
            order = names[:]
            for _ in range(3):
                r.shuffle(order)
                for n in order:
                    p = m.mountpoint / "epoch" / "train" / n
                    read_whole(p, flags, chunk=64 * 1024)
        except Exception as e:  # noqa: BLE001
            errors.append(f"epochs: {e}")

    t1 = threading.Thread(target=scan)
    t2 = threading.Thread(target=epochs)
    t1.start(); t2.start(); t1.join(); t2.join()
    harness.check(not errors, f"readers ran without errors: {errors}")
    harness.check(all(x == big_sha for x in shas) and len(shas) == 1, "big.bin read back byte-identical")
    # The maintenance thread re-tests quiet streams once a second.
    st = wait_stats(s, m, lambda j: {x["path"]: x["pattern"] for x in j.get("streams", [])}
                    .items() >= {("seq/big.bin", "sequential"), ("epoch/train/", "random")})
    labels = {x["path"]: x["pattern"] for x in st.get("streams", [])}
    harness.log(f"  tree labels: {labels}")
    big = next((x for x in st.get("streams", []) if x["path"] == "seq/big.bin"), None)
    harness.check(labels.get("seq/big.bin") == "sequential", f"the large file is labelled sequential: {big}")
    harness.check(labels.get("epoch/train/") == "random", "the epoch directory is labelled random")
    eng = st.get("engine", {})
    harness.check(eng.get("policy") == "igt", f"the engine runs igt: {eng.get('policy')}")
    per = {x["stream"]: x for x in eng.get("streams", [])}
    harness.log("  engine streams: " + ", ".join(
        f"{k} {v['pattern']} cached {v['cached_bytes'] >> 20} MiB hit {v['hit_bytes'] >> 20} MiB "
        f"prefetch {v['prefetch_bytes'] >> 20}/{v['prefetch_hit_bytes'] >> 20} MiB" for k, v in per.items()))
    harness.check(eng.get("cached_bytes", 1 << 40) <= 48 * MIB, f"engine cached bytes within the limit: {eng.get('cached_bytes')}")
    harness.check(sum(v["cached_bytes"] for v in per.values()) == eng.get("cached_bytes"),
                  "per-stream cached bytes add up to the total")
    harness.check("epoch/train/" in per and per["epoch/train/"]["pattern"] == "random"
                  and per["epoch/train/"]["cached_bytes"] > 0,
                  "the epoch directory is a random stream holding cached bytes")
    harness.check(eng.get("prefetch_hit_bytes", 0) > 0, f"prefetch hits: {eng.get('prefetch_hit_bytes')}")
    harness.check(st["cache_used_bytes"] <= 48 * MIB, "store within its limit")

    # SIGHUP reloads the policy file; the cache stays; a bad file is refused.
    # Background prefetches (epoch items, fills) may still insert and evict:
    # wait until none is held and the unit count holds still for a second.
    units, end = None, time.monotonic() + 30
    while time.monotonic() < end:
        j = s.stats(m)
        pf = j.get("engine", {}).get("prefetcher", {})
        if pf.get("held_bytes") == 0 and pf.get("filling") == 0 and j["cache_units"] == units:
            break
        units = j["cache_units"]
        time.sleep(1.0)
    pol.write_text("patterns:\n  random: {eviction: lru}\n")
    os.kill(m.proc.pid, signal.SIGHUP)
    st2 = wait_stats(s, m, lambda j: j.get("engine", {}).get("policy_reloads") == 1)
    per2 = {x["stream"]: x for x in st2["engine"]["streams"]}
    harness.check(harness.is_mounted(m.mountpoint), "still mounted after SIGHUP")
    harness.check(per2["epoch/train/"]["eviction"] == "lru", "the reloaded file applies (random -> lru)")
    harness.check(st2["cache_units"] == units, f"the cache survived the reload ({units} units)")
    harness.check(st2["engine"].get("policy_reload_failures") == 0 and st2["engine"].get("policy_reload_error") == "",
                  "no failed reload in stats")
    pol.write_text("patterns:\n  random: {eviction: arc}\n")
    os.kill(m.proc.pid, signal.SIGHUP)
    st3 = wait_stats(s, m, lambda j: j.get("engine", {}).get("policy_reload_failures") == 1)
    harness.check(st3["engine"]["policy_reloads"] == 1 and harness.is_mounted(m.mountpoint),
                  "a bad policy file is refused, the mount keeps running")
    harness.check("arc" in st3["engine"].get("policy_reload_error", ""),
                  f"stats say why the reload failed: {st3['engine'].get('policy_reload_error')!r}")
    harness.check(s.unmount(m) == 0, "daemon exited 0")


def memory_part(s):
    src = s.mkdir("src2")
    rng = random.Random(5)
    block = rng.randbytes(MIB)
    files = []
    for i in range(64):
        p = src / f"f_{i:02d}.bin"
        with open(p, "wb") as f:
            for k in range(6):
                f.write(block[k:] + block[:k])
        files.append(p.name)
    budget = 32 * MIB
    constant = 160 * MIB
    cfg = s.write_config("mem.yaml", f"cache:\n  eviction: igt\n  max_bytes: 1G\n  prefetch_budget_bytes: 32M\n")
    m = s.mount(f"file://{src}", args=["--config", str(cfg)])
    pid = m.proc.pid
    time.sleep(0.5)
    idle = rss_bytes(pid)
    flags = direct_flags(m.mountpoint / files[0])
    peak = [idle]
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_bytes(pid))
            time.sleep(0.02)

    errors = []

    def reader(name):
        try:
            read_whole(m.mountpoint / name, flags, chunk=128 * 1024)
        except Exception as e:  # noqa: BLE001
            errors.append(f"{name}: {e}")

    smp = threading.Thread(target=sampler)
    smp.start()
    ts = [threading.Thread(target=reader, args=(n,)) for n in files]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stop.set()
    smp.join()
    harness.check(not errors, f"64 readers ran without errors: {errors[:3]}")
    st = s.stats(m)
    pf = st.get("engine", {}).get("prefetcher", {})
    harness.log(f"  RSS idle {idle >> 20} MiB, peak {peak[0] >> 20} MiB; bound idle + budget "
                f"{budget >> 20} MiB + constant {constant >> 20} MiB = {(idle + budget + constant) >> 20} MiB; "
                f"prefetcher {pf}")
    harness.check(pf.get("peak_held_bytes", 0) <= budget, f"prefetcher held at most its budget: {pf}")
    harness.check(peak[0] <= idle + budget + constant, "daemon RSS stayed under idle + budget + constant")
    harness.check(s.unmount(m) == 0, "daemon exited 0")


def scan_part(s):
    """A preprocessing-like scan: files of one directory read one by one in
    listing order, with the default configuration (cache.eviction: igt). The
    directory is labelled sequential at file granularity, and the engine
    prefetches the next files of the listing: later files are served from
    the cache (prefetch hits) and the bytes are the source's."""
    src = s.mkdir("src3")
    rng = random.Random(9)
    (src / "raw").mkdir()
    names = [f"doc_{i:04d}.bin" for i in range(240)]
    data = {}
    for n in names:
        data[n] = rng.randbytes(192 * 1024)
        (src / "raw" / n).write_bytes(data[n])
    m = s.mount(f"file://{src}")
    flags = direct_flags(m.mountpoint / "raw" / names[0])
    bad = 0
    for n in sorted(names):
        got = read_whole(m.mountpoint / "raw" / n, flags, chunk=256 * 1024)
        if got != hashlib.sha256(data[n]).hexdigest():
            bad += 1
        time.sleep(0.002)  # a reader that also works on what it reads: prefetches can land
    harness.check(bad == 0, "scan: every file byte-identical")
    st = wait_stats(s, m, lambda j: any(x.get("path") == "raw/" and x.get("pattern") == "sequential"
                                        for x in j.get("streams", [])))
    raw = [x for x in st.get("streams", []) if x.get("path") == "raw/"]
    harness.check(raw and raw[0]["pattern"] == "sequential",
                  f"scan: raw/ labelled sequential at file granularity ({raw})")
    eng = st.get("engine", {})
    harness.check(eng.get("prefetch_hit_bytes", 0) > 0,
                  f"scan: next files prefetched from the listing and hit "
                  f"(prefetch_bytes {eng.get('prefetch_bytes')}, hits {eng.get('prefetch_hit_bytes')})")
    harness.check(s.unmount(m) == 0, "daemon exited 0")


def readahead_part(s):
    """Per-file kernel readahead: a file read through scattered mmap faults
    gets labelled random, and its next open gets fuse.random_readahead_bytes
    (128 KiB) as its readahead; a file not labelled random gets max_read
    (1 MiB). Set through the mount's bdi read_ahead_kb, so root only."""
    src = s.mkdir("src_ra")
    rng = random.Random(11)
    data = rng.randbytes(64 * MIB)
    (src / "w.bin").write_bytes(data)
    (src / "other.bin").write_bytes(data[:4 * MIB])
    m = s.mount(f"file://{src}")
    dev = harness.mount_entries(m.mountpoint)[-1].split()[2]
    ra_path = f"/sys/class/bdi/{dev}/read_ahead_kb"

    def faults(n, seed):
        r = random.Random(seed)
        bad = 0
        with open(m.mountpoint / "w.bin", "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
            for _ in range(n):
                off = r.randrange(len(data) // 4096) * 4096
                if mm[off:off + 64] != data[off:off + 64]:
                    bad += 1
            mm.close()
        return bad

    bad = faults(300, 1)
    st = wait_stats(s, m, lambda j: any(x.get("path") == "w.bin" and x.get("pattern") == "random"
                                        for x in j.get("streams", [])))
    w = [x for x in st.get("streams", []) if x.get("path") == "w.bin"]
    harness.check(w and w[0]["pattern"] == "random", f"readahead: mmap faults labelled random ({w})")
    bad += faults(100, 2)
    harness.check(bad == 0, "readahead: every mmap read byte-identical")
    if os.geteuid() != 0:
        harness.log("  not root: per-file readahead is not set (kernel default); not checked")
    else:
        with open(m.mountpoint / "w.bin", "rb"):
            ra = int(open(ra_path).read())
        harness.check(ra == 128, f"readahead: a random file is opened with 128 KiB readahead ({ra})")
        with open(m.mountpoint / "other.bin", "rb") as f:
            ra = int(open(ra_path).read())
            harness.check(f.read() == data[:4 * MIB], "readahead: other file byte-identical")
        harness.check(ra == 1024, f"readahead: another file gets max_read, 1 MiB ({ra})")
    harness.check(s.unmount(m) == 0, "daemon exited 0")


def lru_sighup_part(s):
    """SIGHUP on a mount without the policy engine (lru) is logged and
    ignored; before, libfuse's own handler ended the session: the mount went
    away under its readers."""
    src = s.mkdir("src_lru")
    (src / "a.bin").write_bytes(b"lru" * 100_000)
    pol = s.write_config("unused_policy.yaml", "profile: training\n")
    cfg = s.write_config("lru.yaml", f"cache:\n  eviction: lru\npolicy:\n  file: {pol}\n")
    m = s.mount(f"file://{src}", args=["--config", str(cfg)])
    harness.check((m.mountpoint / "a.bin").read_bytes() == b"lru" * 100_000, "lru mount reads")
    os.kill(m.proc.pid, signal.SIGHUP)
    # The maintenance thread logs it within its next round (about 1 s):
    # polled, with a deadline for a loaded machine.
    deadline = time.monotonic() + 30
    while "SIGHUP ignored" not in m.proc.stderr_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    harness.check(harness.is_mounted(m.mountpoint) and m.proc.popen.poll() is None,
                  "lru mount: still mounted after SIGHUP")
    err = m.proc.stderr_text()
    harness.check("SIGHUP ignored" in err and "'policy.file'" in err,
                  "lru mount: the unused policy file and the ignored SIGHUP are logged")
    harness.check((m.mountpoint / "a.bin").read_bytes() == b"lru" * 100_000, "lru mount reads after SIGHUP")
    harness.check(s.unmount(m) == 0, "daemon exited 0")
    # As a daemon too: the warning is the mount command's (the daemon's own
    # warnings go to its log, and this one came before the log was set up).
    d = s.mount(f"file://{src}", args=["--config", str(cfg)], foreground=False)
    harness.check("'policy.file'" in d.mount_stderr and "not used" in d.mount_stderr,
                  f"lru daemon mount: the unused policy file is said ({d.mount_stderr.strip()[:200]!r})")
    s.unmount(d)
    harness.check(not harness.is_mounted(d.mountpoint), "lru daemon mount: unmounted")


def startup_sighup_part(s):
    """A SIGHUP while the daemon starts (a large cache takes seconds to load;
    here a source that does not answer) neither kills it nor is lost: the
    default action ended it with no word (exit 129)."""
    cfg = s.write_config("unreachable.yaml", "backend:\n  endpoint: http://127.0.0.1:1\n  max_retries: 3\n"
                         "  retry_base_ms: 400\n  no_sign_request: true\n")
    mnt = s.mkdir("mnt_hup")
    argv = s.mount_argv("s3://bkt/data", mnt, s.mkdir("cache_hup"), ["--config", str(cfg)], True)
    p = s.spawn("igtcache-hup", argv, s.igt_env())
    # Past argument parsing (Serve installs the handler first): the cache is
    # open (its start-up line), the source's probe still retrying. A fixed
    # sleep was too short on a loaded machine.
    deadline = time.monotonic() + 60
    while "units checked" not in p.stderr_text() and p.popen.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    sent = 0
    while p.popen.poll() is None and time.monotonic() < deadline:
        os.kill(p.pid, signal.SIGHUP)
        sent += 1
        time.sleep(0.2)
    rc = p.popen.wait(timeout=30)
    err = p.stderr_text()
    harness.check(sent >= 2 and rc == 1 and "not usable" in err,
                  f"{sent} SIGHUPs while the mount starts: it runs on and fails on the source (exit {rc}: "
                  f"{err.strip()[-160:]!r})")
    harness.check(not harness.is_mounted(mnt), "nothing mounted")


def never_cache_part(s):
    """A never_cache prefix of the policy file is read through on the live
    mount: served from the source every time, nothing of it stored (before,
    only the simulator honoured it: the mount cached it like anything else)."""
    src = s.mkdir("src_never")
    (src / "tmp").mkdir()
    (src / "keep").mkdir()
    tmp = {f"t{i}.bin": random.Random(i).randbytes(600_000) for i in range(4)}
    for n, b in tmp.items():
        (src / "tmp" / n).write_bytes(b)
    (src / "keep" / "k.bin").write_bytes(b"k" * 600_000)
    pol = s.write_config("never.yaml", 'profile: training\noverrides:\n  - {prefix: "tmp/", never_cache: true}\n')
    cfg = s.write_config("never_cfg.yaml", f"policy:\n  file: {pol}\n")
    m = s.mount(f"file://{src}", args=["--config", str(cfg)])
    flags = direct_flags(m.mountpoint / "tmp" / "t0.bin")
    before = s.stats(m)["backend_get_bytes"]
    for rnd in range(2):
        for n, b in sorted(tmp.items()):
            got = read_whole(m.mountpoint / "tmp" / n, flags)
            harness.check(got == hashlib.sha256(b).hexdigest(), f"never_cache: tmp/{n} read {rnd + 1} is byte-identical")
    st = s.stats(m)
    fetched = st["backend_get_bytes"] - before
    harness.check(st["cache_units"] == 0 and fetched >= 2 * sum(map(len, tmp.values())),
                  f"never_cache: nothing of tmp/ stored, each read from the source "
                  f"(cache_units {st['cache_units']}, backend bytes {fetched})")
    # Small reads of a file of less than a unit fetch the sub-units they
    # cover, not the whole file each (a tester: a 1 MiB never_cache file read
    # in 4 KiB pages fetched 1 MiB per page).
    before = s.stats(m)["backend_get_bytes"]
    fd = os.open(m.mountpoint / "tmp" / "t1.bin", os.O_RDONLY | flags)
    try:
        for k in range(16):
            harness.check(os.pread(fd, 4096, k * 8192) == tmp["t1.bin"][k * 8192:k * 8192 + 4096],
                          f"never_cache: 4 KiB at {k * 8192} of tmp/t1.bin is right")
    finally:
        os.close(fd)
    fetched = s.stats(m)["backend_get_bytes"] - before
    harness.check(fetched <= 16 * (64 << 10), f"never_cache: 16 reads of 4 KiB fetched {fetched} bytes "
                  "(at most a 64 KiB sub-unit each, not the 600 KB file)")
    read_whole(m.mountpoint / "keep" / "k.bin", flags)
    st = s.stats(m)
    harness.check(st["cache_units"] > 0, f"never_cache: other paths are cached ({st['cache_units']} units)")
    ovs = st.get("engine", {}).get("overrides", [])
    harness.check(len(ovs) == 1 and ovs[0]["prefix"] == "tmp/" and ovs[0]["never_cache"] is True,
                  f"never_cache: stats show the override in effect ({ovs})")
    # igtcache warm leaves the prefix out, and says so (before, it read it
    # all from the source and reported it read, caching nothing).
    before = s.stats(m)["backend_get_bytes"]
    r = subprocess.run([harness.igtcache_bin(), "warm", str(m.mountpoint)], capture_output=True, text=True,
                       timeout=120, env=s.igt_env())
    harness.check(r.returncode == 0 and f"warm: {m.mountpoint}: 1 file," in r.stdout
                  and "not read: 4 files" in r.stdout and "never_cache" in r.stdout,
                  f"never_cache: warm reads keep/ only and names what it left out ({r.stdout.strip()!r} {r.stderr.strip()!r})")
    harness.check(s.stats(m)["backend_get_bytes"] == before, "never_cache: warm fetched nothing (keep/ was cached)")
    harness.check(s.unmount(m) == 0, "daemon exited 0")


def quota_warm_part(s):
    """igtcache warm of a prefix with a quota: it plans at most the quota
    and the units join the prefix's stream, where the quota holds (before,
    they waited in the (warm) stream and counted nothing: a tester warmed
    9.5 MiB under a 4 MiB quota, the override showing 0 cached)."""
    src = s.mkdir("src_quota")
    (src / "val").mkdir()
    files = {f"v{i}.bin": random.Random(100 + i).randbytes(1 << 20) for i in range(8)}
    for n, b in files.items():
        (src / "val" / n).write_bytes(b)
    pol = s.write_config("quota.yaml", 'profile: training\noverrides:\n  - {prefix: "val/", quota: 3M}\n')
    cfg = s.write_config("quota_cfg.yaml", f"policy:\n  file: {pol}\n")
    m = s.mount(f"file://{src}", args=["--config", str(cfg), "--cache-size", "64M"])
    r = subprocess.run([harness.igtcache_bin(), "warm", str(m.mountpoint / "val")], capture_output=True, text=True,
                       timeout=120, env=s.igt_env())
    harness.check(r.returncode == 0 and ": 3 files," in r.stdout and "did not fit: 5 files" in r.stdout
                  and "beyond the quota" in r.stdout,
                  f"quota warm: 3 of 8 files planned, the rest named ({r.stdout.strip()!r} {r.stderr.strip()!r})")
    ovs = s.stats(m).get("engine", {}).get("overrides", [])
    harness.check(len(ovs) == 1 and ovs[0]["prefix"] == "val/" and ovs[0]["cached_bytes"] == 3 << 20,
                  f"quota warm: the warmed 3 MiB count in the prefix's stream ({ovs})")
    flags = direct_flags(m.mountpoint / "val" / "v0.bin")
    for n, b in sorted(files.items()):
        harness.check(read_whole(m.mountpoint / "val" / n, flags) == hashlib.sha256(b).hexdigest(),
                      f"quota warm: val/{n} is byte-identical")
    harness.check(s.unmount(m) == 0, "daemon exited 0")


def main():
    with harness.Session("policies_live") as s:
        startup_sighup_part(s)
        never_cache_part(s)
        quota_warm_part(s)
        lru_sighup_part(s)
        streams_part(s)
        scan_part(s)
        readahead_part(s)
        memory_part(s)


if __name__ == "__main__":
    harness.run_test("policies_live", main)
