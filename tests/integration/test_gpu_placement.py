"""GPU placement by the real scheduler: the GPU example's pods land only on matching GPU nodes, and a
gang that no node can hold stays Pending. Fake nodes as the NVIDIA GPU operator labels and taints
them, beside a CPU-only node and GPU nodes of another product; their kubelet runs a stand-in command
(`sleep`), as the placement is the point here, not the training."""

from __future__ import annotations

import secrets
from dataclasses import replace

import pytest
import yaml

from scaletrain_testing.jobs import EXAMPLES, patched
from scaletrain_testing.kube import Kube
from scaletrain_testing.kubelet import FakeNode, Kubelet, gpu_node
from scaletrain_testing.operator_harness import Team, install_watching, operator_process
from scaletrain_testing.timeouts import CONTROLLERS_REACTION_S
from scaletrain_testing.waiting import wait_until

H100 = "NVIDIA-H100-80GB-HBM3"
BIG = {"cpu": "96", "memory": "2Ti"}  # room for the example's requests (64 CPUs, 1000Gi)
H100_NODES = [replace(gpu_node(f"h100-{i}", product=H100), **BIG) for i in range(4)]
OTHER_NODES = [replace(gpu_node("a100-1", product="NVIDIA-A100-SXM4-80GB"), **BIG), FakeNode("cpu-only", **BIG)]
STAND_IN = ["sleep", "600"]
EXAMPLE = yaml.safe_load(next(p for p in EXAMPLES if p.name == "gpu-h100-fsdp.yaml").read_text())


@pytest.fixture(scope="module")
def gpu_cluster(control_plane, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("gpu")
    namespace = control_plane.create_namespace(f"gpu-{secrets.token_hex(3)}")
    install = install_watching(control_plane, namespace, workdir)
    team = Team(Kube(control_plane.api_client()), namespace)
    team.kube.create(
        "priorityclasses",
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
         "metadata": {"name": EXAMPLE["spec"]["priorityClassName"]}, "value": 1000},
    )  # fmt: skip
    for volume in EXAMPLE["spec"]["volumes"]:
        team.provide_claim(volume["persistentVolumeClaim"]["claimName"])
    args = ("--liveness-port", "0", "--metrics-port", "0")
    with (
        Kubelet(control_plane.api_client(), H100_NODES + OTHER_NODES, workdir / "kubelet", namespaces=[namespace]),
        operator_process(install, *args),
    ):
        yield team
    team.kube.delete("priorityclasses", None, EXAMPLE["spec"]["priorityClassName"])


def gpu_job(team, name, **spec):
    """The GPU example in this namespace, admitted at once (no Kueue here), with the stand-in command."""
    document = patched(EXAMPLE, {"metadata": {"name": name, "namespace": team.namespace},
                                      "spec": {"command": STAND_IN} | spec})  # fmt: skip
    document["spec"].pop("queueName")
    return team.kube.create("stj", document)


def test_the_gpu_example_binds_only_to_matching_gpu_nodes(gpu_cluster):
    gpu_job(gpu_cluster, "placed")
    pods = gpu_cluster.pods("placed-g0")

    def all_bound():
        bound = [gpu_cluster.kube.get("pods", gpu_cluster.namespace, p["metadata"]["name"]) for p in pods]
        return all(p["spec"].get("nodeName") for p in bound) and bound

    bound = wait_until(all_bound, CONTROLLERS_REACTION_S, "the scheduler to bind every pod of placed")
    assert sorted(p["spec"]["nodeName"] for p in bound) == sorted(n.name for n in H100_NODES)  # one pod per node
    for pod in bound:
        (trainer,) = pod["spec"]["containers"]
        assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "8"
    gpu_cluster.wait_phase("placed", "Running")
    gpu_cluster.kube.delete("stj", gpu_cluster.namespace, "placed")


def test_a_gang_asking_more_gpus_than_any_node_has_stays_pending(gpu_cluster):
    gpu_job(gpu_cluster, "too-big", gpusPerNode=16, procsPerNode=16,
            training={"globalBatchSize": 512, "microBatchSize": 8})  # fmt: skip
    pods = gpu_cluster.pods("too-big-g0")

    def unschedulable():
        latest = [gpu_cluster.kube.get("pods", gpu_cluster.namespace, p["metadata"]["name"]) for p in pods]
        scheduled = [
            next((c for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"), {}) for p in latest
        ]
        return all(c.get("reason") == "Unschedulable" for c in scheduled) and scheduled

    conditions = wait_until(unschedulable, CONTROLLERS_REACTION_S, "the scheduler to refuse every pod of too-big")
    assert "Insufficient nvidia.com/gpu" in conditions[0]["message"]
    assert gpu_cluster.stj("too-big")["status"]["phase"] == "Pending"
    gpu_cluster.kube.delete("stj", gpu_cluster.namespace, "too-big")
