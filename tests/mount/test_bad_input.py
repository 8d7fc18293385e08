"""Bad input to `igtcache mount`: each case must exit non-zero with a short
(one line, at most a few) error on stderr that names the problem, and leave
no mount (os.path.ismount false, no /proc/self/mountinfo entry) and no
process behind. Every case runs in daemon mode (no -f) and with -f.

Cases: unknown source scheme, relative/missing local source, missing bucket
(s3rver up), wrong endpoint (nothing listening), YAML syntax error, unknown
key, bad value, unwritable cache dir (under a regular file; a regular file;
on a read-only filesystem when we can make one), missing mount point, and a
second daemon on a cache dir already in use."""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import fcntl
import os
import re
import subprocess
import threading
import time

import harness
from harness import check, log

BUCKET = "igt-bad"
CASE_TIMEOUT_S = 120   # a hang is a failure; generous for retry back-off
MAX_LINES = 3          # "one line-ish": the error, maybe a hint


def run_case(s, name, source, mnt, args, keywords, foreground, env=None, want_rc=None):
    """Runs one failing mount; returns a list of problems (empty = ok).
    want_rc: the exit code it must have (else any non-zero one)."""
    argv = s.mount_argv(source, mnt, None, args, foreground)
    t0 = time.monotonic()
    problems = []
    try:
        r = subprocess.run(argv, env=env or s.igt_env(), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=CASE_TIMEOUT_S)
        rc, err = r.returncode, r.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as ex:
        rc, err = None, (ex.stderr or b"").decode("utf-8", "replace")
        problems.append(f"did not exit within {CASE_TIMEOUT_S}s")
    dt = time.monotonic() - t0
    lines = [l for l in err.splitlines() if l.strip()]
    mode = "-f" if foreground else "daemon"
    if rc == 0:
        problems.append("exit code 0")
    elif want_rc is not None and rc != want_rc:
        problems.append(f"exit code {rc}, want {want_rc}")
    if not lines:
        problems.append("nothing on stderr")
    elif len(lines) > MAX_LINES:
        problems.append(f"{len(lines)} lines on stderr (want <= {MAX_LINES})")
    low = err.lower()
    if lines and not any(k.lower() in low for k in keywords):
        problems.append(f"stderr names none of {keywords}")
    mounted = harness.is_mounted(mnt)
    if mounted:
        problems.append("mount left behind")
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        if harness.is_mounted(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
    if harness.mount_entries(mnt):
        problems.append("/proc/self/mountinfo still has an entry")
    # A leftover daemon would carry our unique mount point path in its argv.
    left = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = harness.pids_with_arg(str(mnt))
        if not left:
            break
        time.sleep(0.1)
    if left:
        problems.append(f"process(es) {left} still running")
        for pid in left:  # ours: started by this test with this unique path
            try:
                os.kill(pid, 15)
            except ProcessLookupError:
                pass
    first = lines[0] if lines else ""
    status = "ok" if not problems else "FAIL " + "; ".join(problems)
    log(f"  [{mode:6}] {name}: rc={rc} {dt:.1f}s stderr={first[:160]!r}"
        + (f" (+{len(lines) - 1} lines)" if len(lines) > 1 else "") + f" -> {status}")
    if problems and len(lines) > 1:
        log("      full stderr:\n        " + "\n        ".join(lines[:20]))
    return [f"{name} [{mode}]: {p}" for p in problems]


def main():
    with harness.Session("bad_input") as s:
        srv = s.start_s3rver(buckets=(BUCKET,))
        srv.request("PUT", f"/{BUCKET}/hello.txt", b"hello\n")
        src_dir = s.mkdir("src")
        (src_dir / "a.txt").write_text("a\n")
        held = harness.HeldPort()  # bound, not listening: connections are refused
        dead_port = held.port
        s3args = ["--endpoint", srv.endpoint, "--region", "us-east-1"]

        afile = s.tmp / "a_regular_file"
        afile.write_text("not a directory\n")
        cfg_syntax = s.write_config("syntax.yaml", "cache:\n  dir: [unclosed\n  max_bytes: 1G\n")
        cfg_unknown = s.write_config("unknown.yaml", "cache:\n  max_bytes: 1G\n  bogus_key_xyz: 3\n")
        cfg_badval = s.write_config("badval.yaml", "cache:\n  max_bytes: lots-of-bytes\n")
        cfg_badval2 = s.write_config("badval2.yaml", "backend:\n  addressing: sideways\n")
        cfg_missing = s.tmp / "no_such_config.yaml"
        cfg_poldir = s.write_config("poldir.yaml", f"policy:\n  file: {src_dir}\n")
        fifo = s.tmp / "policy.fifo"
        os.mkfifo(fifo)
        cfg_polfifo = s.write_config("polfifo.yaml", f"policy:\n  file: {fifo}\n")

        # (name, source, args, keywords any of which must appear on stderr;
        # case-insensitive). An unusable cache dir must be called that, not
        # reported through a side effect such as the log file inside it.
        cases = [
            ("unknown scheme", "gs://x", [], ["gs://", "scheme", "gs"]),
            ("no scheme", "just-a-name", [], ["just-a-name", "scheme", "source"]),
            # A path: the file:// URL is suggested.
            ("a path for a source", str(src_dir), [], [f"file://{src_dir}"]),
            # fstab's spelling of a flag: CLI11 said only "not expected".
            ("--cache_dir", f"file://{src_dir}", ["--cache_dir", str(s.tmp / "c")], ["--cache-dir"]),
            ("missing local dir", f"file://{s.tmp}/does-not-exist", [], ["does-not-exist"]),
            ("missing bucket", "s3://no-such-bucket-igt", s3args, ["no-such-bucket-igt", "NoSuchBucket"]),
            ("wrong endpoint", f"s3://{BUCKET}",
             ["--endpoint", f"http://127.0.0.1:{dead_port}", "--region", "us-east-1"],
             [str(dead_port), "connect", "refused"]),
            ("yaml syntax error", f"file://{src_dir}", ["--config", str(cfg_syntax)],
             ["syntax.yaml", "yaml", "line"]),
            ("yaml unknown key", f"file://{src_dir}", ["--config", str(cfg_unknown)], ["bogus_key_xyz"]),
            ("yaml bad size value", f"file://{src_dir}", ["--config", str(cfg_badval)], ["max_bytes"]),
            ("yaml bad enum value", f"file://{src_dir}", ["--config", str(cfg_badval2)], ["addressing"]),
            ("missing config file", f"file://{src_dir}", ["--config", str(cfg_missing)], ["no_such_config"]),
            # A directory read as an empty file gave the defaults, silently.
            ("config file is a directory", f"file://{src_dir}", ["--config", str(src_dir)], ["is a directory"]),
            ("policy file is a directory", f"file://{src_dir}", ["--config", str(cfg_poldir)],
             ["poldir.yaml: config key 'policy.file'"]),
            # Opened without blocking: a FIFO held the mount (and a SIGHUP
            # reload, and the unmount waiting for it) for good.
            ("policy file is a FIFO", f"file://{src_dir}", ["--config", str(cfg_polfifo)], ["is a FIFO"]),
            ("endpoint port out of range", f"s3://{BUCKET}", ["--endpoint", "http://127.0.0.1:99999"],
             ["not a port number"]),
            ("endpoint with a password", f"s3://{BUCKET}", ["--endpoint", "http://usr:pw123@127.0.0.1:9"],
             ["user name or password"]),
            ("region with a line break", f"s3://{BUCKET}", ["--endpoint", srv.endpoint, "--region", "us\r\nX-Evil: 1"],
             ["not a region name"]),
            ("bad --cache-size", f"file://{src_dir}", ["--cache-size", "12Q"], ["cache-size", "12Q", "size"]),
            ("empty --cache-size", f"file://{src_dir}", ["--cache-size", ""], ["cache-size"]),
            ("endpoint without a host", f"s3://{BUCKET}", ["--endpoint", "http://", "--region", "us-east-1"],
             ["endpoint", "host"]),
            ("cache dir under a file", f"file://{src_dir}", ["--cache-dir", str(afile / "cache")],
             ["cache dir"]),
            ("cache dir is a file", f"file://{src_dir}", ["--cache-dir", str(afile)], ["cache dir"]),
            ("cache dir in /proc", f"file://{src_dir}", ["--cache-dir", "/proc/igtcache-test-cache"],
             ["cache dir"]),
        ]

        # A read-only filesystem for the cache dir, if this machine lets us make one.
        ro = s.mkdir("ro_fs")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "igt-test-ro", str(ro)],
                           capture_output=True)
        ro_mounted = r.returncode == 0
        if ro_mounted:
            cases.append(("cache dir on a read-only fs", f"file://{src_dir}",
                          ["--cache-dir", str(ro / "cache")], ["cache dir"]))
        else:
            log(f"  (cannot mount a read-only tmpfs here: {r.stderr.decode(errors='replace').strip()}; "
                "that sub-case is skipped)")

        problems = []
        try:
            for i, (name, source, args, kw) in enumerate(cases):
                for fg in (False, True):
                    mnt = s.mkdir(f"mnt_{i}_{'fg' if fg else 'bg'}")
                    problems += run_case(s, name, source, mnt, args, kw, fg)

            # An unknown FUSE option is a usage error: exit 2 (docs/CLI.md).
            for fg in (False, True):
                mnt = s.mkdir(f"mnt_badopt_{'fg' if fg else 'bg'}")
                problems += run_case(s, "unknown FUSE option", f"file://{src_dir}", mnt, ["-o", "nonsense_opt_xyz"],
                                     ["nonsense_opt_xyz"], fg, want_rc=2)

            # A directory with '%' in its name, written as it is in a file://
            # URL: its escape was decoded; the error says how to write it.
            pct = s.mkdir("pct%20dir")
            for fg in (False, True):
                mnt = s.mkdir(f"mnt_pct_{'fg' if fg else 'bg'}")
                problems += run_case(s, "file:// URL of a directory with '%' in its name", f"file://{pct}", mnt, [],
                                     ["does not exist", "%25"], fg)

            # An empty -o is an error, as an empty value of any option is.
            for fg in (False, True):
                mnt = s.mkdir(f"mnt_emptyo_{'fg' if fg else 'bg'}")
                problems += run_case(s, "empty -o", f"file://{src_dir}", mnt, ["-o", ""], ["-o needs a value"], fg,
                                     want_rc=2)

            # -o max_read is fuse.max_read_bytes, checked as the config key
            # (passed to libfuse as it was, the kernel's INIT was refused after
            # the command had said mounted, exit 0).
            for fg in (False, True):
                mnt = s.mkdir(f"mnt_maxread_{'fg' if fg else 'bg'}")
                problems += run_case(s, "-o max_read not a multiple of 4K", f"file://{src_dir}", mnt,
                                     ["-o", "ro,max_read=5000"], ["fuse.max_read_bytes"], fg, want_rc=2)

            # A mount(8) helper option given to igtcache mount: its flag is
            # named (libfuse said "fuse: unknown option(s)").
            for fg in (False, True):
                mnt = s.mkdir(f"mnt_helperopt_{'fg' if fg else 'bg'}")
                problems += run_case(s, "-o cache_size=1G", f"file://{src_dir}", mnt, ["-o", "ro,cache_size=1G"],
                                     ["--cache-size", "mount(8) helper"], fg, want_rc=2)

            # Files the daemon writes, under the mount point: hidden by the mount.
            for fg in (False, True):
                mnt = s.mkdir(f"mnt_traceout_{'fg' if fg else 'bg'}")
                problems += run_case(s, "--trace-out inside the mount point", f"file://{src_dir}", mnt,
                                     ["--trace-out", str(mnt / "t.csv")], ["inside mount point"], fg, want_rc=2)
                problems += run_case(s, "log file inside the mount point", f"file://{src_dir}", mnt,
                                     ["--log-file", str(mnt / "igt.log")], ["inside mount point"], fg, want_rc=2)
                # The log file as the trace, or either in the cache dir
                # (a --trace-out naming index/CURRENT destroyed the index).
                same = s.tmp / "same.log"
                problems += run_case(s, "--trace-out the log file", f"file://{src_dir}", mnt,
                                     ["--trace-out", str(same), "--log-file", str(same)], ["is the log file"], fg,
                                     want_rc=2)
                cdir = s.mkdir(f"cache_traceout_{'fg' if fg else 'bg'}")
                if not fg:  # a daemon's default log file (an error message named it as a fine place)
                    problems += run_case(s, "--trace-out the daemon's default log", f"file://{src_dir}", mnt,
                                         ["--cache-dir", str(cdir), "--trace-out", str(cdir / "igtcache.log")],
                                         ["is the log file"], fg, want_rc=2)
                problems += run_case(s, "--trace-out over the cache's index", f"file://{src_dir}", mnt,
                                     ["--cache-dir", str(cdir), "--trace-out", str(cdir / "index" / "CURRENT")],
                                     ["overwrite the cache's own files"], fg, want_rc=2)
                problems += run_case(s, "log file over the cache's lock", f"file://{src_dir}", mnt,
                                     ["--cache-dir", str(cdir), "--log-file", str(cdir / "LOCK")],
                                     ["overwrite the cache's own files"], fg, want_rc=2)
                # A mistyped directory is not created (spdlog would have).
                missing = s.tmp / f"no_such_log_dir_{fg}"
                problems += run_case(s, "log file in a missing directory", f"file://{src_dir}", mnt,
                                     ["--log-file", str(missing / "igt.log")], ["does not exist"], fg, want_rc=2)
                if missing.exists():
                    problems.append(f"log file in a missing directory [{fg}]: {missing} was created")

            # Missing mount point.
            for fg in (False, True):
                mnt = s.tmp / f"no_such_mountpoint_{fg}"
                problems += run_case(s, "missing mount point", f"file://{src_dir}", mnt, [],
                                     [mnt.name, "mount"], fg)

            # A second daemon on a cache dir already in use is refused.
            cache = s.mkdir("shared_cache")
            m = s.mount(f"file://{src_dir}", cache_dir=cache)
            for fg in (False, True):
                mnt = s.mkdir(f"mnt_second_{fg}")
                problems += run_case(s, "second daemon on the same cache dir", f"file://{src_dir}", mnt,
                                     ["--cache-dir", str(cache)], [str(cache), "lock", "in use", "another"], fg)
            # A mount on top of a live igtcache mount is refused (it stacked),
            # also when the mount point is spelled through a symlink (that
            # spelling was not recognised and stacked).
            link = s.tmp / "mnt_link"
            link.symlink_to(m.mountpoint)
            for fg, target in ((False, m.mountpoint), (True, m.mountpoint), (False, link), (True, link)):
                argv = s.mount_argv(f"file://{src_dir}", target, s.mkdir(f"cache_stack_{fg}_{target.name}"), [], fg)
                r = subprocess.run(argv, env=s.igt_env(), stdin=subprocess.DEVNULL, capture_output=True,
                                   timeout=CASE_TIMEOUT_S)
                err = r.stderr.decode("utf-8", "replace").strip()
                log(f"  mount on top of an igtcache mount ({target.name}): rc={r.returncode} stderr={err[:160]!r}")
                if r.returncode != 2 or "already an igtcache mount" not in err:
                    problems.append(f"mount on top of an igtcache mount [{fg}, {target}]: rc={r.returncode}, "
                                    f"{err!r}")
                if len(harness.mount_entries(m.mountpoint)) != 1:
                    problems.append(f"mount on top of an igtcache mount [{fg}]: "
                                    f"{len(harness.mount_entries(m.mountpoint))} mounts there")
                    subprocess.run(["fusermount3", "-u", str(m.mountpoint)], capture_output=True)
            check((m.mountpoint / "a.txt").read_text() == "a\n", "the first daemon still serves reads")
            check(s.unmount(m) == 0, "first daemon exited 0")

            # Two mounts started at once on one mount point (two cache dirs):
            # both passed the check above and stacked in 3 of 5 tries (a
            # tester). Now one mounts and the other is refused, every time.
            race_mnt = s.mkdir("mnt_race")

            def clear_race() -> None:
                """Every daemon on race_mnt unmounted (a moment's "busy" after
                stats retried, then lazily) and waited for by its pid."""
                for _ in range(4):
                    if not harness.mount_entries(race_mnt):
                        return
                    try:
                        pid = int(s.stats(harness.Mount(race_mnt, None, None, None, ""))["pid"])
                    except Exception as e:  # a daemon that does not answer: unmounted all the same
                        pid = 0
                        problems.append(f"two mounts at once: stats of the mount failed: {e}")
                    deadline = time.monotonic() + 5
                    while subprocess.run(["fusermount3", "-u", str(race_mnt)], capture_output=True).returncode != 0:
                        if time.monotonic() > deadline:
                            subprocess.run(["fusermount3", "-uz", str(race_mnt)], capture_output=True)
                            break
                        time.sleep(0.1)
                    deadline = time.monotonic() + 20
                    while pid and harness.pid_alive(pid) and time.monotonic() < deadline:
                        time.sleep(0.05)
                    if pid and harness.pid_alive(pid):
                        os.kill(pid, 9)
                        problems.append(f"two mounts at once: daemon {pid} did not exit on unmount")
                if harness.mount_entries(race_mnt):
                    problems.append(f"two mounts at once: {race_mnt} still mounted after 4 unmounts")

            for i in range(5):
                argvs = [s.mount_argv(f"file://{src_dir}", race_mnt, s.mkdir(f"cache_race_{i}_{k}"), [], False)
                         for k in (0, 1)]
                ps: list[subprocess.Popen] = []
                try:
                    for av in argvs:
                        ps.append(subprocess.Popen(av, env=s.igt_env(), stdin=subprocess.DEVNULL,
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE))
                    outs = [p.communicate(timeout=CASE_TIMEOUT_S) for p in ps]
                    rcs = sorted(p.returncode for p in ps)
                    n = len(harness.mount_entries(race_mnt))
                    log(f"  two mounts at once, round {i}: rcs {rcs}, {n} mount(s)")
                    if rcs != [0, 2] or n != 1:
                        problems.append(f"two mounts at once on one mount point, round {i}: exit codes {rcs}, {n} "
                                        f"mounts: {[o[1].decode(errors='replace')[-300:] for o in outs]}")
                    elif not any(b"already an igtcache mount" in o[1] for o in outs):
                        problems.append(f"two mounts at once, round {i}: the refusal did not say why: {outs}")
                finally:
                    for p in ps:  # the mount commands (not the daemons): by pid, if one hung
                        if p.poll() is None:
                            p.kill()
                            p.wait()
                    clear_race()

            # A mount point locked by another process: the mount waits for it,
            # says so, and goes on once it is released (4 s on).
            locked = s.mkdir("mnt_locked")
            lock_fd = os.open(locked, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            release = threading.Timer(4.0, os.close, args=(lock_fd,))  # the mount reaches the lock well before
            release.start()
            try:
                m = s.mount(f"file://{src_dir}", cache_dir=s.mkdir("cache_locked"), mountpoint=locked,
                            foreground=False)
            finally:
                release.join()
            check("is locked" in m.mount_stderr and (m.mountpoint / "a.txt").read_text() == "a\n",
                  f"a locked mount point is waited for, said, then mounted ({m.mount_stderr.strip()!r})")
            s.unmount(m)

            # A mount that would reach itself is refused before it mounts: its
            # reads waited on its own replies (unkillable), or a walk of it
            # found it again inside.
            for fg in (False, True):
                mnt = s.mkdir(f"mnt_self_{fg}")
                problems += run_case(s, "source is the mount point", f"file://{mnt}", mnt, [], ["overlap"], fg,
                                     want_rc=2)
                outer = s.mkdir(f"src_outer_{fg}")
                inner = outer / "mnt"
                inner.mkdir()
                problems += run_case(s, "source contains the mount point", f"file://{outer}", inner, [],
                                     ["overlap"], fg, want_rc=2)
                mnt = s.mkdir(f"mnt_cachein_{fg}")
                problems += run_case(s, "cache dir inside the mount point", f"file://{src_dir}", mnt,
                                     ["--cache-dir", str(mnt / "cache")], ["inside mount point"], fg, want_rc=2)
                # Inside a file:// source the daemon's files would be listed
                # and served by the mount (a black-box test saw the cache's
                # units/, index/ and LOCK in it), and nothing is created there.
                src_in = s.mkdir(f"src_in_{fg}")
                (src_in / "x.bin").write_bytes(b"x" * 100)
                for flag, name in (("--cache-dir", "cachein"), ("--trace-out", "t.csv"), ("--log-file", "igt.log")):
                    problems += run_case(s, f"{flag} inside the source", f"file://{src_in}", mnt,
                                         [flag, str(src_in / name)], ["inside source"], fg, want_rc=2)
                    if (src_in / name).exists():
                        problems.append(f"{flag} inside the source [{fg}]: {src_in / name} was created")
        finally:
            if ro_mounted:
                subprocess.run(["umount", str(ro)], capture_output=True)

        # `config --check` says what the mount would: a quota the cache cannot
        # exceed is a warning, a metrics address the server cannot bind an
        # error (IPv6, unless the HTTP server was built with it).
        pol = s.write_config("quota_pol.yaml", "profile: training\noverrides:\n  - prefix: train/\n    quota: 100G\n")
        cq = s.write_config("quota.yaml", f"cache:\n  max_bytes: 64M\npolicy:\n  file: {pol}\n")
        r = subprocess.run([harness.igtcache_bin(), "config", "--check", str(cq)], capture_output=True, text=True)
        check(r.returncode == 0 and "never applies" in r.stderr,
              f"config --check: a quota above the cache size warns ({r.returncode}, {r.stderr.strip()[:120]!r})")
        # `sim --config` too (before 2026-11-29 it said nothing of the quota,
        # and its error for a bad policy file left out the config file).
        trace = s.write_config("t.csv", "time_us,pid,path,offset,length,file_size\n0,1,train/a,0,10,10\n")
        r = subprocess.run([harness.igtcache_bin(), "sim", "--trace", str(trace), "--cache-size", "64M",
                            "--config", str(cq)], capture_output=True, text=True)
        check(r.returncode == 0 and "never applies" in r.stderr,
              f"sim --config: a quota above the cache size warns ({r.returncode}, {r.stderr.strip()[:120]!r})")
        # A mount's config with cache.eviction and cache.max_bytes: sim says
        # it runs its own --policy and --cache-size instead (it said nothing).
        cl = s.write_config("lru_cfg.yaml", "cache:\n  eviction: lru\n  max_bytes: 1G\n")
        r = subprocess.run([harness.igtcache_bin(), "sim", "--trace", str(trace), "--cache-size", "64M",
                            "--config", str(cl)], capture_output=True, text=True)
        check(r.returncode == 0 and "cache.eviction 'lru' is not used" in r.stderr
              and "cache.max_bytes is not used" in r.stderr,
              f"sim --config: cache.eviction and cache.max_bytes said unused ({r.returncode}, {r.stderr.strip()[:160]!r})")
        # An empty value (an unset shell variable) is an error for every
        # command's options: `config --check ""` printed the example config
        # and exited 0, passing a check of nothing.
        for cmd in (["config", "--check", ""],
                    ["sim", "--trace", str(trace), "--cache-size", "64M", "--unit-size", ""],
                    ["sim", "--trace", str(trace), "--cache-size", "64M", "--listing", ""],
                    ["sim", "--trace", str(trace), "--cache-size", "64M", "--config", ""],
                    ["classify", "--trace", str(trace), "--config", ""]):
            r = subprocess.run([harness.igtcache_bin(), *cmd], capture_output=True, text=True)
            check(r.returncode == 2 and "an empty value is not allowed" in r.stderr,
                  f"{' '.join(cmd[:1] + cmd[-2:])!r}: an error, exit 2 ({r.returncode}, {r.stderr.strip()[:80]!r})")
        r = subprocess.run([harness.igtcache_bin(), "sim", "--trace", str(trace), "--cache-size", "1"],
                           capture_output=True, text=True)
        check(r.returncode == 2 and "less than one unit" in r.stderr,
              f"sim --cache-size 1: less than one unit, exit 2 ({r.returncode}, {r.stderr.strip()[:100]!r})")
        badpol = s.write_config("bad_pol.yaml", "patterns:\n  random: {eviction: kep}\n")
        cb = s.write_config("badpol.yaml", f"policy:\n  file: {badpol}\n")
        outs = [subprocess.run([harness.igtcache_bin(), *cmd], capture_output=True, text=True)
                for cmd in (["config", "--check", str(cb)],
                            ["sim", "--trace", str(trace), "--cache-size", "64M", "--config", str(cb)])]
        check(all(o.returncode == 2 and f"{cb}: config key 'policy.file'" in o.stderr and "kep" in o.stderr
                  for o in outs),
              f"a bad policy file: config --check and sim name the config file, the key and the value "
              f"({[(o.returncode, o.stderr.strip()[:100]) for o in outs]})")
        # A trace's bad row names its path with control characters escaped
        # (a path's escape sequence reached the terminal, a newline split
        # the error: a docs walker's finding).
        esc = s.write_config("esc.csv", 'time_us,pid,path,offset,length,file_size\n0,1,"/x\x1b[31mred\nz",0,1,1\n')
        for cmd in (["classify", "--trace", str(esc)], ["sim", "--trace", str(esc), "--cache-size", "64M"]):
            r = subprocess.run([harness.igtcache_bin(), *cmd], capture_output=True, text=True)
            err = r.stderr.strip()
            check(r.returncode == 2 and "\x1b" not in err and "\n" not in err and "\\x1b[31mred\\x0az" in err,
                  f"{cmd[0]}: a bad path's control characters escaped in the error ({r.returncode}, {err[:120]!r})")
        v6 = s.write_config("v6.yaml", 'metrics:\n  addr: "[::1]:0"\n')
        r = subprocess.run([harness.igtcache_bin(), "config", "--check", str(v6)], capture_output=True, text=True)
        check(r.returncode == 0 or (r.returncode == 2 and "IPv6" in r.stderr and "metrics.addr" in r.stderr),
              f"config --check: an IPv6 metrics address is valid or refused naming IPv6 "
              f"({r.returncode}, {r.stderr.strip()[:120]!r})")

        n = 2 * (len(cases) + 8)
        if problems:
            raise harness.TestFailure(f"{len(problems)} of {n} bad-input runs misbehaved:\n    "
                                      + "\n    ".join(problems))
        check(True, f"all {n} bad-input runs: non-zero exit, short error naming the problem, "
                    "no mount, no process left")


if __name__ == "__main__":
    harness.run_test("test_bad_input", main)
