"""The endpoint scripts of one's own push their progress to: the Kubeflow Trainer status protocol (KEP-2779), which
HF's Trainer speaks by itself (KubeflowCallback) and the Kubeflow SDK's update_trainjob_status() speaks from any
loop. render/status_reports.py tells each pod where it is; validation/trainer_status.py reads a report. The
operator serves it (controller/reporters.py says whose a report is), and run-local on the pods' side of this
machine (local/status_reports.py), so that a script behaves the same in both. The pods' agents call on it too, for
in-place gang restarts (wire.IN_PLACE_PATH, answered from in_place.py), each call held until it has an answer.

An HTTPS server on a thread and event loop of its own. Each connection has its own deadline and size cap, so a
slow or garbled client holds up no other; the check of a sender (`senders.sender(token, address)`, which may call the
API server) runs on a pool of REVIEWERS threads. A report taken is kept in memory (Reports), the newest per job:
whoever runs the jobs copies it in at its own pace (the operator once a housekeeping pass)."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from scaletrain_trainer.contract import wire

from .api.naming import STATUS_REPORTS_PATH as PATH
from .in_place import InPlaceGangs
from .validation.in_place_call import Call, parse_call
from .validation.progress_answer import Unreadable
from .validation.trainer_status import MAX_REPORT_BYTES, parse_trainer_status

log = logging.getLogger(__name__)

REQUEST_SECONDS = 10.0  # a whole request, TLS handshake to body: a slow client holds nothing longer
MAX_HEAD_BYTES = 16 * 1024
REVIEWERS = 8  # senders checked at once (the operator's each hold one API connection)
# In-place calls one pod may have held at once: its agent holds one (two across a restart); a pod's other code,
# which has its token too, cannot hold the endpoint's connections by the thousand.
HELD_PER_POD = 4
Key = tuple[str, str]  # a job's namespace and name
LOSS = frozenset({"loss", "lossFinite"})  # a report's word on its loss: a finite one, or a divergence


@dataclass(frozen=True)
class Report:
    """A gang's newest report, as status.progress fields (trainer_status.py), and when it came; and the names of
    its metrics beyond what status.progress.metrics holds, which it left out."""

    gang_generation: int
    progress: dict[str, Any]
    received_at: datetime
    metrics_left_out: tuple[str, ...] = ()


class Reports:
    """The newest report of each job, kept for housekeeping to copy into the status; `since` is when this
    process began to take them: its start, or the moment an operator replica became the active one (a standby
    takes none). A silence is counted from then at the earliest."""

    def __init__(self) -> None:
        self.since = datetime.now(timezone.utc)
        self._lock = threading.Lock()
        self._newest: dict[Key, Report] = {}

    def put(self, job: Key, report: Report) -> None:
        """`report` over the gang's earlier ones: a field it lacks keeps its last value (HF's last report, at
        train end, has no step). The loss and whether it is finite go together: a finite loss ends an earlier
        divergence, and a divergence leaves no earlier loss beside it. The metrics are replaced whole, and so
        are the names left out of them."""
        with self._lock:
            held = self._newest.get(job)
            if held is not None and held.gang_generation == report.gang_generation:
                said = report.progress.keys() & LOSS
                kept = {k: v for k, v in held.progress.items() if not (said and k in LOSS)}
                left_out = report.metrics_left_out if "metrics" in report.progress else held.metrics_left_out
                report = Report(report.gang_generation, kept | report.progress, report.received_at, left_out)
            self._newest[job] = report

    def newest(self, job: Key) -> Report | None:
        with self._lock:
            return self._newest.get(job)

    def keep_only(self, jobs: set[Key]) -> None:
        """Forget the reports of jobs no longer running."""
        with self._lock:
            self._newest = {job: report for job, report in self._newest.items() if job in jobs}


@dataclass(frozen=True)
class Sender:
    """The gang a call came from, and the rank (completion index) of the pod that made it."""

    job: Key
    gang_generation: int
    rank: int


@dataclass(frozen=True)
class Held:
    """An in-place call, read and its sender known: answered when the gang's state gives an answer."""

    sender: Sender
    call: Call


class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Senders(Protocol):
    def sender(self, token: str, address: str) -> Sender:
        """The gang that holds `token`, sent from `address` (the connection's peer); Refused (with the HTTP
        status and why) when none does."""


