"""Readers of a gang's pods and Job: how many nodes are up, which pods the scheduler or the API server could not
place and why, and which pods still hold a node or are still saving a checkpoint. One reader per fact; the
operator and run-local judge by these."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..api import naming
from ..api.conditions import (
    CONTAINER_ERROR,
    DISRUPTION_TARGET,
    POD_SCHEDULED,
    PREEMPTION_BY_SCHEDULER,
    SCHEDULER_ERROR,
    UNSCHEDULABLE,
    ConditionType,
    PodPhase,
)
from ..api.job import ScaleTrainJob
from ..api.job_status import NodeCounts
from ..api.timestamps import parse_timestamp, timestamp
from ..render.child_annotations import size_of


def node_counts(pods: Sequence[Mapping[str, Any]], size: int) -> NodeCounts:
    phases = [pod_phase(p) for p in pods]
    return NodeCounts(
        current=size,
        active=phases.count(PodPhase.RUNNING),  # a pod the scheduler cannot place is not an active node
        pending=phases.count(PodPhase.PENDING),
        succeeded=phases.count(PodPhase.SUCCEEDED),
        failed=phases.count(PodPhase.FAILED),
    )


@dataclass(frozen=True)
class Unplaced:
    """A pod of the gang that the scheduler cannot place on any node, or pods the API server refused to make."""

    pod: str
    message: str  # the scheduler's, e.g. "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    since: datetime  # when the first pod of the gang that the scheduler cannot place turned so (PodScheduled)
    refused: bool = False  # `pod` names pods that were never made: the Job controller's create was refused

    def describe(self) -> str:
        if self.refused:
            return f"the API server refused to create {self.pod}: {self.message}"
        return f"the scheduler cannot place pod {self.pod}: {self.message}"


def refused_pods(job: ScaleTrainJob, current: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> Unplaced | None:
    """The pods of the gang that do not exist because the API server refused to create them (a ResourceQuota,
    an admission policy), as housekeeping found from the Job controller's FailedCreate Events (the condition
    PodCreationFailed): as unplaced as a pod the scheduler finds no node for, since they were first refused
    (or since this gang's Job was made: the condition may still be an earlier gang's)."""
    missing = size_of(current) - len(pods)
    conditions = job.status.conditions if job.status is not None else []
    failed = next((c for c in conditions if c.type == ConditionType.POD_CREATION_FAILED and c.status == "True"), None)
    if missing <= 0 or failed is None:
        return None
    created = current["metadata"].get("creationTimestamp")
    since = max(failed.last_transition_time, parse_timestamp(created)) if created else failed.last_transition_time
    what = f"{missing} pod{'s' * (missing > 1)} of Job {current['metadata']['name']}"
    return Unplaced(what, failed.message, since, refused=True)


def pod_scheduled(pod: Mapping[str, Any]) -> dict[str, Any]:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == POD_SCHEDULED), {})


def _waits_for_a_node(pod: Mapping[str, Any]) -> bool:
    """Not past Pending, not being deleted, and not yet placed on a node."""
    pending = pod_phase(pod) == PodPhase.PENDING
    return pending and not being_deleted(pod) and pod_scheduled(pod).get("status") != "True"


# The scheduler's reasons for a pod it tried and could not place. With gang placement, kube-scheduler 1.37
# reports a gang for which no node is feasible at all as SchedulerError (its DynamicResources plugin's
# PodGroupPostFilter fails), not Unschedulable: it is no less unplaced.
NOT_PLACED = (UNSCHEDULABLE, SCHEDULER_ERROR)
GANG_WORDS = "pod group is unschedulable"  # the scheduler's message for a pod held back by the rest of its gang


def unplaced(pods: Sequence[Mapping[str, Any]], now: datetime) -> Unplaced | None:
    """The pod the scheduler has been unable to place (PodScheduled False, reason NOT_PLACED) that says most
    of why, and of those the one that waited longest; or None. Most: Unschedulable in words of its own, then
    a pod held back only by its gang, then a scheduler error. Its `since` is the gang's: when the first of
    those pods could not be placed. (A pod it has not looked at yet has no PodScheduled condition: it is not
    unplaced.)"""
    found = []
    for pod in filter(_waits_for_a_node, pods):
        scheduled = pod_scheduled(pod)
        if scheduled.get("status") == "False" and scheduled.get("reason") in NOT_PLACED:
            since, message = scheduled.get("lastTransitionTime"), scheduled.get("message", "")
            told = 0 if scheduled["reason"] == UNSCHEDULABLE and not message.startswith(GANG_WORDS) else 1
            told += 2 * (scheduled["reason"] != UNSCHEDULABLE)
            waiting = Unplaced(pod["metadata"]["name"], message, parse_timestamp(since) if since else now)
            found.append((told, waiting))
    if not found:
        return None
    best = min(found, key=lambda each: (each[0], each[1].since, each[1].pod))[1]
    return replace(best, since=min(waiting.since for _, waiting in found))


def all_placed(pods: Sequence[Mapping[str, Any]], nodes: int) -> bool:
    """Whether every pod of the gang exists and was placed on a node (or is past that)."""
    return len(pods) >= nodes and not any(map(_waits_for_a_node, pods))


def job_condition(child_job: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    conditions = (child_job.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None)


def holds_a_node(pod: Mapping[str, Any]) -> bool:
    """Running, or waiting to (for a node, or on one): a pod whose deletion stops something."""
    return pod_phase(pod) in (PodPhase.PENDING, PodPhase.RUNNING) and not being_deleted(pod)


def still_saving(pod: Mapping[str, Any], now: datetime) -> bool:
    """Running, or not started yet: a pod being deleted may still be saving its checkpoint, until its
    deletionTimestamp, when its grace period ends and the kubelet kills it. One still shown after that is
    on a node that does not answer, and is not waited for."""
    if pod_phase(pod) not in (PodPhase.PENDING, PodPhase.RUNNING):
        return False
    deleted = pod["metadata"].get("deletionTimestamp")
    return deleted is None or parse_timestamp(deleted) > now


def placed(pod: Mapping[str, Any]) -> bool:
    return pod_scheduled(pod).get("status") == "True" and not being_deleted(pod)


def whole_gang_up(pods: Sequence[Mapping[str, Any]], nodes: int) -> bool:
    """Whether every pod of the gang is running (or already done) and at least one runs: a gang part of
    which still waits for a node trains nothing, since every rank joins each collective."""
    phases = [pod_phase(pod) for pod in pods if not being_deleted(pod)]
    return (
        len(phases) >= nodes
        and PodPhase.RUNNING in phases
        and all(p in (PodPhase.RUNNING, PodPhase.SUCCEEDED) for p in phases)
    )


def as_said(pod: Mapping[str, Any], exit_code: int, message: str, at: datetime) -> dict[str, Any]:
    """`pod` as the gang policy and the status take it once its agent said that its workload ended with `exit_code`
    and the termination message `message`: Failed, its trainer container terminated so. (A gang that restarts in
    place: the pod runs on while its agent waits for the verdict, and an in-place restart would leave the kubelet
    no record of that exit.)"""
    status = pod.get("status") or {}
    terminated = {"exitCode": exit_code, "reason": CONTAINER_ERROR, "message": message, "finishedAt": timestamp(at)}
    trainer = {"name": naming.TRAINER_CONTAINER, "state": {"terminated": terminated}}
    others = [c for c in status.get("containerStatuses") or [] if c.get("name") != naming.TRAINER_CONTAINER]
    return {**pod, "status": {**status, "phase": PodPhase.FAILED, "containerStatuses": [*others, trainer]}}


def disruption_target(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's DisruptionTarget condition where it is True (evicted, preempted, its node drained or lost); {}
    otherwise."""
    conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
    return next((c for c in conditions if (c.get("type"), c.get("status")) == (DISRUPTION_TARGET, "True")), {})


