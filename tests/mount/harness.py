"""Shared machinery for the real-mount tests (Python 3 standard library only).

What it owns: every process it starts (s3rver, igtcache daemons) and every
mount and temporary directory it creates, all registered on one `Session`.
`Session` is a context manager whose exit ALWAYS unmounts (fusermount3 -u,
then -uz), stops its processes BY PID (SIGTERM, wait, SIGKILL) and removes its
temporary directory, on success, failure and SIGTERM/SIGINT alike. Nothing is
ever killed by name. Children started in the foreground also get
PR_SET_PDEATHSIG so they die if the test itself is killed (ctest timeout).

Thread-safety: a Session is driven from the test's main thread; the reading
helpers (read_file, sha256_file, pread) are safe from any thread.

Environment: IGTCACHE_BIN (default <root>/build/igtcache), IGT_BUILD_DIR
(default <root>/build). The project root is found relative to this file.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
S3RVER_JS = ROOT / ".deps" / "s3rver" / "node_modules" / "s3rver" / "bin" / "s3rver.js"

# s3rver's built-in account; it accepts these (and unsigned requests).
S3_ACCESS_KEY = "S3RVER"
S3_SECRET_KEY = "S3RVER"

MOUNT_DEADLINE_S = 60.0      # a mount that is not ready within this is a failure
UNMOUNT_WAIT_S = 30.0        # how long a daemon gets to exit after fusermount3 -u
S3RVER_DEADLINE_S = 30.0     # node start-up is slow on a loaded 2-core machine


# ---------------------------------------------------------------------------
# Locations and small utilities.

def igtcache_bin() -> str:
    return os.environ.get("IGTCACHE_BIN") or str(ROOT / "build" / "igtcache")


def build_dir() -> Path:
    return Path(os.environ.get("IGT_BUILD_DIR") or (ROOT / "build"))


def log(msg: str) -> None:
    print(msg, flush=True)


class TestFailure(AssertionError):
    pass


def check(cond: bool, what: str) -> None:
    """Records one checked property: prints it, raises if false."""
    if not cond:
        raise TestFailure(what)
    log(f"  ok: {what}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HeldPort:
    """A loopback port bound (not listening) while this lives: connecting to
    it is refused, and no process started beside the test can take it (a
    port probed free and closed again could be). listen() turns it into a
    busy port."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]

    def listen(self) -> None:
        self.sock.listen(1)

    def close(self) -> None:
        self.sock.close()


def port_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except Exception:
        pass


