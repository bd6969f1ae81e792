"""Decisions about a gang's placement (render/workload.py renders it): whether the cluster can place the
job as it asks, which Workloads besides the job's own name it, and whether the pods were placed by the job's
own Workload."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..api import naming
from ..api.job import ScaleTrainJob
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


def claimed_job(workload: Mapping[str, Any]) -> str | None:
    """The ScaleTrainJob that a Workload names as its controller (spec.controllerRef), by name; None if it names
    none. Anyone who may create Workloads in a namespace may name any job of it: the name proves nothing."""
    ref = (workload.get("spec") or {}).get("controllerRef") or {}
    return ref.get("name") if (ref.get("apiGroup"), ref.get("kind")) == (naming.GROUP, naming.KIND) else None


def foreign_workloads(claims: Iterable[dict[str, Any]], own: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Workloads among `claims` that name the job of its Workload `own` in their spec.controllerRef, as `own`
    does, but are not it (by name), sorted by name. The Job controller places a gang through the first Workload it
    finds that names the job (findParentWorkload in pkg/controller/job, Kubernetes 1.37: no tie-break, no owner
    check), so any other one may take the gang, into a group of another size or none. The one of `own`'s name is
    the job's, or a name conflict its create finds (controller/cluster.py)."""
    job, name = claimed_job(own), own["metadata"]["name"]
    others = [claim for claim in claims if claimed_job(claim) == job and claim["metadata"]["name"] != name]
    return sorted(others, key=lambda claim: claim["metadata"]["name"])


def held_back_by(others: Sequence[Mapping[str, Any]], own: str) -> str:
    """Why no gang of the job starts while the Workloads `others` name it (`foreign_workloads`), and what to do."""
    names = ", ".join(other["metadata"]["name"] for other in others)
    return (
        f"Workload {names} in this namespace names this job in its spec.controllerRef, as the job's own Workload "
        f"{own} does, and the Job controller places a gang through whichever of them it finds first (in a group of "
        f"another size, or none). No gang starts while another Workload names the job: delete Workload {names}"
    )


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
