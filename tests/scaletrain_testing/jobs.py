"""Builders for test objects: a minimal valid ScaleTrainJob (as written, and as the API server stores it),
the status of one that runs and a condition it holds, patches over them (and merge patches, as the API
server applies them), and the repo's files."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
DELETE = object()  # in a patch: remove this key
NAMESPACE = "team-a"  # base_job's, and that of the objects made for it


def base_job(**spec: Any) -> dict[str, Any]:
    """A small valid CPU job; keyword arguments patch its spec."""
    doc = {
        "apiVersion": "scaletrain.io/v1alpha1",
        "kind": "ScaleTrainJob",
        "metadata": {"name": "demo", "namespace": NAMESPACE, "uid": "6f1c2a7e-1111-4c3b-9a61-0123456789ab"},
        "spec": {
            "image": "ghcr.io/scaletrain/trainer:0.1.0",
            "nodes": 2,
            "training": {"globalBatchSize": 16, "microBatchSize": 4, "maxSteps": 20},
        },
    }
    return patched(doc, {"spec": spec})


def stored_job(name: str = "demo", status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """base_job as the API server stores it and the operator's cache holds it: named `name`, with the uid
    f"{name}-uid" and resourceVersion 1 (no generation), and `status` when given; keyword arguments patch
    its spec."""
    stored = {"metadata": {"name": name, "uid": f"{name}-uid", "resourceVersion": "1"}}
    return patched(base_job(**spec), stored | ({"status": status} if status else {}))


def secret_key_ref(name: str, key: str) -> dict[str, Any]:
    """An env var's valueFrom: `key` of the Secret `name`."""
    return {"secretKeyRef": {"name": name, "key": key}}


def running_status(**status: Any) -> dict[str, Any]:
    """The status of a job whose first gang, demo-g0, runs, with no restart yet; keyword arguments add
    fields or replace them."""
    return {"phase": "Running", "currentJob": "demo-g0", "restarts": 0} | status


def stored_condition(kind: str, held: bool, message: str, since: str = "2026-12-02T11:00:00Z") -> dict[str, Any]:
    """A metav1 condition of type `kind` as a stored status holds it: True if `held`, saying `message`, turned
    at `since` (its reason is the test's, "Said")."""
    status = "True" if held else "False"
    return {"type": kind, "status": status, "reason": "Said", "message": message, "lastTransitionTime": since}


def patched(doc: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of `doc` with `patch` merged in (mappings merge, DELETE removes, the rest replaces)."""
    out = copy.deepcopy(doc)
    for key, value in patch.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = patched(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def merge_patched(target: Any, patch: Any) -> Any:
    """`target` with the JSON merge patch `patch` applied (RFC 7386), as the API server applies the
    operator's status patches: mappings merge, null removes, the rest replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patched(out.get(key), value)
    return out


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())
