"""Kueue v0.17.0's real manager (scaletrain_testing/kueue.py) on a control plane of its own admits plain batch/v1
Jobs by quota: a suspended Job in a LocalQueue is unsuspended once its Workload is admitted, one that does not
fit waits suspended, and it is admitted when the quota frees up."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scaletrain_testing.kube import Kube
from scaletrain_testing.kueue import (
    QUEUE_NAME_LABEL,
    cluster_queue,
    condition,
    is_true,
    local_queue,
    resource_flavor,
)
from scaletrain_testing.timeouts import KUEUE_QUOTA_RELEASE_S, KUEUE_REACTION_S
from scaletrain_testing.waiting import wait_until


def _job(name: str, queue: str, cpu: str) -> dict[str, Any]:
    """A suspended Job of one pod requesting CPU, in QUEUE: Kueue's batch/job integration decides when it runs."""
    container = {
        "name": "main",
        "image": "busybox",
        "command": ["sleep", "600"],
        "resources": {"requests": {"cpu": cpu}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_NAME_LABEL: queue}},
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


@pytest.fixture
def kube(kueue) -> Kube:
    return Kube(kueue.api_client())


@pytest.fixture
def queue(kueue, kueue_namespace) -> str:
    """A ClusterQueue of 1 CPU in one flavor (both named after the test's namespace, as they are cluster-wide) and
    a LocalQueue `main` to it in the test's namespace. They stay: the control plane is Kueue's own."""
    name = kueue_namespace
    kueue.create(resource_flavor(name))
    kueue.create(cluster_queue(name, flavor=name, cpu="1", memory="1Gi"))
    kueue.create(local_queue("main", kueue_namespace, cluster_queue=name))
    return "main"


@pytest.fixture
def node(kube, kueue_namespace) -> Iterator[str]:
    """A fake Ready Node with 4 CPUs, as a kubelet would register it (no kubelet runs here, so pods bound to it
    stay Pending): the admitted Job's pod has somewhere to be scheduled."""
    name = f"node-{kueue_namespace}"
    kube.create("nodes", {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})
    capacity = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake node for the tests"}
    kube.set_status("nodes", None, name, {"capacity": capacity, "allocatable": capacity, "conditions": [ready]})
    # The API server taints every new Node not-ready; the node-lifecycle controller, not run here, would lift it.
    kube.patch("nodes", None, name, {"spec": {"taints": None}})
    yield name
    kube.delete("nodes", None, name)


def _admitted(kueue, kube: Kube, job: dict[str, Any]) -> bool:
    """The job unsuspended by Kueue, and its Workload Admitted."""
    current = kube.get("jobs", job["metadata"]["namespace"], job["metadata"]["name"])
    return current is not None and current["spec"]["suspend"] is False and is_true(kueue.workload_of(job), "Admitted")


def test_kueue_admits_a_suspended_job_by_quota_and_the_next_one_when_the_quota_frees(
    kueue, kube, kueue_namespace, queue, node
):
    first = kube.create("jobs", _job("first", queue, cpu="1"), kueue_namespace)
    wait_until(lambda: _admitted(kueue, kube, first), KUEUE_REACTION_S, "the first Job to be admitted")

    second = kube.create("jobs", _job("second", queue, cpu="1"), kueue_namespace)

    def pending() -> dict[str, Any] | None:
        reserved = condition(kueue.workload_of(second) or {}, "QuotaReserved")
        return reserved if reserved is not None and reserved["status"] == "False" else None

    reserved = wait_until(pending, KUEUE_REACTION_S, "the second Job's Workload to be pending for quota")
    assert reserved["reason"] == "Pending", reserved
    assert "insufficient unused quota for cpu" in reserved["message"], reserved
    assert kube.get("jobs", kueue_namespace, "second")["spec"]["suspend"] is True
    assert not is_true(kueue.workload_of(second), "Admitted")

    kube.delete("jobs", kueue_namespace, "first")
    wait_until(lambda: _admitted(kueue, kube, second), KUEUE_QUOTA_RELEASE_S, "the second Job to be admitted")
