"""The steps of an elastic gang's reconcile: the size its current gang runs at, shrinking when pods cannot be placed
or were lost, probing for room to grow back to spec.nodes (render/capacity_probe.py), and resizing at a step
boundary. reconcile.py calls them; the sizes themselves are policy/elastic.py's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..api.conditions import STOPPING, ConditionType, EventReason, JobPhase, ResizeReason
from ..api.job import ScaleTrainJob
from ..api.job_status import Resize
from ..api.timestamps import parse_timestamp, timestamp
from ..policy import elastic
from ..policy.pods import (
    node_counts,
    placed,
    pod_scheduled,
)
from ..render import capacity_probe
from ..render.child_annotations import (
    RESIZE_REASON_ANNOTATION,
    RESIZE_TO_ANNOTATION,
    RESIZE_WHY,
    planned_resize,
    size_of,
)
from ..validation import elastic_sizes
from .decision import Decision, Draft, Event, Observed, current_gang, suspension


def at_gang_size(job: ScaleTrainJob, observed: Observed) -> ScaleTrainJob:
    """`job` as its current gang renders and is judged: spec.nodes is the gang's size (elastic.gang_size)."""
    if job.spec.elastic is None:
        return job
    current = observed.jobs.get(current_gang(job.named_gang, observed))
    # A gang whose Job is gone (deleted by someone else) had the size the status says.
    recorded = job.status.nodes.current if job.status is not None and job.status.nodes.current else None
    running = size_of(current) if current is not None else recorded
    return job.at_size(elastic.gang_size(job.spec, running, planned_resize(current)[0]))


def shrink_target(
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
    if grown is not None and _grew(grown) and grown.to_nodes == size and not _ran_since(asked, grown.time):
        if grown.from_nodes in elastic_sizes.sizes(asked.spec):
            return grown.from_nodes, ResizeReason.CAPACITY_TAKEN
    smaller = elastic.smaller(asked.spec, size, sum(placed(pod) for pod in pods))
    return (smaller, ResizeReason.UNSCHEDULABLE) if smaller is not None else None


def _ran_since(job: ScaleTrainJob, moment: datetime) -> bool:
    """Whether the job turned Running (a whole gang up) at or after `moment`."""
    conditions = job.status.conditions if job.status is not None else []
    running = next((c for c in conditions if c.type == ConditionType.RUNNING and c.status == "True"), None)
    return running is not None and running.last_transition_time >= moment


def _failed_growths(asked: ScaleTrainJob) -> int:
    """How many times in a row, up to now, the gang grew on a probe's word and then could not be placed (the
    room was taken meanwhile, or the probe's pods fit where the gang's do not): each doubles the time to the
    next probe."""
    resizes = asked.status.resizes if asked.status is not None else []
    count, end = 0, len(resizes)
    while end >= 2 and _grew(resizes[end - 2]) and resizes[end - 1].reason == ResizeReason.CAPACITY_TAKEN:
        count, end = count + 1, end - 2
    return count


def _grew(resize: Resize) -> bool:
    """Whether `resize` grew the gang (on a probe's word: an elastic gang grows no other way while its size is
    allowed), back toward the size it lost room at (CapacityReturned) or beyond, up to a spec.nodes raised since
    (Scaled; `_growth_reason`)."""
    return (
        resize.reason in (ResizeReason.CAPACITY_RETURNED, ResizeReason.SCALED) and resize.to_nodes > resize.from_nodes
    )


def _growth_reason(asked: ScaleTrainJob, size: int, target: int) -> ResizeReason:
    """Why a gang of `size` grows to `target` on a probe's word. The probe only says that there is room; what
    the resize is recorded for is what made the gang smaller than `target`. Up to the size it had before it lost
    room, that is the room that went and came back: CapacityReturned. Beyond it, only spec.nodes raised since
    (kubectl scale, an autoscaler) lets it grow: Scaled, also where both happened (a gang that shrank from 4 to 2
    and was scaled to 6 grows to 6 as Scaled, to 4 as CapacityReturned), since the user's change decided the
    size."""
    return ResizeReason.CAPACITY_RETURNED if target <= _size_before_lost_room(asked, size) else ResizeReason.SCALED


def _size_before_lost_room(asked: ScaleTrainJob, size: int) -> int:
    """The size the job's gang had before it lost room, from status.resizes: the size spec.nodes last set (the
    newest Scaled resize's), else the largest the records name (the first gang's, spec.nodes then: shrinks and
    growths back only stay below it), else `size` (no resize yet: the gang has the size it was made at)."""
    resizes = asked.status.resizes if asked.status is not None else []
    scaled = [resize.to_nodes for resize in resizes if resize.reason == ResizeReason.SCALED]
    if scaled:
        return scaled[-1]
    return max((nodes for resize in resizes for nodes in (resize.from_nodes, resize.to_nodes)), default=size)


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
    if (failed := _failed_growths(asked)) >= MAX_FAILED_GROWTHS:
        return (
            f"the gang grew on a probe's word {failed} times in a row and could not be placed (the probe's pods fit "
            "where the gang's do not): no more probes until kubectl scale sets a size"
        )
    return None


def grow_back(
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
            draft.events.append(Event("Warning", EventReason.CAPACITY_PROBE_FAILED, f"no capacity probe: {why_not}"))
            return None
        if (due := _next_probe_in(asked, draft, current, spec.elastic.scale_up.check_every_seconds)) > 0:
            draft.recheck_in(due)
            return None
        draft.new_probe = capacity_probe.render_probe(asked, spec.nodes - size, current, priority_class)
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
        reason = _growth_reason(asked, size, target)
        return resize_at_step_boundary(draft, current, observed.pods, target, reason, why)
    if not observed.probe_pods:  # admission refused its pods (a quota, a policy), or the Job controller is stuck
        name = probe["metadata"]["name"]
        message = (
            f"capacity probe {name} made no pod in {capacity_probe.PROBE_TIMEOUT_S} s (the Events of Job {name} say "
            "why, e.g. a quota or a policy that refused its pods): the gang trains on at its size"
        )
        draft.events.append(Event("Warning", EventReason.CAPACITY_PROBE_FAILED, message))
    draft.recheck_in(max(_next_probe_in(asked, draft, current, spec.elastic.scale_up.check_every_seconds), 1))
    return None


def _next_probe_in(asked: ScaleTrainJob, draft: Draft, current: Mapping[str, Any], check_every: int) -> float:
    """Seconds until the next capacity probe is due: `check_every` (doubled for each failed growth in a row,
    `_failed_growths`) after the last probe started, or after the gang's Job was made."""
    every = check_every * 2 ** min(_failed_growths(asked), MAX_FAILED_GROWTHS)
    now, created = draft.status.now, current["metadata"].get("creationTimestamp")
    last = max(filter(None, (draft.status.before.capacity_probed_at, parse_timestamp(created) if created else now)))
    return every - (now - min(last, now)).total_seconds()  # a clock ahead of ours delays no probe


def resize_at_step_boundary(
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
    patch = suspension(status.spec_generation, current, annotations)
    status.fields["nodes"] = node_counts(pods, size).model_dump(mode="json", by_alias=True)
    message = (
        f"the gang resizes from {size} to {target} nodes ({RESIZE_WHY[reason]}: {why}): its pods save a checkpoint "
        "after the step they are in, then the next gang starts"
    )
    return draft.done(status.phase(JobPhase.RESTARTING, message, STOPPING), patch)
