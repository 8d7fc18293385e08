"""Helpers shared by the reliability tests (issue 6): the cloud proxy
(scripts/cloudproxy.py) as a child of a harness.Session, a small bucket of
seeded objects, reads that report errno instead of raising, and config files
with small retry budgets.

Thread-safety: Proxy.control() may be called from any thread (one HTTP
request per call); everything else is used from the test's main thread.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import os
import time
from pathlib import Path

import harness

PROXY = harness.ROOT / "scripts" / "cloudproxy.py"


class Proxy:
    def __init__(self, proc: harness.Proc, port: int, control_port: int):
        self.proc, self.port, self.control_port = proc, port, control_port

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def control(self, method: str, path: str, body: dict | None = None) -> dict:
        c = http.client.HTTPConnection("127.0.0.1", self.control_port, timeout=30)
        try:
            data = json.dumps(body).encode() if body is not None else None
            c.request(method, path, body=data,
                      headers={"Content-Length": str(len(data or b""))})
            r = c.getresponse()
            out = json.loads(r.read() or b"{}")
            if r.status != 200:
                raise RuntimeError(f"proxy control {method} {path}: HTTP {r.status} {out}")
            return out
        finally:
            c.close()

    def faults(self, *rules: dict, seed: int = 1) -> None:
        self.control("POST", "/faults", {"rules": list(rules), "seed": seed})

    def clear(self) -> None:
        self.control("POST", "/faults/clear", {})

    def stats(self) -> dict:
        return self.control("GET", "/stats")

    def down(self) -> None:
        self.control("POST", "/down", {})

    def up(self) -> None:
        self.control("POST", "/up", {})


def start_proxy(s: harness.Session, upstream: str, ttfb_ms: float = 0, bandwidth: str = "0",
                extra: list[str] = ()) -> Proxy:
    pf = s.tmp / f"proxy.{len(s.procs)}.ports"
    argv = ["/usr/bin/python3", str(PROXY), "--upstream", upstream, "--port-file", str(pf),
            "--ttfb-ms", str(ttfb_ms), "--bandwidth", bandwidth, *extra]
    p = s.spawn("cloudproxy", argv)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if p.popen.poll() is not None:
            raise RuntimeError(f"cloudproxy exited: {p.stderr_text()[-2000:]}")
        if pf.is_file():
            port, cport = (int(x) for x in pf.read_text().split())
            harness.log(f"  cloudproxy pid {p.pid} on 127.0.0.1:{port} (control {cport}) -> {upstream}")
            return Proxy(p, port, cport)
        time.sleep(0.05)
    raise RuntimeError("cloudproxy did not start")


def content(name: str, size: int) -> bytes:
    """Deterministic bytes (fast: sha256 counter stream)."""
    out = bytearray()
    i = 0
    seed = name.encode()
    while len(out) < size:
        out += hashlib.sha256(seed + i.to_bytes(8, "little")).digest() * 64  # 2 KiB per hash
        i += 1
    return bytes(out[:size])


def put_objects(srv: harness.S3rver, bucket: str, objs: dict[str, bytes]) -> None:
    conn = srv.connection()
    try:
        for k, data in objs.items():
            st, body = srv.request("PUT", f"/{bucket}/{harness.s3_quote(k)}", data, conn)
            if st != 200:
                raise RuntimeError(f"PUT {k}: HTTP {st} {body[:200]!r}")
    finally:
        conn.close()


def delete_object(srv: harness.S3rver, bucket: str, key: str) -> None:
    st, body = srv.request("DELETE", f"/{bucket}/{harness.s3_quote(key)}")
    if st not in (200, 204):
        raise RuntimeError(f"DELETE {key}: HTTP {st} {body[:200]!r}")


def try_read(path: Path, offset: int = 0, length: int | None = None) -> tuple[bytes | None, int]:
    """(bytes, 0) or (None, errno). Reads with a fresh fd (O_DIRECT is not
    used: the tests drop the page cache by their own means when needed)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return None, e.errno
    try:
        if length is None:
            length = os.fstat(fd).st_size - offset
        out = bytearray()
        while len(out) < length:
            b = os.pread(fd, min(length - len(out), 1 << 20), offset + len(out))
            if not b:
                break
            out += b
        return bytes(out), 0
    except OSError as e:
        return None, e.errno
    finally:
        os.close(fd)


def drop_page_cache(path: Path) -> None:
    """Evicts a file's pages from the kernel page cache (so the next read
    reaches the daemon). POSIX_FADV_DONTNEED works on FUSE files."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def config(s: harness.Session, name: str = "igt.yaml", **sections) -> Path:
    """Writes a YAML config: config(s, backend={"max_retries": 2}, metadata={...})."""
    lines = []
    for sec, kv in sections.items():
        lines.append(f"{sec}:")
        for k, v in kv.items():
            if isinstance(v, bool):
                v = "true" if v else "false"
            lines.append(f"  {k}: {json.dumps(v) if isinstance(v, str) else v}")
    return s.write_config(name, "\n".join(lines) + "\n")


def errname(e: int) -> str:
    return errno.errorcode.get(e, str(e))


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def fill(path: Path) -> int:
    """Writes until ENOSPC; returns the bytes written."""
    n = 0
    with open(path, "wb", buffering=0) as f:
        chunk = b"\0" * (1 << 20)
        while True:
            try:
                n += f.write(chunk)
            except OSError:
                break
        # Fill the last partial chunk too.
        for size in (65536, 4096, 512):
            while True:
                try:
                    n += f.write(b"\0" * size)
                except OSError:
                    break
    return n
