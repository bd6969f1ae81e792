"""The control plane the tests start is a real one: RBAC decides with ServiceAccount tokens from the
TokenRequest API, PodSecurity admission enforces namespace labels, the Job controller creates pods, the
scheduler binds them, and the garbage collector follows owner references."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from scaletrain_testing.timeouts import CONTROLLERS_REACTION_S, POLICY_PROPAGATION_S
from scaletrain_testing.waiting import wait_until

ApiException = kubernetes.client.ApiException


def _job(name: str, parallelism: int = 1, node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": node_selector,
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
                }
            },
        },
    }


def _job_pods(core: kubernetes.client.CoreV1Api, namespace: str, job: str) -> list[kubernetes.client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items


@pytest.fixture
def admin(control_plane) -> Iterator[kubernetes.client.ApiClient]:
    with control_plane.api_client() as client:
        yield client


@pytest.fixture
def node(admin, namespace) -> Iterator[str]:
    """A fake Ready Node with capacity, as a kubelet would register it (there is no kubelet here)."""
    core = kubernetes.client.CoreV1Api(admin)
    name = f"node-{namespace}"
    core.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})
    capacity = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake node for the tests"}
    core.patch_node_status(name, {"status": {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}})
    # The API server taints every new Node not-ready; the node-lifecycle controller, not run here,
    # would lift the taint once the node reports Ready.
    core.patch_node(name, {"spec": {"taints": None}})
    yield name
    core.delete_node(name)


def test_rbac_denies_an_unbound_service_account_and_allows_it_after_a_role_binding(
    control_plane, admin, namespace, tmp_path
):
    core = kubernetes.client.CoreV1Api(admin)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    kubeconfig = control_plane.token_kubeconfig(namespace, "reader", tmp_path / "reader.kubeconfig")
    reader = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(kubeconfig)))

    with pytest.raises(ApiException) as denied:
        reader.list_namespaced_pod(namespace)
    assert denied.value.status == 403
    assert f"system:serviceaccount:{namespace}:reader" in denied.value.body

    rbac = kubernetes.client.RbacAuthorizationV1Api(admin)
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "pod-reader"}, "rules": rules})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )

    def allowed() -> bool:  # the authorizer's RBAC cache follows its informers, within moments
        try:
            reader.list_namespaced_pod(namespace)
        except ApiException as error:
            if error.status != 403:
                raise
            return False
        return True

    wait_until(allowed, POLICY_PROPAGATION_S, "the RoleBinding to take effect")
    with pytest.raises(ApiException) as still_denied:  # only what the Role grants
        reader.list_namespaced_secret(namespace)
    assert still_denied.value.status == 403


def test_job_controller_creates_the_pod_and_the_scheduler_binds_it(admin, namespace, node):
    core = kubernetes.client.CoreV1Api(admin)
    kubernetes.client.BatchV1Api(admin).create_namespaced_job(namespace, _job("bind-me"))

    def bound() -> bool:
        pods = _job_pods(core, namespace, "bind-me")
        return len(pods) == 1 and pods[0].spec.node_name is not None

    wait_until(bound, CONTROLLERS_REACTION_S, "the Job's pod to be created and bound")
    (pod,) = _job_pods(core, namespace, "bind-me")
    assert pod.spec.node_name == node
    assert pod.metadata.owner_references[0].kind == "Job"


def test_pod_security_restricted_namespace_rejects_a_privileged_pod(admin, namespace):
    core = kubernetes.client.CoreV1Api(admin)
    container = {"name": "main", "image": "busybox", "securityContext": {"privileged": True}}
    pod = {"metadata": {"name": "privileged"}, "spec": {"containers": [container]}}
    # Unlabelled, the namespace enforces the privileged level, and the server allows privileged pods.
    core.create_namespaced_pod(namespace, pod, dry_run="All")

    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    refusals = []

    def refused() -> bool:  # the admission plugin sees the namespace's new label through its informer: soon
        try:
            core.create_namespaced_pod(namespace, pod, dry_run="All")
        except ApiException as error:
            refusals.append(error)
            return True
        return False

    wait_until(refused, POLICY_PROPAGATION_S, "PodSecurity admission to see the namespace's label")
    message = json.loads(refusals[0].body)["message"]
    assert refusals[0].status == 403
    assert 'violates PodSecurity "restricted:latest": privileged (container "main" must not set' in message


def test_background_delete_lets_the_garbage_collector_remove_the_pods(admin, namespace):
    core = kubernetes.client.CoreV1Api(admin)
    batch = kubernetes.client.BatchV1Api(admin)
    # Pods stay unscheduled: a bound pod's deletion waits for its kubelet, and there is none here.
    batch.create_namespaced_job(namespace, _job("collect-me", parallelism=2, node_selector={"no-such": "node"}))
    wait_until(lambda: len(_job_pods(core, namespace, "collect-me")) == 2, CONTROLLERS_REACTION_S, "the Job's 2 pods")

    batch.delete_namespaced_job("collect-me", namespace, propagation_policy="Background")
    assert batch.list_namespaced_job(namespace).items == []  # the owner goes at once, its pods after
    wait_until(lambda: _job_pods(core, namespace, "collect-me") == [], CONTROLLERS_REACTION_S, "the garbage collector")
