"""Pure reconciliation: from a ScaleTrainJob and the children that exist, decide what to do next.

`decide(job, observed, now)` looks only at its inputs (the job and the children found by label), so
calling it again after a repeated event, an operator restart or a lost status patch reaches the same
decision. It reads as a list of steps:

1. a finished job is left alone (only its TTL, ttl.py, touches it now), but for a gang still running or
   waiting for a node: its Job is suspended (where another controller owns that flag, such as Kueue:
   deleted), which ends those pods;
2. find the current gang generation and its size (with spec.elastic: the running gang's, or the size a
   resize under way goes to: `at_gang_size`), and render the one Job this call may create;
3. create what is missing: the job's Workload (gang placement, render/workload.py, before a gang's Job
   wherever it may be missing: `decide`), the Services, and the current generation's Job (kept off the
   nodes in status.excludedNodes); a current Job that someone else deleted ends its gang like a failure
   (counted against maxRestarts);
4. the gang policy (policy/gang_policy.py, with spec.failurePolicy) judges the pods first, whatever else
   changed in the same pass: succeeded, failed, or restart, counted as a restart or as a disruption, maybe
   blaming a node the next gangs avoid;
5. a spec change the running gang cannot take (another size, from kubectl scale, too) restarts it, after
   it stopped at a step boundary with a checkpoint, and so does resuming a suspended job (neither counted
   against maxRestarts); a gang whose Job its admission controller (Kueue) suspended after admitting it
   was preempted, which ends it as a disruption; a Job suspended by anyone but the operator that never ran
   waits for admission; a Running gang whose rank 0 answered, when read, that it made no progress by the
   time it promised (progress.staleAfter, of this very gang) is hung, which ends it like a failure;
6. otherwise patch what the Job takes in place (suspend, deadline), say whether the scheduler can place
   the pods (Schedulable), shrink an elastic gang it could not place within elastic.scaleDownAfterSeconds,
   fail a gang it could not place within scheduleTimeoutSeconds, probe for room to grow an elastic gang
   below spec.nodes (render/capacity_probe.py), and report the running status.

An invalid spec gets its own decision (`decide_invalid`), and so does a child the API server refuses
(`decide_failed`): Failed once, never retried.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from scaletrain_trainer.contract.exit_codes import HANG_RESULT
from scaletrain_trainer.contract.validation import Problem

from ..api import naming
from ..api.models import MAX_RESIZES, GangRecord, NodeCounts, Resize, ResizeReason, ScaleTrainJob, ScaleTrainJobStatus
from ..api.timestamps import parse_timestamp, timestamp
from ..policy import elastic
from ..policy import placement as gang_placement
from ..policy.gang_policy import (
    Action,
    GangLimits,
    Verdict,
    ended_gang,
    judge,
    kept,
    pod_outcome,
    recomputed_steps,
    restart_backoff,
    stalled,
)
from ..policy.hang import broken_promise, stalled_message
from ..policy.ledger import Ledger, ledger_of
from ..policy.node_exclusion import avoid_nodes
from ..policy.pods import (
    UNSCHEDULABLE,
    Unplaced,
    all_placed,
    being_deleted,
    holds_a_node,
    job_condition,
    node_counts,
    placed,
    pod_scheduled,
    refused_pods,
    still_saving,
    unplaced,
    waiting_for,
    whole_gang_up,
)
from ..render import capacity_probe
from ..render.child_annotations import (
    ENDED_GANG_ANNOTATION,
    RESIZE_REASON_ANNOTATION,
    RESIZE_TO_ANNOTATION,
    RESIZE_WHY,
    START_AFTER_ANNOTATION,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
    child_job_suspended,
    gang_started,
    hash_of,
    held_until,
    planned_resize,
    size_of,
    suspended_by_operator,
    suspension_note,
    with_spec_hash,
)
from ..render.children import render_job, render_master_alias, render_network_policy, render_service, render_workload
from ..render.workload import uses_workload
from ..validation import elastic_sizes
from ..validation.progress_answer import final_progress, status_patch
from .decision import ChildJobPatch, ControllerFailureReason, Decision, Draft, Event, Observed, current_gang, occasion
from .settings import DEFAULTS, OperatorConfig
from .status import StatusBuilder, bounded, condition

SPEC_CHANGE = "the spec changed in a way the running gang cannot take"
STOPPING = "StoppingAtStep"  # the Restarting reason while a gang saves its checkpoint for a spec change
RESUME_MESSAGE = "spec.suspend is false: a new gang goes on from the checkpoint the suspension saved"
SUSPENDED_MESSAGE = "spec.suspend is true"
JOB_DELETED = "JobDeleted"  # what the gang policy hears of a current Job that someone else deleted
HANG = HANG_RESULT  # and of a Running gang whose progress stalled
SCHEDULABLE = "Schedulable"


def this_gang(job: ScaleTrainJob, generation: int, pods: Sequence[Mapping[str, Any]], ended: str) -> GangRecord:
    """The record of the current gang, were it to end now: from the progress rank 0 of this generation
    reported (the status may still hold the previous gang's) and rank 0's termination message."""
    progress = job.status.progress if job.status else None
    ours = progress is not None and progress.generation == generation
    reported = progress.model_dump(mode="json", by_alias=True, exclude_none=True) if ours else None
    return ended_gang(generation, reported, [pod_outcome(pod) for pod in pods], ended)


def gangs_with(job: ScaleTrainJob, ended: GangRecord) -> list[GangRecord]:
    """The ended gangs of status.gangs, and `ended` after them."""
    return [*(job.status.gangs if job.status else []), ended]


def record_gang_end(draft: Draft, job: ScaleTrainJob, ended: GangRecord) -> None:
    """`ended` into status.gangs (the last ones kept), and the steps it trained again into the goodput."""
    history = job.status.gangs if job.status else []
    gangs = kept([*history, ended])
    draft.status.fields["gangs"] = [gang.model_dump(mode="json", by_alias=True, exclude_none=True) for gang in gangs]
    draft.status.recomputed_steps += recomputed_steps(history[-1] if history else None, ended)


def for_gang(job: ScaleTrainJob, child_job: dict[str, Any], ledger: Ledger) -> dict[str, Any]:
    """A rendered Job (spec hash taken) as the next gang's: the ledger on it, kept off the excluded nodes."""
    child_job = avoid_nodes(child_job, ledger.excluded_nodes, job.spec.failure_policy.exclude_nodes)
    annotations = child_job["metadata"].setdefault("annotations", {})
    annotations.update(ledger.annotations())
    if job.spec.suspend and job.queue is None:  # made suspended by the operator's choice, not for a queue
        annotations[SUSPENDED_BY_OPERATOR_ANNOTATION] = str(job.metadata.generation)
    return child_job


def at_gang_size(job: ScaleTrainJob, observed: Observed) -> ScaleTrainJob:
    """`job` as its current gang renders and is judged: spec.nodes is the gang's size (elastic.gang_size)."""
    if job.spec.elastic is None:
        return job
    current = observed.jobs.get(current_gang(job.name, job.current_job, observed))
    # A gang whose Job is gone (deleted by someone else) had the size the status says.
    recorded = job.status.nodes.current if job.status is not None and job.status.nodes.current else None
    running = size_of(current) if current is not None else recorded
    return job.at_size(elastic.gang_size(job.spec, running, planned_resize(current)[0]))


def admission_managed(queue: str | None, child_job: Mapping[str, Any]) -> bool:
    """Whether another controller owns the suspend flag of the gang's Job, and would start a Job that the
    operator suspended again: the job names a Kueue queue, Kueue gave the Job one (its LocalQueue defaulting,
    where it manages every Job), or someone un-suspended a Job the operator had suspended. Such a gang is
    stopped by deleting its Job, which also has Kueue release its quota."""
    labels = child_job["metadata"].get("labels") or {}
    taken_back = suspension_note(child_job) is not None and not child_job_suspended(child_job)
    return queue is not None or naming.KUEUE_QUEUE_LABEL in labels or taken_back


def suspension(
    spec_generation: int | None, child_job: Mapping[str, Any], annotations: Mapping[str, str] | None = None
) -> ChildJobPatch:
    """The operator suspends the gang's Job, and says so on it (SUSPENDED_BY_OPERATOR_ANNOTATION)."""
    noted = {SUSPENDED_BY_OPERATOR_ANNOTATION: str(spec_generation), **(annotations or {})}
    return ChildJobPatch(child_job["metadata"]["name"], {"suspend": True}, noted)


def resumed(job: ScaleTrainJob, child_job: Mapping[str, Any], phase_before: str | None) -> bool:
    """spec.suspend turned false while the gang's Job is suspended by the operator (or, for a Job an operator
    without SUSPENDED_BY_OPERATOR_ANNOTATION suspended, while the job was Suspended)."""
    ours = suspended_by_operator(child_job) or (phase_before == "Suspended" and child_job_suspended(child_job))
    return not job.spec.suspend and ours


def preempted(job: ScaleTrainJob, child_job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether an admission controller took back a gang it had admitted (Kueue, for the quota): it suspended
    the gang's Job (which ends the pods: the trainer checkpoints on their SIGTERM), and the Job has pods,
    which only an admitted Job has. That is a disruption: the next generation's Job queues again and resumes
    from the checkpoint. (Kueue would admit this Job again, but its podFailurePolicy would then fail it for
    the pods the suspension stopped: resumed() says why.) A suspended Job without pods waits for admission."""
    taken = child_job_suspended(child_job) and suspension_note(child_job) is None
    return not job.spec.suspend and taken and bool(pods)


def current_job_deleted(job: ScaleTrainJob, generation: int, current: Mapping[str, Any] | None) -> bool:
    """Whether someone else deleted the current generation's Job: the status names it, and neither it nor a
    newer generation's Job exists. The status names a Job only once it was created (cluster.apply patches
    the status after its creates went through), and the operator deletes a gang's Job only after creating
    the next generation's, so a gap like this is not the operator's doing.

    Nor can a watch cache that is behind pass for a deletion (say, the status came from another replica's
    patch, and the event of the Job it created is still on its way): the decision a deletion leads to
    creates a Job, or finishes the job, and handlers.needs_fresh_look makes either again from fresh reads:
    a GET of the job, then a LIST of its Jobs, which holds every Job created before the status naming it."""
    return current is None and naming.generation_of(job.name, job.current_job) == generation


def judge_gang(
    job: ScaleTrainJob,
    child_job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    ledger: Ledger,
    stalled_gangs: int,
) -> Verdict:
    """The gang policy on the current generation: its pods, and the Job controller's conditions on its Job.
    Suspending a Job (spec.suspend, a handover to the next gang, or Kueue preempting it) terminates its pods,
    which may end Failed (exit 143) on the way out: that is not a crash, unless the trainer named what failed
    (a checkpoint it could not save)."""
    failed = job_condition(child_job, "Failed")
    return judge(
        [pod_outcome(pod) for pod in pods],
        GangLimits.of(job.spec),
        ledger.restarts,
        disruptions=ledger.disruptions,
        stalled_gangs=stalled_gangs,
        job_complete=job_condition(child_job, "Complete") is not None,
        job_failure=failed.get("reason", "Failed") if failed else None,
        suspended=child_job_suspended(child_job) or job.spec.suspend,
    )


def decide(job: ScaleTrainJob, observed: Observed, now: datetime, settings: OperatorConfig = DEFAULTS) -> Decision:
    """What to do next for `job`, given its children; see the module docstring. Whatever starts a gang first
    makes sure of what the gang needs beside its Services (creating either again is a no-op): the job's
    NetworkPolicy, with `settings.network_policy_from` (the operator's namespace); and its Workload, with
    gang placement. The Workload is not read back, and it may be missing before any gang: its create failed
    while the Services' went through, the cluster began to serve the API, or someone deleted it. A Workload
    made again for a gang after the first says so in a Warning Event, once it was in fact made (`if_made`):
    without it the gang's pods would be placed one by one."""
    sized = at_gang_size(job, observed)
    decision = _decide(sized, job, observed, now, settings)
    first: list[dict[str, Any]] = []
    if_made: dict[tuple[str, str], Event] = {}
    if settings.network_policy_from and decision.create:
        first.append(render_network_policy(job, settings.network_policy_from))
    gang = next((child for child in decision.create if _gang_job(child)), None)
    made = any(child["kind"] == "Workload" for child in decision.create)  # a spec change makes it again
    if gang is not None and not made and uses_workload(job.spec, settings.workload_api):
        workload = render_workload(sized)
        first.append(workload)
        if gang["metadata"]["name"] != naming.child_job_name(job.name, 0):
            name, gang_name = workload["metadata"]["name"], gang["metadata"]["name"]
            message = (
                f"Workload {name} was missing (deleted by someone else): made again before gang {gang_name}, which "
                "it places as one gang"
            )
            when = occasion(gang_name, job.metadata.generation)
            if_made["Workload", name] = Event("Warning", "WorkloadRecreated", message, when)
    if not first:
        return decision
    return replace(decision, create=(*first, *decision.create), if_made={**decision.if_made, **if_made})


def _gang_job(child: Mapping[str, Any]) -> bool:
    return child["kind"] == "Job" and not capacity_probe.is_probe(child)


def _decide(
    job: ScaleTrainJob, asked: ScaleTrainJob, observed: Observed, now: datetime, settings: OperatorConfig
) -> Decision:
    """`job` is `asked` at its current gang's size (at_gang_size): the same unless spec.elastic is set."""
    status = StatusBuilder(job, now)
    if status.finished:
        return stop_what_runs(observed, job.queue, job.metadata.generation)
    if (unavailable := gang_placement.unavailable(job, settings.workload_api)) is not None:
        stored = job.status.model_dump(mode="json", by_alias=True, exclude_none=True) if job.status else {}
        return decide_failed("GangSchedulingUnavailable", unavailable, stored, job.metadata.generation, now)
    generation = current_gang(job.name, job.current_job, observed)
    generation = 0 if generation is None else generation  # none yet: the first gang's
    current = observed.jobs.get(generation)
    gone = current_job_deleted(job, generation, current)
    # Where another controller owns the Job's suspend flag, the operator suspends a gang by deleting its Job.
    suspended_away = gone and (job.spec.suspend or status.before.phase == "Suspended")
    deleted = gone and not suspended_away
    gang = uses_workload(job.spec, settings.workload_api)
    # The one render of this call: the Job it would create. That is the current generation's when it was
    # never made, else the next one's, for a restart; either way its hash tells whether the spec changed.
    next_generation = generation if current is None and not gone else generation + 1
    desired = with_spec_hash(render_job(job, next_generation, gang=gang))
    probe = observed.probe["metadata"]["name"] if observed.probe is not None else None
    draft = Draft(status, gang=naming.child_job_name(job.name, generation), probe=probe)
    missing_services = [service for service in (render_service(job), render_master_alias(job))
                        if service["metadata"]["name"] not in observed.services]  # fmt: skip
    draft.create += missing_services
    draft.delete_child_jobs += [naming.child_job_name(job.name, g) for g in sorted(observed.jobs) if g < generation]

    ledger = ledger_of(job, current)
    status.fields.update(ledger.status_fields())
    status.fields["selector"] = f"{naming.LABEL_JOB_NAME}={job.name}"  # the scale subresource's
    status.fields["elasticSizes"] = elastic_sizes.sizes(asked.spec) if asked.spec.elastic is not None else []
    if deleted:
        gone = naming.child_job_name(job.name, generation)
        message = f"Job {gone} was deleted, not by the operator: that ends its gang like a failure"
        deleted_gang = this_gang(job, generation, observed.pods, "Failed")
        return _gang_ended(job, draft, None, desired, ledger, JOB_DELETED, message, deleted_gang)
    if suspended_away or (current is None and job.spec.suspend and job.queue is not None):
        return _suspended_without_job(job, draft, for_gang(job, desired, ledger), observed.pods)
    if current is None:  # first start, or a restart whose create did not happen yet
        return _start_gang(job, draft, for_gang(job, desired, ledger))
    status.fields["currentJob"] = current["metadata"]["name"]
    job, lost = _recover_gang_end(job, draft, current)
    # Judge first, then change: a pod that failed in the same pass as a spec change, or while its gang stops
    # for one (a save that failed on the way out), is the gang's end, and its record says so.
    status.fields["nodes"] = node_counts(observed.pods, size_of(current)).model_dump(mode="json", by_alias=True)
    failing = this_gang(job, generation, observed.pods, "Failed")
    verdict = judge_gang(job, current, observed.pods, ledger, stalled(gangs_with(job, failing)))
    if verdict.action is Action.SUCCEED:
        record_gang_end(draft, job, failing.model_copy(update={"ended": "Succeeded"}))
        return _succeed(draft, generation, observed.pods, verdict.message)
    if verdict.action is Action.FAIL:
        record_gang_end(draft, job, failing)
        return _fail(draft, verdict.message, verdict.reason)
    if verdict.action is Action.RESTART:
        return _restart_after_failure(job, draft, current, desired, ledger, verdict, failing)
    if lost is not None:
        return draft.done(status.phase("Restarting", *lost))
    # A resize under way (an elastic gang's Job, suspended to stop at a step boundary) goes through the same
    # handover even should the spec have changed back to the running size meanwhile.
    if hash_of(current) != hash_of(desired) or planned_resize(current)[0] is not None:
        return _spec_changed(job, draft, current, for_gang(job, desired, ledger), observed.pods, generation, gang)
    if (until := held_until(current)) is not None and not job.spec.suspend:
        return _start_after_backoff(draft, current, until, job.spec.nodes)
    if resumed(job, current, status.before.phase):
        # The suspension's SIGTERM ended the pods Failed with exit 80, which the Job's podFailurePolicy may
        # count once the Job runs again (it cannot fail a suspended Job): un-suspended, the Job would fail
        # after a moment, as a disruption. The next gang starts instead, counted as neither.
        record_gang_end(draft, job, this_gang(job, generation, observed.pods, "SpecChanged"))
        return _restart(draft, current, for_gang(job, desired, ledger), RESUME_MESSAGE)
    if preempted(job, current, observed.pods):
        message = f"Kueue suspended Job {current['metadata']['name']}: its gang ends, and the next one queues again"
        return _gang_ended(job, draft, current, desired, ledger, naming.QUEUE_PREEMPTED, message, failing)
    if gang and (foreign := gang_placement.foreign_pod_group(current, job.name, observed.pods)) is not None:
        message = (
            f"pods of Job {current['metadata']['name']} are in PodGroup {foreign}, not one of the job's Workload "
            f"{job.name}: another Workload in the namespace names this job in its spec.controllerRef, and the Job "
            "controller took it (its gang may be of another size). The gang restarts to be placed by the job's own; "
            "delete the other Workload"
        )
        return _gang_ended(job, draft, current, desired, ledger, naming.FOREIGN_WORKLOAD, message, failing)
    if (due := broken_promise(job, generation, settings.progress_timeout_seconds)) is not None:
        return _gang_ended(job, draft, current, desired, ledger, HANG, stalled_message(job, due), failing)
    return _keep_running(job, asked, draft, current, observed, settings.probe_priority_class)


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
        generation: child
        for generation, child in observed.jobs.items()
        if job_condition(child, "Complete") is None
        and job_condition(child, "Failed") is None
        and (generation != newest or holding)
    }
    older = tuple(child["metadata"]["name"] for generation, child in sorted(running.items()) if generation != newest)
    current = running.get(newest) if newest is not None else None
    older += (observed.probe["metadata"]["name"],) if observed.probe is not None else ()
    if current is not None and admission_managed(queue, current):
        return Decision(delete_child_jobs=(*older, current["metadata"]["name"]))
    if current is None or child_job_suspended(current):
        return Decision(delete_child_jobs=older)
    return Decision(delete_child_jobs=older, patch_child_job=suspension(spec_generation, current))


def _succeed(draft: Draft, generation: int, pods: Sequence[Mapping[str, Any]], message: str) -> Decision:
    """Succeeded, with rank 0's final step and loss from its termination message: the last progress read
    may be a logging interval or a poll behind (what it has beside them, such as throughput, stays when it
    was this gang's), and its ETA and promise are moot now."""
    status = draft.status
    rank_0 = next((outcome for outcome in map(pod_outcome, pods) if outcome.index == 0), None)
    final = final_progress(rank_0.message) if rank_0 is not None else {}
    before = status.before.progress
    if final or before is not None:
        read = before.model_dump(mode="json", by_alias=True, exclude_none=True) if before is not None else {}
        last = read if read.get("generation") == generation else {}
        if "step" in final:  # the final loss, or its absence, is the final answer's
            last = {key: value for key, value in last.items() if key not in ("loss", "lossFinite")}
        moot = {"etaSeconds": None, "staleAfter": None, "readAt": None}
        status.fields["progress"] = status_patch(last | final, generation) | moot
    return draft.done(status.phase("Succeeded", message))


def _fail(draft: Draft, message: str, reason: str | None) -> Decision:
    draft.events.append(Event("Warning", "Failed", message))
    return draft.done(draft.status.phase("Failed", message, reason))


def _gang_ended(
    job: ScaleTrainJob,
    draft: Draft,
    current: Mapping[str, Any] | None,
    desired: dict[str, Any],
    ledger: Ledger,
    failure: str,
    why: str,
    ending: GangRecord,
) -> Decision:
    """The gang ended with no pod failing: someone else deleted its Job (and so its pods), it hung, Kueue
    preempted it, or another Workload took it. The gang policy takes the first two as failures, counted
    against maxRestarts, and the others as disruptions; the next generation starts."""
    verdict = judge(
        [],
        GangLimits.of(job.spec),
        ledger.restarts,
        disruptions=ledger.disruptions,
        stalled_gangs=stalled(gangs_with(job, ending)),
        job_failure=failure,
    )
    draft.events.append(Event("Warning", failure, why))
    if verdict.action is Action.FAIL:
        record_gang_end(draft, job, ending)
        return _fail(draft, verdict.message, verdict.reason)
    return _restart_after_failure(job, draft, current, desired, ledger, verdict, ending)


def _start_gang(job: ScaleTrainJob, draft: Draft, desired: dict[str, Any]) -> Decision:
    status, name = draft.status, desired["metadata"]["name"]
    draft.create.append(desired)
    status.fields["currentJob"] = name
    status.fields["nodes"] = NodeCounts(current=size_of(desired)).model_dump(mode="json", by_alias=True)
    if status.before.phase is None:
        service = naming.service_name(job.name)
        status.set("Created", True, "Created", f"created Service {service} and Job {name}")
        draft.events.append(Event("Normal", "Created", f"created Job {name}"))
    if job.spec.suspend:
        return draft.done(status.phase("Suspended", SUSPENDED_MESSAGE))
    if job.queue is not None:  # its Job is created suspended
        return draft.done(_waiting(status, waiting_for_admission(job, desired)))
    return draft.done(_waiting(status, waiting_for([], job.spec.nodes)))


def waiting_for_admission(job: ScaleTrainJob, child_job: Mapping[str, Any] | None) -> str:
    """Which queue the gang waits in (the job's, or the one Kueue gave its Job), or who holds its Job suspended,
    and why Kueue holds it back where housekeeping found out (Queued)."""
    labels = (child_job or {}).get("metadata", {}).get("labels") or {}
    queue = job.queue or labels.get(naming.KUEUE_QUEUE_LABEL)
    if queue:
        waiting = f"waiting for Kueue to admit it from queue {queue}"
    else:
        name = (child_job or {}).get("metadata", {}).get("name")
        waiting = (
            f"waiting for admission: Job {name} was suspended by another controller (an admission controller, "
            "such as Kueue managing every Job), which starts it by un-suspending it"
        )
    conditions = job.status.conditions if job.status else []
    queued = next((c for c in conditions if c.type == "Queued" and c.status == "True"), None)
    return f"{waiting}: {queued.message}" if queued is not None else waiting


def _restart_after_failure(
    job: ScaleTrainJob,
    draft: Draft,
    current: Mapping[str, Any] | None,
    desired: dict[str, Any],
    ledger: Ledger,
    verdict: Verdict,
    ending: GangRecord,
) -> Decision:
    """The restart the gang policy ordered: counted as a restart or a disruption, and with the blamed node
    avoided from the next gang on. The Restarting condition's reason is the rule's or the meaning's name."""
    after = ledger.after(verdict, job)
    draft.status.fields.update(after.status_fields())
    ended = ending.model_copy(update={"ended": "Disrupted" if verdict.disruption else "Failed"})
    record_gang_end(draft, job, ended)
    message = verdict.message
    if after.excluded_nodes != ledger.excluded_nodes:
        message += f"; the next gangs avoid node {verdict.avoid_node}"
    next_gang, status = for_gang(job, desired, after), draft.status
    note = {"gang": ended.model_dump(mode="json", by_alias=True, exclude_none=True), "reason": verdict.reason}
    next_gang["metadata"]["annotations"][ENDED_GANG_ANNOTATION] = json.dumps(note | {"message": bounded(message)})
    # With a queue, Kueue decides when the next gang starts (it admits the Job).
    queued = job.queue is not None or (current is not None and admission_managed(job.queue, current))
    started = gang_started(current) if current is not None else None
    ran = (status.now - started).total_seconds() if started is not None else math.inf  # no time: no evidence
    wait, quick = restart_backoff(job.spec.restart_backoff, status.before.quick_restarts, ran)
    wait = 0 if queued else wait
    status.fields["quickRestarts"] = quick
    if wait:
        until = status.now + timedelta(seconds=wait)
        spec, annotations = next_gang["spec"], next_gang["metadata"]["annotations"]
        spec["suspend"] = True  # for now: un-suspended at `until` (_start_after_backoff)
        annotations[SUSPENDED_BY_OPERATOR_ANNOTATION] = str(status.generation)
        annotations[START_AFTER_ANNOTATION] = timestamp(until)
        status.fields["nextGangAt"] = timestamp(until)
        draft.recheck_in(wait)
        message += f"; the next gang starts in {wait} s (spec.restartBackoff: {quick} quick restarts in a row)"
    return _restart(draft, current, next_gang, message, warning=True, reason=verdict.reason)


def _recover_gang_end(
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
    draft.events.append(Event("Warning", "Restarting", message, occasion(gone, draft.status.generation)))
    status = (job.status or ScaleTrainJobStatus()).model_copy(update={"gangs": kept([*history, ended])})
    return job.model_copy(update={"status": status}), (message, reason if isinstance(reason, str) else None)


def _start_after_backoff(draft: Draft, current: Mapping[str, Any], until: datetime, nodes: int) -> Decision:
    """The next gang waits out spec.restartBackoff (Restarting, saying until when), then its Job runs."""
    status = draft.status
    if status.now < until:
        draft.recheck_in((until - status.now).total_seconds())
        return draft.done(_waiting(status, ""))
    notes: dict[str, str | None] = {SUSPENDED_BY_OPERATOR_ANNOTATION: None, START_AFTER_ANNOTATION: None}
    status.fields["nextGangAt"] = None
    started = ChildJobPatch(current["metadata"]["name"], {"suspend": False}, notes)
    return draft.done(_waiting(status, waiting_for([], nodes)), started)


def _restart(
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
    status.fields["nodes"] = NodeCounts(current=size_of(desired)).model_dump(mode="json", by_alias=True)
    draft.events.append(Event("Warning" if warning else "Normal", "Restarting", message))
    return draft.done(status.phase("Restarting", message, reason))


def _spec_changed(
    job: ScaleTrainJob,
    draft: Draft,
    current: Mapping[str, Any],
    desired: dict[str, Any],
    pods: Sequence[Mapping[str, Any]],
    generation: int,
    gang: bool,
) -> Decision:
    """A spec the running gang cannot take, such as another size (kubectl scale): the next generation
    starts, counted as neither a restart nor a disruption. The gang stops at a step boundary first. Its Job
    is suspended, and the SIGTERM makes each pod save a checkpoint after the step it is in and exit. The
    next gang starts once no pod of it is left, from that checkpoint. Made at once, the next gang could
    restore the checkpoint before it (the save still in progress) and train steps twice. The wait ends
    with the pods' grace period at the latest (`still_saving`).

    With a queue, Kueue owns the Job's suspend flag (it would start a Job it admitted again), so the gang
    goes at once, and the next one may train steps again since its last checkpoint."""
    status = draft.status
    before, after = size_of(current), size_of(desired)
    planned, reason = planned_resize(current)
    reason = reason if planned == after else "Scaled"
    change = f"the gang resizes from {before} to {after} nodes" if before != after else SPEC_CHANGE
    saving = [] if admission_managed(job.queue, current) else _recheck_when_saved(draft, pods)
    if saving:
        patch = None if child_job_suspended(current) else suspension(job.metadata.generation, current)
        status.fields["nodes"] = node_counts(pods, before).model_dump(mode="json", by_alias=True)
        message = f"{change}: its pods save a checkpoint after the step they are in, then the next gang starts"
        return draft.done(status.phase("Restarting", message, STOPPING), patch)
    record_gang_end(draft, job, this_gang(job, generation, pods, "SpecChanged"))
    if gang:  # the gang's size or priority may have changed: the Workload is made to match (cluster.py)
        draft.create.append(render_workload(job))
    if before != after:
        why = f"spec.nodes is {after}" if reason == "Scaled" else RESIZE_WHY[reason]
        draft.events.append(Event("Normal", "Resized", f"{change} ({why})"))
        resize = Resize(time=status.now, from_nodes=before, to_nodes=after, reason=reason)
        resizes = [*status.before.resizes, resize][-MAX_RESIZES:]
        status.fields["resizes"] = [r.model_dump(mode="json", by_alias=True) for r in resizes]
    return _restart(draft, current, desired, f"{change}; the next gang goes on from its last checkpoint")


def _recheck_when_saved(draft: Draft, pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods of a stopping gang that may still be saving its checkpoint (`still_saving`); the decision is
    looked at again when the grace period of the last of them ends, since no event may come by then."""
    now = draft.status.now
    saving = [pod for pod in pods if still_saving(pod, now)]
    if deadlines := [parse_timestamp(p["metadata"]["deletionTimestamp"]) for p in saving if being_deleted(p)]:
        draft.recheck_in((max(deadlines) - now).total_seconds())
    return saving


def _suspended_without_job(
    job: ScaleTrainJob, draft: Draft, desired: dict[str, Any], pods: Sequence[Mapping[str, Any]]
) -> Decision:
    """A gang whose Job the operator deleted to suspend it (admission_managed), or a queued job suspended
    before its first gang: Suspended while spec.suspend is true. Once it is false, the next gang starts from
    the checkpoint the suspension saved, after the last pod of the suspended one is gone (it may still be
    saving), counted as neither a restart nor a disruption."""
    status = draft.status
    if job.spec.suspend:
        return draft.done(status.phase("Suspended", SUSPENDED_MESSAGE))
    if _recheck_when_saved(draft, pods):
        message = "spec.suspend is false: the suspended gang's pods are saving a checkpoint, then the next gang starts"
        return draft.done(status.phase("Restarting", message, STOPPING))
    return _restart(draft, None, desired, RESUME_MESSAGE)


def _keep_running(
    job: ScaleTrainJob,
    asked: ScaleTrainJob,
    draft: Draft,
    current: Mapping[str, Any],
    observed: Observed,
    probe_priority_class: str,
) -> Decision:
    """The gang goes on: apply what its Job takes in place, and say how it is doing; unless the scheduler
    could not place a pod of it within scheduleTimeoutSeconds, which fails the job. An elastic gang
    (`asked`.spec.elastic) shrinks instead while it can, and a running one below spec.nodes probes for room
    to grow back."""
    spec, status, pods = job.spec, draft.status, observed.pods
    suspended, name = child_job_suspended(current), current["metadata"]["name"]
    if spec.suspend and admission_managed(job.queue, current):
        # Kueue would start the Job again: it goes instead (its pods save a checkpoint on their SIGTERM), which
        # also has Kueue release its quota; the next gang starts once spec.suspend is false.
        record_gang_end(draft, job, this_gang(job, naming.generation_of(job.name, name), pods, "SpecChanged"))
        draft.delete_child_jobs.append(name)
        return draft.done(status.phase("Suspended", SUSPENDED_MESSAGE))
    in_place: dict[str, Any] = {}
    if (current.get("spec") or {}).get("activeDeadlineSeconds") != spec.active_deadline_seconds:
        in_place["activeDeadlineSeconds"] = spec.active_deadline_seconds
    if spec.suspend and not suspended:
        operator_suspends = suspension(job.metadata.generation, current)
        patch: ChildJobPatch | None = replace(operator_suspends, spec=operator_suspends.spec | in_place)
    else:
        patch = ChildJobPatch(name, in_place) if in_place else None
    if spec.suspend:
        return draft.done(status.phase("Suspended", SUSPENDED_MESSAGE), patch)
    if suspended:  # by someone else: resumed() and preempted() took the operator's own suspension and Kueue's
        return draft.done(status.phase("Pending", waiting_for_admission(job, current)), patch)
    waiting = _report_placement(draft, pods, spec.nodes) or refused_pods(job, current, pods)
    if waiting is not None and (shrink := _shrink_target(asked, current, pods)) is not None:
        left = asked.spec.elastic.scale_down_after_seconds - (status.now - waiting.since).total_seconds()
        if left <= 0:
            return _resize_at_step_boundary(draft, current, pods, *shrink, waiting.describe())
        draft.recheck_in(left)  # no event may come by then
    elif waiting is not None and spec.schedule_timeout_seconds is not None:
        waited = (status.now - waiting.since).total_seconds()
        if waited >= spec.schedule_timeout_seconds:
            message = f"{waiting.describe()}; scheduleTimeoutSeconds ({spec.schedule_timeout_seconds}) passed"
            return _fail(draft, message, UNSCHEDULABLE)
        draft.recheck_in(spec.schedule_timeout_seconds - waited)  # no event may come by then
    if whole_gang_up(pods, spec.nodes):
        status.fields["startTime"] = timestamp(status.before.start_time or status.now)
        if (grow := _grow_back(asked, draft, current, observed, probe_priority_class)) is not None:
            return grow
        nodes = status.fields["nodes"]["active"]
        below = (
            f" (spec.nodes is {asked.spec.nodes}; growing back when there is room)"
            if spec.nodes < asked.spec.nodes
            else ""
        )
        return draft.done(status.phase("Running", f"{nodes} of {spec.nodes} nodes active{below}"), patch)
    return draft.done(_waiting(status, waiting_for(pods, spec.nodes)), patch)


def _shrink_target(
    asked: ScaleTrainJob, current: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
) -> tuple[int, ResizeReason] | None:
    """The size an elastic gang the scheduler cannot place whole shrinks to once scaleDownAfterSeconds passed
    (scheduleTimeoutSeconds waits meanwhile), and why; None at the smallest size, or without spec.elastic. A
    gang that grew on a probe's word and never ran goes back to the size it grew from (which fitted; the room
    was taken meanwhile); any other, as far as the scheduler's verdict on each pod says (elastic.smaller)."""
    if asked.spec.elastic is None:
        return None
    size, status = size_of(current), asked.status
    grown = status.resizes[-1] if status is not None and status.resizes else None
    if (
        grown is not None
        and grown.reason == "CapacityReturned"
        and grown.to_nodes == size
        and not _ran_since(asked, grown.time)
    ):
        if grown.from_nodes in elastic_sizes.sizes(asked.spec):
            return grown.from_nodes, "CapacityTaken"
    smaller = elastic.smaller(asked.spec, size, sum(placed(pod) for pod in pods))
    return (smaller, "Unschedulable") if smaller is not None else None


def _ran_since(job: ScaleTrainJob, moment: datetime) -> bool:
    """Whether the job turned Running (a whole gang up) at or after `moment`."""
    conditions = job.status.conditions if job.status is not None else []
    running = next((c for c in conditions if c.type == "Running" and c.status == "True"), None)
    return running is not None and running.last_transition_time >= moment


def failed_growths(asked: ScaleTrainJob) -> int:
    """How many times in a row, up to now, the gang grew on a probe's word and then could not be placed (the
    room was taken meanwhile, or the probe's pods fit where the gang's do not): each doubles the time to the
    next probe."""
    resizes = asked.status.resizes if asked.status is not None else []
    count, end = 0, len(resizes)
    while end >= 2 and (resizes[end - 2].reason, resizes[end - 1].reason) == ("CapacityReturned", "CapacityTaken"):
        count, end = count + 1, end - 2
    return count


MAX_FAILED_GROWTHS = 4  # in a row (each doubles the time to the next probe): then the probes stop
NO_PROBE_CLASS = (
    "the operator has no PriorityClass that preempts nothing for probes (--probe-priority-class; the chart makes "
    "one, or capacityProbePriorityClass names one), and a probe of the gang's class could preempt other tenants' "
    "pods: the gang does not grow back"
)


def _no_probe(asked: ScaleTrainJob, current: Mapping[str, Any], priority_class: str) -> str | None:
    """Why the gang is not probed for room at all (None: it is): a probe could preempt, could not ask what the
    gang would, or its word did not hold MAX_FAILED_GROWTHS times in a row (kubectl scale starts them again)."""
    if not priority_class:
        return NO_PROBE_CLASS
    if (why := capacity_probe.cannot_speak_for(current)) is not None:
        return f"{why}: the gang does not grow back on a probe's word"
    if (failed := failed_growths(asked)) >= MAX_FAILED_GROWTHS:
        return (
            f"the gang grew on a probe's word {failed} times in a row and could not be placed (the probe's pods fit "
            "where the gang's do not): no more probes until kubectl scale sets a size"
        )
    return None


def _grow_back(
    asked: ScaleTrainJob, draft: Draft, current: Mapping[str, Any], observed: Observed, priority_class: str
) -> Decision | None:
    """A running elastic gang below spec.nodes probes for room every elastic.scaleUp.checkEverySeconds
    (render/capacity_probe.py); when the scheduler placed pods of the probe, the gang stops at a step boundary
    and the next one is as large as fits. None: it goes on as it is (a probe may be under way)."""
    spec, status, size = asked.spec, draft.status, size_of(current)
    if spec.elastic is None or elastic.larger(spec, size, spec.nodes - size) is None:
        return None
    probe, now = observed.probe, status.now
    if probe is None:
        if (why_not := _no_probe(asked, current, priority_class)) is not None:
            draft.events.append(Event("Warning", "CapacityProbeFailed", f"no capacity probe: {why_not}"))
            return None
        if (due := _next_probe_in(asked, draft, current, spec.elastic.scale_up.check_every_seconds)) > 0:
            draft.recheck_in(due)
            return None
        draft.create.append(capacity_probe.render_probe(asked, spec.nodes - size, current, priority_class))
        # When it started: the next is due a check interval later, whether this one is judged or cannot be
        # made at all.
        status.fields["capacityProbedAt"] = timestamp(now)
        draft.keep_probe = True
        draft.recheck_in(capacity_probe.PROBE_TIMEOUT_S)  # no pod of it may ever be made, and no event come
        return None
    # The scheduler's verdict: every pod of the probe placed, or each placed or found no node for (or the
    # probe timed out); until then it may still place more.
    wanted = int(probe["spec"]["completions"])
    room = sum(placed(pod) for pod in observed.probe_pods)
    said = sum(pod_scheduled(pod).get("status") in ("True", "False") for pod in observed.probe_pods)
    if room < wanted and said < wanted and (left := capacity_probe.expires_in(probe, now)) > 0:
        draft.keep_probe = True
        draft.recheck_in(left)
        return None
    if (target := elastic.larger(spec, size, room)) is not None:
        why = f"the scheduler placed {room} pod{'s' * (room > 1)} of a capacity probe"
        return _resize_at_step_boundary(draft, current, observed.pods, target, "CapacityReturned", why)
    if not observed.probe_pods:  # admission refused its pods (a quota, a policy), or the Job controller is stuck
        name = probe["metadata"]["name"]
        message = (
            f"capacity probe {name} made no pod in {capacity_probe.PROBE_TIMEOUT_S} s (the Events of Job {name} say "
            "why, e.g. a quota or a policy that refused its pods): the gang trains on at its size"
        )
        draft.events.append(Event("Warning", "CapacityProbeFailed", message))
    draft.recheck_in(max(_next_probe_in(asked, draft, current, spec.elastic.scale_up.check_every_seconds), 1))
    return None


def _next_probe_in(asked: ScaleTrainJob, draft: Draft, current: Mapping[str, Any], check_every: int) -> float:
    """Seconds until the next capacity probe is due: `check_every` (doubled for each failed growth in a row,
    `failed_growths`) after the last probe started, or after the gang's Job was made."""
    every = check_every * 2 ** min(failed_growths(asked), MAX_FAILED_GROWTHS)
    now, created = draft.status.now, current["metadata"].get("creationTimestamp")
    last = max(filter(None, (draft.status.before.capacity_probed_at, parse_timestamp(created) if created else now)))
    return every - (now - min(last, now)).total_seconds()  # a clock ahead of ours delays no probe


def _resize_at_step_boundary(
    draft: Draft,
    current: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    target: int,
    reason: ResizeReason,
    why: str,
) -> Decision:
    """Suspend the gang's Job, saying on it the size of the next gang and why: the pods save a checkpoint
    after the step they are in and exit, and the next pass (`_spec_changed`, which the new size makes)
    starts the next gang once they are gone."""
    size, status = size_of(current), draft.status
    annotations = {RESIZE_TO_ANNOTATION: str(target), RESIZE_REASON_ANNOTATION: reason}
    patch = suspension(status.generation, current, annotations)
    status.fields["nodes"] = node_counts(pods, size).model_dump(mode="json", by_alias=True)
    message = (
        f"the gang resizes from {size} to {target} nodes ({RESIZE_WHY[reason]}: {why}): its pods save a checkpoint "
        "after the step they are in, then the next gang starts"
    )
    return draft.done(status.phase("Restarting", message, STOPPING), patch)


def _report_placement(draft: Draft, pods: Sequence[Mapping[str, Any]], nodes: int) -> Unplaced | None:
    """Whether the scheduler can place the gang's pods, as the condition Schedulable: False, with the
    scheduler's message, while it cannot place one (and a Warning Event when it turns False), True again
    once every pod was placed. Returns what holds the gang back (`unplaced`), if a pod waits."""
    status = draft.status
    waiting = unplaced(pods, status.now)
    said = status.conditions.get(SCHEDULABLE)
    if waiting is not None:
        if said is None or said["status"] == "True":
            draft.events.append(Event("Warning", UNSCHEDULABLE, waiting.describe()))
        status.set(SCHEDULABLE, False, UNSCHEDULABLE, waiting.describe(), shown_when_false=True)
    elif said is not None and all_placed(pods, nodes):
        status.set(SCHEDULABLE, True, "Scheduled", "every pod of the gang was placed on a node")
    return waiting


def _waiting(status: StatusBuilder, waiting: str) -> dict[str, Any]:
    """The gang is not wholly up yet: still Restarting (keeping why) after a restart, else Pending, saying
    which pods it waits for and why (`waiting`)."""
    if status.before.phase == "Restarting":
        why = status.conditions.get("Restarting") or {}
        return status.phase("Restarting", status.before.message or "", why.get("reason"))
    return status.phase("Pending", waiting)


def decide_invalid(
    problems: Sequence[Problem], stored_status: Mapping[str, Any], generation: int | None, now: datetime
) -> Decision:
    """A spec the CRD schema let through but the operator cannot run: Failed once, with every problem."""
    message = "invalid spec: " + "; ".join(str(p) for p in problems)
    return decide_failed("InvalidSpec", message, stored_status, generation, now)


def decide_failed(
    reason: ControllerFailureReason,
    message: str,
    stored_status: Mapping[str, Any],
    generation: int | None,
    now: datetime,
) -> Decision:
    """Failed once, for `reason`, with a condition and a Warning Event saying `message` (cut to the API's
    limits): an invalid spec, or a child the API server refused (cluster.ChildRejected)."""
    message = bounded(message)
    if stored_status.get("phase") == "Failed" and stored_status.get("message") == message:
        return Decision()
    failed = condition("Failed", True, reason, message, now, generation)
    status = {"phase": "Failed", "message": message, "conditions": [failed], "observedGeneration": generation}
    return Decision(
        status=status,
        events=(Event("Warning", reason, message, occasion(stored_status.get("currentJob"), generation)),),
    )
