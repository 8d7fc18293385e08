"""examples/systemd/igtcache@.service, run the way systemd runs it (systemd is
not PID 1 here): its EnvironmentFile, ExecStartPre/ExecStart, then a crash
of the daemon (SIGKILL) followed by what Restart=on-failure does
(ExecStopPost, then ExecStartPre/ExecStart again) — the dead mount is
cleared and the remount serves from the same, still warm cache — and
finally ExecStop/ExecStopPost. Specifiers (%f, %i, %I) and environment
expansion (${VAR} one word, $VAR split on whitespace, a leading '-' ignores
failure) follow systemd.service(5); /usr/local/bin/igtcache is the build."""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import harness
from harness import check, log

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "examples" / "systemd" / "igtcache@.service"


def service_lines(text: str) -> list[tuple[str, str]]:
    out, section = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            k, v = line.split("=", 1)
            out.append((k, v))
    return out


def expand(cmd: str, spec: dict, env: dict) -> tuple[bool, list[str]]:
    ignore = cmd.startswith("-")
    cmd = cmd.lstrip("-")
    for k, v in spec.items():
        cmd = cmd.replace(k, v)
    argv = []
    for w in shlex.split(cmd):
        m = re.fullmatch(r"\$\{(\w+)\}", w)
        if m:
            argv.append(env.get(m.group(1), ""))
        elif re.fullmatch(r"\$(\w+)", w):
            argv += env.get(w[1:], "").split()
        else:
            argv.append(w)
    argv = [harness.igtcache_bin() if a == "/usr/local/bin/igtcache" else a for a in argv]
    return ignore, argv


def main():
    with harness.Session("systemd") as s:
        src, mnt, cache = s.mkdir("src"), s.tmp / "mnt" / "datasets", s.mkdir("cache")
        (src / "a.bin").write_bytes(os.urandom(300_000))
        envfile = s.write_config("test.env", f"IGTCACHE_SOURCE=file://{src}\n"
                                             f"IGTCACHE_ARGS=--cache-dir {cache} --cache-size 64M\n")
        lines = service_lines(UNIT.read_text())
        svc = dict(lines)
        check(svc.get("Restart") == "on-failure" and svc.get("Type") == "forking", "Restart=on-failure, Type=forking")
        spec = {"%f": str(mnt), "%I": str(mnt).lstrip("/"), "%i": "test"}
        check(svc["EnvironmentFile"].replace("%i", "test").endswith("/test.env"), "EnvironmentFile per instance")
        env = dict(s.igt_env())
        for l in envfile.read_text().splitlines():
            k, v = l.split("=", 1)
            env[k] = v

        def run(key: str) -> None:
            for k, v in lines:
                if k != key:
                    continue
                ignore, argv = expand(v, spec, env)
                r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
                log(f"  {key}: {' '.join(argv)} -> {r.returncode}")
                check(ignore or r.returncode == 0, f"{key} succeeded ({r.stderr.strip()!r})")

        m = harness.Mount(mnt, cache, None, None, "unit")
        s.mounts.append(m)
        run("ExecStartPre")
        run("ExecStart")
        st = s.stats(m)
        m.daemon_pid = st["pid"]
        check((mnt / "a.bin").read_bytes() == (src / "a.bin").read_bytes(), "started: file reads identical")

        os.stat(mnt)  # the mount point's attributes now in the kernel's cache
        os.kill(m.daemon_pid, signal.SIGKILL)  # the crash
        gone_by = time.monotonic() + 30
        while harness.pid_alive(m.daemon_pid):
            if time.monotonic() > gone_by:
                raise harness.TestFailure(f"daemon {m.daemon_pid} still alive 30 s after SIGKILL")
            time.sleep(0.01)
        try:
            harness.pread_exact(mnt / "a.bin", 0, 4096, os.O_DIRECT)  # not from kernel caches
            dead = False
        except OSError:
            dead = True
        check(dead and harness.is_mounted(mnt), "after the crash the mount is dead (ENOTCONN) but still there")
        # What an admin runs: it unmounts, and says nothing is wrong (it
        # warned that the cache dir stayed locked while the kernel still had
        # the mount point's attributes).
        r = subprocess.run([harness.igtcache_bin(), "unmount", str(mnt)], capture_output=True, text=True,
                           env=env, timeout=60)
        check(r.returncode == 0 and not r.stderr.strip() and not harness.is_mounted(mnt),
              f"igtcache unmount of the dead mount: exit {r.returncode}, no warning ({r.stderr.strip()!r})")
        run("ExecStopPost")  # what systemd runs after a failure, then the restart:
        run("ExecStartPre")
        run("ExecStart")
        st = s.stats(m)
        m.daemon_pid = st["pid"]
        check(harness.pread_exact(mnt / "a.bin", 0, 1 << 20, os.O_DIRECT) == (src / "a.bin").read_bytes(),
              "restarted: file reads identical")
        st = s.stats(m)
        check(st["backend_get_bytes"] == 0 and st["cache_hit_bytes"] > 0, "restarted: served from the warm cache")

        run("ExecStop")
        check(not harness.is_mounted(mnt) and not harness.pid_alive(m.daemon_pid), "stopped: unmounted, daemon gone")
        run("ExecStopPost")
        m.unmounted = True


if __name__ == "__main__":
    harness.run_test("test_systemd_unit", main)
