"""The status-report endpoint (report_server.py) as clients meet it, over real TLS on loopback: a client that
holds a connection open and says nothing delays no other's report, a report over the size cap is refused before
it is read, and a port already taken is said so at start. Whose a report is (TokenReviews) is
tests/e2e/test_status_reports.py's."""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.error
import urllib.request

import pytest

from scaletrain_operator.api.naming import STATUS_REPORTS_PATH
from scaletrain_operator.in_place import InPlaceGangs
from scaletrain_operator.local.pod_network import free_port
from scaletrain_operator.local.status_reports import serving_pki
from scaletrain_operator.report_server import REQUEST_SECONDS, Refused, Reports, Sender, StatusServer
from scaletrain_operator.validation.trainer_status import MAX_REPORT_BYTES

JOB = ("team-a", "demo")


class OneToken:
    def sender(self, token: str, address: str) -> Sender:
        assert address == "127.0.0.1"  # the connection's peer: what review limits are kept by
        if token != "good":
            raise Refused(401, "not a token of ours")
        return Sender(JOB, 0, 0)


@pytest.fixture
def endpoint(tmp_path):
    tls, reports, port, answers = serving_pki(tmp_path / "tls", "127.0.0.1"), Reports(), free_port(), []
    server = StatusServer(
        port, str(tls), OneToken(), reports, InPlaceGangs(), lambda: True, "127.0.0.1", answered=answers.append
    )
    server.start()
    context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    yield f"https://127.0.0.1:{port}{STATUS_REPORTS_PATH}", context, reports, port, answers
    server.stop()


def post(url, context, body: bytes, token: str = "good") -> int:
    request = urllib.request.Request(url, body, {"Authorization": f"Bearer {token}"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_SECONDS, context=context) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def oversized(port: int, context: ssl.SSLContext) -> bytes:
    """The answer to the head of a report over the size cap, its body never sent."""
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1") as tls:
        length = MAX_REPORT_BYTES + 1
        tls.sendall(f"POST {STATUS_REPORTS_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
        tls.settimeout(REQUEST_SECONDS)
        return tls.recv(4096)


def test_a_silent_client_delays_no_other_report_and_an_oversized_one_is_refused_unread(endpoint):
    url, context, reports, port, answers = endpoint
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]  # no TLS hello, nothing
    try:
        started = time.monotonic()
        report = json.dumps({"trainerStatus": {"metrics": [{"name": "current_step", "value": "5"}]}}).encode()
        assert post(url, context, report) == 200
        assert time.monotonic() - started < REQUEST_SECONDS  # the silent ones are dropped only after that
        assert reports.newest(JOB).progress == {"step": 5}
        assert oversized(port, context).startswith(b"HTTP/1.1 413 ")  # answered from its head alone
        assert post(url, context, report, token="forged") == 401
        assert answers == [200, 413, 401]  # what the operator counts (scaletrain_status_reports_total)
    finally:
        for connection in silent:
            connection.close()


def test_a_port_already_taken_is_said_at_start(endpoint, tmp_path):
    port = endpoint[3]
    server = StatusServer(
        port, str(serving_pki(tmp_path / "other", "127.0.0.1")), OneToken(), Reports(), InPlaceGangs(), lambda: True
    )
    with pytest.raises(OSError, match=f"cannot listen on port {port}: .*[Aa]ddress already in use"):
        server.start()
