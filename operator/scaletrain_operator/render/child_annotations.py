"""What the operator writes on a gang's Job besides its spec, and reads back from it: the spec hash (what the
running gang cannot take in place), the job's counts when the Job was made (policy/ledger.py), an elastic resize
under way, the operator's own suspension and restart backoff, and how the gang before it ended. On the Job, made
or patched in the same write as what they describe, so that a lost status write cannot lose them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..api import naming
from ..api.conditions import ResizeReason
from ..api.timestamps import parse_timestamp
from ..render.children import generation_free
from ..render.workload import GROUP_TEMPLATE_ANNOTATION

SPEC_HASH_ANNOTATION = f"{naming.GROUP}/spec-hash"
# On each child Job: what the job had counted when it was made (Ledger). They are created with the Job,
# in one write, so a status patch that was lost cannot lose a restart (and so allow one more than
# maxRestarts), a disruption, or a node to avoid.
RESTARTS_ANNOTATION = f"{naming.GROUP}/restarts"
DISRUPTIONS_ANNOTATION = f"{naming.GROUP}/disruptions"
EXCLUDED_NODES_ANNOTATION = f"{naming.GROUP}/excluded-nodes"  # a JSON list
# On a gang's Job, with the suspension that stops it: the size the next gang has, and why (an elastic
# resize). One patch sets both, so the resize cannot be lost or half made.
RESIZE_TO_ANNOTATION = f"{naming.GROUP}/resize-to"
RESIZE_REASON_ANNOTATION = f"{naming.GROUP}/resize-reason"
# On a gang's Job the operator suspended: the spec generation that asked for it. A Job suspended without it was
# suspended by someone else (Kueue, which creates every Job it manages suspended and admits it by un-suspending it,
# or another admission controller): the gang waits for them, and that is never taken for the user's resume.
SUSPENDED_BY_OPERATOR_ANNOTATION = f"{naming.GROUP}/suspended-at-spec-generation"
# On a gang's Job made suspended to wait out spec.restartBackoff: when the operator un-suspends it (RFC 3339); on a
# gang's Job restarted in place: when its barrier released (releases) the generation, kept as when that gang
# started. On the Job, so that a lost status write cannot lose the wait.
START_AFTER_ANNOTATION = f"{naming.GROUP}/start-after"
# On the Job a restart after a failure made: how the gang before it ended (its record, and the restart's reason and
# message, which name the failed pod and its exit). Made with the Job, in one write, as the Ledger is: a status
# write that was lost, or an operator killed before it, cannot lose them (`_recover_gang_end`).
ENDED_GANG_ANNOTATION = f"{naming.GROUP}/previous-gang-ended"
# On a gang's Job whose gang was restarted in place: the generation its pods run now. The Job keeps the name and
# label of the generation it was made for; without this annotation, that is the one it runs.
GANG_GENERATION_ANNOTATION = f"{naming.GROUP}/gang-generation"
# On a gang's Job restarted in place: the uids of its pods a disruption took (evicted, their node drained or lost),
# which the Job controller replaces (render/in_place.py's podFailurePolicy), so that they are judged no more. A JSON
# list, newest last, of at most as many as the gang has pods: an older one has a newer pod of its index by then.
REPLACED_PODS_ANNOTATION = f"{naming.GROUP}/replaced-pods"


def _spec_hash(rendered_job: Mapping[str, Any]) -> str:
    """What a running gang cannot take in place: the rendered Job without what each generation has of
    its own, its owner, and the suspend flag and deadline (which a Job accepts as updates)."""
    shape = generation_free(rendered_job)
    shape["spec"].pop("suspend", None)
    shape["spec"].pop("activeDeadlineSeconds", None)
    shape["metadata"].pop("ownerReferences", None)
    # Whether the cluster serves the Workload API (found at the operator's start) is no change of the job's:
    # an operator that starts on an upgraded cluster must not restart every running gang for it.
    annotations = shape["metadata"].pop("annotations", {})
    annotations.pop(GROUP_TEMPLATE_ANNOTATION, None)
    if annotations:
        shape["metadata"]["annotations"] = annotations
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


def with_spec_hash(rendered_job: dict[str, Any]) -> dict[str, Any]:
    rendered_job["metadata"].setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = _spec_hash(rendered_job)
    return rendered_job


def hash_of(child_job: Mapping[str, Any]) -> str | None:
    return (child_job["metadata"].get("annotations") or {}).get(SPEC_HASH_ANNOTATION)


def gang_generation(child_job: Mapping[str, Any]) -> int | None:
    """The gang generation `child_job` runs: GANG_GENERATION_ANNOTATION's, else its label's; None for a Job that
    carries neither (a capacity probe's)."""
    metadata = child_job["metadata"]
    annotated = naming.whole_number((metadata.get("annotations") or {}).get(GANG_GENERATION_ANNOTATION))
    return (
        annotated
        if annotated is not None
        else naming.whole_number((metadata.get("labels") or {}).get(naming.LABEL_GENERATION))
    )


def replaced_pods(child_job: Mapping[str, Any]) -> list[str]:
    """REPLACED_PODS_ANNOTATION's uids; none where it is not a JSON list of strings (anyone who may edit Jobs may
    write it)."""
    try:
        said = json.loads((child_job["metadata"].get("annotations") or {}).get(REPLACED_PODS_ANNOTATION) or "[]")
    except ValueError:
        return []
    return [uid for uid in said if isinstance(uid, str)] if isinstance(said, list) else []


def with_replaced(child_job: Mapping[str, Any], uids: list[str]) -> str:
    """REPLACED_PODS_ANNOTATION's value once `uids` are replaced too: the newest as many as the gang has pods."""
    kept = [uid for uid in replaced_pods(child_job) if uid not in uids]
    return json.dumps([*kept, *uids][-size_of(child_job) :])


def size_of(child_job: Mapping[str, Any]) -> int:
    """The nodes of a gang: its Job's completions (one pod per node)."""
    return int(child_job["spec"]["completions"])


def planned_resize(child_job: Mapping[str, Any] | None) -> tuple[int | None, ResizeReason]:
    """The size an elastic resize under way gives the next gang (None: none is), and why."""
    annotations = (child_job or {}).get("metadata", {}).get("annotations") or {}
    reason = annotations.get(RESIZE_REASON_ANNOTATION)
    if reason not in RESIZE_WHY:
        return None, ResizeReason.SCALED
    return naming.whole_number(annotations.get(RESIZE_TO_ANNOTATION)), ResizeReason(reason)


def child_job_suspended(child_job: Mapping[str, Any]) -> bool:
    return bool((child_job.get("spec") or {}).get("suspend"))


def suspension_note(child_job: Mapping[str, Any]) -> str | None:
    return (child_job["metadata"].get("annotations") or {}).get(SUSPENDED_BY_OPERATOR_ANNOTATION)


def suspended_by_operator(child_job: Mapping[str, Any]) -> bool:
    return child_job_suspended(child_job) and suspension_note(child_job) is not None


def gang_started(child_job: Mapping[str, Any]) -> datetime | None:
    """When the gang of `child_job` started: its Job was made, or un-suspended after a restart backoff."""
    created = child_job["metadata"].get("creationTimestamp")
    moments = (parse_timestamp(created) if created else None, start_after(child_job))
    return max((moment for moment in moments if moment is not None), default=None)


def start_after(child_job: Mapping[str, Any]) -> datetime | None:
    """START_AFTER_ANNOTATION's time; None without one, or for one that is not an RFC 3339 time in UTC (anyone
    who may edit Jobs may write it)."""
    text = (child_job["metadata"].get("annotations") or {}).get(START_AFTER_ANNOTATION)
    try:
        moment = parse_timestamp(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return moment if moment is not None and moment.utcoffset() is not None else None


def held_until(child_job: Mapping[str, Any]) -> datetime | None:
    """When the operator un-suspends the gang's Job it made suspended to wait out spec.restartBackoff."""
    return start_after(child_job) if suspended_by_operator(child_job) else None


RESIZE_WHY: dict[ResizeReason, str] = {  # an elastic resize's reasons, in words (Scaled: as a growth on a probe's word)
    ResizeReason.SCALED: "spec.nodes was raised above the gang's size, and a capacity probe found room",
    ResizeReason.UNSCHEDULABLE: "the scheduler could not place the whole gang within elastic.scaleDownAfterSeconds",
    ResizeReason.CAPACITY_RETURNED: "a capacity probe found room for a larger gang",
    ResizeReason.CAPACITY_TAKEN: (
        "the larger gang a capacity probe found room for could not be placed: the room was taken"
    ),
}
