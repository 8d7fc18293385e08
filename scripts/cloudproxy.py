#!/usr/bin/env python3
"""cloudproxy: an HTTP/1.1 proxy that makes a local S3 server (s3rver on
127.0.0.1) behave like a cloud object store, and injects faults on demand.

    client (igtcache, s3fs, rclone) --> cloudproxy --> s3rver

What it adds to every request (DESIGN.md sec. 8):
  * time to first byte: a fixed delay (default 25 ms), or log-normal with a
    tail (--ttfb-sigma), counted from the moment the request is fully
    received; LIST requests may have their own (--list-ttfb-ms);
  * a per-connection bandwidth cap on response bodies (default 90 MB/s),
    paced in steps of 128 KiB or ~50 ms of the rate, whichever is smaller.
Bodies are streamed in large chunks (no buffering of whole objects, no
sendfile), one thread per client connection with its own kept-alive upstream
connection, so a handful of clients at 90 MB/s each is cheap.

Fault injection, set at run time through the control endpoint (JSON over
HTTP on --control-port; see CONTROL below) or at start with --faults JSON:
  status       reply <status> with an S3 error XML (default 503 SlowDown)
  reset        send the headers and `after_bytes` of the body, then a TCP RST
  stall        send the headers and `after_bytes`, then stall `stall_s`
               seconds (past the client's timeout), then close
  truncate     full Content-Length, `after_bytes` of the body, then FIN
  bad_length   Content-Length off by `length_delta` (body as sent upstream),
               then close
  error_200    status 200 with an S3 error XML body and a Content-Length
               that matches it (the upstream ETag header is kept)
  refuse       close the connection without any reply
Each rule: {"kind": ..., "count": N (-1 = unlimited), "prob": 0..1,
"methods": ["GET"], "path_contains": "...", "ranged_only": bool, plus the
kind's parameters}. For each request the first rule that matches and whose
coin flip (seeded) succeeds fires and uses up one of its count.
"down" mode closes the listening socket (connection refused) and resets
every open client connection: the backend is gone until "up".

CONTROL (127.0.0.1:<control-port>):
  GET  /stats             counters (requests, bytes, faults by kind, ...)
  GET  /config            current latency/bandwidth settings
  POST /config            {"ttfb_ms":, "ttfb_sigma":, "list_ttfb_ms":, "bandwidth":}
  GET  /faults            the current rules with their remaining counts
  POST /faults            {"rules": [...], "seed": n}  replaces the rules
  POST /faults/add        {"rules": [...]}             appends
  POST /faults/clear      no rules
  POST /down, POST /up    backend gone / back
  POST /reset-stats

The proxy writes "<port> <control-port>" to --port-file once it listens.
Python 3 standard library only. Thread-safety: shared state (config, rules,
counters, open connections) is guarded by one lock, State.mu.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK = 128 * 1024          # body relay and pacing step
MAX_HEAD = 64 * 1024        # request/response head larger than this is refused
KINDS = ("status", "reset", "stall", "truncate", "bad_length", "error_200", "refuse")


def parse_size(s: str | int | float) -> float:
    """'90M' -> 90e6 bytes (decimal, as network rates are); 0 = unlimited."""
    if isinstance(s, (int, float)):
        return float(s)
    s = s.strip().upper().rstrip("B").rstrip("/S")
    mult = {"K": 1e3, "M": 1e6, "G": 1e9}
    if s and s[-1] in mult:
        return float(s[:-1]) * mult[s[-1]]
    return float(s)


class State:
    def __init__(self, args):
        self.mu = threading.Lock()
        self.ttfb_ms = args.ttfb_ms
        self.ttfb_sigma = args.ttfb_sigma
        self.ttfb_max_ms = args.ttfb_max_ms
        self.list_ttfb_ms = args.list_ttfb_ms
        self.bandwidth = parse_size(args.bandwidth)
        self.rules: list[dict] = []
        self.rng = random.Random(args.seed)
        self.down = False
        self.conns: set[socket.socket] = set()
        self.stats = self._zero()

    @staticmethod
    def _zero():
        return {"connections": 0, "requests": 0, "requests_by_method": {}, "response_bytes": 0,
                "request_bytes": 0, "upstream_errors": 0, "refused_while_down": 0,
                "faults": {k: 0 for k in KINDS}, "status_counts": {}}

    def count(self, key, n=1):
        with self.mu:
            self.stats[key] += n

    def config(self):
        return {"ttfb_ms": self.ttfb_ms, "ttfb_sigma": self.ttfb_sigma, "ttfb_max_ms": self.ttfb_max_ms,
                "list_ttfb_ms": self.list_ttfb_ms, "bandwidth": self.bandwidth, "down": self.down}

    def ttfb_s(self, is_list: bool) -> float:
        with self.mu:
            base = self.list_ttfb_ms if (is_list and self.list_ttfb_ms is not None) else self.ttfb_ms
            if base <= 0:
                return 0.0
            if self.ttfb_sigma > 0:
                # Log-normal with median `base`: exp(N(ln base, sigma)).
                v = math.exp(self.rng.gauss(math.log(base), self.ttfb_sigma))
                if self.ttfb_max_ms:
                    v = min(v, self.ttfb_max_ms)
                return v / 1000.0
            return base / 1000.0

    def pick_fault(self, method: str, target: str, ranged: bool) -> dict | None:
        with self.mu:
            for r in self.rules:
                if r.get("count", -1) == 0:
                    continue
                if r.get("methods") and method not in r["methods"]:
                    continue
                if r.get("path_contains") and r["path_contains"] not in urllib.parse.unquote(target):
                    continue
                if r.get("ranged_only") and not ranged:
                    continue
                if self.rng.random() >= r.get("prob", 1.0):
                    continue
                if r.get("count", -1) > 0:
                    r["count"] -= 1
                r["fired"] = r.get("fired", 0) + 1
                self.stats["faults"][r["kind"]] += 1
                return dict(r)
        return None


def check_rules(rules) -> list[dict]:
    if not isinstance(rules, list):
        raise ValueError("rules must be a list")
    out = []
    for r in rules:
        if not isinstance(r, dict) or r.get("kind") not in KINDS:
            raise ValueError(f"bad rule {r!r}: kind must be one of {', '.join(KINDS)}")
        r = dict(r)
        r.setdefault("count", -1)
        r.setdefault("prob", 1.0)
        out.append(r)
    return out


# ---------------------------------------------------------------------------
# HTTP plumbing.

class Closed(Exception):
    pass


def read_head(f) -> bytes:
    """Reads an HTTP head (through the blank line) from a buffered reader."""
    lines, total = [], 0
    while True:
        line = f.readline(MAX_HEAD)
        if not line:
            if lines:
                raise Closed("EOF inside a head")
            raise Closed("EOF")
        total += len(line)
        if total > MAX_HEAD:
            raise Closed("head too large")
        if line in (b"\r\n", b"\n"):
            if not lines:
                continue  # tolerate stray CRLF between requests
            lines.append(line)
            return b"".join(lines)
        lines.append(line)


def split_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    text = head.decode("latin-1")
    first, *rest = text.split("\r\n") if "\r\n" in text else text.split("\n")
    hdrs = []
    for ln in rest:
        if not ln:
            continue
        k, _, v = ln.partition(":")
        hdrs.append((k.strip(), v.strip()))
    return first, hdrs


def get(hdrs, name):
    name = name.lower()
    for k, v in hdrs:
        if k.lower() == name:
            return v
    return None


def join_head(first: str, hdrs) -> bytes:
    return (first + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs) + "\r\n").encode("latin-1")


def relay_exact(src, dst_sock, n: int, pacer=None, stop_after: int | None = None) -> int:
    """Copies n bytes from buffered reader src to socket dst. Returns bytes
    sent. stop_after: send only that many, but still read (drain) all n."""
    buf = bytearray(CHUNK)
    mv = memoryview(buf)
    sent = 0
    left = n
    while left > 0:
        got = src.readinto1(mv[:min(CHUNK, left)]) if hasattr(src, "readinto1") else src.readinto(mv[:min(CHUNK, left)])
        if not got:
            raise Closed("upstream EOF inside a body")
        left -= got
        if stop_after is not None and sent >= stop_after:
            continue
        piece = mv[:got]
        if stop_after is not None and sent + got > stop_after:
            piece = mv[:stop_after - sent]
        if dst_sock is not None and len(piece):
            # Paced in steps of at most ~50 ms of the rate: a slow link
            # trickles, as TCP does, rather than sending a whole chunk and
            # going silent for seconds (at 20 KB/s a 128 KiB step was 6.4 s
            # of silence, which a client's stall check rightly aborts).
            step = getattr(pacer, "step", len(piece)) if pacer else len(piece)
            for off in range(0, len(piece), step):
                part = piece[off:off + step]
                dst_sock.sendall(part)
                if pacer:
                    pacer(len(part))
        sent += len(piece)
    return sent


def relay_chunked(src, dst_sock, pacer=None) -> int:
    """Relays a chunked body verbatim. Returns payload bytes."""
    total = 0
    while True:
        line = src.readline(1024)
        if not line:
            raise Closed("EOF in chunked body")
        dst_sock.sendall(line)
        size = int(line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while True:  # trailers
                t = src.readline(MAX_HEAD)
                if not t:
                    raise Closed("EOF in trailers")
                dst_sock.sendall(t)
                if t in (b"\r\n", b"\n"):
                    return total
        total += relay_exact(src, dst_sock, size, pacer)
        crlf = src.readline(16)
        dst_sock.sendall(crlf)


def error_xml(code: str, message: str, resource: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message><Resource>{resource}</Resource>"
            f"<RequestId>cloudproxy</RequestId></Error>").encode()


def rst_close(sock: socket.socket) -> None:
    """Closes with a TCP RST (SO_LINGER 0)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class Upstream:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.sock = None
        self.rfile = None

    def ensure(self):
        if self.sock is None:
            s = socket.create_connection((self.host, self.port), timeout=300)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock, self.rfile = s, s.makefile("rb", buffering=CHUNK)

    def close(self):
        if self.sock is not None:
            try:
                self.rfile.close()
                self.sock.close()
            except OSError:
                pass
        self.sock = self.rfile = None