class StatusServer:
    """The HTTPS endpoint on `host` (None: every interface) and `port`; `active` says whether to take reports
    (a standby operator replica answers 503: its cache is paused, peering.py, and could not tell whose they are)."""

    def __init__(
        self,
        port: int,
        tls_dir: str,
        senders: Senders,
        reports: Reports,
        in_place: InPlaceGangs,
        active: Callable[[], bool],
        host: str | None = None,
        answered: Callable[[int], None] = lambda status: None,
    ):
        """`answered(status)` is told each answer's HTTP status (the operator counts them)."""
        self.port, self.host, self.senders, self.reports, self.active = port, host, senders, reports, active
        self.in_place, self.answered = in_place, answered
        self._changes: dict[Key, asyncio.Event] = {}  # by job: set when its gang changes, for the calls held
        self._held_calls: dict[tuple[Key, int], int] = {}  # calls held, by job and rank
        in_place.listen(self._changed)
        self.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.tls.load_cert_chain(Path(tls_dir) / "tls.crt", Path(tls_dir) / "tls.key")
        self._reviewers = ThreadPoolExecutor(REVIEWERS, thread_name_prefix="token-review")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="status-reports", daemon=True)
        self._started = threading.Event()
        self._failed: OSError | None = None

    def start(self) -> None:
        """Serve on the thread; raises OSError, saying why, when the port cannot be had."""
        self._thread.start()
        self._started.wait(REQUEST_SECONDS)
        if self._failed is not None or not self._started.is_set():
            failed = self._failed
            why = (failed.strerror or str(failed)) if failed is not None else f"nothing within {REQUEST_SECONDS} s"
            raise OSError(f"the status-report endpoint cannot listen on port {self.port}: {why}")

    def stop(self) -> None:
        """Stop listening, end the connections still open, and wait (a while) for the thread to end."""
        if self._thread.is_alive() and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(REQUEST_SECONDS)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.set_exception_handler(_quiet_about_clients)
        listening = asyncio.start_server(
            self._connection, self.host, self.port, ssl=self.tls, ssl_handshake_timeout=REQUEST_SECONDS
        )
        try:
            server = self._loop.run_until_complete(listening)
        except OSError as error:  # the port is taken, or the address is not this machine's
            self._failed = error
            self._loop.close()
            self._started.set()
            return
        log.info("status reports served on port %d", self.port)
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            peer = writer.get_extra_info("peername")
            address = peer[0] if isinstance(peer, tuple) else str(peer)
            answer = await asyncio.wait_for(self._answer(reader, address), REQUEST_SECONDS)
            status, said = await self._held(answer) if isinstance(answer, Held) else answer
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        except asyncio.CancelledError:  # the endpoint stops: a held call ends unanswered, as its connection does
            writer.close()
            return
        except Exception:  # a bug of ours: the client learns that much, and the endpoint goes on
            log.exception("a status report could not be answered")
            status, said = 500, "internal error; see the operator's log"
        self.answered(status)
        body = json.dumps(said if isinstance(said, dict) else {"message": said}).encode()
        head = f"HTTP/1.1 {status} {STATUS_TEXT[status]}\r\nContent-Type: application/json\r\n"
        writer.write(f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        try:
            await asyncio.wait_for(writer.drain(), REQUEST_SECONDS)
        except (asyncio.TimeoutError, ConnectionError):
            pass
        writer.close()

    async def _answer(self, reader: asyncio.StreamReader, address: str) -> tuple[int, str] | Held:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD_BYTES:
            return 431, "request head too large"
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, *_ = (request_line.split(" ") + ["", ""])[:3]
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        route = path.split("?")[0]
        if route == "/healthz":
            return 200, "ok"
        if route not in (PATH, wire.IN_PLACE_PATH):
            return 404, f"reports go to {PATH}"
        if method != "POST":
            return 405, "POST a report"
        length = headers.get("content-length", "")
        if not length.isdigit() or int(length) > MAX_REPORT_BYTES:
            return 413, f"a report has a Content-Length of at most {MAX_REPORT_BYTES} bytes"
        body = await reader.readexactly(int(length))
        if not self.active():
            return 503, "this operator replica stands by; report again"
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return 401, "a bearer token is expected (KUBEFLOW_TRAINER_SERVER_TOKEN)"
        try:
            loop = asyncio.get_running_loop()
            sender = await loop.run_in_executor(self._reviewers, self.senders.sender, token, address)
            if route == wire.IN_PLACE_PATH:
                return Held(sender, parse_call(body))
            progress, left_out = parse_trainer_status(body)
        except Refused as refused:
            return refused.status, str(refused)
        except Unreadable as unreadable:
            return 400, str(unreadable)
        self.reports.put(sender.job, Report(sender.gang_generation, progress, datetime.now(timezone.utc), left_out))
        return 200, "accepted"

    async def _held(self, held: Held) -> tuple[int, str | dict[str, Any]]:
        """The operator's word on the sender's gang, once there is one; WAIT after wire.HOLD_SECONDS without; 429
        for a pod that has HELD_PER_POD calls held already."""
        pod = (held.sender.job, held.sender.rank)
        if self._held_calls.get(pod, 0) >= HELD_PER_POD:
            return 429, f"{HELD_PER_POD} calls of this pod are held already; call again when one is answered"
        self._held_calls[pod] = self._held_calls.get(pod, 0) + 1
        try:
            return await self._word(held)
        finally:
            if (left := self._held_calls.pop(pod) - 1) > 0:
                self._held_calls[pod] = left

    async def _word(self, held: Held) -> tuple[int, dict[str, Any]]:
        loop, job = asyncio.get_running_loop(), held.sender.job
        deadline = loop.time() + wire.HOLD_SECONDS
        while loop.time() < deadline:
            changed = self._changes.setdefault(job, asyncio.Event())  # before the answer is sought: no change lost
            now = datetime.now(timezone.utc)
            answer, retry_at = self.in_place.answer(job, held.sender.rank, held.call, now)
            if answer is not None:
                return 200, {"verdict": answer.verdict, "generation": answer.generation}
            wait = deadline - loop.time()
            if retry_at is not None:
                wait = min(wait, (retry_at - now).total_seconds())
            try:
                await asyncio.wait_for(changed.wait(), max(0.0, wait))
            except asyncio.TimeoutError:
                pass
        return 200, {"verdict": wire.WAIT, "generation": held.call.generation}

    def _changed(self, job: Key) -> None:
        """in_place told of a change to `job`'s gang, on any thread: its held calls look again, on the loop."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, job)

    def _wake(self, job: Key) -> None:
        if (changed := self._changes.pop(job, None)) is not None:
            changed.set()


def _quiet_about_clients(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A client that hung up or spoke no TLS is the client's business, not a line in the operator's log with a
    traceback; anything else is logged as asyncio would."""
    if isinstance(context.get("exception"), ConnectionError | ssl.SSLError | TimeoutError):
        log.debug("a status-report client went away: %s", context["exception"])
        return
    loop.default_exception_handler(context)


STATUS_TEXT = {
    200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 413: "Content Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
    431: "Request Header Fields Too Large", 503: "Service Unavailable",
}  # fmt: skip
