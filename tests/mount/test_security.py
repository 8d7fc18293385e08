"""Security properties of a real mount.

1. Cache dir permissions: every directory 0700, every unit file 0600, nothing
   group/world accessible; a world-writable cache dir and one owned by
   another user are refused with a clear error and no mount left behind.
2. Credentials never leak: a mount with a distinctive secret key and session
   token (through the cloud proxy, with faults so that error paths run, at
   log level trace, recording a trace, printing stats, plus a failing mount)
   — the secret appears in no log, stderr, stdout, stats output, trace file,
   error message, command line, or file in the cache dir.
3. allow_other is off by default; every mount has default_permissions
   (/proc/self/mountinfo; without it access(X_OK) said a 0444 file was
   executable), with allow_other (config or -o) too; fuse.file_mode, dir_mode,
   uid and gid are what stat shows and what keeps another user out.
4. Object keys that would escape the mount ('..', '.', absolute, empty
   components, over-long names, control characters) are hidden or shown as
   one safe name, never followed: the walk of the mount stays inside it.
"""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import os
import stat
import subprocess
from pathlib import Path

import faultlib
import harness
from faultlib import content, try_read
from harness import check, log

BUCKET = "igt-security"
SECRET = "igtSECRETk3y/Zq9+xW7vB2nM4pL8sT6uY0eR5aD1fG3hJ"
TOKEN = "igtSESSIONt0ken/FwoGZXIvYXdzEKb7DsJ9pV2mN8qX4wR6tY1uI3oP5aS7dF9g"
NEEDLES = [SECRET, TOKEN, SECRET[3:27], TOKEN[3:27]]


def mount_opts(mnt: Path) -> set[str]:
    opts = set()
    for ln in harness.mount_entries(mnt):
        f = ln.split()
        opts |= set(f[5].split(","))
        sep = f.index("-")
        opts |= set(f[sep + 3].split(",")) if len(f) > sep + 3 else set()
    return opts


def grep_tree(root: Path, needles) -> list[str]:
    hits = []
    for d, _, fs in os.walk(root):
        for f in fs:
            p = Path(d) / f
            try:
                data = p.read_bytes()
            except OSError:
                continue
            for n in needles:
                if n.encode() in data:
                    hits.append(f"{p} contains {n[:8]}...")
    return hits


