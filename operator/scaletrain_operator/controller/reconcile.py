"""Pure reconciliation: from a ScaleTrainJob and the children that exist, decide what to do next.

`decide(asked, observed, now)` looks only at its inputs (the job and the children found by label), so
calling it again after a repeated event, an operator restart or a lost status patch reaches the same
decision. It reads as a list of steps:

1. a finished job is left alone (only its TTL, ttl.py, touches it now), but for a gang still running or
   waiting for a node: its Job is suspended (where another controller owns that flag, such as Kueue:
   deleted), which ends those pods;
2. find the current gang generation and its size (with spec.elastic: the running gang's, or the size a
   resize under way goes to: `at_gang_size`), and render the one Job this call may create;
3. create what is missing: the Services, the NetworkPolicy, the job's Workload before any gang's Job
   (gang placement, render/workload.py; Decision.workload, since the decide layer does not read it back),
   and the current generation's Job (kept off the nodes in status.excludedNodes); a current Job that
   someone else deleted ends its gang like a failure (counted against maxRestarts);
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
   below spec.nodes (render/capacity_probe.py, Decision.create_probe), and report the running status.

Every action is named in the Decision, which controller/cluster.py carries out without deciding. An
invalid spec gets its own decision (`decide_invalid`, finished.py), and so does a child the API server
refuses (`decide_failed`): Failed once, never retried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..api import naming
from ..api.conditions import (
    JOB_COMPLETE,
    JOB_FAILED,
    NO_RESTART_RULE,
    SCHEDULED,
    STOPPING,
    UNSCHEDULABLE,
    ConditionType,
    ControllerFailureReason,
    EventReason,
    GangEnding,
    JobPhase,
    ResizeReason,
)
from ..api.job import ScaleTrainJob
from ..api.job_status import MAX_RESIZES, NodeCounts, Resize
from ..api.timestamps import parse_timestamp, timestamp
from ..in_place import as_said_by_agents
from ..policy import placement as gang_placement
from ..policy.gang_policy import (
    Action,
    GangLimits,
    Verdict,
    crash_loop_length,
    judge,
    pod_outcome,
)
from ..policy.hang import broken_promise, stalled_message
from ..policy.ledger import Ledger, ledger_of
from ..policy.pods import (
    Unplaced,
    all_placed,
    being_deleted,
    job_condition,
    node_counts,
    refused_pods,
    still_saving,
    unplaced,
    waiting_for,
    whole_gang_up,
)
from ..policy.suspension import admission_managed, current_job_deleted, preempted, resumed
from ..render.child_annotations import (
    RESIZE_WHY,
    child_job_suspended,
    hash_of,
    held_until,
    planned_resize,
    size_of,
    start_after,
    with_spec_hash,
)
from ..render.children import render_job, render_master_alias, render_network_policy, render_service, render_workload
from ..render.in_place import restarting_in_place, restarts_in_place, runs_in_place
from ..render.status_reports import reporting_to
from ..render.workload import placed_by_workload
from ..validation import elastic_sizes
from ..validation.progress_answer import final_progress, status_patch
from .decision import (
    ChildJobPatch,
    Decision,
    Draft,
    Event,
    InPlaceWord,
    Observed,
    current_gang,
    suspension,
)
from .finished import decide_failed, stop_what_runs
from .resizing import at_gang_size, grow_back, resize_at_step_boundary, shrink_target
from .restarts import (
    fail,
    for_gang,
    gang_ended,
    gangs_with,
    record_gang_end,
    recover_gang_end,
    restart,
    restart_after_failure,
    start_after_backoff,
    this_gang,
    wait_for_release,
    waiting_status,
)
from .settings import DEFAULTS, OperatorConfig
from .status import StatusBuilder

SPEC_CHANGE = "the spec changed in a way the running gang cannot take"
RESUME_MESSAGE = "spec.suspend is false: a new gang goes on from the checkpoint the suspension saved"
SUSPENDED_MESSAGE = "spec.suspend is true"


def _judge_gang(
    job: ScaleTrainJob,
    child_job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    ledger: Ledger,
    crash_loop: int,
) -> Verdict:
    """The gang policy on the current generation: its pods, and the Job controller's conditions on its Job.
    Suspending a Job (spec.suspend, a handover to the next gang, or Kueue preempting it) terminates its pods,
    which may end Failed (exit 143) on the way out: that is not a crash, unless the trainer named what failed
    (a checkpoint it could not save)."""
    failed = job_condition(child_job, JOB_FAILED)
    return judge(
        [pod_outcome(pod) for pod in pods],
        GangLimits.of(job.spec),
        ledger.restarts,
        disruptions=ledger.disruptions,
        crash_loop=crash_loop,
        job_complete=job_condition(child_job, JOB_COMPLETE) is not None,
        job_failure=failed.get("reason", JOB_FAILED) if failed else None,
        suspended=child_job_suspended(child_job) or job.spec.suspend,
    )


def decide(asked: ScaleTrainJob, observed: Observed, now: datetime, settings: OperatorConfig = DEFAULTS) -> Decision:
    """What to do next for the job `asked`, given its children; see the module docstring."""
    return _decide(at_gang_size(asked, observed), asked, observed, now, settings)


def _decide(
    job: ScaleTrainJob, asked: ScaleTrainJob, observed: Observed, now: datetime, settings: OperatorConfig
) -> Decision:
    """`job` is `asked` at its current gang's size (at_gang_size): the same unless spec.elastic is set."""
    status = StatusBuilder(job, now)
    if status.finished:
        return stop_what_runs(observed, job.queue, job.metadata.generation)
    if (unavailable := gang_placement.unavailable(job, settings.workload_api)) is not None:
        stored = job.status.model_dump(mode="json", by_alias=True, exclude_none=True) if job.status else {}
        return decide_failed(
            ControllerFailureReason.GANG_SCHEDULING_UNAVAILABLE, unavailable, stored, job.metadata.generation, now
        )
    gang_generation = current_gang(job.named_gang, observed)
    gang_generation = 0 if gang_generation is None else gang_generation  # none yet: the first gang's
    current = observed.jobs.get(gang_generation)
    gone = current_job_deleted(job, gang_generation, current)
    # Where another controller owns the Job's suspend flag, the operator suspends a gang by deleting its Job.
    suspended_away = gone and (job.spec.suspend or status.before.phase == JobPhase.SUSPENDED)
    deleted = gone and not suspended_away
    uses_workload = placed_by_workload(job.spec, settings.workload_api)
    # The one render of this call: the Job it would create. That is the current generation's when it was
    # never made, else the next one's, for a restart; either way its hash tells whether the spec changed.
    next_gang_generation = gang_generation if current is None and not gone else gang_generation + 1
    rendered = with_spec_hash(render_job(job, next_gang_generation, uses_workload=uses_workload))
    in_place_endpoint = settings.status_endpoint if settings.restarts_in_place else None
    reporting = reporting_to(rendered, job, settings.status_endpoint)
    desired = restarting_in_place(reporting, job, in_place_endpoint, settings.agent_image)
    probe = observed.probe["metadata"]["name"] if observed.probe is not None else None
    draft = Draft(
        status,
        gang_job=naming.child_job_name(job.name, gang_generation),
        probe=probe,
        network_policy=render_network_policy(asked, settings.network_policy_from)
        if settings.network_policy_from
        else None,
        workload=render_workload(job) if uses_workload else None,
    )
    _say_if_recreated(job, draft, settings)
    missing_services = [service for service in (render_service(job), render_master_alias(job))
                        if service["metadata"]["name"] not in observed.services]  # fmt: skip
    draft.create += missing_services
    draft.delete_child_jobs += [
        observed.jobs[g]["metadata"]["name"] for g in sorted(observed.jobs) if g < gang_generation
    ]

    ledger = ledger_of(job, current)
    status.fields.update(ledger.status_fields())
    status.fields["selector"] = f"{naming.LABEL_JOB_NAME}={job.name}"  # the scale subresource's
    status.fields["elasticSizes"] = elastic_sizes.sizes(asked.spec) if asked.spec.elastic is not None else []
    if deleted:
        gone = naming.child_job_name(job.name, gang_generation)
        message = f"Job {gone} was deleted, not by the operator: that ends its gang like a failure"
        deleted_gang = this_gang(job, gang_generation, observed.pods, GangEnding.FAILED)
        return gang_ended(job, draft, None, desired, ledger, EventReason.JOB_DELETED, message, deleted_gang)
    if suspended_away or (current is None and job.spec.suspend and job.queue is not None):
        return _suspended_without_job(job, draft, for_gang(job, desired, ledger), observed.pods)
    if current is None:  # first start, or a restart whose create did not happen yet
        return _start_gang(job, draft, for_gang(job, desired, ledger))
    status.fields["currentJob"] = current["metadata"]["name"]
    status.fields["gangGeneration"] = gang_generation
    if runs_in_place(current):
        draft.in_place = InPlaceWord(gang_generation, size_of(current), start_after(current))
    running, observed = observed.pods, replace(observed, pods=as_said_by_agents(observed.pods, observed.said))
    job, lost = recover_gang_end(job, draft, current)
    # Judge first, then change: a pod that failed in the same pass as a spec change, or while its gang stops
    # for one (a save that failed on the way out), is the gang's end, and its record says so.
    status.fields["nodes"] = node_counts(observed.pods, size_of(current)).model_dump(mode="json", by_alias=True)
    failing = this_gang(job, gang_generation, observed.pods, GangEnding.FAILED)
    verdict = _judge_gang(job, current, observed.pods, ledger, crash_loop_length(gangs_with(job, failing)))
    if verdict.action is Action.SUCCEED:
        record_gang_end(draft, job, failing.model_copy(update={"ended": GangEnding.SUCCEEDED}))
        return _succeed(draft, gang_generation, observed, verdict.message)
    if verdict.action is Action.FAIL:
        record_gang_end(draft, job, failing)
        return fail(draft, verdict.message, verdict.reason)
    if verdict.action is Action.RESTART:
        return restart_after_failure(job, draft, current, desired, ledger, verdict, failing, running)
    if lost is not None:
        return draft.done(status.phase(JobPhase.RESTARTING, *lost))
    # A resize under way (an elastic gang's Job, suspended to stop at a step boundary) goes through the same
    # handover even should the spec have changed back to the running size meanwhile.
    if hash_of(current) != hash_of(desired) or planned_resize(current)[0] is not None:
        return _spec_changed(job, draft, current, for_gang(job, desired, ledger), observed.pods, gang_generation)
    if (until := held_until(current)) is not None and not job.spec.suspend:
        return start_after_backoff(draft, current, until, job.spec.nodes)
    if resumed(job, current, status.before.phase):
        # The suspension's SIGTERM ended the pods Failed with exit 80, which the Job's podFailurePolicy may
        # count once the Job runs again (it cannot fail a suspended Job): un-suspended, the Job would fail
        # after a moment, as a disruption. The next gang starts instead, counted as neither.
        record_gang_end(draft, job, this_gang(job, gang_generation, observed.pods, GangEnding.SPEC_CHANGED))
        return restart(draft, current, for_gang(job, desired, ledger), RESUME_MESSAGE)
    if preempted(job, current, observed.pods):
        message = f"Kueue suspended Job {current['metadata']['name']}: its gang ends, and the next one queues again"
        return gang_ended(job, draft, current, desired, ledger, EventReason.PREEMPTED, message, failing)
    if uses_workload and (foreign := gang_placement.foreign_pod_group(current, job.name, observed.pods)) is not None:
        message = (
            f"pods of Job {current['metadata']['name']} are in PodGroup {foreign}, not one of the job's Workload "
            f"{job.name}: another Workload in the namespace names this job in its spec.controllerRef, and the Job "
            "controller took it (its gang may be of another size). The gang restarts to be placed by the job's own; "
            "delete the other Workload"
        )
        return gang_ended(job, draft, current, desired, ledger, EventReason.FOREIGN_WORKLOAD, message, failing)
    if (due := broken_promise(job, gang_generation, settings.progress_timeout_seconds)) is not None:
        hang = stalled_message(job, due)
        return gang_ended(job, draft, current, desired, ledger, EventReason.HANG, hang, failing, running)
    # Restarted in place, the gang waits at its barrier for its backoff: what ends a running gang ends it there too.
    if draft.in_place is not None and not job.spec.suspend and (waiting := wait_for_release(draft, current)):
        return waiting
    return _keep_running(job, asked, draft, current, gang_generation, observed, settings.probe_priority_class)


