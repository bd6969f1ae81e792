"""Decisions about a gang's placement (render/workload.py renders it): whether the cluster can place the
job as it asks, and whether the pods were placed by the job's own Workload."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..api.models import ScaleTrainJob
from ..render.workload import (
    GROUP_TEMPLATE_ANNOTATION,
    WORKLOAD_API_VERSION,
    placed_by_workload,
    pod_group_name,
    workload_topology,
)

GANG_UNAVAILABLE = (
    f"spec.scheduling.gang is workload, but the API server does not serve {WORKLOAD_API_VERSION} Workloads "
    "(feature gates GenericWorkload and WorkloadWithJob); set it to auto to run without gang placement here"
)
TOPOLOGY_UNAVAILABLE = (
    "spec.placement.topology.required needs gang placement or a queue, and the API server does not serve "
    f"{WORKLOAD_API_VERSION} Workloads (feature gates GenericWorkload and WorkloadWithJob): set queueName to "
    "a Kueue queue with Topology Aware Scheduling, or remove the topology"
)


def unavailable(job: ScaleTrainJob, workload_api: bool) -> str | None:
    """Why the job cannot run on this cluster as it asks, else None: gang: workload, or a required topology
    that only a Workload would keep (no queue), where the cluster serves no Workloads."""
    if job.spec.scheduling.gang == "workload" and not workload_api:
        return GANG_UNAVAILABLE
    if workload_topology(job) is not None and not placed_by_workload(job.spec, workload_api):
        return TOPOLOGY_UNAVAILABLE
    return None


def foreign_pod_group(child_job: dict[str, Any], workload: str, pods: Sequence[Mapping[str, Any]]) -> str | None:
    """The PodGroup of a pod of `child_job`'s gang that Workload `workload` did not make: the Job controller
    takes the first Workload whose spec.controllerRef names the job, and anyone who may create Workloads in the
    namespace can make one that does (with another gang size). None: every pod is in the job's own group."""
    template = ((child_job.get("metadata") or {}).get("annotations") or {}).get(GROUP_TEMPLATE_ANNOTATION)
    if template is None:
        return None
    ours = pod_group_name(workload, template)
    groups = {((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName") for pod in pods}
    return next((group for group in sorted(groups - {None, ours})), None)


def same_gang(there: dict[str, Any], rendered: dict[str, Any]) -> bool:
    """Whether the Workload `there` asks for what `rendered` does: each field the renderer sets is the
    same (the API server adds defaults of its own to the rest)."""
    templates = {template.get("name"): template for template in there.get("spec", {}).get("podGroupTemplates") or ()}
    for wanted in rendered["spec"]["podGroupTemplates"]:
        found = templates.get(wanted["name"], {})
        if any(found.get(key) != value for key, value in wanted.items()):
            return False
        if "schedulingConstraints" not in wanted and found.get("schedulingConstraints"):
            return False
    return len(templates) == len(rendered["spec"]["podGroupTemplates"])