def main():
    with harness.Session("security") as s:
        srv = s.start_s3rver(buckets=(BUCKET,))
        objs = {f"ok/f{i}.bin": content(f"sec{i}", [500, 300_000, 2_500_000][i % 3]) for i in range(9)}
        faultlib.put_objects(srv, BUCKET, objs)

        # -- 1. permissions
        cache = s.tmp / "cache-perm"
        m = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=["--endpoint", srv.endpoint])
        for k, v in objs.items():
            if try_read(m.mountpoint / k)[0] != v:
                raise harness.TestFailure(f"{k}: wrong bytes")
        check(s.unmount(m) == 0, "daemon exited 0")
        bad = []
        units = 0
        for d, dirs, fs in os.walk(cache):
            for x in dirs:
                mode = stat.S_IMODE(os.stat(Path(d) / x).st_mode)
                if mode != 0o700:
                    bad.append(f"dir {Path(d) / x} {mode:o}")
            for x in fs:
                p = Path(d) / x
                mode = stat.S_IMODE(os.stat(p).st_mode)
                if "units" in p.relative_to(cache).parts:
                    units += 1
                    if mode != 0o600:
                        bad.append(f"unit {p} {mode:o}")
                elif mode & 0o077 and not (Path(d) == cache or "index" in p.parts):
                    bad.append(f"file {p} {mode:o}")
        top = stat.S_IMODE(os.stat(cache).st_mode)
        check(top == 0o700 and not bad and units > 0,
              f"cache dir 0700, {units} unit files 0600, every subdir 0700 ({bad[:3]})")
        others = [f"{Path(d) / x} {stat.S_IMODE(os.stat(Path(d) / x).st_mode):o}"
                  for d, _, fs in os.walk(cache) for x in fs
                  if stat.S_IMODE(os.stat(Path(d) / x).st_mode) & 0o077]
        log(f"  (info) files with group/other bits (inside the 0700 dir): {others[:5]}")

        for label, prep in (("world-writable", lambda p: os.chmod(p, 0o777)),
                            ("group-writable", lambda p: os.chmod(p, 0o770)),
                            ("owned by another user", lambda p: os.chown(p, 65534, 65534))):
            d = s.tmp / f"cache-{label.split()[0]}"
            d.mkdir(mode=0o700)
            prep(d)
            mnt = s.mkdir(f"mnt-{label.split()[0]}")
            r = subprocess.run([harness.igtcache_bin(), "mount", f"s3://{BUCKET}", str(mnt),
                                "--cache-dir", str(d), "--endpoint", srv.endpoint],
                               env=s.igt_env(), capture_output=True, text=True, timeout=60)
            err = r.stderr.strip()
            check(r.returncode != 0 and "refus" in err and not harness.is_mounted(mnt),
                  f"{label} cache dir refused: exit {r.returncode}: {err[:160]!r}")

        # -- 2. credentials never leak
        env = s.igt_env({"AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": TOKEN})
        proxy = faultlib.start_proxy(s, srv.endpoint, ttfb_ms=1)
        trace = s.tmp / "trace.csv"
        logf = s.tmp / "igt.log"
        cfg = faultlib.config(s, "creds.yaml", backend={"max_retries": 1, "retry_base_ms": 10,
                                                        "request_timeout_ms": 5000})
        cache2 = s.tmp / "cache-creds"
        m = s.mount(f"s3://{BUCKET}", cache_dir=cache2, env=env,
                    args=["--config", str(cfg), "--endpoint", proxy.endpoint, "--log-level", "trace",
                          "--log-file", str(logf), "--trace-out", str(trace)])
        for k, v in list(objs.items())[:4]:
            if try_read(m.mountpoint / k)[0] != v:
                raise harness.TestFailure(f"{k}: wrong bytes")
        proxy.faults({"kind": "status", "status": 403, "code": "AccessDenied", "count": -1})
        e1 = try_read(m.mountpoint / "ok/f5.bin")[1]
        proxy.faults({"kind": "status", "status": 500, "count": -1})
        e2 = try_read(m.mountpoint / "ok/f7.bin")[1]
        proxy.faults({"kind": "reset", "count": -1})
        e3 = try_read(m.mountpoint / "ok/f8.bin")[1]
        proxy.clear()
        check(e1 and e2 and e3, f"error paths ran (403, 500, reset: {[faultlib.errname(e) for e in (e1, e2, e3)]})")
        stats_out = subprocess.run([harness.igtcache_bin(), "stats", str(m.mountpoint)],
                                   capture_output=True, text=True, env=env).stdout
        with open(f"/proc/{m.pid}/cmdline", "rb") as f:
            cmdline = f.read()
        check(s.unmount(m) == 0, "daemon exited 0")
        # A mount that fails (the bucket does not exist) and one against a dead endpoint.
        fails = []
        for src, ep in ((f"s3://no-such-bucket-igt", proxy.endpoint), (f"s3://{BUCKET}", "http://127.0.0.1:9")):
            mnt = s.mkdir(f"mnt-fail{len(fails)}")
            r = subprocess.run([harness.igtcache_bin(), "mount", src, str(mnt), "--cache-dir",
                                str(s.tmp / f"cache-fail{len(fails)}"), "--endpoint", ep,
                                "--log-level", "trace"],
                               env=env, capture_output=True, text=True, timeout=120)
            fails.append(r.stdout + r.stderr)
        check(all(f.strip() for f in fails), "failing mounts printed errors")
        texts = {"stats output": stats_out, "daemon cmdline": cmdline.decode(errors="replace")}
        texts.update({f"failing mount {i}": t for i, t in enumerate(fails)})
        leaks = [f"{name} contains {n[:8]}..." for name, t in texts.items() for n in NEEDLES if n in t]
        leaks += grep_tree(s.tmp, NEEDLES)  # logs, stderr/stdout files, trace, every cache dir
        check(logf.stat().st_size > 0 and trace.stat().st_size > 0,
              f"trace-level log ({logf.stat().st_size} B) and trace ({trace.stat().st_size} B) written")
        check(not leaks, f"the secret key and session token appear nowhere ({leaks[:5]})")

        # -- 3. allow_other
        m = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=["--endpoint", srv.endpoint])
        o = mount_opts(m.mountpoint)
        check("allow_other" not in o, f"default mount: no allow_other ({sorted(o)})")
        # default_permissions on every mount: without it access(X_OK) said
        # every (0444) file was executable (find -executable listed them).
        f0 = m.mountpoint / next(iter(objs))
        check("default_permissions" in o and os.access(f0, os.R_OK) and not os.access(f0, os.X_OK),
              f"default mount: default_permissions, files readable and not executable ({sorted(o)})")
        check(s.unmount(m) == 0, "daemon exited 0")
        cfg_ao = faultlib.config(s, "ao.yaml", fuse={"allow_other": True})
        for how, extra in (("config fuse.allow_other", ["--config", str(cfg_ao)]), ("-o allow_other", ["-o", "allow_other"])):
            m = s.mount(f"s3://{BUCKET}", cache_dir=cache, args=["--endpoint", srv.endpoint, *extra])
            o = mount_opts(m.mountpoint)
            check("allow_other" in o and "default_permissions" in o,
                  f"{how}: allow_other with default_permissions ({sorted(o)})")
            check(s.unmount(m) == 0, "daemon exited 0")

        # -- 3b. Owner and modes (fuse.uid/gid/file_mode/dir_mode): with
        # allow_other every local user could read every object (0444); the
        # kernel keeps them out once the modes say so. Mounted under /tmp so
        # that another user can reach the mount point at all (the control
        # run proves it can).
        key = next(iter(objs))
        nobody = 65534
        # Directories stay 0555 in the second case: file_mode alone keeps
        # the other user out; uid/gid other than the daemon's (root) show.
        for modes, readable in (({}, True), ({"file_mode": "0440", "uid": "12345", "gid": "12346"}, False)):
            cfg = faultlib.config(s, "modes.yaml", fuse={"allow_other": True, **modes})
            mnt = Path(subprocess.run(["mktemp", "-d", "/tmp/igt-modes-XXXXXX"], capture_output=True,
                                      text=True, check=True).stdout.strip())
            try:
                os.chmod(mnt, 0o755)
                m = s.mount(f"s3://{BUCKET}", cache_dir=cache, mountpoint=mnt,
                            args=["--endpoint", srv.endpoint, "--config", str(cfg)])
                st = os.stat(mnt / key)
                want_mode = int(modes.get("file_mode", "0444"), 8)
                check(stat.S_IMODE(st.st_mode) == want_mode and stat.S_IMODE(os.stat(mnt / "ok").st_mode)
                      == int(modes.get("dir_mode", "0555"), 8)
                      and (st.st_uid, st.st_gid) == (int(modes.get("uid", os.getuid())),
                                                      int(modes.get("gid", os.getgid()))),
                      f"modes {modes or 'default'}: shown as configured ({oct(st.st_mode)}, "
                      f"uid {st.st_uid}, gid {st.st_gid})")
                r = subprocess.run(["cat", str(mnt / key)], user=nobody, group=nobody, capture_output=True)
                check((r.returncode == 0 and r.stdout == objs[key]) == readable,
                      f"modes {modes or 'default'}: another user {'can' if readable else 'cannot'} read "
                      f"(rc {r.returncode}, {r.stderr.decode(errors='replace').strip()[:80]!r})")
                check((mnt / key).read_bytes() == objs[key], f"modes {modes or 'default'}: root reads it")
                check(s.unmount(m) == 0, "daemon exited 0")
            finally:
                if harness.is_mounted(mnt):
                    subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
                os.rmdir(mnt)

        # -- 4. keys that would escape the mount. s3rver stores one file per
        # key (it follows '..' itself and dies on names > 255 bytes), so these
        # keys are served by a small S3 stub of our own (StubS3 below).
        nasty = ["../up.bin", "a/../../escape.bin", "./dot.bin", "b/./x.bin", "c//double.bin",
                 "/abs.bin", "..", "d/..", "e/../..", "x" * 300 + ".bin", "f/" + "z" * 256 + "/inner.bin",
                 "y" * 255, "nul\0name.bin", "nl\nname.bin", "tab\tname.bin", "back\\slash.bin",
                 "g/.", "h/./../up2.bin"]
        stub = StubS3({**{k: b"nasty:" + k.encode() for k in nasty}, **objs})
        log(f"  S3 stub on {stub.endpoint} with {len(nasty)} nasty keys")
        m = s.mount(f"s3://{BUCKET}", cache_dir=s.tmp / "cache-nasty",
                    args=["--endpoint", stub.endpoint, "--log-level", "trace"])
        seen, outside = [], []
        root = os.path.realpath(m.mountpoint)
        for d, dirs, fs in os.walk(m.mountpoint):
            for x in dirs + fs:
                p = os.path.join(d, x)
                seen.append(os.path.relpath(p, m.mountpoint))
                if not os.path.realpath(p).startswith(root + os.sep):
                    outside.append(p)
                if x in (".", "..") or "/" in x or "\0" in x or len(x.encode()) > 255 or not x:
                    outside.append(f"unsafe name {x!r}")
        check(not outside, f"the walk of the mount stays inside it, all names safe ({outside[:3]})")
        hidden = s.stats(m)["hidden_names"]
        check(hidden >= 5, f"stats count the hidden keys (hidden_names {hidden})")
        for k in objs:
            if try_read(m.mountpoint / k)[0] != objs[k]:
                raise harness.TestFailure(f"{k}: wrong bytes next to nasty keys")
        shown = [p for p in seen if p not in objs and p != "ok"]
        for p in shown:
            if os.path.isfile(m.mountpoint / p):
                got = try_read(m.mountpoint / p)[0] or b""
                if not got.startswith(b"nasty:") or got[6:].decode(errors="replace") != p:
                    raise harness.TestFailure(f"{p!r} shows bytes of another key: {got[:60]!r}")
        check(True, f"visible odd names ({len(shown)}: {[x[:30] for x in shown]}) are their own objects")
        check(not os.path.exists(m.mountpoint.parent / "up.bin") and not os.path.exists(m.mountpoint.parent / "escape.bin"),
              "nothing appeared outside the mount point")
        check(s.unmount(m) == 0, "daemon exited 0")
        stub.close()
        # The keys' control characters are escaped in the log (trace: every
        # lookup, open and read, and every backend call): none forges a line.
        lines = m.proc.stderr_text().splitlines()
        forged = [ln for ln in lines if ln and not ln.startswith(("[", "igtcache:"))]
        raw = [ln for ln in lines if any(c in ln for c in "\t\x1b\x7f")]
        check(not forged and not raw and any("\\x0a" in ln for ln in lines),
              f"{len(lines)} log lines at trace, control characters escaped (\\x0a), no forged line "
              f"({(forged + raw)[:2]!r})")
        # And the mount command's own errors on the user's terminal (they
        # quote sources, keys, an S3 server's messages).
        r = subprocess.run([harness.igtcache_bin(), "mount", "file:///nonexistent/a\x1b[31mred\nforged",
                            str(s.mkdir("mnt-esc"))], capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
        err = r.stderr.decode(errors="replace")
        check(r.returncode != 0 and "\x1b" not in err and "\\x1b[31mred\\x0aforged" in err and err.count("\n") == 1,
              f"a failing mount's error is one line with the control characters escaped ({err.strip()[:120]!r})")


class StubS3:
    """A minimal S3 (ListObjectsV2 with prefix/delimiter and encoding-type=url,
    GET with Range, HEAD) over a dict of keys, on 127.0.0.1, in a thread."""

    def __init__(self, objects: dict):
        import hashlib
        import threading
        import urllib.parse
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from xml.sax.saxutils import escape

        def etag(b):
            return '"' + hashlib.md5(b).hexdigest() + '"'

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _reply(self, code, body=b"", headers=()):
                self.send_response(code)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _key(self):
                path = urllib.parse.urlsplit(self.path).path
                rest = urllib.parse.unquote(path)[len("/" + BUCKET):]
                return rest[1:] if rest.startswith("/") else rest, path

            def do_HEAD(self):
                self.do_GET()

            def do_GET(self):
                key, path = self._key()
                q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query, keep_blank_values=True))
                if key == "" and ("list-type" in q or self.command == "GET"):
                    prefix, delim = q.get("prefix", ""), q.get("delimiter", "")
                    contents, prefixes = [], set()
                    for k in sorted(objects):
                        if not k.startswith(prefix):
                            continue
                        rest = k[len(prefix):]
                        if delim and delim in rest:
                            prefixes.add(prefix + rest[:rest.index(delim) + 1])
                        else:
                            contents.append(k)
                    enc = lambda k: escape(urllib.parse.quote(k.encode("utf-8", "surrogatepass"), safe="/"))
                    xml = ['<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>',
                           f"<Name>{BUCKET}</Name><EncodingType>url</EncodingType>",
                           "<IsTruncated>false</IsTruncated>"]
                    for k in contents:
                        xml.append(f"<Contents><Key>{enc(k)}</Key><LastModified>2024-01-01T00:00:00.000Z"
                                   f"</LastModified><ETag>{escape(etag(objects[k]))}</ETag>"
                                   f"<Size>{len(objects[k])}</Size></Contents>")
                    for p in sorted(prefixes):
                        xml.append(f"<CommonPrefixes><Prefix>{enc(p)}</Prefix></CommonPrefixes>")
                    xml.append("</ListBucketResult>")
                    return self._reply(200, "".join(xml).encode(), [("Content-Type", "application/xml")])
                if key not in objects:
                    return self._reply(404, b"<Error><Code>NoSuchKey</Code></Error>",
                                       [("Content-Type", "application/xml")])
                data = objects[key]
                hdrs = [("ETag", etag(data)), ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")]
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    a, _, b = rng[6:].partition("-")
                    a, b = int(a), min(int(b), len(data) - 1)
                    if a >= len(data):
                        return self._reply(416, b"", hdrs + [("Content-Range", f"bytes */{len(data)}")])
                    return self._reply(206, data[a:b + 1], hdrs + [("Content-Range", f"bytes {a}-{b}/{len(data)}")])
                return self._reply(200, data, hdrs)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


if __name__ == "__main__":
    harness.run_test("test_security", main)
