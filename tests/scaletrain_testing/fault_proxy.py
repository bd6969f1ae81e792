"""A fault proxy between the operator and the tests' real API server: every request of the operator goes
through it, and the test tells it what to do to the ones that match a method and a path.

    with FaultProxy(control_plane, workdir) as proxy:
        kubeconfig = proxy.kubeconfig_for(install.kubeconfig)   # the operator's, pointed at the proxy
        outage = proxy.fail("PATCH", r"/scaletrainjobs/[^/]+/status$", seconds=15)
        held = proxy.hold("DELETE", r"/jobs/demo-g0$")
        held.wait_matched()                                     # the operator is inside its restart: kill it

- fail: answer 500 (as a failing API server or etcd does), for `times` requests or for `seconds`;
- drop: pass the request on, so it takes effect, and close the connection without an answer (the answer
  is lost on the way back);
- hold: keep the request, unanswered and not passed on, until the proxy closes: a SIGKILL of the operator
  then lands in the middle of what it was doing.

Everything else passes through unchanged, watches included (streamed). The proxy terminates TLS with a
certificate of the cluster's CA, so the operator's kubeconfig only changes its server; the operator's own
credentials pass through, and the API server judges them. One request per connection: the proxy asks
both sides to close after it, so that no request can slip by on a kept-alive connection.
"""

from __future__ import annotations

import re
import socket
import socketserver
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from .control_plane import ControlPlane
from .timeouts import PROXIED_REQUEST_S
from .waiting import wait_until

Action = Literal["fail", "drop", "hold"]
HEAD_LIMIT = 64 * 1024
IO_TIMEOUT_S = 60.0  # how long a socket of an ordinary request may wait; watches stream for longer
WATCH_TIMEOUT_S = 600.0
HOLD_LIMIT_S = 300.0  # a held request is let go at the latest then
FAILED = (
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)
FAILED_BODY = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    b'"message":"injected by the fault proxy","reason":"InternalError","code":500}'
)


@dataclass
class Rule:
    """What to do to the requests of `method` whose path (without the query) matches `path`, and whose body
    matches `body` if given."""

    action: Action
    method: str
    path: re.Pattern[str]
    body: re.Pattern[bytes] | None = None
    times: int | None = None  # None: until `until`, or for good
    until: float | None = None  # time.monotonic()
    matched: list[tuple[float, str, str]] = field(default_factory=list)  # when, method, path
    _released: threading.Event = field(default_factory=threading.Event)

    def applies(self, method: str, path: str, body: bytes, now: float) -> bool:
        if method != self.method or not self.path.search(path):
            return False
        if self.body is not None and not self.body.search(body):
            return False
        if self.times is not None and len(self.matched) >= self.times:
            return False
        return self.until is None or now < self.until

    def wait_matched(self, count: int = 1, timeout_s: float = PROXIED_REQUEST_S) -> None:
        """Until `count` requests matched."""
        wait_until(
            lambda: len(self.matched) >= count,
            timeout_s,
            f"{count} request(s) to match {self.action} {self.method} {self.path.pattern}",
            interval_s=0.05,
            details=lambda: f"{len(self.matched)} matched",
        )


class FaultProxy:
    def __init__(self, control_plane: ControlPlane, workdir: Path):
        self.control_plane, self.workdir = control_plane, workdir
        self.rules: list[Rule] = []
        self._lock = threading.Lock()
        self._server: socketserver.ThreadingTCPServer | None = None
        host, _, port = control_plane.server.removeprefix("https://").partition(":")
        self._upstream = (host, int(port))

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FaultProxy:
        certificate, key = self.control_plane.serving_certificate(self.workdir, "fault-proxy")
        server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_side.load_cert_chain(certificate, key)
        client_side = ssl.create_default_context(cadata=self.control_plane.ca_bundle.decode())
        proxy = self

        class Connection(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    with server_side.wrap_socket(self.request, server_side=True) as downstream:
                        proxy._serve(downstream, client_side)
                except (OSError, ssl.SSLError):
                    pass  # a client that went away (an operator killed mid-request)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Connection)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            for rule in self.rules:
                rule._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def kubeconfig_for(self, kubeconfig: Path) -> Path:
        """A copy of `kubeconfig` whose clusters are reached through the proxy."""
        config = yaml.safe_load(kubeconfig.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = self.url
        proxied = self.workdir / f"proxied-{kubeconfig.name}"
        proxied.write_text(yaml.safe_dump(config))
        return proxied

    def fail(self, method: str, path: str, times: int | None = None, seconds: float | None = None) -> Rule:
        until = time.monotonic() + seconds if seconds is not None else None
        return self._add(Rule("fail", method, re.compile(path), times=times, until=until))

    def drop(self, method: str, path: str, body: str | None = None, times: int = 1) -> Rule:
        return self._add(Rule("drop", method, re.compile(path), _pattern(body), times=times))

    def hold(self, method: str, path: str, body: str | None = None, times: int = 1) -> Rule:
        return self._add(Rule("hold", method, re.compile(path), _pattern(body), times=times))

    def remove(self, rule: Rule) -> None:
        """The rule no longer applies; the requests it holds are let go (closed unanswered)."""
        with self._lock:
            self.rules.remove(rule)
        rule._released.set()

    def _add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def _match(self, method: str, path: str, body: bytes) -> Rule | None:
        with self._lock:
            now = time.monotonic()
            rule = next((rule for rule in self.rules if rule.applies(method, path, body, now)), None)
            if rule is not None:
                rule.matched.append((now, method, path))
            return rule

    def _serve(self, downstream: ssl.SSLSocket, client_side: ssl.SSLContext) -> None:
        downstream.settimeout(IO_TIMEOUT_S)
        head, body = _read_request(downstream)
        if head is None:
            return
        request_line, *headers = head.split(b"\r\n")
        method, target, _ = request_line.decode("latin-1").split(" ", 2)
        path = target.partition("?")[0]
        rule = self._match(method, path, body)
        if rule is not None and rule.action == "fail":
            downstream.sendall(FAILED % (len(FAILED_BODY), FAILED_BODY))
            return
        if rule is not None and rule.action == "hold":
            rule._released.wait(HOLD_LIMIT_S)
            return
        kept = [h for h in headers if not h.lower().startswith((b"connection:", b"keep-alive:"))]
        forwarded = b"\r\n".join([request_line, *kept, b"Connection: close"]) + b"\r\n\r\n" + body
        with socket.create_connection(self._upstream, timeout=IO_TIMEOUT_S) as raw:
            with client_side.wrap_socket(raw, server_hostname=self._upstream[0]) as upstream:
                upstream.sendall(forwarded)
                watching = "watch=" in target
                upstream.settimeout(WATCH_TIMEOUT_S if watching else IO_TIMEOUT_S)
                if rule is not None and rule.action == "drop":
                    upstream.recv(1)  # the API server has answered: it took effect; the answer is lost
                    return
                while chunk := upstream.recv(65536):
                    downstream.sendall(chunk)


def _pattern(body: str | None) -> re.Pattern[bytes] | None:
    return re.compile(body.encode()) if body is not None else None


def _read_request(connection: ssl.SSLSocket) -> tuple[bytes | None, bytes]:
    """The head (without its blank line) and the body (by Content-Length) of one request."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk or len(data) > HEAD_LIMIT:
            return None, b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")[1:]
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = connection.recv(65536)
        if not chunk:
            break
        body += chunk
    return head, body
