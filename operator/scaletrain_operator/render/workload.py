"""Gang placement: the scheduler places all of a gang's pods at once, or none of them.

Without it, half a gang can hold its nodes while the other half waits for room, and two half-placed
gangs can wait for each other forever. Kubernetes 1.36+ places gangs natively (the Workload API,
scheduling.k8s.io/v1beta1: feature gates GenericWorkload and WorkloadWithJob, off by default in 1.37):

- each ScaleTrainJob has one `Workload`, owned by it, whose pod group template asks for a gang of
  `nodes` pods (and, with placement.topology.required, one domain of that node label);
- each gang generation's Job names a template of it in the annotation GROUP_TEMPLATE_ANNOTATION: the
  Job controller then makes the Job's runtime PodGroup from it and puts the Job's pods in that group (it
  manages Workloads itself only for a Job without a controller owner; ours has one, the ScaleTrainJob);
- kube-scheduler's GangScheduling plugin binds no pod of a group until all of them fit.

A gang restart reuses the Workload. Its two templates, alike but for their names, take turns by
generation, because the Job controller names a delegated PodGroup after the Workload and the template
alone (computePodGroupName in pkg/controller/job, Kubernetes 1.37), and the last gang's PodGroup stays
until its last pod is gone (PodGroup protection): with one template the next gang's Job could make no
PodGroup while the last gang's pods still checkpoint on their SIGTERM, and the Job controller retried
with a backoff that doubles up to 60 s.

`spec.scheduling.gang` chooses: auto uses the Workload API where the API server serves it (discovery, at
the operator's start), workload requires it, none leaves each pod to the scheduler.
"""

from __future__ import annotations

from typing import Any

from ..api import naming
from ..api.job import ScaleTrainJob
from ..api.spec import ScaleTrainJobSpec

WORKLOAD_GROUP = "scheduling.k8s.io"
WORKLOAD_VERSION = "v1beta1"
WORKLOAD_API_VERSION = f"{WORKLOAD_GROUP}/{WORKLOAD_VERSION}"
WORKLOAD_PLURAL = "workloads"
GROUP_TEMPLATE_ANNOTATION = f"{WORKLOAD_GROUP}/group-template-name"
GANG_TOPOLOGY_ANNOTATION = f"{naming.GROUP}/gang-topology"  # on a Job: the topology of its gang's Workload
# The Workload's pod group templates: the gang of an even generation's Job, and of an odd one's.
GANG_TEMPLATES = ("gang-even", "gang-odd")


def placed_by_workload(spec: ScaleTrainJobSpec, workload_api: bool) -> bool:
    """Whether the job's gangs are placed through a Workload, given whether the cluster serves the API."""
    return spec.scheduling.gang == "workload" or (spec.scheduling.gang == "auto" and workload_api)


def workload_topology(job: ScaleTrainJob) -> str | None:
    """The node label all of the gang must share a value of that the Workload alone keeps: a required
    topology without a queue (with one, Kueue's Topology Aware Scheduling keeps it)."""
    topology = job.spec.placement.topology
    return topology.required if topology is not None and job.queue is None else None


def workload_of(job: ScaleTrainJob, metadata: dict[str, Any]) -> dict[str, Any]:
    """The job's Workload (`metadata` as its other children have it): a gang of `nodes` pods, with the
    job's priority, and all in one domain of placement.topology.required's label; once per template."""
    spec = job.spec
    gang: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": spec.nodes}}}
    topology = spec.placement.topology
    if topology is not None and topology.required is not None:
        gang["schedulingConstraints"] = {"topology": [{"key": topology.required}]}
    if spec.priority_class_name:
        gang["priorityClassName"] = spec.priority_class_name
    return {
        "apiVersion": WORKLOAD_API_VERSION,
        "kind": "Workload",
        "metadata": metadata,
        "spec": {
            "controllerRef": {"apiGroup": naming.GROUP, "kind": naming.KIND, "name": job.name},
            "podGroupTemplates": [{"name": name, **gang} for name in GANG_TEMPLATES],
        },
    }


def _template_of(gang_generation: int) -> str:
    """The Workload's template that gang `generation` is placed by: not the last gang's."""
    return GANG_TEMPLATES[gang_generation % len(GANG_TEMPLATES)]


def delegated(rendered_job: dict[str, Any], job: ScaleTrainJob, gang_generation: int) -> dict[str, Any]:
    """A rendered Job whose pods the Job controller puts in a PodGroup of the job's Workload. A topology the
    Workload alone keeps is said on the Job too: a change of it is then a change of the Job's spec (its
    hash, controller/reconcile.py), and the next gang is placed by the new one."""
    annotations = rendered_job["metadata"].setdefault("annotations", {})
    annotations[GROUP_TEMPLATE_ANNOTATION] = _template_of(gang_generation)
    if (topology := workload_topology(job)) is not None:
        annotations[GANG_TOPOLOGY_ANNOTATION] = topology
    return rendered_job


# kube's rand.SafeEncodeString alphabet (k8s.io/apimachinery/pkg/util/rand), which the Job controller's PodGroup
# names end in.
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def pod_group_name(workload: str, template: str) -> str:
    """The name the Job controller gives the PodGroup it makes from `template` of Workload `workload`
    (computePodGroupName in pkg/controller/job of Kubernetes 1.37): both names, and an FNV-1a hash of them.
    The names here are short enough never to be cut."""
    hashed = 0x811C9DC5
    for byte in (workload + template).encode():
        hashed = ((hashed ^ byte) * 0x01000193) & 0xFFFFFFFF
    encoded = "".join(_SAFE_ALPHABET[ord(char) % len(_SAFE_ALPHABET)] for char in str(hashed))
    return f"{workload}-{template}-{encoded}"