class Connection(threading.Thread):
    """One client connection: a loop of request -> upstream -> response."""

    def __init__(self, state: State, sock: socket.socket, upstream_addr, verbose: bool):
        super().__init__(daemon=True)
        self.state, self.sock, self.verbose = state, sock, verbose
        self.up = Upstream(*upstream_addr)

    def run(self):
        st = self.state
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rfile = self.sock.makefile("rb", buffering=CHUNK)
        try:
            while True:
                if not self.one_request(rfile):
                    break
        except (Closed, OSError, ValueError) as e:
            if self.verbose:
                print(f"cloudproxy: connection ended: {e}", file=sys.stderr)
        finally:
            with st.mu:
                st.conns.discard(self.sock)
            self.up.close()
            try:
                rfile.close()
                self.sock.close()
            except OSError:
                pass

    def one_request(self, rfile) -> bool:
        st = self.state
        head = read_head(rfile)
        t_req = time.monotonic()
        first, hdrs = split_head(head)
        parts = first.split(" ")
        if len(parts) != 3:
            raise Closed(f"bad request line {first!r}")
        method, target, version = parts
        with st.mu:
            st.stats["requests"] += 1
            m = st.stats["requests_by_method"]
            m[method] = m.get(method, 0) + 1
            down = st.down
        if down:
            with st.mu:
                st.stats["refused_while_down"] += 1
            rst_close(self.sock)
            return False
        client_close = (get(hdrs, "connection") or "").lower() == "close" or version == "HTTP/1.0"
        expect = (get(hdrs, "expect") or "").lower() == "100-continue"
        fwd = [(k, v) for k, v in hdrs if k.lower() not in ("expect", "proxy-connection")]
        clen = get(hdrs, "content-length")
        chunked = "chunked" in (get(hdrs, "transfer-encoding") or "").lower()
        ranged = get(hdrs, "range") is not None
        path, _, query = target.partition("?")
        # A GET of the bucket itself (path-style "/bucket?..." or "/?...") is a LIST.
        is_list = method == "GET" and ("list-type=" in query or "/" not in path.strip("/"))
        fault = st.pick_fault(method, target, ranged)
        if fault and fault["kind"] == "refuse":
            # Read nothing more, reply nothing.
            rst_close(self.sock)
            return False
        if expect:
            self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")

        # Forward the request, retrying once on a stale kept-alive upstream:
        # one whose send fails, or (for a GET or HEAD without a body, which
        # can be sent again) that closes before any response. The upstream
        # (s3rver under Node) closes idle kept-alive connections after ~5 s;
        # a request sent just then got a 502 here, which the client counted
        # as a backend failure and retried (a metrics tester: 45 spurious
        # retries in one mount, and fault rules spent on them).
        # GET and HEAD only: a POST or DELETE the upstream carried out before
        # closing would be carried out twice.
        bodiless = method in ("GET", "HEAD") and not chunked and (clen is None or int(clen) == 0)
        for attempt in (0, 1):
            reused = self.up.sock is not None
            try:
                self.up.ensure()
                self.up.sock.sendall(join_head(first, fwd))
            except OSError:
                self.up.close()
                if attempt == 1:
                    st.count("upstream_errors")
                    return self.reply_simple(502, "BadGateway", "upstream unreachable", target)
                continue
            try:
                if clen is not None:
                    st.count("request_bytes", relay_exact(rfile, self.up.sock, int(clen)))
                elif chunked:
                    st.count("request_bytes", relay_chunked(rfile, self.up.sock))
                rhead = read_head(self.up.rfile)
                break
            except (OSError, Closed):
                self.up.close()
                if attempt == 0 and reused and bodiless:
                    continue
                st.count("upstream_errors")
                return self.reply_simple(502, "BadGateway", "upstream failed", target)

        rfirst, rhdrs = split_head(rhead)
        status = int(rfirst.split(" ")[1])
        with st.mu:
            sc = st.stats["status_counts"]
            sc[str(status)] = sc.get(str(status), 0) + 1
        rclen = get(rhdrs, "content-length")
        rchunked = "chunked" in (get(rhdrs, "transfer-encoding") or "").lower()
        no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
        up_close = (get(rhdrs, "connection") or "").lower() == "close"
        body_len = 0 if no_body else (int(rclen) if rclen is not None else None)

        # Time to first byte, from the end of the request.
        delay = st.ttfb_s(is_list) - (time.monotonic() - t_req)
        if delay > 0:
            time.sleep(delay)

        kind = fault["kind"] if fault else None
        if kind in ("status", "error_200"):
            # Drain the real body so the upstream connection stays usable.
            if body_len:
                relay_exact(self.up.rfile, None, body_len)
            elif rchunked:
                self.up.close()
            if up_close:
                self.up.close()
            if kind == "status":
                code = int(fault.get("status", 503))
                name = fault.get("code", "SlowDown" if code == 503 else "InternalError")
                return self.reply_simple(code, name, "injected by cloudproxy", target,
                                         keep=not client_close)
            body = error_xml(fault.get("code", "InternalError"), "injected error body with status 200",
                             urllib.parse.urlsplit(target).path)
            keep_hdrs = [(k, v) for k, v in rhdrs if k.lower() in ("etag", "last-modified", "x-amz-request-id")]
            out = [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))] + keep_hdrs
            if client_close:
                out.append(("Connection", "close"))
            self.sock.sendall(join_head("HTTP/1.1 200 OK", out) + body)
            st.count("response_bytes", len(body))
            return not client_close

        pacer = self.make_pacer()
        if kind == "bad_length" and body_len is not None:
            delta = int(fault.get("length_delta", -100))
            rhdrs = [(k, str(max(0, body_len + delta)) if k.lower() == "content-length" else v)
                     for k, v in rhdrs]
        self.sock.sendall(join_head(rfirst, rhdrs))

        if no_body:
            return not (client_close or up_close)
        if kind in ("reset", "stall", "truncate") and body_len is not None:
            after = min(int(fault.get("after_bytes", 64 * 1024)), max(0, body_len - 1))
            sent = relay_exact(self.up.rfile, self.sock, body_len, pacer, stop_after=after)
            st.count("response_bytes", sent)
            if up_close:
                self.up.close()
            if kind == "reset":
                rst_close(self.sock)
            elif kind == "stall":
                end = time.monotonic() + float(fault.get("stall_s", 60))
                while time.monotonic() < end and not st.down:
                    time.sleep(0.05)
                    # The client gave up (timeout) and closed: stop stalling.
                    try:
                        if self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                            break
                    except BlockingIOError:
                        pass
                    except OSError:
                        break
                self.sock.close()
            else:
                self.sock.shutdown(socket.SHUT_RDWR)
                self.sock.close()
            return False
        try:
            if body_len is not None:
                sent = relay_exact(self.up.rfile, self.sock, body_len, pacer)
            elif rchunked:
                sent = relay_chunked(self.up.rfile, self.sock, pacer)
            else:  # until upstream EOF
                sent = 0
                while True:
                    b = self.up.rfile.read1(getattr(pacer, "step", CHUNK))
                    if not b:
                        break
                    self.sock.sendall(b)
                    pacer(len(b))
                    sent += len(b)
                up_close = True
        except Closed:
            self.up.close()
            st.count("upstream_errors")
            rst_close(self.sock)
            return False
        st.count("response_bytes", sent)
        if up_close:
            self.up.close()
        if kind == "bad_length":
            self.sock.close()
            return False
        return not client_close

    def make_pacer(self):
        with self.state.mu:
            rate = self.state.bandwidth
        if rate <= 0:
            return lambda n: None
        t0 = time.monotonic()
        sent = [0]

        def pace(n):
            sent[0] += n
            ahead = t0 + sent[0] / rate - time.monotonic()
            if ahead > 0.0005:
                time.sleep(ahead)
        pace.step = int(max(4096, min(CHUNK, rate / 20)))
        return pace

    def reply_simple(self, status: int, code: str, msg: str, target: str, keep: bool = False) -> bool:
        body = error_xml(code, msg, urllib.parse.urlsplit(target).path)
        reason = {500: "Internal Server Error", 502: "Bad Gateway", 503: "Slow Down"}.get(status, "Error")
        hdrs = [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
        if not keep:
            hdrs.append(("Connection", "close"))
        self.sock.sendall(join_head(f"HTTP/1.1 {status} {reason}", hdrs) + body)
        self.state.count("response_bytes", len(body))
        return keep


# ---------------------------------------------------------------------------
# Listener (can go down and come back on the same port) and control server.

class Listener(threading.Thread):
    def __init__(self, state: State, host: str, port: int, upstream, verbose: bool):
        super().__init__(daemon=True)
        self.state, self.host, self.upstream, self.verbose = state, host, upstream, verbose
        self.cv = threading.Condition()
        self.lsock = self._bind(port)
        self.port = self.lsock.getsockname()[1]

    def _bind(self, port):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.host, port))
        s.listen(256)
        return s

    def run(self):
        while True:
            with self.cv:
                while self.lsock is None:
                    self.cv.wait()
                ls = self.lsock
            try:
                c, _ = ls.accept()
            except OSError:
                continue  # closed by go_down()
            with self.state.mu:
                if self.state.down:
                    self.state.stats["refused_while_down"] += 1
                    rst_close(c)
                    continue
                self.state.stats["connections"] += 1
                self.state.conns.add(c)
            Connection(self.state, c, self.upstream, self.verbose).start()

    def go_down(self):
        with self.state.mu:
            self.state.down = True
            conns = list(self.state.conns)
        with self.cv:
            if self.lsock is not None:
                try:
                    self.lsock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self.lsock.close()
                self.lsock = None
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def go_up(self):
        with self.cv:
            if self.lsock is None:
                for _ in range(100):  # the port may linger briefly
                    try:
                        self.lsock = self._bind(self.port)
                        break
                    except OSError:
                        time.sleep(0.05)
                else:
                    raise OSError(f"cannot re-bind port {self.port}")
            self.cv.notify_all()
        with self.state.mu:
            self.state.down = False


