"""ScaleTrainJobs for the node tier: as users write them, for the built trainer image, with what the image
lacks (a paced data set, a third-party script) brought in ConfigMaps, as users bring their own code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .jobs import patched
from .trainer_runs import BASE_CONFIG, SYNTHETIC_OPTIONS, TRAINER_ENV

PLUGINS = Path(__file__).resolve().parent / "plugins"
SCRIPTS = Path(__file__).resolve().parents[1] / "e2e" / "scripts"
PACKAGE = "node_plugins"  # the plugins' package inside the pods, on PYTHONPATH
PLUGINS_MOUNT = "/opt/plugins"
SCRIPTS_MOUNT = "/opt/scripts"
# Two gang pods and the operator's two replicas (100m each) fit the 2 CPUs of a small machine.
POD_RESOURCES = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "3Gi"}}


def config_map(name: str, namespace: str, files: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": files}


def plugins_config_map(namespace: str) -> dict[str, Any]:
    """tests/scaletrain_testing/plugins/faults.py as the package `node_plugins` (it needs only torch and
    scaletrain_trainer, which the image has)."""
    return config_map("plugins", namespace, {"__init__.py": "", "faults.py": (PLUGINS / "faults.py").read_text()})


def scripts_config_map(namespace: str, *names: str) -> dict[str, Any]:
    return config_map("scripts", namespace, {name: (SCRIPTS / name).read_text() for name in names})


def job(name: str, namespace: str, image: str, **spec: Any) -> dict[str, Any]:
    document = {
        "apiVersion": "scaletrain.io/v1alpha1",
        "kind": "ScaleTrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": image,
            "nodes": 2,
            "resources": POD_RESOURCES,
            "shmSize": "256Mi",
            "env": [{"name": key, "value": value} for key, value in TRAINER_ENV.items()],
        },
    }
    return patched(document, {"spec": spec})


def paced_training_job(
    name: str, namespace: str, image: str, claim: str, seconds_per_read: float, **training: Any
) -> dict[str, Any]:
    """The tests' tiny GPT, paced by the SlowSynthetic data set from the plugins ConfigMap, checkpointing
    to the claim mounted at /checkpoints."""
    options = {"seconds_per_read": seconds_per_read} | SYNTHETIC_OPTIONS
    data = {"source": f"{PACKAGE}.faults:SlowSynthetic", "options": options}
    config = patched(patched(BASE_CONFIG, {"data": data, "checkpoint": {"dir": f"/checkpoints/{name}"}}), training)
    document = job(
        name,
        namespace,
        image,
        training=config,
        volumes=[
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim}},
            {"name": "plugins", "configMap": {"name": "plugins"}},
        ],
        volumeMounts=[
            {"name": "checkpoints", "mountPath": "/checkpoints"},
            {"name": "plugins", "mountPath": f"{PLUGINS_MOUNT}/{PACKAGE}", "readOnly": True},
        ],
    )
    document["spec"]["env"].append({"name": "PYTHONPATH", "value": PLUGINS_MOUNT})
    return document


def script_job(name: str, namespace: str, image: str, command: list[str]) -> dict[str, Any]:
    """A job of one's own command (no training block), with the scripts ConfigMap at /opt/scripts."""
    return job(
        name,
        namespace,
        image,
        command=command,
        volumes=[{"name": "scripts", "configMap": {"name": "scripts"}}],
        volumeMounts=[{"name": "scripts", "mountPath": SCRIPTS_MOUNT, "readOnly": True}],
    )


def container_id(pod: dict[str, Any], container: str = "trainer") -> str:
    """The runtime's id of a container of the pod (containerStatuses[].containerID, `containerd://ID`)."""
    (status,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == container]
    runtime, _, identifier = status["containerID"].partition("://")
    assert runtime == "containerd", status["containerID"]
    return identifier


def eviction(pod: dict[str, Any]) -> dict[str, Any]:
    """An Eviction of the pod (policy/v1), as `kubectl drain` posts for each pod."""
    metadata = {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"]}
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": metadata}
