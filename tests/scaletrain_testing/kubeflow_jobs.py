"""Kubeflow jobs for the `scaletrain convert` tests: the fixture files, small PyTorchJobs and TrainJobs
built to order, and every path of a document (to put a wrong value at each)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scaletrain_trainer.contract.documents import load_documents

from .jobs import REPO

CONVERT_FIXTURES = sorted((REPO / "tests" / "fixtures" / "convert").glob("*.yaml"))


def fixture(name: str) -> list[Any]:
    """The documents of tests/fixtures/convert/NAME.yaml, read as the CLI reads them."""
    (path,) = [p for p in CONVERT_FIXTURES if p.stem == name]
    return read(path)


def read(path: Path) -> list[Any]:
    return load_documents(path.read_text(), str(path))


def pytorchjob(container: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A PyTorchJob of one Master and one Worker, both with `container` (merged over a minimal one named
    pytorch); keyword arguments are added to its spec, a `pod` one to both pod specs."""
    pod = spec.pop("pod", {})
    training = {"name": "pytorch", "image": "example.com/train:1", "command": ["python", "train.py"]}
    training |= container or {}
    template = {"spec": {"containers": [training], **pod}}
    replica_specs = {
        kind: {"replicas": 1, "restartPolicy": "Never", "template": copy.deepcopy(template)}
        for kind in ("Master", "Worker")
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "small"},
        "spec": {"pytorchReplicaSpecs": replica_specs, **spec},
    }


def trainjob(
    trainer: dict[str, Any] | None = None, ml_policy: dict[str, Any] | None = None, **spec: Any
) -> list[dict[str, Any]]:
    """A TrainJob and the ClusterTrainingRuntime it references: `trainer` is the TrainJob's
    spec.trainer, `ml_policy` the runtime's (default: torch with numProcPerNode auto); keyword arguments
    are added to the TrainJob's spec, a `pod` one to the runtime's trainer node pod spec."""
    pod = spec.pop("pod", {})
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "small"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer or {}, **spec},
    }
    node = {"name": "node", "image": "example.com/torch:2", "command": ["torchrun", "train.py"]}
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-distributed"},
        "spec": {
            "mlPolicy": ml_policy if ml_policy is not None else {"torch": {"numProcPerNode": "auto"}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [node], **pod}}}}}
                    ]
                }
            },
        },
    }
    return [job, runtime]


def pod_override(
    spec: dict[str, Any] | None = None, targets: tuple[str, ...] = ("node",), **fields: Any
) -> dict[str, Any]:
    """A TrainJob podTemplateOverride of `targets` (default: the trainer nodes) with `spec`; keyword
    arguments are added to it (metadata, ...)."""
    return {"targetJobs": [{"name": target} for target in targets], "spec": spec or {}, **fields}


def every_path(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every mapping value and list item in `value`, outermost first."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield (*path, key)
        yield from every_path(item, (*path, key))


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """A deep copy of `value` with what is at `path` replaced by `new`."""
    out = copy.deepcopy(value)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return out