def replaceable(pod: Mapping[str, Any]) -> bool:
    """Whether a disruption took the pod where its Job's controller makes a replacement that the scheduler can place:
    evicted, its node drained or lost. Not one the scheduler preempted: its replacement would wait for the room the
    preemptor took while the rest of the gang holds its nodes."""
    disruption = disruption_target(pod)
    return bool(disruption) and disruption.get("reason") != PREEMPTION_BY_SCHEDULER


def without_replaced(pods: Sequence[Mapping[str, Any]], replaced: Collection[str]) -> list[Mapping[str, Any]]:
    """The pods of a gang restarted in place, less those a disruption took that are replaced: the ones the restart
    named (`replaced`, their uids), and any that ended disrupted and has a newer pod of its index."""
    newest: dict[int | None, str] = {}
    for pod in pods:
        index, created = pod_index(pod), pod["metadata"].get("creationTimestamp") or ""
        newest[index] = max(newest.get(index, ""), created)

    def superseded(pod: Mapping[str, Any]) -> bool:
        finished = pod_phase(pod) in (PodPhase.FAILED, PodPhase.SUCCEEDED) or being_deleted(pod)
        created = pod["metadata"].get("creationTimestamp") or ""
        return finished and bool(disruption_target(pod)) and created < newest[pod_index(pod)]

    return [pod for pod in pods if pod["metadata"].get("uid") not in replaced and not superseded(pod)]


