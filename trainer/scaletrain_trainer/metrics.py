"""Rank 0's outputs: metrics.jsonl, a progress/Prometheus endpoint, and the pod's termination message."""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .tracking import Tracker, scalars_of

log = logging.getLogger(__name__)

TERMINATION_LOG_ENV = "SCALETRAIN_TERMINATION_LOG"  # mirrors the container's terminationMessagePath
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
TERMINATION_MESSAGE_LIMIT = 4096  # the kubelet keeps at most 4096 bytes
REQUEST_TIMEOUT_SECONDS = 2.0  # for a client to send its request (the operator's reads take milliseconds)
MAX_CONNECTIONS = 16  # served at once

PROMETHEUS_GAUGES = {
    "step": ("scaletrain_step", "Optimizer steps completed."),
    "maxSteps": ("scaletrain_max_steps", "Optimizer steps the job trains for."),
    "loss": ("scaletrain_loss", "Training loss of the last logged step."),
    "samplesPerSecond": ("scaletrain_samples_per_second", "Training throughput in samples per second."),
    "tokensPerSecond": ("scaletrain_tokens_per_second", "Training throughput in tokens per second."),
    "tflopsPerDevice": ("scaletrain_tflops_per_device", "Model TFLOP/s per device (6N plus attention per token)."),
    "mfu": ("scaletrain_mfu", "Model FLOPs utilization: a fraction of the device's dense 16-bit peak."),
    "evalLoss": ("scaletrain_eval_loss", "Loss on the held-out samples at the last evaluation."),
    "etaSeconds": ("scaletrain_eta_seconds", "Estimated seconds until maxSteps."),
}


class MetricsReporter:
    """Appends one JSON object per logged step (and evaluation), hands it to the trackers (tracking.py), and
    keeps the progress endpoint current (rank 0 only)."""

    def __init__(self, output_dir: str, port: int, max_steps: int, enabled: bool, trackers: tuple[Tracker, ...] = ()):
        self.enabled, self.trackers = enabled, trackers
        self._lock = threading.Lock()
        self._progress: dict[str, Any] = {"step": 0, "maxSteps": max_steps}
        self._server: ThreadingHTTPServer | None = None
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
        keys = ("step", "loss", "samplesPerSecond", "tokensPerSecond", "tflopsPerDevice", "mfu")
        now = datetime.now(timezone.utc)
        with self._lock:
            self._progress.update({k: record[k] for k in keys if k in record})
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

    def report_checkpoint(self, step: int, resumed: bool = False) -> None:
        """The step of the newest checkpoint (0: none), and with `resumed` the one this run resumed from:
        the operator tells a gang that saved nothing newer than it started from (a crash loop) by them."""
        with self._lock:
            self._progress["checkpointStep"] = step
            if resumed:
                self._progress["resumedFromStep"] = step

    def report_set_aside(self, checkpoints: list[str]) -> None:
        """Damaged checkpoints moved aside while resuming: served with the progress, so the operator can
        post an Event naming them (the trainer has no API access)."""
        with self._lock:
            self._progress["checkpointsSetAside"] = list(checkpoints)

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
            self._server.shutdown()
            self._server.server_close()

    def prometheus_text(self) -> str:
        progress = self.progress()
        lines = []
        for key, (name, help_text) in PROMETHEUS_GAUGES.items():
            if progress.get(key) is not None:
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {progress[key]}"]
        return "\n".join(lines) + "\n"


def finite_json(progress: dict[str, Any]) -> dict[str, Any]:
    """`progress` as strict JSON: a non-finite number (a diverged loss) is null, which every JSON parser
    reads (NaN is Python's extension), and `lossFinite: false` says the loss was not merely missing."""
    served = {key: None if isinstance(value, float) and not math.isfinite(value) else value
              for key, value in progress.items()}  # fmt: skip
    if served.get("loss") is None and isinstance(progress.get("loss"), float):
        served["lossFinite"] = False
    return served


class BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most MAX_CONNECTIONS at once: a connection beyond that is closed at
    once, so idle or slow clients cannot pile up threads in the trainer."""

    daemon_threads = True
    request_queue_size = 64  # connections waiting to be accepted (and then served or closed)

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]):
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _start_server(port: int, reporter: MetricsReporter) -> ThreadingHTTPServer | None:
    """Serve /progress (JSON) and /metrics (Prometheus), GET only (other methods get 501). Best effort:
    a busy port must not stop training."""

    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_SECONDS  # a client that sends its request slowly, or never, is dropped

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path == "/progress":
                body, content_type = json.dumps(finite_json(reporter.progress())).encode(), "application/json"
            elif self.path == "/metrics":
                body, content_type = reporter.prometheus_text().encode(), "text/plain; version=0.0.4"
            else:
                self.send_error(404, "try /progress or /metrics")
                return
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # polled often; keep the training log clean
            pass

    try:
        server = BoundedHTTPServer(("", port), Handler)
    except OSError as error:
        log.warning("progress endpoint disabled: cannot listen on port %d: %s", port, error)
        return None
    threading.Thread(target=server.serve_forever, name="progress-server", daemon=True).start()
    log.info("serving progress on :%d/progress and Prometheus metrics on :%d/metrics", port, port)
    return server


def termination_message_path() -> Path:
    return Path(os.environ.get(TERMINATION_LOG_ENV, DEFAULT_TERMINATION_LOG))


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
    path = termination_message_path()
    if not path.exists():
        return
    try:
        path.write_text(json.dumps(with_step(summary))[:TERMINATION_MESSAGE_LIMIT])
    except OSError as error:
        log.warning("cannot write the termination message to %s: %s", path, error)
