"""Rank 0's /progress endpoint as the trainer serves it, for the operator's tests that run without a
trainer: `progress` is what it answers (with a field status.progress does not keep), None makes it answer
503 (a trainer not serving yet, or no more), and `healthy(seconds)` makes it answer as a trainer that keeps
stepping: each answer reported just now, promising the next within `seconds`.

    with ProgressServer() as server:
        team.submit("demo", training={"metricsPort": server.port})
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from scaletrain_operator.api.timestamps import timestamp

RANK0_PROGRESS = {"step": 42, "maxSteps": 100, "loss": 1.25, "samplesPerSecond": 8.0, "tokensPerSecond": 128.0,
                  "tflopsPerDevice": 0.5, "mfu": 0.25, "etaSeconds": 70.0,
                  "updatedAt": "2026-11-30T12:00:00Z"}  # fmt: skip


def promise(seconds: float, at: datetime | None = None) -> dict[str, str]:
    """The times of a report made `at` (now), promising the next within `seconds`."""
    at = at or datetime.now(timezone.utc)
    return {"updatedAt": timestamp(at), "staleAfter": timestamp(at + timedelta(seconds=seconds))}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 4096  # the rank 0 of every job at once, as an operator reads them (bench/steady_state.py)


class ProgressServer:
    def __init__(self, progress: dict[str, Any] | None = RANK0_PROGRESS, host: str = "127.0.0.1", port: int = 0):
        self.progress: dict[str, Any] | Callable[[], dict[str, Any]] | None = progress
        self.answered = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                progress = server.progress() if callable(server.progress) else server.progress
                if progress is None:
                    self.send_error(503)
                    return
                server.answered += 1
                body = json.dumps(progress | {"gradNorm": 0.5}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = _Server((host, port), Handler)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def healthy(self, seconds: float, **fields: Any) -> None:
        """From now on, answer as a trainer that keeps stepping, promising each next report within `seconds`."""
        self.progress = lambda: RANK0_PROGRESS | fields | promise(seconds)

    def __enter__(self) -> ProgressServer:
        threading.Thread(target=self._server.serve_forever, name="progress-server", daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
