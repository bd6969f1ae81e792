"""The operator's Prometheus metrics."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from .decision import ControllerFailureReason, Decision

JOBS = Counter("scaletrain_jobs_total", "ScaleTrainJobs by outcome: created, succeeded, failed.", ["outcome"])
RESTARTS = Counter("scaletrain_gang_restarts_total", "Gang restarts (after failures and spec changes).")
HOUSEKEEPING_FAILURES = Counter(
    "scaletrain_housekeeping_failures_total",
    "Jobs whose housekeeping step failed (logged; the other jobs go on), by step: ttl or progress.",
    ["step"],
)
STATUS_FIELDS_LEFT_OUT = Counter(
    "scaletrain_status_fields_left_out_total",
    "Status fields left out of a write because the CRD's schema would refuse them (logged with why).",
)
RECONCILE_SECONDS = Histogram("scaletrain_reconcile_seconds", "Time to reconcile one ScaleTrainJob.")
# Per job, from its status (goodput and counts), set again on each housekeeping pass: a deleted job drops out.
JOB_SECONDS = Gauge(
    "scaletrain_job_seconds",
    "Seconds a job spent, up to its last phase change (status.goodput): running, or waiting (pending, restarting).",
    ["namespace", "name", "spent"],
)
JOB_GANG_RESTARTS = Gauge(
    "scaletrain_job_gang_restarts",
    "A job's gang restarts, by cause: failure (status.restarts) or disruption (status.disruptions).",
    ["namespace", "name", "cause"],
)

OUTCOME_OF_EVENT = {"Created": "created", "Succeeded": "succeeded", "Failed": "failed"} | {
    reason: "failed" for reason in get_args(ControllerFailureReason)
}


def count(decision: Decision) -> None:
    for event in decision.events:
        if event.reason in OUTCOME_OF_EVENT:
            JOBS.labels(OUTCOME_OF_EVENT[event.reason]).inc()
        elif event.reason == "Restarting":
            RESTARTS.inc()


def report_jobs(jobs: Iterable[dict[str, Any]]) -> None:
    """The per-job gauges, from the jobs as the operator's cache holds them."""
    JOB_SECONDS.clear()
    JOB_GANG_RESTARTS.clear()
    for job in jobs:
        where = (job["metadata"]["namespace"], job["metadata"]["name"])
        status = job.get("status") or {}
        goodput = status.get("goodput") or {}
        JOB_SECONDS.labels(*where, "running").set(goodput.get("runningSeconds", 0))
        JOB_SECONDS.labels(*where, "waiting").set(goodput.get("waitingSeconds", 0))
        JOB_GANG_RESTARTS.labels(*where, "failure").set(status.get("restarts", 0))
        JOB_GANG_RESTARTS.labels(*where, "disruption").set(status.get("disruptions", 0))


_served_ports: set[int] = set()


def serve(port: int) -> None:
    if port not in _served_ports:  # once per process, even if the operator is started again
        start_http_server(port)
        _served_ports.add(port)
