"""Ready Nodes that no kubelet runs, for benchmarks on the tests' control plane: the scheduler binds pods there,
and whatever plays the kubelet (nothing, or simulated_kubelet.py) says what becomes of them. They are tainted and
labelled for one namespace, so that only its jobs (`placed_on_fake_nodes`) land there, not a test's on a shared
control plane."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .kube import Kube
from .kubelet import DECLARED_FEATURES

FAKE_NODE_TAINT = "scaletrain.io/bench"  # on the fake Nodes: only the benchmark's jobs tolerate (and select) them


@contextmanager
def fake_nodes(kube: Kube, namespace: str, count: int, pods_per_node: int) -> Iterator[list[str]]:
    """`count` Ready Nodes with room for `pods_per_node` pods each, as a kubelet of ours would register them (restarts
    in place declared); their names."""
    names = [f"{namespace}-node-{index}" for index in range(count)]
    capacity = {"cpu": "1000", "memory": "4Ti", "pods": str(pods_per_node)}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "a benchmark's fake node"}
    taint = {"key": FAKE_NODE_TAINT, "value": namespace, "effect": "NoSchedule"}
    try:
        for name in names:
            labels = {"kubernetes.io/hostname": name, FAKE_NODE_TAINT: namespace}
            kube.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
            status = {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}
            kube.set_status("nodes", None, name, status | {"declaredFeatures": DECLARED_FEATURES})
            # The API server taints a new Node not-ready; the node lifecycle controller, not run here, would
            # lift that once the Node reports Ready. The benchmark's own taint replaces it.
            kube.patch("nodes", None, name, {"spec": {"taints": [taint]}})
        yield names
    finally:
        for name in names:
            kube.delete("nodes", None, name)


def placed_on_fake_nodes(namespace: str) -> dict[str, Any]:
    """What a job's spec adds so that its gang goes to `namespace`'s fake Nodes."""
    toleration = {"key": FAKE_NODE_TAINT, "operator": "Equal", "value": namespace, "effect": "NoSchedule"}
    return {"nodeSelector": {FAKE_NODE_TAINT: namespace}, "tolerations": [toleration]}
