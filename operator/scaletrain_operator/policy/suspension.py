"""Readers of who holds a gang's Job suspended, and why: the operator (its note, render/child_annotations.py), the
user's spec.suspend, or an admission controller such as Kueue, which owns the suspend flag of the Jobs it manages
and takes back a gang it admitted by suspending its Job again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..api import naming
from ..api.conditions import JobPhase
from ..api.job import ScaleTrainJob
from ..render.child_annotations import (
    child_job_suspended,
    suspended_by_operator,
    suspension_note,
)


def admission_managed(queue: str | None, child_job: Mapping[str, Any]) -> bool:
    """Whether another controller owns the suspend flag of the gang's Job, and would start a Job that the
    operator suspended again: the job names a Kueue queue, Kueue gave the Job one (its LocalQueue defaulting,
    where it manages every Job), or someone un-suspended a Job the operator had suspended. Such a gang is
    stopped by deleting its Job, which also has Kueue release its quota."""
    labels = child_job["metadata"].get("labels") or {}
    taken_back = suspension_note(child_job) is not None and not child_job_suspended(child_job)
    return queue is not None or naming.KUEUE_QUEUE_LABEL in labels or taken_back


def resumed(job: ScaleTrainJob, child_job: Mapping[str, Any], phase_before: str | None) -> bool:
    """spec.suspend turned false while the gang's Job is suspended by the operator (or, for a Job an operator
    without SUSPENDED_BY_OPERATOR_ANNOTATION suspended, while the job was Suspended)."""
    ours = suspended_by_operator(child_job) or (phase_before == JobPhase.SUSPENDED and child_job_suspended(child_job))
    return not job.spec.suspend and ours


def preempted(job: ScaleTrainJob, child_job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether an admission controller took back a gang it had admitted (Kueue, for the quota): it suspended
    the gang's Job (which ends the pods: the trainer checkpoints on their SIGTERM), and the Job has pods,
    which only an admitted Job has. That is a disruption: the next generation's Job queues again and resumes
    from the checkpoint. (Kueue would admit this Job again, but its podFailurePolicy would then fail it for
    the pods the suspension stopped: resumed() says why.) A suspended Job without pods waits for admission."""
    taken = child_job_suspended(child_job) and suspension_note(child_job) is None
    return not job.spec.suspend and taken and bool(pods)


def current_job_deleted(job: ScaleTrainJob, gang_generation: int, current: Mapping[str, Any] | None) -> bool:
    """Whether someone else deleted the current generation's Job: the status names it, and neither it nor a
    newer generation's Job exists. The status names a Job only once it was created (cluster.apply patches
    the status after its creates went through), and the operator deletes a gang's Job only after creating
    the next generation's, so a gap like this is not the operator's doing.

    Nor can a watch cache that is behind pass for a deletion (say, the status came from another replica's
    patch, and the event of the Job it created is still on its way): the decision a deletion leads to
    creates a Job, or finishes the job, and handlers.needs_fresh_look makes either again from fresh reads:
    a GET of the job, then a LIST of its Jobs, which holds every Job created before the status naming it."""
    return current is None and job.named_gang == gang_generation