def _say_if_recreated(job: ScaleTrainJob, draft: Draft, settings: OperatorConfig) -> None:
    """A job whose spec.restartStrategy is InPlace on a cluster that cannot restart gangs in place (the operator's
    dry run found out) says so once, in a condition and an Event: its gangs are recreated. (An operator that serves
    no status-report endpoint, which the pods' agents ask, recreates them too: its log says so when it starts.)"""
    status = draft.status
    if ConditionType.IN_PLACE_RESTARTS_UNAVAILABLE in status.conditions or settings.restarts_in_place:
        return
    if settings.status_endpoint is None or not restarts_in_place(job, settings.agent_image):
        return
    message = (
        "spec.restartStrategy is InPlace, but the API server does not take a container's restart rule "
        "RestartAllContainers (Kubernetes 1.36 and later, with the feature gates ContainerRestartRules and "
        "RestartAllContainersOnContainerExits on): a restart recreates the gang instead"
    )
    status.set(ConditionType.IN_PLACE_RESTARTS_UNAVAILABLE, True, NO_RESTART_RULE, message)
    draft.events.append(Event("Normal", EventReason.IN_PLACE_RESTARTS_UNAVAILABLE, message, "restartStrategy"))


def _succeed(draft: Draft, gang_generation: int, observed: Observed, message: str) -> Decision:
    """Succeeded, with rank 0's final step and loss from its termination message, or the script's last pushed
    report: the last progress read may be a logging interval or a poll behind, and a script's last report
    (at its end, with its summary) may have come after the last housekeeping pass. What it has beside them
    (such as throughput) stays when it was this gang's; its ETA and promise are moot now."""
    status = draft.status
    rank_0 = next((outcome for outcome in map(pod_outcome, observed.pods) if outcome.index == 0), None)
    final = final_progress(rank_0.message) if rank_0 is not None else {}
    report = observed.report
    pushed = report.progress if report is not None and report.gang_generation == gang_generation else {}
    before = status.before.progress
    if final or pushed or before is not None:
        read = before.model_dump(mode="json", by_alias=True, exclude_none=True) if before is not None else {}
        last = (read if read.get("generation") == gang_generation else {}) | pushed
        if "step" in final:  # the final loss, or its absence, is the final answer's
            last = {key: value for key, value in last.items() if key not in ("loss", "lossFinite")}
        moot = {"etaSeconds": None, "staleAfter": None, "readAt": None}
        status.fields["progress"] = status_patch(last | final, gang_generation, read) | moot
    return draft.done(status.phase(JobPhase.SUCCEEDED, message))


