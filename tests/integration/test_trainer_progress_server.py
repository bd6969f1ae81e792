"""Rank 0's progress server (metrics.ProgressServer) under clients that hold its connections: connections
that trickle a request a byte a second, or send nothing, however many, never delay the operator's read of
/progress, and each is closed at its request's deadline."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from scaletrain_operator.progress import read_progress
from scaletrain_testing.hostile_http import Slowloris
from scaletrain_testing.trainer_runs import free_port
from scaletrain_trainer.reporting.metrics import MAX_CONNECTIONS, REQUEST_DEADLINE_SECONDS, MetricsReporter

READ_DEADLINE = 1.0  # seconds: what a prompt answer takes at most, on a loaded machine


@pytest.fixture
def port(tmp_path):
    """The port of a served progress (maxSteps 100)."""
    port = free_port()
    reporter = MetricsReporter(str(tmp_path), port, max_steps=100, enabled=True)
    yield port
    reporter.close()


def _reads_for(port: int, seconds: float) -> list[tuple[dict | None, float]]:
    """The operator's read of /progress, every half second for `seconds`: each answer, and how long it took."""
    reads = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        started = time.monotonic()
        progress = read_progress(f"http://127.0.0.1:{port}/progress", READ_DEADLINE)
        reads.append((progress, time.monotonic() - started))
        time.sleep(0.5)
    return reads


def test_trickling_and_idle_connections_never_delay_a_progress_read(port):
    with Slowloris(port, trickling=64, idle=64) as attack:
        time.sleep(1.5)  # every connection open, the trickling ones a byte or two in
        reads = _reads_for(port, seconds=10)
    assert len(reads) >= 10
    for progress, seconds in reads:
        assert progress is not None and progress["maxSteps"] == 100, reads
        assert seconds < READ_DEADLINE
    # A request trickled a byte a second is closed at its deadline, counted from accept, not from its last byte.
    trickled = attack.lifetimes["trickling"]
    assert len(trickled) >= 64 * 4  # each of the 64 closed, and replaced, every deadline or so
    assert all(REQUEST_DEADLINE_SECONDS - 0.1 < lifetime < REQUEST_DEADLINE_SECONDS + 1.0 for lifetime in trickled)
    assert all(lifetime < REQUEST_DEADLINE_SECONDS + 1.0 for lifetime in attack.lifetimes["idle"])


def test_connections_past_the_cap_close_the_oldest_and_cost_no_threads(port):
    threads = threading.active_count()
    with Slowloris(port, idle=MAX_CONNECTIONS + 200, tick=0.25) as attack:
        time.sleep(1)
        assert threading.active_count() == threads + 1  # the attack's own thread; the server's none
        reads = _reads_for(port, seconds=3)
    assert all(progress is not None and seconds < READ_DEADLINE for progress, seconds in reads), reads
    # Each tick, the 200 over the cap closed as many of the oldest, well before their deadline.
    assert sum(lifetime < REQUEST_DEADLINE_SECONDS - 0.5 for lifetime in attack.lifetimes["idle"]) >= 200


def test_only_a_get_of_progress_or_metrics_is_answered(port):
    url = f"http://127.0.0.1:{port}"
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        assert answer.headers["Content-Type"] == "text/plain; version=0.0.4"
        assert "scaletrain_max_steps 100\n" in answer.read().decode()
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"{url}/progress?verbose=1", timeout=10)
    post = urllib.request.Request(f"{url}/progress", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError, match="501"):
        urllib.request.urlopen(post, timeout=10)


def test_a_request_head_over_the_size_cap_is_closed_unanswered(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        try:
            connection.sendall(b"GET /progress HTTP/1.0\r\nX-Padding: " + b"a" * 16384 + b"\r\n\r\n")
            answer = connection.recv(4096)
        except ConnectionResetError:  # closed while the rest of the head was still arriving
            answer = b""
    assert answer == b""
