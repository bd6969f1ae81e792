"""The Job controller's part in run-local: an Indexed Job becomes its pods."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from typing import Any

from ..api import naming

JOB_COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
COMPLETION_INDEX_VAR = {
    "name": JOB_COMPLETION_INDEX_ENV,
    "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{naming.COMPLETION_INDEX_ANNOTATION}']"}},
}


def indexed_pods(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pods the Job controller creates for an Indexed Job, one per completion index: named
    `<job>-<index>-<suffix>` with a uid (as the API server gives it), hostname `<job>-<index>`, the
    template's subdomain, the completion index as annotation and label, and JOB_COMPLETION_INDEX (from
    the annotation) in every container that does not set it."""
    name, template = job["metadata"]["name"], job["spec"]["template"]
    metadata = template.get("metadata") or {}
    pods = []
    for index in range(job["spec"]["completions"]):
        index_entry = {naming.COMPLETION_INDEX_ANNOTATION: str(index)}
        spec = copy.deepcopy(template["spec"])
        spec["hostname"] = f"{name}-{index}"
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            if not any(var["name"] == JOB_COMPLETION_INDEX_ENV for var in container.get("env", [])):
                container["env"] = [*container.get("env", []), copy.deepcopy(COMPLETION_INDEX_VAR)]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{index}-{uuid.uuid4().hex[:5]}",
                    "namespace": job["metadata"].get("namespace"),
                    "uid": str(uuid.uuid4()),
                    "labels": (metadata.get("labels") or {}) | index_entry | {"batch.kubernetes.io/job-name": name},
                    "annotations": (metadata.get("annotations") or {}) | index_entry,
                },
                "spec": spec,
            }
        )
    return pods
