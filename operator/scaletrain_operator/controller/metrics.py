"""The operator's Prometheus metrics: its own health (reconciles, API responses, the work queue, Events) and, per
job, what its status says (phase, counts, goodput, and rank 0's progress under the names the trainer's own
gauges have, prefixed scaletrain_job_). The chart's dashboard and alert rules read these
(charts/scaletrain/files/); tests/integration/test_monitoring.py checks that every series they name is here."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.config import CheckpointConfig

from ..api.conditions import ControllerFailureReason, EventReason, JobPhase
from ..api.timestamps import parse_timestamp
from .decision import Decision

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
STATUS_WRITES_REFUSED = Counter(
    "scaletrain_status_writes_refused_total",
    "Status writes the API server refused as invalid (422; logged with its reason, and said in an Event).",
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
JOB_PHASE = Gauge(
    "scaletrain_job_phase", "1 for a job's phase (status.phase), 0 for the others.", ["namespace", "name", "phase"]
)
# Rank 0's last progress as the status holds it (status.progress), one gauge per field the trainer exports too.
JOB_PROGRESS = {
    field.name: Gauge(
        field.gauge.name.replace("scaletrain_", "scaletrain_job_", 1),
        f"{field.gauge.help} (status.progress.{field.name})",
        ["namespace", "name"],
    )
    for field in wire.PROGRESS_FIELDS
    if field.gauge is not None
}
JOB_LOSS_FINITE = Gauge(
    "scaletrain_job_loss_finite", "0 once rank 0 reported a loss that is not finite, else 1.", ["namespace", "name"]
)
JOB_PROGRESS_UPDATED = Gauge(
    "scaletrain_job_progress_updated_timestamp_seconds",
    "When rank 0 last logged progress (status.progress.updatedAt), in seconds since the epoch.",
    ["namespace", "name"],
)
JOB_CHECKPOINT_EVERY = Gauge(
    "scaletrain_job_checkpoint_every_steps",
    "The job's checkpoint interval in optimizer steps (training.checkpoint.everySteps).",
    ["namespace", "name"],
)
EVENTS = Counter(
    "scaletrain_events_total",
    "Events the operator posted on jobs, by type and reason (Hang, LossNotFinite, Restarting, ...).",
    ["namespace", "name", "type", "reason"],
)
API_RESPONSES = Counter(
    "scaletrain_api_responses_total",
    "The operator's requests to the API server by verb and answer: the HTTP code, or error (no answer).",
    ["verb", "code"],
)
STATUS_REPORTS = Counter(
    "scaletrain_status_reports_total",
    "Progress reports scripts pushed to the operator's endpoint, by its answer: 200 taken, 401/403 a token not a "
    "running gang pod's, 400 not a report, 429 too many unknown tokens at once, 503 standby or TokenReview failing.",
    ["code"],
)
for _taken_or_refused in ("200", "401", "403"):  # at 0 from the start: rate() and the dashboard see the first ones
    STATUS_REPORTS.labels(_taken_or_refused)
# The Warning Events the chart's alerts count with increase(): each job has them at 0 from the first pass that
# sees it, since increase() cannot see a counter's first value, the 1 it would be born at.
ALERTED_EVENTS = (EventReason.HANG, EventReason.CHECKPOINT_SET_ASIDE)
WORK_QUEUE_DEPTH = Gauge("scaletrain_workqueue_depth", "Jobs due for a reconcile that no worker has taken yet.")
CHECKPOINT_EVERY_DEFAULT = CheckpointConfig.model_fields["every_steps"].default
PER_JOB = (JOB_SECONDS, JOB_GANG_RESTARTS, JOB_PHASE, *JOB_PROGRESS.values(), JOB_LOSS_FINITE, JOB_PROGRESS_UPDATED,
           JOB_CHECKPOINT_EVERY)  # fmt: skip

OUTCOME_OF_EVENT = {
    EventReason.CREATED: "created",
    EventReason.SUCCEEDED: "succeeded",
    EventReason.FAILED: "failed",
} | {reason: "failed" for reason in ControllerFailureReason}


def count(decision: Decision) -> None:
    for event in decision.events:
        if event.reason in OUTCOME_OF_EVENT:
            JOBS.labels(OUTCOME_OF_EVENT[event.reason]).inc()
        elif event.reason == EventReason.RESTARTING:
            RESTARTS.inc()


def report_jobs(jobs: Iterable[dict[str, Any]]) -> None:
    """The per-job gauges, from the jobs as the operator's cache holds them (a job's status is anyone's to
    write who may write the status: a value of the wrong type is left out, never a failed pass)."""
    for gauge in PER_JOB:
        gauge.clear()
    jobs = list(jobs)
    _forget_events_of_jobs_gone({(job["metadata"]["namespace"], job["metadata"]["name"]) for job in jobs})
    for job in jobs:
        where = (job["metadata"]["namespace"], job["metadata"]["name"])
        for reason in ALERTED_EVENTS:
            _count_events(*where, "Warning", reason)
        status = job.get("status") or {}
        goodput = status.get("goodput") or {}
        _set(JOB_SECONDS, (*where, "running"), goodput.get("runningSeconds", 0))
        _set(JOB_SECONDS, (*where, "waiting"), goodput.get("waitingSeconds", 0))
        _set(JOB_GANG_RESTARTS, (*where, "failure"), status.get("restarts", 0))
        _set(JOB_GANG_RESTARTS, (*where, "disruption"), status.get("disruptions", 0))
        for phase in JobPhase:
            JOB_PHASE.labels(*where, phase).set(1 if status.get("phase", JobPhase.PENDING) == phase else 0)
        _set(JOB_CHECKPOINT_EVERY, where, _checkpoint_every(job.get("spec") or {}))
        progress = status.get("progress") or {}
        if not progress:
            continue
        for field, gauge in JOB_PROGRESS.items():
            _set(gauge, where, progress.get(field))
        JOB_LOSS_FINITE.labels(*where).set(0 if progress.get("lossFinite") is False else 1)
        try:
            _set(JOB_PROGRESS_UPDATED, where, parse_timestamp(progress["updatedAt"]).timestamp())
        except (KeyError, TypeError, ValueError, AttributeError):
            pass


def _set(gauge: Gauge, labels: tuple[str, ...], value: Any) -> None:
    """`gauge` of `labels` at `value` when that is a finite number; else no series at all."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        gauge.labels(*labels).set(value)


