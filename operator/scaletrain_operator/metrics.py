"""The operator's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter, Histogram, start_http_server

from .reconcile import Decision

JOBS = Counter("scaletrain_jobs_total", "ScaleTrainJobs by outcome: created, succeeded, failed.", ["outcome"])
RESTARTS = Counter("scaletrain_gang_restarts_total", "Gang restarts (after failures and spec changes).")
RECONCILE_SECONDS = Histogram("scaletrain_reconcile_seconds", "Time to reconcile one ScaleTrainJob.")


def count(decision: Decision) -> None:
    for _, reason, _ in decision.events:
        if reason == "Created":
            JOBS.labels("created").inc()
        elif reason in ("Succeeded", "Failed"):
            JOBS.labels(reason.lower()).inc()
        elif reason == "Restarting":
            RESTARTS.inc()


_served_ports: set[int] = set()


def serve(port: int) -> None:
    if port not in _served_ports:  # once per process, even if the operator is started again
        start_http_server(port)
        _served_ports.add(port)
