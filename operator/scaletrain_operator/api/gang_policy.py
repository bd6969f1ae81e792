"""The gang policy: what the outcomes of one gang's pods mean for the whole ScaleTrainJob.

One dead rank breaks every collective, so the pods of a gang run, succeed and fail together. This is
the one place that says what a set of pod outcomes means: keep running, succeeded, restart the gang
from the last checkpoint, or fail the job with a reason, and which pod is the root cause. The
operator (controller/reconcile.py) and `scaletrain run-local` (local/gang.py) both ask `judge`, and
read pods through `pod_outcome`, so they cannot disagree.

The root cause is the pod that finished first, then the lowest completion index: a dead rank makes
its peers fail right after it, so the first to fail is the likely culprit. A stuck rank is the
exception: its peers' hang watchdogs stop them while they wait on it (their termination messages say
so: exit_codes.waited_on_peers), and it may never finish at all. Such victims are never the root
cause while another failed pod is not one, or while a pod still runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum
from typing import Any, Literal

from scaletrain_trainer.exit_codes import EXIT_CODES, FINAL, Result, final_failure, waited_on_peers

from . import naming
from .models import ScaleTrainJobSpec
from .timestamps import parse_timestamp

DEADLINE_EXCEEDED = "DeadlineExceeded"  # the Job controller's reason when activeDeadlineSeconds passed
PodPhase = Literal["Pending", "Running", "Succeeded", "Failed"]
FailureReason = Literal["DeadlineExceeded", "RestartLimitReached"] | Result  # Result: a final trainer failure


class Action(Enum):
    KEEP_RUNNING = "KeepRunning"
    SUCCEED = "Succeed"
    RESTART = "Restart"  # the whole gang, as the next generation, from the last checkpoint
    FAIL = "Fail"


@dataclass(frozen=True)
class GangLimits:
    """What the policy needs from the spec."""

    nodes: int
    max_restarts: int
    active_deadline_seconds: int | None = None

    @classmethod
    def of(cls, spec: ScaleTrainJobSpec) -> GangLimits:
        return cls(spec.nodes, spec.max_restarts, spec.active_deadline_seconds)


@dataclass(frozen=True)
class PodOutcome:
    """One pod of the gang, as the kubelet (or run-local) reports it."""

    name: str
    index: int  # the completion index: the node rank
    phase: PodPhase
    exit_code: int | None = None
    reason: str = ""  # of the terminated container (Error, OOMKilled, ...) or of the pod
    message: str = ""  # the container's termination message
    finished_at: datetime | None = None
    stopping: bool = False  # being deleted: stopped (a suspension, a preemption), not crashed

    @property
    def failed(self) -> bool:
        return self.phase == "Failed" and not self.stopping

    @property
    def waited_on_peers(self) -> bool:
        return waited_on_peers(self.message)

    def describe(self) -> str:
        if self.phase == "Running":
            return f"pod {self.name} stopped advancing (its peers timed out waiting on it)"
        detail = self.reason or "Failed"
        if self.exit_code is not None:
            detail += f", exit code {self.exit_code}"
        return f"pod {self.name} failed ({detail})"


def pod_outcome(pod: Mapping[str, Any]) -> PodOutcome:
    """A pod object (metadata and status, as the API server or run-local's executor reports it) as the
    gang policy sees it: its phase, and its trainer container's exit."""
    metadata, status = pod["metadata"], pod.get("status") or {}
    index = (metadata.get("annotations") or {}).get(naming.COMPLETION_INDEX_ANNOTATION, "")
    terminated = next(
        (
            (container.get("state") or {}).get("terminated")
            for container in status.get("containerStatuses") or []
            if container.get("name") == naming.TRAINER_CONTAINER
        ),
        None,
    )
    outcome = PodOutcome(
        name=metadata["name"],
        index=int(index) if index.isdigit() else naming.MAX_NODES,
        phase=status.get("phase", "Pending"),
        reason=status.get("reason", ""),
        message=status.get("message", ""),
        stopping=metadata.get("deletionTimestamp") is not None,
    )
    if not terminated:
        return outcome
    finished = terminated.get("finishedAt")
    return replace(
        outcome,
        exit_code=terminated.get("exitCode"),
        reason=terminated.get("reason", "Error"),
        message=terminated.get("message", ""),
        finished_at=parse_timestamp(finished) if finished else None,
    )


@dataclass(frozen=True)
class Verdict:
    action: Action
    message: str = ""
    reason: FailureReason | None = None  # why the job fails (with Action.FAIL)
    root_cause: PodOutcome | None = None  # the pod that caused a restart or failure, when one did

    @property
    def exit_code(self) -> int:
        """The job's exit code, as run-local returns it: 0, the code of a final trainer failure (78 for a
        config error, also one a worker reported under torchrun's exit code 1), the root-cause pod's
        code, or 1."""
        if self.action is Action.SUCCEED:
            return 0
        if self.reason in EXIT_CODES:
            return EXIT_CODES[self.reason]
        if self.root_cause is not None and self.root_cause.exit_code:
            return self.root_cause.exit_code
        return 1


def root_cause(pods: Sequence[PodOutcome]) -> PodOutcome | None:
    """The failed pod that finished first (then the lowest index); pods being stopped do not count. When
    every failed pod waited on its peers, a pod still running is the one they waited on."""
    failed = [pod for pod in pods if pod.failed]
    if not failed:
        return None
    culprits = (
        [pod for pod in failed if not pod.waited_on_peers]
        or [pod for pod in pods if pod.phase == "Running" and not pod.stopping]
        or failed
    )
    return min(culprits, key=lambda pod: (pod.finished_at is None, pod.finished_at or datetime.min, pod.index))


def judge(
    pods: Sequence[PodOutcome],
    limits: GangLimits,
    restarts: int,
    *,
    job_complete: bool = False,
    job_failure: str | None = None,
    suspended: bool = False,
) -> Verdict:
    """What the gang's pods mean for the job, after `restarts` counted gang restarts.

    `job_complete` and `job_failure` are the Job controller's word on the gang's Job (run-local's
    deadline timer speaks for it there). While `suspended`, failed pods were stopped by the suspension,
    not crashed.
    """
    succeeded = {pod.index for pod in pods if pod.phase == "Succeeded"}
    if job_complete or len(succeeded) >= limits.nodes:
        return Verdict(Action.SUCCEED, f"all {limits.nodes} nodes finished")
    if job_failure == DEADLINE_EXCEEDED:
        return Verdict(
            Action.FAIL, f"activeDeadlineSeconds ({limits.active_deadline_seconds}) passed", DEADLINE_EXCEEDED
        )
    cause = None if suspended else root_cause(pods)
    if cause is None and job_failure is None:
        return Verdict(Action.KEEP_RUNNING)
    what = cause.describe() if cause is not None else f"the gang's Job failed ({job_failure})"
    final = final_failure(cause.exit_code, cause.message) if cause is not None else None
    if final is not None:
        message = f"{what}: {FINAL[final]}, not retried. {cause.message}".strip()
        return Verdict(Action.FAIL, message, final, cause)
    if restarts >= limits.max_restarts:
        message = f"{what}; maxRestarts ({limits.max_restarts}) reached"
        return Verdict(Action.FAIL, message, "RestartLimitReached", cause)
    message = f"{what}; gang restart {restarts + 1}/{limits.max_restarts} from the last checkpoint"
    return Verdict(Action.RESTART, message, root_cause=cause)
