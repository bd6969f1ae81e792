"""The operator's Prometheus metrics."""

from __future__ import annotations

from typing import get_args

from prometheus_client import Counter, Histogram, start_http_server

from .decision import Decision, FailureReason

JOBS = Counter("scaletrain_jobs_total", "ScaleTrainJobs by outcome: created, succeeded, failed.", ["outcome"])
RESTARTS = Counter("scaletrain_gang_restarts_total", "Gang restarts (after failures and spec changes).")
HOUSEKEEPING_FAILURES = Counter(
    "scaletrain_housekeeping_failures_total",
    "Jobs whose housekeeping step failed (logged; the other jobs go on), by step: ttl or progress.",
    ["step"],
)
RECONCILE_SECONDS = Histogram("scaletrain_reconcile_seconds", "Time to reconcile one ScaleTrainJob.")

OUTCOME_OF_EVENT = {"Created": "created", "Succeeded": "succeeded", "Failed": "failed"} | {
    reason: "failed" for reason in get_args(FailureReason)
}


def count(decision: Decision) -> None:
    for event in decision.events:
        if event.reason in OUTCOME_OF_EVENT:
            JOBS.labels(OUTCOME_OF_EVENT[event.reason]).inc()
        elif event.reason == "Restarting":
            RESTARTS.inc()


_served_ports: set[int] = set()


def serve(port: int) -> None:
    if port not in _served_ports:  # once per process, even if the operator is started again
        start_http_server(port)
        _served_ports.add(port)
