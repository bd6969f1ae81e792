"""The chart installed with the built operator image: its pod runs in a container of the node's runtime,
as its own non-root user, under the chart's ServiceAccount, and reaches the API server through the
in-cluster config (the `kubernetes` Service, kube-proxy and its projected token)."""

from __future__ import annotations

from scaletrain_testing.local_cluster import CHART_NAMESPACE
from scaletrain_testing.node_jobs import container_id
from scaletrain_testing.timeouts import CLUSTER_POD_READY_S
from scaletrain_testing.waiting import wait_until


def test_the_operator_runs_from_its_image_under_its_service_account(node_cluster):
    node_cluster.cluster.wait_operator_ready(CLUSTER_POD_READY_S)
    pods = node_cluster.kube.list("pods", CHART_NAMESPACE)
    assert pods, "the chart's Deployment made no pod"
    for pod in pods:
        assert pod["spec"]["serviceAccountName"] == "scaletrain"
        assert pod["spec"]["containers"][0]["image"] == node_cluster.images["OPERATOR_IMAGE"]
        assert container_id(pod, "operator")  # containerd://…: a container of the node's runtime
        assert pod["spec"]["securityContext"]["runAsUser"] == 65532

    # Through the in-cluster config: kopf's peering is the operator's first write with its token.
    def peering_written() -> bool:
        peering = node_cluster.kube.get("clusterkopfpeerings", None, "scaletrain")
        return bool(peering and peering.get("status"))

    wait_until(peering_written, CLUSTER_POD_READY_S, "the operator to write its peering through the in-cluster config")
    logs = node_cluster.cluster.kubectl("--namespace", CHART_NAMESPACE, "logs", "deployment/scaletrain").stdout
    assert "Traceback" not in logs, logs[-3000:]
