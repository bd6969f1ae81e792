"""Decisions for a job that cannot go on, or has ended: an invalid spec, a failure outside the gang policy (a child
the API server refused, a name taken, a spec the operator cannot reconcile), and what is left running of a
finished job's gang."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from scaletrain_trainer.contract.validation import Problem

from ..api.conditions import JOB_COMPLETE, JOB_FAILED, ConditionType, ControllerFailureReason, JobPhase
from ..policy.pods import (
    holds_a_node,
    job_condition,
)
from ..policy.suspension import admission_managed
from ..render.child_annotations import (
    child_job_suspended,
)
from .decision import (
    Decision,
    Event,
    Observed,
    occasion,
    suspension,
)
from .status import bounded, condition


def stop_what_runs(observed: Observed, queue: str | None, spec_generation: int | None) -> Decision:
    """A finished job is left alone, but for a gang of it that did not end by itself: a gang failed as
    hung, or for its restart limit while its other pods still ran, or one whose pods still wait for a node.
    Its Job is suspended: the Job controller ends the pods that run or wait (nothing holds the nodes, or
    starts once the scheduler finds room) and keeps those that ended, with their logs, such as the pod
    whose failure ended the job. Where another controller owns the Job's suspend flag (admission_managed:
    Kueue would start a suspended Job it admitted again), the Job goes instead, pods and all. A Job the Job
    controller finished (Complete, or Failed: it ends the pods still running itself), or whose pods all
    ended, is left as it is. This comes after the Failed or Succeeded status landed (the finishing decision
    stops nothing), so a status patch that fails cannot leave a job whose gang is stopped but that never
    finished."""
    newest = max(observed.jobs, default=None)
    holding = any(holds_a_node(pod) for pod in observed.pods)  # the pods are the newest gang's
    running = {
        gang_generation: child
        for gang_generation, child in observed.jobs.items()
        if job_condition(child, JOB_COMPLETE) is None
        and job_condition(child, JOB_FAILED) is None
        and (gang_generation != newest or holding)
    }
    older = tuple(
        child["metadata"]["name"] for gang_generation, child in sorted(running.items()) if gang_generation != newest
    )
    current = running.get(newest) if newest is not None else None
    older += (observed.probe["metadata"]["name"],) if observed.probe is not None else ()
    if current is not None and admission_managed(queue, current):
        return Decision(delete_child_jobs=(*older, current["metadata"]["name"]))
    if current is None or child_job_suspended(current):
        return Decision(delete_child_jobs=older)
    return Decision(delete_child_jobs=older, patch_child_job=suspension(spec_generation, current))


def decide_invalid(
    problems: Sequence[Problem], stored_status: Mapping[str, Any], spec_generation: int | None, now: datetime
) -> Decision:
    """A spec the CRD schema let through but the operator cannot run: Failed once, with every problem."""
    message = "invalid spec: " + "; ".join(str(p) for p in problems)
    return decide_failed(ControllerFailureReason.INVALID_SPEC, message, stored_status, spec_generation, now)


def decide_failed(
    reason: ControllerFailureReason,
    message: str,
    stored_status: Mapping[str, Any],
    spec_generation: int | None,
    now: datetime,
) -> Decision:
    """Failed once, for `reason`, with a condition and a Warning Event saying `message` (cut to the API's
    limits): an invalid spec, or a child the API server refused (cluster.ChildRejected)."""
    message = bounded(message)
    if stored_status.get("phase") == JobPhase.FAILED and stored_status.get("message") == message:
        return Decision()
    failed = condition(ConditionType.FAILED, True, reason, message, now, spec_generation)
    status = {
        "phase": JobPhase.FAILED,
        "message": message,
        "conditions": [failed],
        "observedGeneration": spec_generation,
    }
    return Decision(
        status=status,
        events=(Event("Warning", reason, message, occasion(stored_status.get("currentJob"), spec_generation)),),
    )