def _checkpoint_every(spec: dict[str, Any]) -> Any:
    """training.checkpoint.everySteps (its default where unset); None for a job that saves no checkpoints."""
    training = spec.get("training")
    checkpoint = training.get("checkpoint") if isinstance(training, dict) else None
    if not isinstance(checkpoint, dict) or not checkpoint.get("dir"):
        return None
    return checkpoint.get("everySteps", CHECKPOINT_EVERY_DEFAULT)


def count_event(namespace: str, name: str, event_type: str, reason: str) -> None:
    """An Event the operator posted on a job (not a repeat it found posted already)."""
    _count_events(namespace, name, event_type, reason).inc()


# The label sets of EVENTS, to remove a deleted job's: the reconcile workers count, housekeeping forgets.
_event_series: set[tuple[str, str, str, str]] = set()
_event_series_lock = threading.Lock()


def _count_events(*labels: str) -> Any:
    with _event_series_lock:
        _event_series.add(labels)
        return EVENTS.labels(*labels)


def _forget_events_of_jobs_gone(jobs: set[tuple[str, str]]) -> None:
    """A deleted job's Event counters go with it, as its gauges do."""
    with _event_series_lock:
        for labels in [labels for labels in _event_series if labels[:2] not in jobs]:
            EVENTS.remove(*labels)
            _event_series.discard(labels)


def count_response(verb: str, code: int | str) -> None:
    API_RESPONSES.labels(verb, str(code)).inc()


def count_status_report(code: int) -> None:
    STATUS_REPORTS.labels(str(code)).inc()


_served_ports: set[int] = set()


def serve(port: int) -> None:
    if port not in _served_ports:  # once per process, even if the operator is started again
        start_http_server(port)
        _served_ports.add(port)