def _start_gang(job: ScaleTrainJob, draft: Draft, desired: dict[str, Any]) -> Decision:
    status, name = draft.status, desired["metadata"]["name"]
    draft.create.append(desired)
    status.fields["currentJob"] = name
    status.fields["nodes"] = NodeCounts(current=size_of(desired)).model_dump(mode="json", by_alias=True)
    if status.before.phase is None:
        service = naming.service_name(job.name)
        status.set(ConditionType.CREATED, True, ConditionType.CREATED, f"created Service {service} and Job {name}")
        draft.events.append(Event("Normal", EventReason.CREATED, f"created Job {name}"))
    if job.spec.suspend:
        return draft.done(status.phase(JobPhase.SUSPENDED, SUSPENDED_MESSAGE))
    if job.queue is not None:  # its Job is created suspended
        return draft.done(waiting_status(status, waiting_for_admission(job, desired)))
    return draft.done(waiting_status(status, waiting_for([], job.spec.nodes)))


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
    queued = next((c for c in conditions if c.type == ConditionType.QUEUED and c.status == "True"), None)
    return f"{waiting}: {queued.message}" if queued is not None else waiting


def _spec_changed(
    job: ScaleTrainJob,
    draft: Draft,
    current: Mapping[str, Any],
    desired: dict[str, Any],
    pods: Sequence[Mapping[str, Any]],
    gang_generation: int,
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
    # The reason the resize under way was planned for holds where the next gang has the size it planned; a
    # spec.nodes changed meanwhile that decides another size makes it Scaled (one it leaves as planned does not).
    planned, reason = planned_resize(current)
    reason = reason if planned == after else ResizeReason.SCALED
    change = f"the gang resizes from {before} to {after} nodes" if before != after else SPEC_CHANGE
    saving = [] if admission_managed(job.queue, current) else _recheck_when_saved(draft, pods)
    if saving:
        patch = None if child_job_suspended(current) else suspension(job.metadata.generation, current)
        status.fields["nodes"] = node_counts(pods, before).model_dump(mode="json", by_alias=True)
        message = f"{change}: its pods save a checkpoint after the step they are in, then the next gang starts"
        return draft.done(status.phase(JobPhase.RESTARTING, message, STOPPING), patch)
    record_gang_end(draft, job, this_gang(job, gang_generation, pods, GangEnding.SPEC_CHANGED))
    # The gang's size or priority may have changed: the Workload is made to match (Decision.workload).
    draft.respec_workload = True
    if before != after:
        why = RESIZE_WHY[reason] if planned == after else f"spec.nodes is {after}"
        draft.events.append(Event("Normal", EventReason.RESIZED, f"{change} ({why})"))
        resize = Resize(time=status.now, from_nodes=before, to_nodes=after, reason=reason)
        resizes = [*status.before.resizes, resize][-MAX_RESIZES:]
        status.fields["resizes"] = [r.model_dump(mode="json", by_alias=True) for r in resizes]
    return restart(draft, current, desired, f"{change}; the next gang goes on from its last checkpoint")


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
        return draft.done(status.phase(JobPhase.SUSPENDED, SUSPENDED_MESSAGE))
    if _recheck_when_saved(draft, pods):
        message = "spec.suspend is false: the suspended gang's pods are saving a checkpoint, then the next gang starts"
        return draft.done(status.phase(JobPhase.RESTARTING, message, STOPPING))
    return restart(draft, None, desired, RESUME_MESSAGE)


def _keep_running(
    job: ScaleTrainJob,
    asked: ScaleTrainJob,
    draft: Draft,
    current: Mapping[str, Any],
    gang_generation: int,
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
        record_gang_end(draft, job, this_gang(job, gang_generation, pods, GangEnding.SPEC_CHANGED))
        draft.delete_child_jobs.append(name)
        return draft.done(status.phase(JobPhase.SUSPENDED, SUSPENDED_MESSAGE))
    in_place: dict[str, Any] = {}
    if (current.get("spec") or {}).get("activeDeadlineSeconds") != spec.active_deadline_seconds:
        in_place["activeDeadlineSeconds"] = spec.active_deadline_seconds
    if spec.suspend and not suspended:
        operator_suspends = suspension(job.metadata.generation, current)
        patch: ChildJobPatch | None = replace(operator_suspends, spec=operator_suspends.spec | in_place)
    else:
        patch = ChildJobPatch(name, in_place) if in_place else None
    if spec.suspend:
        return draft.done(status.phase(JobPhase.SUSPENDED, SUSPENDED_MESSAGE), patch)
    if suspended:  # by someone else: resumed() and preempted() took the operator's own suspension and Kueue's
        return draft.done(status.phase(JobPhase.PENDING, waiting_for_admission(job, current)), patch)
    waiting = _report_placement(draft, pods, spec.nodes) or refused_pods(job, current, pods)
    if waiting is not None and (shrink := shrink_target(asked, current, pods)) is not None:
        left = asked.spec.elastic.scale_down_after_seconds - (status.now - waiting.since).total_seconds()
        if left <= 0:
            return resize_at_step_boundary(draft, current, pods, *shrink, waiting.describe())
        draft.recheck_in(left)  # no event may come by then
    elif waiting is not None and spec.schedule_timeout_seconds is not None:
        waited = (status.now - waiting.since).total_seconds()
        if waited >= spec.schedule_timeout_seconds:
            message = f"{waiting.describe()}; scheduleTimeoutSeconds ({spec.schedule_timeout_seconds}) passed"
            return fail(draft, message, UNSCHEDULABLE)
        draft.recheck_in(spec.schedule_timeout_seconds - waited)  # no event may come by then
    if whole_gang_up(pods, spec.nodes):
        status.fields["startTime"] = timestamp(status.before.start_time or status.now)
        if (grow := grow_back(asked, draft, current, observed, probe_priority_class)) is not None:
            return grow
        nodes = status.fields["nodes"]["active"]
        below = (
            f" (spec.nodes is {asked.spec.nodes}; growing back when there is room)"
            if spec.nodes < asked.spec.nodes
            else ""
        )
        return draft.done(status.phase(JobPhase.RUNNING, f"{nodes} of {spec.nodes} nodes active{below}"), patch)
    return draft.done(waiting_status(status, waiting_for(pods, spec.nodes)), patch)


def _report_placement(draft: Draft, pods: Sequence[Mapping[str, Any]], nodes: int) -> Unplaced | None:
    """Whether the scheduler can place the gang's pods, as the condition Schedulable: False, with the
    scheduler's message, while it cannot place one (and a Warning Event when it turns False), True again
    once every pod was placed. Returns what holds the gang back (`unplaced`), if a pod waits."""
    status = draft.status
    waiting = unplaced(pods, status.now)
    said = status.conditions.get(ConditionType.SCHEDULABLE)
    if waiting is not None:
        if said is None or said["status"] == "True":
            draft.events.append(Event("Warning", EventReason.UNSCHEDULABLE, waiting.describe()))
        status.set(ConditionType.SCHEDULABLE, False, UNSCHEDULABLE, waiting.describe(), shown_when_false=True)
    elif said is not None and all_placed(pods, nodes):
        status.set(ConditionType.SCHEDULABLE, True, SCHEDULED, "every pod of the gang was placed on a node")
    return waiting
