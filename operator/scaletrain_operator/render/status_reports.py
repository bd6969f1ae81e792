"""Where a script of one's own pushes its progress: the Kubeflow Trainer status protocol's three variables, and
the volume behind two of them, added to a gang's rendered Job (report_server.py serves the endpoint).

- KUBEFLOW_TRAINER_SERVER_URL: the operator's endpoint (the chart's Service).
- KUBEFLOW_TRAINER_SERVER_TOKEN: a service-account token the kubelet projects for the pod, for AUDIENCE only and
  short-lived, so that it is worth nothing to the API server or anyone else, and names its pod.
- KUBEFLOW_TRAINER_SERVER_CA_CERT: the CA that signed the endpoint's certificate, projected from an annotation
  of the pod (the downward API): no ConfigMap to make and keep in every namespace.

Added after the spec hash is taken (child_annotations.with_spec_hash): where the operator's endpoint is, and
its CA, are not the job's spec, so enabling the endpoint, or moving it, restarts no running gang. Only for a
script of one's own: the built-in trainer serves /progress, which the operator reads."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from scaletrain_trainer.contract import wire

from ..api import naming
from ..api.job import ScaleTrainJob

AUDIENCE = f"{naming.GROUP}/status-reports"
TOKEN_SECONDS = 600  # the shortest the API server grants; the kubelet renews it at 80% of its life
VOLUME = "status-reports"
MOUNT_PATH = f"/var/run/secrets/{naming.GROUP}/status-reports"
CA_ANNOTATION = f"{naming.GROUP}/status-reports-ca"


@dataclass(frozen=True)
class Endpoint:
    """The operator's status-report endpoint as pods reach it."""

    base_url: str  # https://HOST[:PORT], as pods reach the operator (the chart's Service)
    ca_pem: str  # the CA that signed its certificate

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + naming.STATUS_REPORTS_PATH


def pushes_reports(job: ScaleTrainJob) -> bool:
    """Whether the job's pods are told where to report: a script of one's own (the built-in trainer serves
    /progress, which is read instead)."""
    return job.spec.command is not None


def reporting_to(rendered_job: dict[str, Any], job: ScaleTrainJob, endpoint: Endpoint | None) -> dict[str, Any]:
    """`rendered_job` with the trainer container told where to report, or unchanged: no endpoint, or the
    built-in trainer. A variable the job sets itself (spec.env) is left as it is."""
    if endpoint is None or not pushes_reports(job):
        return rendered_job
    return with_endpoint(rendered_job, job, endpoint, {wire.REPORT_URL_ENV: endpoint.url})


def with_endpoint(
    rendered_job: dict[str, Any], job: ScaleTrainJob, endpoint: Endpoint, variables: dict[str, str]
) -> dict[str, Any]:
    """A copy of `rendered_job` whose trainer container has the pod's token for the endpoint and the endpoint's CA
    (each once, whoever adds them first), and `variables`; a variable the job sets itself (spec.env) is left as
    it is."""
    reaching = copy.deepcopy(rendered_job)
    template = reaching["spec"]["template"]
    pod = template["spec"]
    trainer = next(c for c in pod["containers"] if c["name"] == naming.TRAINER_CONTAINER)
    if not any(volume["name"] == VOLUME for volume in pod.get("volumes", [])):
        template["metadata"].setdefault("annotations", {})[CA_ANNOTATION] = endpoint.ca_pem
        pod["volumes"] = [*pod.get("volumes", []), _volume()]
        mount = {"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True}
        trainer["volumeMounts"] = [*trainer.get("volumeMounts", []), mount]
        variables = variables | {
            wire.REPORT_CA_ENV: f"{MOUNT_PATH}/ca.crt",
            wire.REPORT_TOKEN_ENV: f"{MOUNT_PATH}/token",
        }
    own = {var.name for var in job.spec.env}
    trainer["env"] = [*trainer.get("env", []), *({"name": n, "value": v} for n, v in variables.items() if n not in own)]
    return reaching


def _volume() -> dict[str, Any]:
    token = {"audience": AUDIENCE, "expirationSeconds": TOKEN_SECONDS, "path": "token"}
    ca = {"items": [{"path": "ca.crt", "fieldRef": {"fieldPath": f"metadata.annotations['{CA_ANNOTATION}']"}}]}
    return {"name": VOLUME, "projected": {"sources": [{"serviceAccountToken": token}, {"downwardAPI": ca}]}}
