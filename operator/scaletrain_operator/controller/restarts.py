"""The steps of a reconcile that end a gang and start the next: the record of how the gang ended (kept in the status
and on the next Job, so a lost status write cannot lose it), the Ledger's counts, restartBackoff, and the next
generation's Job."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..api import naming
from ..api.conditions import JOB_FAILED, ConditionType, EventReason, GangEnding, JobPhase, PodPhase
from ..api.job import ScaleTrainJob
from ..api.job_status import GangRecord, NodeCounts, ScaleTrainJobStatus
from ..api.timestamps import timestamp
from ..policy.gang_policy import (
    Action,
    GangLimits,
    Verdict,
    crash_loop_length,
    ended_gang,
    judge,
    kept,
    pod_outcome,
    recomputed_steps,
    restart_backoff,
)
from ..policy.ledger import Ledger
from ..policy.node_exclusion import avoid_nodes
from ..policy.pods import (
    being_deleted,
    job_condition,
    pod_index,
    pod_phase,
    replaceable,
    waiting_for,
)
from ..policy.suspension import admission_managed
from ..render.child_annotations import (
    ENDED_GANG_ANNOTATION,
    GANG_GENERATION_ANNOTATION,
    REPLACED_PODS_ANNOTATION,
    START_AFTER_ANNOTATION,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
    child_job_suspended,
    gang_generation,
    gang_started,
    hash_of,
    planned_resize,
    size_of,
    start_after,
    with_replaced,
)
from ..render.in_place import replaces_disrupted_pods, runs_in_place
from .decision import (
    ChildJobPatch,
    Decision,
    Draft,
    Event,
    InPlaceWord,
    occasion,
)
from .status import StatusBuilder, bounded


def this_gang(
    job: ScaleTrainJob, gang_generation: int, pods: Sequence[Mapping[str, Any]], ended: GangEnding
) -> GangRecord:
    """The record of the current gang, were it to end now: from the progress rank 0 of this generation
    reported (the status may still hold the previous gang's) and rank 0's termination message."""
    progress = job.status.progress if job.status else None
    ours = progress is not None and progress.generation == gang_generation
    reported = progress.model_dump(mode="json", by_alias=True, exclude_none=True) if ours else None
    return ended_gang(gang_generation, reported, [pod_outcome(pod) for pod in pods], ended)


def gangs_with(job: ScaleTrainJob, ended: GangRecord) -> list[GangRecord]:
    """The ended gangs of status.gangs, and `ended` after them."""
    return [*(job.status.gangs if job.status else []), ended]


def record_gang_end(draft: Draft, job: ScaleTrainJob, ended: GangRecord) -> None:
    """`ended` into status.gangs (the last ones kept), and the steps it trained again into the goodput."""
    history = job.status.gangs if job.status else []
    gangs = kept([*history, ended])
    draft.status.fields["gangs"] = [gang.model_dump(mode="json", by_alias=True, exclude_none=True) for gang in gangs]
    draft.status.recomputed_steps += recomputed_steps(history[-1] if history else None, ended)


def fail(draft: Draft, message: str, reason: str | None) -> Decision:
    draft.events.append(Event("Warning", EventReason.FAILED, message))
    return draft.done(draft.status.phase(JobPhase.FAILED, message, reason))


def gang_ended(
    job: ScaleTrainJob,
    draft: Draft,
    current: Mapping[str, Any] | None,
    desired: dict[str, Any],
    ledger: Ledger,
    failure: EventReason,
    why: str,
    ending: GangRecord,
    running: Sequence[Mapping[str, Any]] = (),
) -> Decision:
    """The gang ended with no pod failing: someone else deleted its Job (and so its pods), it hung, Kueue
    preempted it, or another Workload took it. The gang policy takes the first two as failures, counted
    against maxRestarts, and the others as disruptions; the next generation starts (in place, for a gang whose
    pods still run: `running`)."""
    verdict = judge(
        [],
        GangLimits.of(job.spec),
        ledger.restarts,
        disruptions=ledger.disruptions,
        crash_loop=crash_loop_length(gangs_with(job, ending)),
        job_failure=failure,
    )
    draft.events.append(Event("Warning", failure, why))
    if verdict.action is Action.FAIL:
        record_gang_end(draft, job, ending)
        return fail(draft, verdict.message, verdict.reason)
    return restart_after_failure(job, draft, current, desired, ledger, verdict, ending, running)


def restart_after_failure(
    job: ScaleTrainJob,
    draft: Draft,
    current: Mapping[str, Any] | None,
    desired: dict[str, Any],
    ledger: Ledger,
    verdict: Verdict,
    ending: GangRecord,
    running: Sequence[Mapping[str, Any]] = (),
) -> Decision:
    """The restart the gang policy ordered: counted as a restart or a disruption, and with the blamed node
    avoided from the next gang on. The Restarting condition's reason is the rule's or the meaning's name. The
    gang's pods restart where they stand where they can (`running`: the pods as the kubelet reports them,
    can_restart_in_place), else its Job is recreated."""
    after = ledger.after(verdict, job)
    in_place = current is not None and can_restart_in_place(job, current, desired, running, after.excluded_nodes)
    draft.status.fields.update(after.status_fields())
    ended = ending.model_copy(update={"ended": GangEnding.DISRUPTED if verdict.disruption else GangEnding.FAILED})
    record_gang_end(draft, job, ended)
    message = verdict.message
    if after.excluded_nodes != ledger.excluded_nodes:
        message += f"; the next gangs avoid node {verdict.avoid_node}"
    status = draft.status
    note = {"gang": ended.model_dump(mode="json", by_alias=True, exclude_none=True), "reason": verdict.reason}
    ended_note = json.dumps(note | {"message": bounded(message)})
    # With a queue, Kueue decides when a recreated gang starts (it admits the Job); one restarted in place keeps
    # its admission, and so waits out its own backoff.
    queued = job.queue is not None or (current is not None and admission_managed(job.queue, current))
    started = gang_started(current) if current is not None else None
    ran = (status.now - started).total_seconds() if started is not None else math.inf  # no time: no evidence
    wait, quick = restart_backoff(job.spec.restart_backoff, status.before.quick_restarts, ran)
    wait = 0 if queued and not in_place else wait
    status.fields["quickRestarts"] = quick
    if wait:
        message += f"; the next gang starts in {wait} s (spec.restartBackoff: {quick} quick restarts in a row)"
    if in_place and current is not None:
        until = status.now + timedelta(seconds=wait)
        replaced = [pod for pod in running if replaceable(pod)]
        if replaced:
            names = ", ".join(pod["metadata"]["name"] for pod in replaced)
            message += f"; pod {names} is replaced, the others restart in place"
        return _restart_in_place(draft, current, after, ended_note, until, message, verdict.reason, replaced)
    next_gang = for_gang(job, desired, after)
    next_gang["metadata"]["annotations"][ENDED_GANG_ANNOTATION] = ended_note
    if wait:
        until = status.now + timedelta(seconds=wait)
        spec, annotations = next_gang["spec"], next_gang["metadata"]["annotations"]
        spec["suspend"] = True  # for now: un-suspended at `until` (start_after_backoff)
        annotations[SUSPENDED_BY_OPERATOR_ANNOTATION] = str(status.spec_generation)
        annotations[START_AFTER_ANNOTATION] = timestamp(until)
        status.fields["nextGangAt"] = timestamp(until)
        draft.recheck_in(wait)
    return restart(draft, current, next_gang, message, warning=True, reason=verdict.reason)


def can_restart_in_place(
    job: ScaleTrainJob,
    current: Mapping[str, Any],
    desired: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    avoided: Sequence[str],
) -> bool:
    """Whether the gang of Job `current` can restart in place: its pods were made to (the agent and the restart
    rule: runs_in_place) and spec.restartStrategy still says so; the spec is one it can run (no change since, no
    resize under way); and each rank has a pod that runs or is starting, on a node the next gangs do not avoid
    (`avoided`), or one a disruption took (evicted, its node drained or lost: replaceable; or gone already), which
    the Job controller replaces. `pods` as the kubelet reports them: a pod whose agent said its workload ended still
    runs, waiting for the word; a pod starting is a replacement, or of a gang not yet wholly up, and its agent is told
    to restart before it trains. None (a Job deleted or suspended) cannot restart. Else the gang's Job is recreated,
    and its pods with it."""
    staying = [pod for pod in pods if not replaceable(pod)]
    ranks, indices = set(range(size_of(current))), {pod_index(pod) for pod in pods}
    # A rank with no pod: one a disruption took that ended and is gone, whose replacement is not made yet.
    replacing = len(staying) < len(pods) or indices != ranks
    return (
        job.spec.restart_strategy == "InPlace"
        and runs_in_place(current)
        and hash_of(current) == hash_of(desired)
        and planned_resize(current)[0] is None
        and not child_job_suspended(current)
        and bool(staying)
        and indices <= ranks
        and len({pod_index(pod) for pod in staying}) == len(staying)
        and (not replacing or (replaces_disrupted_pods(current) and job_condition(current, JOB_FAILED) is None))
        and all(pod_phase(pod) in (PodPhase.RUNNING, PodPhase.PENDING) and not being_deleted(pod) for pod in staying)
        and not {(pod.get("spec") or {}).get("nodeName") for pod in staying} & set(avoided)
    )


def _restart_in_place(
    draft: Draft,
    current: Mapping[str, Any],
    after: Ledger,
    ended_note: str,
    until: datetime,
    message: str,
    reason: str | None,
    replaced: Sequence[Mapping[str, Any]],
) -> Decision:
    """The next generation runs in the gang's Job and pods, where they stand, but for the `replaced` pods, which the
    Job controller replaces. The Job says so (its generation, the ledger, how the gang before ended, when the next
    one starts, and the pods replaced: one write, as a recreated gang's Job is made with them); the in-place channel
    tells every pod to restart, and releases the next generation to all of them together, replacements included,
    at `until`."""
    status, generation = draft.status, (gang_generation(current) or 0) + 1
    notes = {
        **after.annotations(),
        GANG_GENERATION_ANNOTATION: str(generation),
        ENDED_GANG_ANNOTATION: ended_note,
        START_AFTER_ANNOTATION: timestamp(until),
    }
    if replaced:
        notes[REPLACED_PODS_ANNOTATION] = with_replaced(current, [pod["metadata"]["uid"] for pod in replaced])
    status.fields["gangGeneration"] = generation
    if until > status.now:
        status.fields["nextGangAt"] = timestamp(until)
        draft.recheck_in((until - status.now).total_seconds())
    draft.in_place = InPlaceWord(generation, size_of(current), until)
    draft.events.append(Event("Warning", EventReason.RESTARTING, message))
    patch = ChildJobPatch(current["metadata"]["name"], {}, notes)
    return draft.done(status.phase(JobPhase.RESTARTING, message, reason), patch)


def wait_for_release(draft: Draft, current: Mapping[str, Any]) -> Decision | None:
    """A gang restarted in place waits at its barrier until its backoff passes (the Job's START_AFTER_ANNOTATION):
    Restarting until then, saying until when. None once it passed."""
    status, until = draft.status, start_after(current)
    if until is not None and status.now < until:
        draft.recheck_in((until - status.now).total_seconds())
        return draft.done(waiting_status(status, ""))
    if status.before.next_gang_at is not None:
        status.fields["nextGangAt"] = None
    return None


def recover_gang_end(
    job: ScaleTrainJob, draft: Draft, current: Mapping[str, Any]
) -> tuple[ScaleTrainJob, tuple[str, str | None] | None]:
    """The record of how the gang before `current` ended, and its Restarting Event, made again from what
    `current` carries (ENDED_GANG_ANNOTATION) where the status lacks that gang: the status write of the restart
    was lost, or the operator was killed before it. The Event is the one the restart posted, if it did (the same
    occasion: posted once). Returns `job` with the record among its gangs, and the restart's message and reason
    for the Restarting condition; `job` as it is and None where nothing was lost."""
    try:
        note = json.loads((current["metadata"].get("annotations") or {}).get(ENDED_GANG_ANNOTATION) or "null")
        ended = GangRecord.model_validate(note["gang"]) if isinstance(note, dict) else None
    except (ValueError, KeyError, TypeError):  # anyone who may edit Jobs may write it
        return job, None
    history = job.status.gangs if job.status is not None else []
    if ended is None or any(gang.generation == ended.generation for gang in history):
        return job, None
    message, reason = bounded(str(note.get("message", ""))), note.get("reason")
    record_gang_end(draft, job, ended)
    gone = naming.child_job_name(job.name, ended.generation)
    draft.events.append(Event("Warning", EventReason.RESTARTING, message, occasion(gone, draft.status.spec_generation)))
    status = (job.status or ScaleTrainJobStatus()).model_copy(update={"gangs": kept([*history, ended])})
    return job.model_copy(update={"status": status}), (message, reason if isinstance(reason, str) else None)


def start_after_backoff(draft: Draft, current: Mapping[str, Any], until: datetime, nodes: int) -> Decision:
    """The next gang waits out spec.restartBackoff (Restarting, saying until when), then its Job runs."""
    status = draft.status
    if status.now < until:
        draft.recheck_in((until - status.now).total_seconds())
        return draft.done(waiting_status(status, ""))
    notes: dict[str, str | None] = {SUSPENDED_BY_OPERATOR_ANNOTATION: None, START_AFTER_ANNOTATION: None}
    status.fields["nextGangAt"] = None
    started = ChildJobPatch(current["metadata"]["name"], {"suspend": False}, notes)
    return draft.done(waiting_status(status, waiting_for([], nodes)), started)


def restart(
    draft: Draft,
    current: Mapping[str, Any] | None,
    desired: dict[str, Any],
    message: str,
    *,
    warning: bool = False,
    reason: str | None = None,
) -> Decision:
    """The whole gang goes (its Job, with its pods, unless it is gone already) and the next generation
    starts from the last checkpoint."""
    status = draft.status
    if current is not None:
        draft.delete_child_jobs.append(current["metadata"]["name"])
    draft.create.append(desired)
    status.fields["currentJob"] = desired["metadata"]["name"]
    status.fields["gangGeneration"] = gang_generation(desired)
    status.fields["nodes"] = NodeCounts(current=size_of(desired)).model_dump(mode="json", by_alias=True)
    draft.events.append(Event("Warning" if warning else "Normal", EventReason.RESTARTING, message))
    return draft.done(status.phase(JobPhase.RESTARTING, message, reason))


def waiting_status(status: StatusBuilder, waiting: str) -> dict[str, Any]:
    """The gang is not wholly up yet: still Restarting (keeping why) after a restart, else Pending, saying
    which pods it waits for and why (`waiting`)."""
    if status.before.phase == JobPhase.RESTARTING:
        why = status.conditions.get(ConditionType.RESTARTING) or {}
        return status.phase(JobPhase.RESTARTING, status.before.message or "", why.get("reason"))
    return status.phase(JobPhase.PENDING, waiting)


def for_gang(job: ScaleTrainJob, child_job: dict[str, Any], ledger: Ledger) -> dict[str, Any]:
    """A rendered Job (spec hash taken) as the next gang's: the ledger on it, kept off the excluded nodes."""
    child_job = avoid_nodes(child_job, ledger.excluded_nodes, job.spec.failure_policy.exclude_nodes)
    annotations = child_job["metadata"].setdefault("annotations", {})
    annotations.update(ledger.annotations())
    if job.spec.suspend and job.queue is None:  # made suspended by the operator's choice, not for a queue
        annotations[SUSPENDED_BY_OPERATOR_ANNOTATION] = str(job.metadata.generation)
    return child_job
