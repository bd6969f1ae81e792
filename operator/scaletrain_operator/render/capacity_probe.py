"""The capacity probe: how an elastic gang below spec.nodes learns that room for more nodes returned.

It asks the scheduler itself, so that nothing here re-implements it: a Job of placeholder pods, one for
each node the gang lacks, with the gang's own placement (node selector, affinity, tolerations, scheduler,
the nodes it avoids), the same requests, host ports and volume claims as a pod of the gang. A gang whose
pods need what a placeholder cannot ask for as well (devices claimed through resourceClaims, generic
ephemeral volumes) is not probed for (`cannot_speak_for`). Each pod the scheduler places is room for
one more node. The probe is deleted as soon as the scheduler placed every pod of it or said it cannot (or
after PROBE_TIMEOUT_S); its pods only sleep until then.

The pods take the operator's probe PriorityClass (the chart makes it, with preemptionPolicy Never): a
probe never preempts anything. Without one there is no probe.
Each is placed on its own (not as a gang), so the scheduler says how many fit, and the gang grows to the
largest allowed size that does. The running gang keeps training all the while: if no room is found, or
the API server refuses the probe, nothing changes; if room is found, the gang stops at a step boundary
with a checkpoint, and the larger one starts. Another pod may take the room in between; the larger gang
then waits, and goes back to the size it grew from after elastic.scaleDownAfterSeconds
(controller/reconcile.py, which also backs off the probes).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..api import naming
from ..api.job import ScaleTrainJob
from ..api.timestamps import parse_timestamp
from .children import child_metadata, job_labels

PROBE_LABEL = f"{naming.GROUP}/capacity-probe"
PROBE_TIMEOUT_S = 60  # a probe the scheduler did not judge by then is taken for no room
SLEEP_S = 3600  # what a placed probe pod does until the operator deletes it
# What the scheduler reads of a pod to place it, beside its containers' requests, and what admission reads
# of who runs it.
KEPT_KEYS = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "schedulerName",
    "topologySpreadConstraints",
    "runtimeClassName",
    "overhead",
    "securityContext",
    "serviceAccountName",
    "automountServiceAccountToken",
    "hostNetwork",  # with the containers' ports: a host port taken on a node keeps a pod off it
)
# Labels of the gang's pod template that are not the probe's: its generation and rank (which would make the
# probe's pods the gang's), and the ones the Job controller adds to its own Job's template (the API server
# refuses a Job whose template names another Job).
GANG_LABELS = (
    naming.LABEL_GENERATION,
    naming.COMPLETION_INDEX_LABEL,
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)


def probe_name(job_name: str) -> str:
    return f"{job_name}-probe"


def render_probe(job: ScaleTrainJob, pods: int, gang_job: Mapping[str, Any], priority_class: str) -> dict[str, Any]:
    """A Job of `pods` placeholder pods that are placed, and admitted, as a pod of `gang_job` (the current
    gang's Job: its pods' requests, placement and the nodes it avoids, their labels, annotations and service
    account) would be, each sleeping in the gang's image; of `priority_class` (the operator's, with
    preemptionPolicy Never: never the gang's, which may preempt other tenants' pods)."""
    template = gang_job["spec"]["template"]
    gang_pod = template["spec"]
    pod_spec: dict[str, Any] = {key: copy.deepcopy(gang_pod[key]) for key in KEPT_KEYS if key in gang_pod}
    # A claim's volume may be reachable from some nodes only (its PersistentVolume's node affinity, a zone).
    if claims := [volume for volume in gang_pod.get("volumes") or () if "persistentVolumeClaim" in volume]:
        pod_spec["volumes"] = copy.deepcopy(claims)
    pod_spec |= {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [_placeholder(container, SLEEP_S) for container in gang_pod["containers"]],
    }
    pod_spec["priorityClassName"] = priority_class
    if init := gang_pod.get("initContainers"):
        # Init containers count towards the pod's requests too; a sidecar (restartPolicy Always) keeps running.
        pod_spec["initContainers"] = [
            _placeholder(container, SLEEP_S if container.get("restartPolicy") == "Always" else 0) for container in init
        ]
    labels = job_labels(job) | {naming.LABEL_COMPONENT: "capacity-probe", PROBE_LABEL: "true"}
    gang_labels = {k: v for k, v in (template["metadata"].get("labels") or {}).items() if k not in GANG_LABELS}
    pod_metadata = {"labels": gang_labels | labels, "annotations": dict(template["metadata"].get("annotations") or {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": child_metadata(job, probe_name(job.name), None, labels),
        "spec": {
            "completions": pods,
            "parallelism": pods,
            "backoffLimit": 0,
            "activeDeadlineSeconds": SLEEP_S,  # gone by itself should the operator not delete it
            "template": {"metadata": pod_metadata, "spec": pod_spec},
        },
    }


def _placeholder(container: Mapping[str, Any], seconds: int) -> dict[str, Any]:
    kept = {
        key: container[key]
        for key in ("name", "image", "resources", "restartPolicy", "securityContext", "ports")
        if key in container
    }
    return kept | {"command": ["sleep", str(seconds)]}


def cannot_speak_for(gang_job: Mapping[str, Any]) -> str | None:
    """Why a probe's word would not hold for the gang of `gang_job`, whose pods need what a placeholder pod
    cannot ask for as well: devices claimed through resourceClaims (a claim is shared or made per pod), or
    generic ephemeral volumes (each makes a claim of its own). None: a probe asks what the gang would."""
    pod = gang_job["spec"]["template"]["spec"]
    if pod.get("resourceClaims"):
        return "its pods claim devices (resourceClaims), which a probe's placeholder pods cannot claim as well"
    if any("ephemeral" in volume for volume in pod.get("volumes") or ()):
        return "its pods have generic ephemeral volumes, which a probe's placeholder pods would make claims for"
    return None


def is_probe(obj: Mapping[str, Any]) -> bool:
    return (obj["metadata"].get("labels") or {}).get(PROBE_LABEL) == "true"


def expires_in(probe: Mapping[str, Any], now: datetime) -> float:
    """Seconds until the scheduler's silence on the probe counts as no room (0: now)."""
    created = probe["metadata"].get("creationTimestamp")
    age = (now - parse_timestamp(created)).total_seconds() if created is not None else 0.0
    return max(0.0, PROBE_TIMEOUT_S - age)
