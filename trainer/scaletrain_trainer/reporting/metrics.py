"""Rank 0's outputs: metrics.jsonl, a progress/Prometheus endpoint, and the pod's termination message."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import socket
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from pathlib import Path
from typing import Any

from ..contract import wire
from .tracking import Tracker, scalars_of

log = logging.getLogger(__name__)

# The progress server (ProgressServer): the operator's reads take milliseconds, and requests are tiny GETs.
REQUEST_DEADLINE_SECONDS = 2.0  # from accept to the answer sent
MAX_REQUEST_BYTES = 8192  # the request line and headers
MAX_CONNECTIONS = 256  # open at once; the next closes the oldest
LISTEN_BACKLOG = 1024  # connections the kernel completes and holds until the event loop accepts them
CLOSE_TIMEOUT_SECONDS = 5.0
TEXT = "text/plain; charset=utf-8"
Answer = tuple[int, str, bytes]  # status, Content-Type, body

PROMETHEUS_GAUGES = {field.name: field.gauge for field in wire.PROGRESS_FIELDS if field.gauge is not None}


class MetricsReporter:
    """Appends one JSON object per logged step (and evaluation), hands it to the trackers (tracking.py), and
    keeps the progress endpoint current (rank 0 only)."""

    def __init__(
        self,
        output_dir: str,
        port: int,
        max_steps: int,
        enabled: bool,
        trackers: tuple[Tracker, ...] = (),
        resumed_from_step: int = 0,
        set_aside: Sequence[str] = (),
    ):
        """`resumed_from_step`: the step of the checkpoint this run resumed from (0: a fresh start), and
        `set_aside`: the damaged checkpoints the restore moved aside. Both are in the progress before the
        endpoint serves it: the operator tells a crash loop by them, from the first answer on."""
        self.enabled, self.trackers = enabled, trackers
        self._lock = threading.Lock()
        self._progress: dict[str, Any] = {
            "step": resumed_from_step,
            "maxSteps": max_steps,
            "resumedFromStep": resumed_from_step,
            "checkpointStep": resumed_from_step,
        }
        if set_aside:
            # Served with the progress, so the operator can post an Event naming them (the trainer has no
            # API access).
            self._progress["checkpointsSetAside"] = list(set_aside)
        self._server: ProgressServer | None = None
        if not enabled:
            return
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        self.path = Path(output_dir) / "metrics.jsonl"
        self._server = _start_server(port, self)

    def progress(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._progress)

    def log(self, record: dict[str, Any], eta_seconds: float, next_report_within: float) -> None:
        """Append `record`, and serve it as the progress, promising the next report within
        `next_report_within` seconds (staleAfter: the operator takes a gang silent past it for hung)."""
        if not self.enabled:
            return
        self._append(record)
        now = datetime.now(timezone.utc)
        with self._lock:
            self._progress.update({key: record[key] for key in wire.FROM_STEP_RECORD if key in record})
            self._progress["etaSeconds"] = eta_seconds
            self._progress["updatedAt"] = now.isoformat(timespec="seconds")
        self.promise_report_within(next_report_within, now)

    def log_eval(self, step: int, eval_loss: float) -> None:
        """Append the evaluation after `step` and serve its loss as evalLoss."""
        if not self.enabled:
            return
        self._append({"step": step, "evalLoss": eval_loss})
        with self._lock:
            self._progress["evalLoss"] = eval_loss

    def _append(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as file:
            file.write(json.dumps(record) + "\n")
        for tracker in self.trackers:
            tracker.log(record["step"], scalars_of(record))

    def report_checkpoint(self, step: int) -> None:
        """The step of the newest checkpoint: the operator tells a gang that saved nothing newer than it
        started from (a crash loop) by it."""
        with self._lock:
            self._progress["checkpointStep"] = step

    def promise_report_within(self, seconds: float, now: datetime | None = None) -> None:
        """Move the promise of the next report (a checkpoint save about to take a while). Rounded up to
        whole seconds, as the timestamps are."""
        due = (now or datetime.now(timezone.utc)) + timedelta(seconds=math.ceil(seconds) + 1)
        with self._lock:
            self._progress["staleAfter"] = due.isoformat(timespec="seconds")

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()
        if self._server is not None:
            self._server.close()

    def prometheus_text(self) -> str:
        progress = self.progress()
        lines = []
        for key, gauge in PROMETHEUS_GAUGES.items():
            if progress.get(key) is not None:
                lines += [
                    f"# HELP {gauge.name} {gauge.help}",
                    f"# TYPE {gauge.name} gauge",
                    f"{gauge.name} {progress[key]}",
                ]
        return "\n".join(lines) + "\n"


def finite_json(progress: dict[str, Any]) -> dict[str, Any]:
    """`progress` as strict JSON: a non-finite number (a diverged loss) is null, which every JSON parser
    reads (NaN is Python's extension), and `lossFinite: false` says the loss was not merely missing."""
    served = {key: None if isinstance(value, float) and not math.isfinite(value) else value
              for key, value in progress.items()}  # fmt: skip
    if served.get("loss") is None and isinstance(progress.get("loss"), float):
        served["lossFinite"] = False
    return served


class ProgressServer:
    """Serves GET /progress and /metrics from one thread running an asyncio event loop: an open connection
    costs a few kilobytes and no thread, so idle or slow clients (another tenant's pods, say) can hold
    hundreds of them without delaying anyone else's answer. What keeps the operator's reads getting through:

    - a deadline per request, not per receive: REQUEST_DEADLINE_SECONDS from accept to the answer sent,
      however a client paces its bytes (one byte a second held a thread-per-connection server's every slot);
    - a size cap on the request head (MAX_REQUEST_BYTES), and no body ever read: only GET is answered, and
      each connection is closed after its one answer (HTTP/1.0);
    - a cap on open connections (MAX_CONNECTIONS): the next one closes the oldest, which, every deadline
      being as long, has had the longest to send its request. The operator's read sends its request at once
      and is answered within milliseconds: only MAX_CONNECTIONS others connecting meanwhile could close it.

    A path or port reserved for the operator would need a secret, or a second port, in every pod; this keeps
    the one unauthenticated endpoint, whose answers are not secret, and makes holding it open worthless."""

    def __init__(self, port: int, answer: Callable[[str, str], Answer]):
        """Listen on `port`, all interfaces (OSError when it is taken), and answer each request with
        `answer(method, path)`, called in the server's thread."""
        self._answer = answer
        self._listener = socket.create_server(("", port))
        self._loop = asyncio.new_event_loop()
        self._closing = asyncio.Event()
        self._open: dict[asyncio.StreamWriter, None] = {}  # in accept order: the oldest first
        self._thread = threading.Thread(
            target=self._loop.run_until_complete, args=(self._serve(),), name="progress-server", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop listening and close every connection; waits for the server's thread, boundedly."""
        self._loop.call_soon_threadsafe(self._closing.set)
        self._thread.join(CLOSE_TIMEOUT_SECONDS)
        if not self._thread.is_alive():
            self._loop.close()

    async def _serve(self) -> None:
        server = await asyncio.start_server(
            self._connection, sock=self._listener, backlog=LISTEN_BACKLOG, limit=MAX_REQUEST_BYTES
        )
        async with server:
            await self._closing.wait()
            server.close()
            for writer in self._open:
                writer.transport.abort()
            await asyncio.gather(*asyncio.all_tasks() - {asyncio.current_task()}, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open[writer] = None
        if len(self._open) > MAX_CONNECTIONS:
            oldest = next(iter(self._open))
            del self._open[oldest]
            oldest.transport.abort()
        try:
            await asyncio.wait_for(self._answer_one(reader, writer), REQUEST_DEADLINE_SECONDS)
        except (asyncio.TimeoutError, ValueError, ConnectionError):
            pass  # too slow (the deadline), too long (the limit: ValueError), or gone: closed unanswered
        finally:
            self._open.pop(writer, None)
            writer.transport.abort()  # at once: nothing is left to send

    async def _answer_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read the request head, answer it, and close once the answer is sent."""
        head = [await reader.readline()]  # each line: ValueError past MAX_REQUEST_BYTES
        while head[-1].strip():  # the request line and headers (unused), up to the blank line
            if not head[-1].endswith(b"\n") or sum(map(len, head)) > MAX_REQUEST_BYTES:
                return  # the client hung up mid-head, or the head is too long
            head.append(await reader.readline())
        if not head[-1].endswith(b"\n"):
            return  # the client hung up before the blank line
        writer.write(_response(*self._answer_line(head[0])))
        writer.close()
        await writer.wait_closed()

    def _answer_line(self, request_line: bytes) -> Answer:
        parts = request_line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, TEXT, b"a request line: GET /progress HTTP/1.0\n"
        method, path, _ = parts
        return self._answer(method, path)


def _response(status: int, content_type: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.0 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def _start_server(port: int, reporter: MetricsReporter) -> ProgressServer | None:
    """Serve /progress (JSON) and /metrics (Prometheus), GET only (other methods get 501). Best effort:
    a busy port must not stop training."""

    def answer(method: str, path: str) -> Answer:
        if method != "GET":
            return 501, TEXT, b"only GET is served: GET /progress or /metrics\n"
        if path == "/progress":
            return 200, "application/json", json.dumps(finite_json(reporter.progress())).encode()
        if path == "/metrics":
            return 200, "text/plain; version=0.0.4", reporter.prometheus_text().encode()
        return 404, TEXT, b"try /progress or /metrics\n"

    try:
        server = ProgressServer(port, answer)
    except OSError as error:
        log.warning("progress endpoint disabled: cannot listen on port %d: %s", port, error)
        return None
    log.info("serving progress on :%d/progress and Prometheus metrics on :%d/metrics", port, port)
    return server


# The last optimizer step this process completed (or resumed at), None before training: every result the
# trainer records says where the run stood, whichever part of it stopped the run.
_last_completed_step: int | None = None


def record_completed_step(step: int) -> None:
    global _last_completed_step
    _last_completed_step = step


def with_step(summary: dict[str, Any]) -> dict[str, Any]:
    """`summary` with the last completed step as its `step`, unless it says one or training never began."""
    if "step" in summary or _last_completed_step is None:
        return summary
    return summary | {"step": _last_completed_step}


def write_termination_message(summary: dict[str, Any]) -> None:
    """Kubernetes copies this file into the pod's status, where the operator and `kubectl describe` see it."""
    path = wire.termination_message_path()
    if not path.exists():
        return
    try:
        path.write_text(json.dumps(with_step(summary))[: wire.TERMINATION_MESSAGE_LIMIT])
    except OSError as error:
        log.warning("cannot write the termination message to %s: %s", path, error)