def make_control(state: State, listener: Listener, host: str, port: int):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code, obj):
            b = (json.dumps(obj, indent=1) + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)

        def _body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n) or b"{}") if n else {}

        def do_GET(self):
            if self.path == "/stats":
                with state.mu:
                    self._send(200, json.loads(json.dumps(state.stats)))
            elif self.path == "/config":
                with state.mu:
                    self._send(200, state.config())
            elif self.path == "/faults":
                with state.mu:
                    self._send(200, {"rules": state.rules})
            else:
                self._send(404, {"error": "unknown path"})

        def do_POST(self):
            try:
                body = self._body()
                if self.path == "/config":
                    with state.mu:
                        for k in ("ttfb_ms", "ttfb_sigma", "ttfb_max_ms", "list_ttfb_ms"):
                            if k in body:
                                setattr(state, k, body[k])
                        if "bandwidth" in body:
                            state.bandwidth = parse_size(body["bandwidth"])
                        self._send(200, state.config())
                elif self.path in ("/faults", "/faults/add"):
                    rules = check_rules(body.get("rules", []))
                    with state.mu:
                        if self.path == "/faults":
                            state.rules = rules
                        else:
                            state.rules += rules
                        if "seed" in body:
                            state.rng.seed(body["seed"])
                        self._send(200, {"rules": state.rules})
                elif self.path == "/faults/clear":
                    with state.mu:
                        state.rules = []
                    self._send(200, {"rules": []})
                elif self.path == "/down":
                    listener.go_down()
                    self._send(200, {"down": True})
                elif self.path == "/up":
                    listener.go_up()
                    self._send(200, {"down": False})
                elif self.path == "/reset-stats":
                    with state.mu:
                        state.stats = State._zero()
                    self._send(200, {})
                else:
                    self._send(404, {"error": "unknown path"})
            except (ValueError, KeyError, TypeError) as e:
                self._send(400, {"error": str(e)})

    srv = ThreadingHTTPServer((host, port), H)
    srv.daemon_threads = True
    return srv


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="cloudproxy.py",
        description="HTTP proxy adding cloud-like latency, a per-connection bandwidth cap and "
                    "run-time fault injection in front of a local S3 server.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Fault injection" + __doc__.split("Fault injection", 1)[1])
    ap.add_argument("--upstream", required=True, help="upstream S3 endpoint, http://HOST:PORT")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to serve on (port 0: any)")
    ap.add_argument("--control", default="127.0.0.1:0", help="HOST:PORT of the JSON control endpoint")
    ap.add_argument("--port-file", help="write '<port> <control-port>' here once listening")
    ap.add_argument("--ttfb-ms", type=float, default=25.0,
                    help="time to first byte per request, ms (median if --ttfb-sigma > 0); default 25")
    ap.add_argument("--ttfb-sigma", type=float, default=0.0,
                    help="log-normal sigma of the TTFB (0: fixed). 0.6 gives p99 ~ 4x the median")
    ap.add_argument("--ttfb-max-ms", type=float, default=0.0, help="cap on a sampled TTFB (0: none)")
    ap.add_argument("--list-ttfb-ms", type=float, default=None,
                    help="TTFB of LIST requests (default: same as --ttfb-ms; S3 is ~100 ms per page)")
    ap.add_argument("--bandwidth", default="90M",
                    help="per-connection cap on response bodies, bytes/s: 90M, 1G, 0 = unlimited; default 90M")
    ap.add_argument("--faults", default=None, help="initial fault rules, JSON list (see below)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the fault coin flips and TTFB samples")
    ap.add_argument("-v", "--verbose", action="store_true", help="log connection errors to stderr")
    args = ap.parse_args(argv)

    u = urllib.parse.urlsplit(args.upstream)
    if u.scheme != "http" or not u.hostname:
        ap.error("--upstream must be http://HOST:PORT")
    upstream = (u.hostname, u.port or 80)
    state = State(args)
    if args.faults:
        state.rules = check_rules(json.loads(args.faults))
    lh, _, lp = args.listen.rpartition(":")
    ch, _, cp = args.control.rpartition(":")
    listener = Listener(state, lh or "127.0.0.1", int(lp), upstream, args.verbose)
    control = make_control(state, listener, ch or "127.0.0.1", int(cp))
    listener.start()
    threading.Thread(target=control.serve_forever, daemon=True).start()
    ports = f"{listener.port} {control.server_address[1]}"
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(ports + "\n")
        os.replace(tmp, args.port_file)
    print(f"cloudproxy: listening on {lh}:{listener.port} -> {args.upstream}, control on "
          f"{ch}:{control.server_address[1]}, ttfb {args.ttfb_ms} ms (sigma {args.ttfb_sigma}), "
          f"bandwidth {parse_size(args.bandwidth) / 1e6:.0f} MB/s per connection", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
