"""Pure reconciliation: from what exists in the cluster, decide what to do and what status to report.

`decide(job, observed, now)` looks only at its inputs (the ScaleTrainJob and the children found by
label), so calling it again after a repeated event, an operator restart or a lost status patch
reaches the same decision. The handlers execute the decision.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import naming
from .api import Condition, NodeCounts, ScaleTrainJob, ScaleTrainJobStatus
from .render import render_children, render_job

CONFIG_ERROR_EXIT_CODE = 78  # the trainer's EX_CONFIG: retrying cannot help
SPEC_HASH_ANNOTATION = f"{naming.GROUP}/spec-hash"


@dataclass(frozen=True)
class PodFailure:
    pod: str
    exit_code: int | None
    reason: str
    message: str = ""


@dataclass
class Observed:
    """The children of one ScaleTrainJob, as listed from the API server."""

    service: dict[str, Any] | None
    jobs: dict[int, dict[str, Any]]  # by gang generation
    pods: list[dict[str, Any]]  # of the current generation


@dataclass
class Decision:
    create: list[dict[str, Any]] = field(default_factory=list)
    delete_jobs: list[str] = field(default_factory=list)
    patch_job: dict[str, Any] | None = None  # merge patch for the current Job's spec (suspend, deadline)
    status: dict[str, Any] = field(default_factory=dict)  # merge patch for .status
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def spec_hash(job: ScaleTrainJob) -> str:
    """What a running gang cannot take in place: the Job as rendered, without its suspend flag and
    deadline (which the Job accepts as updates)."""
    rendered = render_job(job, generation=0)
    rendered["spec"].pop("suspend")
    rendered["spec"].pop("activeDeadlineSeconds", None)
    rendered["metadata"].pop("ownerReferences", None)
    return hashlib.sha256(json.dumps(rendered, sort_keys=True).encode()).hexdigest()[:16]


def current_generation(job: ScaleTrainJob, observed: Observed) -> int:
    """The newest gang generation: from the Jobs that exist, or the status if they are gone."""
    recorded = job.status.current_job if job.status else None
    from_status = naming.generation_of(recorded) if recorded else 0
    return max([from_status, *observed.jobs])


def first_failure(pods: list[dict[str, Any]]) -> PodFailure | None:
    """The pod that failed first (by its trainer container's finishedAt, then by name): the likely root
    cause, as a dead rank makes its peers fail right after it. Pods being deleted are skipped: they were
    stopped (a suspension, a preemption), not crashed."""
    failures = []
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Failed" or pod["metadata"].get("deletionTimestamp"):
            continue
        failure = PodFailure(pod["metadata"]["name"], None, status.get("reason", "Failed"), status.get("message", ""))
        finished = "~"  # after any timestamp
        for container in status.get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated and container.get("name") == naming.TRAINER_CONTAINER:
                failure = PodFailure(
                    pod["metadata"]["name"],
                    terminated.get("exitCode"),
                    terminated.get("reason", "Error"),
                    terminated.get("message", ""),
                )
                finished = terminated.get("finishedAt") or finished
        failures.append((finished, failure.pod, failure))
    return min(failures)[2] if failures else None


def _job_condition(job_object: dict[str, Any] | None, kind: str) -> bool:
    conditions = ((job_object or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def node_counts(pods: list[dict[str, Any]]) -> NodeCounts:
    phases = [(p.get("status") or {}).get("phase", "Pending") for p in pods]
    return NodeCounts(
        active=sum(phase in ("Pending", "Running") for phase in phases),
        succeeded=phases.count("Succeeded"),
        failed=phases.count("Failed"),
    )


def condition(kind: str, status: bool, reason: str, message: str, now: datetime, generation: int | None) -> dict:
    return Condition(
        type=kind,
        status="True" if status else "False",
        reason=reason,
        message=message,
        last_transition_time=now,
        observed_generation=generation,
    ).model_dump(mode="json", by_alias=True, exclude_none=True)


class _StatusBuilder:
    """The next status: conditions keep their transition time unless their status flips."""

    def __init__(self, job: ScaleTrainJob, now: datetime):
        self.before = job.status or ScaleTrainJobStatus()
        self.now, self.generation = now, job.metadata.generation
        self.conditions = {
            c.type: c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in self.before.conditions
        }
        self.fields: dict[str, Any] = {"restarts": self.before.restarts}

    def set(self, kind: str, status: bool, reason: str, message: str = "") -> None:
        old = self.conditions.get(kind)
        if old and (old["status"] == "True") == status:
            self.conditions[kind] = old | {"reason": reason, "message": message}
        elif old or status:
            self.conditions[kind] = condition(kind, status, reason, message, self.now, self.generation)

    def phase(self, phase: str, message: str = "", reason: str | None = None) -> dict[str, Any]:
        """The status for `phase`; Running, Restarting and Suspended are true exactly while in that phase."""
        for kind in ("Running", "Restarting", "Suspended"):
            if phase == kind or kind in self.conditions:
                self.set(kind, phase == kind, phase, message if phase == kind else "")
        if phase in ("Succeeded", "Failed"):
            self.set(phase, True, reason or phase, message)
        return {
            **self.fields,
            "phase": phase,
            "message": message,
            "conditions": list(self.conditions.values()),
            "observedGeneration": self.generation,
        }


def _timestamp(now: datetime) -> str:
    return now.isoformat().replace("+00:00", "Z")


def decide(job: ScaleTrainJob, observed: Observed, now: datetime) -> Decision:
    """What to do next for `job`, given its children; see the module docstring."""
    builder = _StatusBuilder(job, now)
    before = builder.before
    decision = Decision()
    if before.phase in ("Succeeded", "Failed"):
        return decision  # finished: only the TTL (handled by the timer) touches it now
    generation = current_generation(job, observed)
    service, rendered_job = render_children(job, generation)
    rendered_job = _with_hash(rendered_job, job)
    if observed.service is None:
        decision.create.append(service)
    decision.delete_jobs += [naming.child_job_name(job.name, g) for g in observed.jobs if g < generation]
    current = observed.jobs.get(generation)

    if current is None:  # first start, or a restart whose create did not happen yet
        decision.create.append(rendered_job)
        builder.fields["currentJob"] = rendered_job["metadata"]["name"]
        if before.phase is None:
            builder.set(
                "Created",
                True,
                "Created",
                f"created Service {service['metadata']['name']} and Job {rendered_job['metadata']['name']}",
            )
            decision.events.append(("Normal", "Created", f"created Job {rendered_job['metadata']['name']}"))
        decision.status = builder.phase("Suspended", "spec.suspend is true") if job.spec.suspend else _waiting(builder)
        return _with_phase_event(decision, before.phase)

    builder.fields["currentJob"] = current["metadata"]["name"]
    desired_hash = rendered_job["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    if (current["metadata"].get("annotations") or {}).get(SPEC_HASH_ANNOTATION) != desired_hash:
        message = "the spec changed in a way the running gang cannot take; restarting it from the last checkpoint"
        return _restart(job, decision, builder, current, generation, message, counts=False)

    counts = node_counts(observed.pods)
    builder.fields["nodes"] = counts.model_dump(mode="json", by_alias=True)
    # Suspending a Job (spec.suspend, or Kueue preempting it) terminates its pods, which may end
    # Failed (exit 143) on the way out: that is not a crash, and the Job does not count it either.
    job_suspended = bool((current.get("spec") or {}).get("suspend"))
    failure = None if job_suspended or job.spec.suspend else first_failure(observed.pods)
    if failure is None and _job_condition(current, "Failed"):
        reason = next(c.get("reason", "Failed") for c in current["status"]["conditions"] if c.get("type") == "Failed")
        failure = PodFailure(current["metadata"]["name"], None, reason)

    if _job_condition(current, "Complete"):
        builder.fields["completionTime"] = _timestamp(now)
        decision.status = builder.phase("Succeeded", f"all {job.spec.nodes} nodes finished")
        return _with_phase_event(decision, before.phase)
    if failure is not None:
        what = f"pod {failure.pod} failed ({failure.reason}" + (
            f", exit code {failure.exit_code})" if failure.exit_code is not None else ")"
        )
        if failure.exit_code == CONFIG_ERROR_EXIT_CODE:
            return _fail(
                decision,
                builder,
                "ConfigError",
                f"{what}: invalid training config, not retried. {failure.message}".strip(),
            )
        if failure.reason == "DeadlineExceeded":
            return _fail(
                decision,
                builder,
                "DeadlineExceeded",
                f"activeDeadlineSeconds ({job.spec.active_deadline_seconds}) passed",
            )
        if before.restarts >= job.spec.max_restarts:
            return _fail(
                decision,
                builder,
                "RestartLimitReached",
                f"{what}; maxRestarts ({job.spec.max_restarts}) reached",
            )
        message = f"{what}; gang restart {before.restarts + 1}/{job.spec.max_restarts} from the last checkpoint"
        return _restart(job, decision, builder, current, generation, message, counts=True)

    # The gang keeps running: apply what the Job takes in place.
    spec_patch = {}
    if job.spec.suspend and not job_suspended:
        spec_patch["suspend"] = True
    elif not job.spec.suspend and job_suspended and job.spec.queue_name is None:
        spec_patch["suspend"] = False  # with a queue, admission (un-suspending) is Kueue's
    if (current.get("spec") or {}).get("activeDeadlineSeconds") != job.spec.active_deadline_seconds:
        spec_patch["activeDeadlineSeconds"] = job.spec.active_deadline_seconds
    decision.patch_job = spec_patch or None
    if job.spec.suspend:
        decision.status = builder.phase("Suspended", "spec.suspend is true")
    elif job_suspended:
        decision.status = builder.phase("Pending", f"waiting for Kueue to admit it from queue {job.spec.queue_name}")
    elif any((p.get("status") or {}).get("phase") == "Running" for p in observed.pods):
        builder.fields["startTime"] = _timestamp(before.start_time) if before.start_time else _timestamp(now)
        decision.status = builder.phase("Running", f"{counts.active} of {job.spec.nodes} nodes active")
    else:
        decision.status = _waiting(builder)
    return _with_phase_event(decision, before.phase)


def _waiting(builder: _StatusBuilder) -> dict[str, Any]:
    """No pod running yet: still Restarting (keeping why) after a restart, else Pending."""
    if builder.before.phase == "Restarting":
        return builder.phase("Restarting", builder.before.message or "")
    return builder.phase("Pending")


def _with_hash(rendered_job: dict[str, Any], job: ScaleTrainJob) -> dict[str, Any]:
    rendered_job["metadata"].setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = spec_hash(job)
    return rendered_job


def _restart(job, decision, builder, current, generation, message, counts: bool) -> Decision:
    decision.delete_jobs.append(current["metadata"]["name"])
    next_job = _with_hash(render_job(job, generation + 1), job)
    decision.create.append(next_job)
    if counts:
        builder.fields["restarts"] = builder.before.restarts + 1
    builder.fields["currentJob"] = next_job["metadata"]["name"]
    builder.fields["nodes"] = NodeCounts().model_dump(mode="json", by_alias=True)
    decision.status = builder.phase("Restarting", message)
    decision.events.append(("Warning" if counts else "Normal", "Restarting", message))
    return decision


def _fail(decision: Decision, builder: _StatusBuilder, reason: str, message: str) -> Decision:
    builder.fields["completionTime"] = _timestamp(builder.now)
    decision.status = builder.phase("Failed", message, reason)
    decision.events.append(("Warning", "Failed", message))
    return decision


def _with_phase_event(decision: Decision, phase_before: str | None) -> Decision:
    phase = decision.status.get("phase")
    if phase != phase_before and phase in ("Running", "Suspended", "Succeeded"):
        decision.events.append(("Normal", phase, decision.status.get("message", "")))
    return decision