def being_deleted(obj: Mapping[str, Any]) -> bool:
    """Whether the API server is deleting `obj` (a pod, a Job, the ScaleTrainJob): it has a deletionTimestamp."""
    return obj["metadata"].get("deletionTimestamp") is not None


MAX_WAITING_SHOWN = 4  # pods a waiting message names, before "and N more"


def waiting_for(pods: Sequence[Mapping[str, Any]], nodes: int) -> str:
    """Which pods of the gang are not running yet, and why, each in the words of whoever holds it up: the
    scheduler's message, the kubelet's waiting reason, or the Job controller not having made it yet."""
    running = sum(pod_phase(pod) == PodPhase.RUNNING and not being_deleted(pod) for pod in pods)
    waiting = sorted(
        (pod for pod in pods if pod_phase(pod) == PodPhase.PENDING or being_deleted(pod)),
        key=lambda pod: pod["metadata"]["name"],
    )
    parts = [f"pod {pod['metadata']['name']} ({_why_pending(pod)})" for pod in waiting]
    if (missing := nodes - len(pods)) > 0:
        parts.append(f"{missing} pod{'s' * (missing > 1)} the Job controller has not created yet")
    if len(parts) > MAX_WAITING_SHOWN:
        parts = [*parts[:MAX_WAITING_SHOWN], f"and {len(parts) - MAX_WAITING_SHOWN} more"]
    return f"{running} of {nodes} pods running; waiting for " + "; ".join(parts) if parts else ""


def _why_pending(pod: Mapping[str, Any]) -> str:
    """Why one Pending pod is not running: not placed (and the scheduler's why), or placed and starting
    (and the kubelet's why: pulling its image, creating its container, a volume it waits for)."""
    if being_deleted(pod):
        return "being deleted"
    scheduled = pod_scheduled(pod)
    if gates := [gate.get("name") for gate in (pod.get("spec") or {}).get("schedulingGates") or ()]:
        # Whoever added a gate (Kueue's topology assignment, a quota controller) lets the pod be placed.
        return f"held back from scheduling by the gate{'s' * (len(gates) > 1)} {', '.join(map(str, gates))}"
    if scheduled.get("status") == "False":
        reason = "the scheduler cannot place it" if scheduled.get("reason") in NOT_PLACED else scheduled.get("reason")
        return f"{reason}: {scheduled.get('message', '')}".rstrip(": ")
    node = (pod.get("spec") or {}).get("nodeName")
    if scheduled.get("status") != "True" or not node:
        return "not placed on a node yet"
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        if waiting := (container.get("state") or {}).get("waiting"):
            detail = f": {waiting['message']}" if waiting.get("message") else ""
            return f"{waiting.get('reason', 'waiting')} on node {node}{detail}"
    return f"starting on node {node}"


def pod_index(pod: Mapping[str, Any]) -> int | None:
    """The pod's completion index (its rank among the gang's nodes); None without an index of ASCII digits."""
    return naming.whole_number((pod["metadata"].get("annotations") or {}).get(naming.COMPLETION_INDEX_ANNOTATION))


def pod_phase(pod: Mapping[str, Any]) -> str:
    """The pod's phase (a PodPhase's word); Pending until the kubelet or the scheduler says more."""
    return (pod.get("status") or {}).get("phase", PodPhase.PENDING)
