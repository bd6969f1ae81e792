"""A gang that restarts in place, as its pods are rendered: the pod's main process is the agent
(scaletrain_trainer/agent.py), which runs the workload and asks the operator over its status-report endpoint what
to do when it ends; the trainer container's restart rule turns the agent's EXIT_RESTART_IN_PLACE into a restart of
every container of the pod where it stands (Kubernetes' RestartAllContainers, beta and on since 1.36). The pod
keeps its node, IP, volumes and devices. What it needs:

- the endpoint, and the pod's projected token for it (status_reports.with_endpoint): no API permission;
- an emptyDir where the agent keeps the generation it ran, which the restart keeps and the writable layer does not;
- the rule, beside a container restartPolicy (the API server takes rules only with one): Never, so that any other
  exit ends the container as before, and the gang policy judges it.

Only the built-in trainer, whose image has the agent. Added after the spec hash is taken, as the endpoint is."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.exit_codes import EXIT_RESTART_IN_PLACE

from ..api import naming
from ..api.conditions import RESTART_ALL_CONTAINERS
from ..api.job import ScaleTrainJob
from .status_reports import Endpoint, with_endpoint

AGENT = ["python", "-m", "scaletrain_trainer.agent", "--"]
STATE_VOLUME = "scaletrain-agent"
STATE_DIR = "/var/run/scaletrain/agent"
RESTART_RULE = {"action": RESTART_ALL_CONTAINERS, "exitCodes": {"operator": "In", "values": [EXIT_RESTART_IN_PLACE]}}


def restarts_in_place(job: ScaleTrainJob) -> bool:
    """Whether the job's gangs restart in place: as spec.restartStrategy says, and only the built-in trainer, whose
    image runs the agent."""
    return job.spec.restart_strategy == "InPlace" and job.spec.command is None


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


def runs_in_place(child_job: Mapping[str, Any]) -> bool:
    """Whether the pods of a gang's Job restart in place: its trainer container has the restart rule."""
    pod = child_job["spec"]["template"]["spec"]
    trainer = next((c for c in pod.get("containers") or () if c.get("name") == naming.TRAINER_CONTAINER), {})
    return RESTART_RULE in (trainer.get("restartPolicyRules") or ())


def restarting_in_place(rendered_job: dict[str, Any], job: ScaleTrainJob, endpoint: Endpoint | None) -> dict[str, Any]:
    """`rendered_job` with its pods run by the agent and restarted in place; unchanged where they are not (no
    endpoint, spec.restartStrategy Recreate, or a script of one's own)."""
    if endpoint is None or not restarts_in_place(job):
        return rendered_job
    variables = {
        wire.IN_PLACE_URL_ENV: endpoint.base_url.rstrip("/") + wire.IN_PLACE_PATH,
        wire.IN_PLACE_STATE_ENV: f"{STATE_DIR}/generation",
    }
    restarting = with_endpoint(rendered_job, job, endpoint, variables)
    pod = restarting["spec"]["template"]["spec"]
    pod["volumes"] = [*pod.get("volumes", []), {"name": STATE_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}}]
    trainer = next(c for c in pod["containers"] if c["name"] == naming.TRAINER_CONTAINER)
    trainer["command"] = [*AGENT, *trainer["command"]]
    trainer["restartPolicy"] = "Never"
    trainer["restartPolicyRules"] = [copy.deepcopy(RESTART_RULE)]
    trainer["volumeMounts"] = [*trainer.get("volumeMounts", []), {"name": STATE_VOLUME, "mountPath": STATE_DIR}]
    return restarting