def _unescape_mountinfo(s: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
    out, i = bytearray(), 0
    b = s.encode("utf-8", "surrogateescape")
    while i < len(b):
        if b[i:i + 1] == b"\\" and i + 4 <= len(b) and b[i + 1:i + 4].isdigit():
            out.append(int(b[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(b[i])
            i += 1
    return out.decode("utf-8", "surrogateescape")


def mount_entries(path: str | os.PathLike) -> list[str]:
    """Lines of /proc/self/mountinfo whose mount point is `path`."""
    target = os.path.abspath(os.fspath(path))
    hits = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 4 and _unescape_mountinfo(fields[4]) == target:
                hits.append(line.rstrip("\n"))
    return hits


def is_mounted(path: str | os.PathLike) -> bool:
    """True if `path` is a mount point by either os.path.ismount or mountinfo."""
    try:
        if os.path.ismount(path):
            return True
    except OSError:
        return True  # ENOTCONN etc.: a dead FUSE mount is still a mount
    return bool(mount_entries(path))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child is not alive for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pids_with_arg(arg: str) -> list[int]:
    """Pids whose command line contains the exact argument `arg` (a unique temp
    path of ours). Used only to detect and report leftovers we caused."""
    want = os.fsencode(arg)
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if want in argv and pid_alive(int(d)):
            found.append(int(d))
    return found


def s3_quote(key: str) -> str:
    """URL path encoding of an S3 key (UTF-8, RFC 3986 unreserved kept)."""
    return urllib.parse.quote(key.encode("utf-8"), safe="/-_.~")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def pread_exact(path: str | os.PathLike, offset: int, length: int, flags: int = 0) -> bytes:
    """pread loop until `length` bytes or EOF (a short read mid-file is retried
    the way a POSIX reader would; a 0-byte read means EOF)."""
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        out = bytearray()
        while len(out) < length:
            b = os.pread(fd, length - len(out), offset + len(out))
            if not b:
                break
            out += b
        return bytes(out)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------
# Processes.

class Proc:
    """A started child we own: Popen plus where its output went."""

    def __init__(self, name: str, popen: subprocess.Popen, stdout_path: Path, stderr_path: Path):
        self.name, self.popen = name, popen
        self.stdout_path, self.stderr_path = stdout_path, stderr_path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait, SIGKILL; by pid only. Returns the exit code."""
        p = self.popen
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"  warn: {self.name} pid {p.pid} ignored SIGTERM for {timeout}s; SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait(10)
        return p.returncode


class S3rver:
    def __init__(self, proc: Proc, port: int, data_dir: Path):
        self.proc, self.port, self.data_dir = proc, port, data_dir
        self.host = "127.0.0.1"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=120)

    def request(self, method: str, path: str, body: bytes | None = None,
                conn: http.client.HTTPConnection | None = None) -> tuple[int, bytes]:
        own = conn is None
        c = conn or self.connection()
        try:
            c.request(method, path, body=body,
                      headers={"Content-Length": str(len(body or b""))} if method == "PUT" else {})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            if own:
                c.close()

    def create_bucket(self, bucket: str) -> None:
        st, body = self.request("PUT", f"/{bucket}")
        if st != 200:
            raise RuntimeError(f"create bucket {bucket}: HTTP {st} {body[:200]!r}")

    def upload_tree(self, bucket: str, root: Path, rel_paths: list[str] | None = None,
                    prefix: str = "") -> int:
        """PUTs every regular file under `root` (or just `rel_paths`) as
        prefix+relative path, over one kept-alive connection. Returns bytes."""
        if rel_paths is None:
            rel_paths = sorted(
                os.path.relpath(os.path.join(d, f), root)
                for d, _, fs in os.walk(root) for f in fs)
        conn, total = self.connection(), 0
        try:
            for rel in rel_paths:
                data = (root / rel).read_bytes()
                key = prefix + rel.replace(os.sep, "/")
                for attempt in range(3):
                    try:
                        st, body = self.request("PUT", f"/{bucket}/{s3_quote(key)}", data, conn)
                        break
                    except (http.client.HTTPException, ConnectionError):
                        if attempt == 2:
                            raise
                        conn.close()
                        conn = self.connection()
                if st != 200:
                    raise RuntimeError(f"PUT {key!r}: HTTP {st} {body[:300]!r}")
                total += len(data)
        finally:
            conn.close()
        return total

    def list_bucket(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """ListObjectsV2 (paginated, no delimiter) -> {key: size}."""
        out, token, conn = {}, None, self.connection()

        def local(tag: str) -> str:  # s3rver uses a non-AWS namespace URI
            return tag.rsplit("}", 1)[-1]

        def child(el, name):
            return next((c for c in el if local(c.tag) == name), None)
        try:
            while True:
                q = {"list-type": "2", "max-keys": "1000"}
                if prefix:
                    q["prefix"] = prefix
                if token:
                    q["continuation-token"] = token
                st, body = self.request(
                    "GET", f"/{bucket}?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote), None, conn)
                if st != 200:
                    raise RuntimeError(f"list {bucket}: HTTP {st} {body[:300]!r}")
                x = ET.fromstring(body)
                for c in x:
                    if local(c.tag) == "Contents":
                        out[child(c, "Key").text] = int(child(c, "Size").text)
                trunc = child(x, "IsTruncated")
                if trunc is None or trunc.text != "true":
                    return out
                token = child(x, "NextContinuationToken").text
        finally:
            conn.close()


class Mount:
    def __init__(self, mountpoint: Path, cache_dir: Path | None, proc: Proc | None,
                 daemon_pid: int | None, source: str):
        self.mountpoint, self.cache_dir, self.proc = mountpoint, cache_dir, proc
        self.daemon_pid, self.source = daemon_pid, source
        self.unmounted = False
        self.mount_stderr = ""  # daemon mode: what the mount command printed

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else self.daemon_pid

    def path(self, rel: str) -> Path:
        return self.mountpoint / rel


class MountError(RuntimeError):
    def __init__(self, msg: str, returncode: int | None, stderr: str):
        super().__init__(msg)
        self.returncode, self.stderr = returncode, stderr


# ---------------------------------------------------------------------------
# The session: owns everything, cleans up everything.

class Session:
    """with Session("name") as s: ... — a temp dir, processes, mounts."""

    def __init__(self, name: str, keep_tmp: bool = False):
        self.name = name
        base = build_dir() / "mount-tmp"
        base.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))
        self.keep_tmp = keep_tmp or bool(os.environ.get("IGT_KEEP_TMP"))
        self.procs: list[Proc] = []
        self.mounts: list[Mount] = []
        self._old_handlers = {}

    # -- context manager and signals
    def __enter__(self) -> "Session":
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, et, ev, tb) -> bool:
        try:
            if et is not None:
                self.report_daemons()
            self.cleanup()
        finally:
            for sig, h in self._old_handlers.items():
                signal.signal(sig, h)
        return False

    def report_daemons(self) -> None:
        """On failure: how each igtcache daemon we own is doing, with the end
        of its stderr (a crash shows up as a negative exit code = signal)."""
        for p in self.procs:
            if p.name != "igtcache":
                continue
            rc = p.popen.poll()
            state = "running" if rc is None else (
                f"killed by signal {-rc} ({signal.Signals(-rc).name})" if rc < 0 else f"exited {rc}")
            mnt = next((str(m.mountpoint) for m in self.mounts if m.proc is p), "?")
            log(f"  daemon pid {p.pid} ({mnt}): {state}")
            tail = p.stderr_text().strip().splitlines()[-25:]
            if tail:
                log("    stderr tail:\n      " + "\n      ".join(tail))

    def cleanup(self) -> None:
        errors = []
        for m in reversed(self.mounts):
            try:
                self.unmount(m, quiet=True)
            except Exception as e:  # keep going: everything must be torn down
                errors.append(f"unmount {m.mountpoint}: {e}")
        for p in reversed(self.procs):
            try:
                p.stop()
            except Exception as e:
                errors.append(f"stop {p.name} pid {p.pid}: {e}")
        if not self.keep_tmp:
            # Never rmtree through a mount that is still there.
            if any(is_mounted(m.mountpoint) for m in self.mounts):
                errors.append(f"mount still present; leaving {self.tmp}")
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            log(f"  (kept {self.tmp})")
        for e in errors:
            log(f"  cleanup error: {e}")

    # -- helpers
    def mkdir(self, name: str) -> Path:
        p = self.tmp / name
        p.mkdir(parents=True, exist_ok=True)
        return p

    def spawn(self, name: str, argv: list[str], env: dict | None = None) -> Proc:
        out = self.tmp / f"{name}.{len(self.procs)}.stdout"
        err = self.tmp / f"{name}.{len(self.procs)}.stderr"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
                                     env=env, preexec_fn=_set_pdeathsig)
        p = Proc(name, popen, out, err)
        self.procs.append(p)
        return p

    # -- s3rver
    def start_s3rver(self, buckets: tuple[str, ...] = (), data_dir: Path | None = None) -> S3rver:
        if not S3RVER_JS.is_file():
            raise RuntimeError(f"s3rver not installed at {S3RVER_JS}; run scripts/setup.sh")
        data_dir = data_dir or self.mkdir("s3rver-data")
        # Port 0: the kernel picks a free port and s3rver prints it once it
        # listens ("S3rver listening on 127.0.0.1:PORT", on stdout even with
        # --silent); a port probed free here could be taken before node binds.
        argv = ["node", "--openssl-legacy-provider", str(S3RVER_JS), "-d", str(data_dir),
                "-a", "127.0.0.1", "-p", "0", "--silent"]
        for b in buckets:
            argv += ["--configure-bucket", b]
        p = self.spawn("s3rver", argv)
        deadline = time.monotonic() + S3RVER_DEADLINE_S
        port = 0
        while time.monotonic() < deadline and p.popen.poll() is None:
            if not port:
                with contextlib.suppress(OSError):
                    m = re.search(r"S3rver listening on 127\.0\.0\.1:(\d+)\n", p.stdout_path.read_text())
                    port = int(m.group(1)) if m else 0
            if port and port_answers("127.0.0.1", port):
                s = S3rver(p, port, data_dir)
                log(f"  s3rver pid {p.pid} on {s.endpoint}, data {data_dir}")
                return s
            time.sleep(0.1)
        err = p.stderr_text()
        p.stop()
        raise RuntimeError(f"s3rver did not start within {S3RVER_DEADLINE_S} s: {err[-2000:]}")

    # -- igtcache
    def igt_env(self, extra: dict | None = None) -> dict:
        env = dict(os.environ)
        env["AWS_ACCESS_KEY_ID"] = S3_ACCESS_KEY
        env["AWS_SECRET_ACCESS_KEY"] = S3_SECRET_KEY
        env.pop("AWS_SESSION_TOKEN", None)
        env.pop("AWS_PROFILE", None)
        for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_REGION",
                  "AWS_DEFAULT_REGION"):
            env.pop(k, None)
        env["HOME"] = str(self.tmp)  # no ~/.aws of the host leaks in
        if extra:
            env.update(extra)
        return env

    def write_config(self, name: str, text: str) -> Path:
        p = self.tmp / name
        p.write_text(text)
        return p

    def mount_argv(self, source: str, mountpoint: Path, cache_dir: Path | None,
                   args: list[str], foreground: bool) -> list[str]:
        argv = [igtcache_bin(), "mount", source, str(mountpoint)]
        if cache_dir is not None:
            argv += ["--cache-dir", str(cache_dir)]
        if foreground:
            argv.append("-f")
        return argv + list(args)

    def mount(self, source: str, cache_dir: Path | None = None, args: list[str] = (),
              mountpoint: Path | None = None, foreground: bool = True,
              env: dict | None = None) -> Mount:
        """Mounts and waits until the mount is ready. Raises MountError (with
        the daemon's stderr) if it fails or is not ready by the deadline."""
        mountpoint = mountpoint or self.mkdir(f"mnt{len(self.mounts)}")
        mountpoint.mkdir(parents=True, exist_ok=True)
        if cache_dir is None:
            cache_dir = self.mkdir(f"cache{len(self.mounts)}")
        argv = self.mount_argv(source, mountpoint, cache_dir, list(args), foreground)
        env = env or self.igt_env()
        if foreground:
            p = self.spawn("igtcache", argv, env)
            m = Mount(mountpoint, cache_dir, p, None, source)
            self.mounts.append(m)
            deadline = time.monotonic() + MOUNT_DEADLINE_S
            while time.monotonic() < deadline:
                if p.popen.poll() is not None:
                    raise MountError(f"igtcache exited with {p.popen.returncode} before mounting: "
                                     f"{p.stderr_text().strip()[-3000:]}", p.popen.returncode,
                                     p.stderr_text())
                if is_mounted(mountpoint):
                    log(f"  mounted {source} at {mountpoint} (pid {p.pid}, cache {cache_dir})")
                    return m
                time.sleep(0.05)
            raise MountError(f"mount not ready after {MOUNT_DEADLINE_S}s: {p.stderr_text()[-3000:]}",
                             None, p.stderr_text())
        # Daemon mode: the command returns once the mount is ready.
        m = Mount(mountpoint, cache_dir, None, None, source)
        self.mounts.append(m)
        r = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=MOUNT_DEADLINE_S)
        if r.returncode != 0:
            raise MountError(f"igtcache mount exited {r.returncode}: {r.stderr.decode(errors='replace')}",
                             r.returncode, r.stderr.decode(errors="replace"))
        if not is_mounted(mountpoint):
            raise MountError("igtcache mount returned 0 but the mount point is not mounted",
                             0, r.stderr.decode(errors="replace"))
        m.mount_stderr = r.stderr.decode(errors="replace")  # the command's warnings
        with contextlib.suppress(Exception):
            m.daemon_pid = int(self.stats(m)["pid"])
        log(f"  mounted {source} at {mountpoint} (daemon pid {m.daemon_pid}, cache {cache_dir})")
        return m

    def stats(self, m: Mount) -> dict:
        r = subprocess.run([igtcache_bin(), "stats", str(m.mountpoint)], capture_output=True,
                           timeout=60, env=self.igt_env())
        if r.returncode != 0:
            raise RuntimeError(f"igtcache stats {m.mountpoint} exited {r.returncode}: "
                               f"{r.stderr.decode(errors='replace')}")
        try:
            return json.loads(r.stdout)
        except json.JSONDecodeError as e:
            raise RuntimeError(f"igtcache stats: not JSON ({e}): {r.stdout[:500]!r}")

    def unmount(self, m: Mount, quiet: bool = False) -> int | None:
        """fusermount3 -u (then -uz if busy); waits for the daemon to exit by
        itself, SIGTERM/SIGKILL by pid only if it does not. Returns the
        daemon's exit code when we own it (foreground mode)."""
        if m.unmounted:
            return m.proc.popen.returncode if m.proc else None
        if is_mounted(m.mountpoint):
            r = subprocess.run(["fusermount3", "-u", str(m.mountpoint)], capture_output=True)
            if r.returncode != 0 and is_mounted(m.mountpoint):
                if not quiet:
                    log(f"  warn: fusermount3 -u failed ({r.stderr.decode(errors='replace').strip()}); -uz")
                subprocess.run(["fusermount3", "-uz", str(m.mountpoint)], capture_output=True)
        rc = None
        deadline = time.monotonic() + UNMOUNT_WAIT_S
        if m.proc is not None:
            try:
                rc = m.proc.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"  warn: igtcache pid {m.proc.pid} still running {UNMOUNT_WAIT_S}s after unmount")
                rc = m.proc.stop()
        elif m.daemon_pid:
            while pid_alive(m.daemon_pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if pid_alive(m.daemon_pid):
                log(f"  warn: daemon pid {m.daemon_pid} still running after unmount; SIGTERM")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(m.daemon_pid, signal.SIGTERM)
                t = time.monotonic() + 10
                while pid_alive(m.daemon_pid) and time.monotonic() < t:
                    time.sleep(0.05)
                if pid_alive(m.daemon_pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(m.daemon_pid, signal.SIGKILL)
        m.unmounted = True
        return rc


# ---------------------------------------------------------------------------
# Test entry point wrapper.

def run_test(name: str, body) -> None:
    """Runs body() and exits 0 on success, 1 on failure (printing why), 77 is
    not used: a missing binary is a failure, not a skip."""
    t0 = time.monotonic()
    log(f"== {name}")
    try:
        if not os.access(igtcache_bin(), os.X_OK):
            raise TestFailure(f"igtcache binary not found at {igtcache_bin()}")
        body()
    except TestFailure as e:
        log(f"FAIL {name}: {e}  ({time.monotonic() - t0:.1f}s)")
        sys.exit(1)
    except BaseException as e:
        import traceback
        traceback.print_exc()
        log(f"FAIL {name}: {type(e).__name__}: {e}  ({time.monotonic() - t0:.1f}s)")
        sys.exit(1)
    log(f"PASS {name} ({time.monotonic() - t0:.1f}s)")
    sys.exit(0)
