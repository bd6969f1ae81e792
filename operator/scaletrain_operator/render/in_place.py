"""A gang that restarts in place, as its pods are rendered: the pod's main process is the agent
(scaletrain_trainer/agent.py), which runs the workload and asks the operator over its status-report endpoint what
to do when it ends; the trainer container's restart rule turns the agent's EXIT_RESTART_IN_PLACE into a restart of
every container of the pod where it stands (Kubernetes' RestartAllContainers, beta and on since 1.36). The pod
keeps its node, IP, volumes and devices. What it needs:

- the endpoint, and the pod's projected token for it (status_reports.with_endpoint): no API permission;
- an emptyDir where the agent keeps the generation it ran, which the restart keeps and the writable layer does not;
- the rule, beside a container restartPolicy (the API server takes rules only with one): Never, so that any other
  exit ends the container as before, and the gang policy judges it.
- a podFailurePolicy under which the Job controller replaces a pod that a disruption took (evicted, its node drained
  or lost), instead of failing the Job: the rest of the gang restarts in place around its replacement. Not for an
  elastic gang, which goes on at the size the cluster has room for.

The built-in trainer's image has the agent. A script of one's own runs in an image that need not: an init container
from the agent image (the operator's) writes the agent, as one file (scaletrain_trainer/agent_bundle.py), onto the
emptyDir, and the image's `python3` (3.10 or later) runs it. Added after the spec hash is taken, as the endpoint is."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.exit_codes import EXIT_RESTART_IN_PLACE

from ..api import naming
from ..api.conditions import RESTART_ALL_CONTAINERS
from ..api.job import ScaleTrainJob
from .children import DISRUPTION_FAILS_THE_JOB, TRAINER_SECURITY
from .status_reports import Endpoint, with_endpoint

AGENT = ["python", "-m", "scaletrain_trainer.agent", "--"]
STATE_VOLUME = "scaletrain-agent"
STATE_DIR = "/var/run/scaletrain/agent"
AGENT_WRITER = "scaletrain-agent"  # a script of one's own's init container: it writes the agent to STATE_DIR
BUNDLED_AGENT = ["python3", f"{STATE_DIR}/{wire.AGENT_BUNDLE}", "--"]
# A pod a disruption took (evicted, its node drained or lost) is replaced by the Job controller, and only it: the rest
# of the gang restarts in place around it (controller/restarts.py). Its DisruptionTarget condition is not counted
# against the Job's backoffLimit (Ignore), and the replacement is made once the pod ended, its checkpoint saved. Any
# other failed pod fails the Job as before.
DISRUPTED_PODS_REPLACED = {
    "rules": [
        {"action": "Ignore", "onPodConditions": DISRUPTION_FAILS_THE_JOB["rules"][0]["onPodConditions"]},
        *DISRUPTION_FAILS_THE_JOB["rules"][1:],
    ]
}
RESTART_RULE = {"action": RESTART_ALL_CONTAINERS, "exitCodes": {"operator": "In", "values": [EXIT_RESTART_IN_PLACE]}}


def restarts_in_place(job: ScaleTrainJob, agent_image: str) -> bool:
    """Whether the job's gangs restart in place: as spec.restartStrategy says; a script of one's own where there is
    an image to bring its pods the agent (`agent_image`)."""
    return job.spec.restart_strategy == "InPlace" and (job.spec.command is None or bool(agent_image))


def restart_rule_probe() -> dict[str, Any]:
    """A Job whose one container has the restart rule, for a server-side dry run: an API server that does not take
    the rule (before 1.36, or with a feature gate off) refuses it or drops it (Cluster.restarts_all_containers)."""
    container = {
        "name": naming.TRAINER_CONTAINER,
        "image": "scaletrain.invalid/restart-rule-probe",
        "restartPolicy": "Never",
        "restartPolicyRules": [copy.deepcopy(RESTART_RULE)],
    }
    pod = {"restartPolicy": "Never", "containers": [container]}
    metadata = {"generateName": "scaletrain-restart-rule-probe-", "labels": {naming.LABEL_MANAGED_BY: naming.MANAGER}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {"template": {"spec": pod}}}


def agent_writer(agent_image: str) -> dict[str, Any]:
    """The init container that writes the agent onto the emptyDir, for a script of one's own."""
    return {
        "name": AGENT_WRITER,
        "image": agent_image,
        "command": ["python", "-m", "scaletrain_trainer.agent_bundle", STATE_DIR],
        "volumeMounts": [{"name": STATE_VOLUME, "mountPath": STATE_DIR}],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}},
        "securityContext": copy.deepcopy(TRAINER_SECURITY),
    }


def runs_in_place(child_job: Mapping[str, Any]) -> bool:
    """Whether the pods of a gang's Job restart in place: its trainer container has the restart rule."""
    pod = child_job["spec"]["template"]["spec"]
    trainer = next((c for c in pod.get("containers") or () if c.get("name") == naming.TRAINER_CONTAINER), {})
    return RESTART_RULE in (trainer.get("restartPolicyRules") or ())


def replaces_disrupted_pods(child_job: Mapping[str, Any]) -> bool:
    """Whether the Job controller replaces a disrupted pod of the gang's Job, rather than failing the Job."""
    return child_job["spec"].get("podFailurePolicy") == DISRUPTED_PODS_REPLACED


def restarting_in_place(
    rendered_job: dict[str, Any], job: ScaleTrainJob, endpoint: Endpoint | None, agent_image: str
) -> dict[str, Any]:
    """`rendered_job` with its pods run by the agent and restarted in place; unchanged where they are not (no
    endpoint, spec.restartStrategy Recreate, or a script of one's own with no `agent_image`)."""
    if endpoint is None or not restarts_in_place(job, agent_image):
        return rendered_job
    variables = {
        wire.IN_PLACE_URL_ENV: endpoint.base_url.rstrip("/") + wire.IN_PLACE_PATH,
        wire.IN_PLACE_STATE_ENV: f"{STATE_DIR}/generation",
    }
    restarting = with_endpoint(rendered_job, job, endpoint, variables)
    if job.spec.elastic is None:  # an elastic gang goes on smaller instead, in a new Job (policy/elastic.py)
        restarting["spec"]["podFailurePolicy"] = copy.deepcopy(DISRUPTED_PODS_REPLACED)
    pod = restarting["spec"]["template"]["spec"]
    pod["volumes"] = [*pod.get("volumes", []), {"name": STATE_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}}]
    trainer = next(c for c in pod["containers"] if c["name"] == naming.TRAINER_CONTAINER)
    if job.spec.command is None:
        trainer["command"] = [*AGENT, *trainer["command"]]
    else:
        pod["initContainers"] = [agent_writer(agent_image), *pod.get("initContainers", [])]
        trainer["command"] = [*BUNDLED_AGENT, *trainer["command"]]
    trainer["restartPolicy"] = "Never"
    trainer["restartPolicyRules"] = [copy.deepcopy(RESTART_RULE)]
    trainer["volumeMounts"] = [*trainer.get("volumeMounts", []), {"name": STATE_VOLUME, "mountPath": STATE_DIR}]
    return restarting
