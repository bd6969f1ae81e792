"""Builders for what the operator's decide layer reads of an elastic gang: the job, its gang's Job, its pods
as the scheduler left them, and a capacity probe with its pods."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scaletrain_operator.api.models import ScaleTrainJob, parse_job
from scaletrain_operator.api.naming import COMPLETION_INDEX_ANNOTATION, LABEL_GENERATION
from scaletrain_operator.controller.decision import ChildJobPatch, Observed
from scaletrain_operator.render.capacity_probe import render_probe
from scaletrain_operator.render.child_annotations import with_spec_hash
from scaletrain_operator.render.children import render_job, render_master_alias, render_service

from .jobs import base_job

ELASTIC = {"minNodes": 2, "scaleDownAfterSeconds": 120, "scaleUp": {"checkEverySeconds": 300}}
PROBE_CLASS = "scaletrain-capacity-probe"  # the chart's PriorityClass for probes (value 0, preemptionPolicy Never)


def operator_suspends(child_job: str, spec_generation: int = 1, **annotations: str) -> ChildJobPatch:
    """The patch by which the operator suspends a gang's Job, saying on it that it did so, and at which spec
    generation (and, for a resize, the `annotations` that go with it)."""
    noted = {"scaletrain.io/suspended-at-spec-generation": str(spec_generation), **annotations}
    return ChildJobPatch(child_job, {"suspend": True}, noted)


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def elastic_job(status: dict[str, Any] | None = None, **spec: Any) -> ScaleTrainJob:
    """A 3-node job that may run at 2 (24 samples a step: 4 micro-batches of 2 a rank at 3 nodes, 6 at 2)."""
    elastic_spec = {"nodes": 3, "elastic": ELASTIC, "training": {"globalBatchSize": 24, "microBatchSize": 2}}
    document = base_job(**(elastic_spec | spec))
    document["metadata"]["generation"] = 1
    if status:
        document["status"] = status
    return parse_job(document)


def gang_job(
    job: ScaleTrainJob,
    generation: int,
    nodes: int,
    *,
    created: datetime,
    suspend: bool | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The Job of gang `generation` at `nodes` nodes, as the API server holds it."""
    child = with_spec_hash(render_job(job.at_size(nodes), generation))
    child["metadata"]["creationTimestamp"] = rfc3339(created)
    # The Job controller's own labels, which the API server adds to the template of every Job.
    uid = f"uid-demo-g{generation}"
    child["spec"]["template"]["metadata"]["labels"] |= {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": f"demo-g{generation}",
        "controller-uid": uid,
        "job-name": f"demo-g{generation}",
    }
    child["metadata"]["annotations"] |= annotations or {}
    if suspend is not None:
        child["spec"]["suspend"] = suspend
    child["status"] = {}
    return child


def gang_pod(
    index: int, phase: str, generation: int = 0, *, scheduled: bool | None = True, since: datetime | None = None
) -> dict[str, Any]:
    """A pod of a gang: placed on a node (`scheduled`), found no node since `since` (False), or not looked at
    yet by the scheduler (None)."""
    metadata = {
        "name": f"demo-g{generation}-{index}-abcde",
        "annotations": {COMPLETION_INDEX_ANNOTATION: str(index)},
        "labels": {LABEL_GENERATION: str(generation)},
    }
    return {"metadata": metadata, "status": {"phase": phase, "conditions": _placement(scheduled, since)}}


def probe_pod(number: int, *, scheduled: bool | None, since: datetime | None = None) -> dict[str, Any]:
    metadata = {"name": f"demo-probe-{number}", "labels": {"scaletrain.io/capacity-probe": "true"}}
    return {"metadata": metadata, "status": {"phase": "Pending", "conditions": _placement(scheduled, since)}}


def _placement(scheduled: bool | None, since: datetime | None) -> list[dict[str, Any]]:
    if scheduled is None:
        return []
    if scheduled:
        return [{"type": "PodScheduled", "status": "True"}]
    message = "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu."
    moment = rfc3339(since) if since is not None else None
    return [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
             "lastTransitionTime": moment}]  # fmt: skip


def observed(
    job: ScaleTrainJob,
    jobs: dict[int, dict[str, Any]],
    pods: list[dict[str, Any]],
    probe: dict[str, Any] | None = None,
    probe_pods: list[dict[str, Any]] | None = None,
) -> Observed:
    services = {s["metadata"]["name"]: s for s in (render_service(job), render_master_alias(job))}
    return Observed(services=services, jobs=jobs, pods=pods, probe=probe, probe_pods=probe_pods or [])


def probe_of(job: ScaleTrainJob, gang: dict[str, Any], pods: int, created: datetime) -> dict[str, Any]:
    """The capacity probe the operator made for `job`'s running gang `gang`, as the API server holds it."""
    probe = render_probe(job, pods, gang, PROBE_CLASS)
    probe["metadata"]["creationTimestamp"] = rfc3339(created)
    return probe
