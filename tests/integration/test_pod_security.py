"""The pods ScaleTrain renders pass Pod Security "restricted" on the real API server (its PodSecurity
admission plugin, in a namespace that enforces the level), for every example. What a podTemplate adds is
the cluster's to allow or refuse: a privileged sidecar is refused there, not by ScaleTrain."""

from __future__ import annotations

import json
import secrets

import pytest
import yaml
from kubernetes.client.rest import ApiException

from scaletrain_operator.api.job import parse_job
from scaletrain_operator.render.children import render_job
from scaletrain_testing.jobs import REPO, base_job
from scaletrain_testing.kube import Kube
from scaletrain_testing.operator_harness import PROGRESS_EACH_READ, QUIET, Team, install_watching, operator_process
from scaletrain_testing.timeouts import POLICY_PROPAGATION_S
from scaletrain_testing.waiting import wait_until

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


@pytest.fixture(scope="module")
def restricted(control_plane):
    """A namespace enforcing "restricted", once its admission plugin refuses a pod that breaks it."""
    namespace = control_plane.create_namespace(f"restricted-{secrets.token_hex(3)}", labels=RESTRICTED)
    kube = Kube(control_plane.api_client())
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"},
             "spec": {"containers": [{"name": "main", "image": "busybox"}]}}  # fmt: skip
    wait_until(
        lambda: admission_refusal(kube, namespace, plain) is not None, POLICY_PROPAGATION_S, "restricted to be enforced"
    )
    # The priority classes the examples name (the Priority admission plugin refuses pods without them).
    classes = {yaml.safe_load(path.read_text())["spec"].get("priorityClassName") for path in EXAMPLES} - {None}
    for name in classes:
        priority_class = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                          "value": 1000}  # fmt: skip
        kube.create("priorityclasses", priority_class)
    yield kube, namespace
    for name in classes:
        kube.delete("priorityclasses", None, name)
    control_plane.delete_namespace(namespace)


def admission_refusal(kube: Kube, namespace: str, pod: dict) -> str | None:
    """The API server's refusal of `pod` (a dry run), or None when it would admit it."""
    try:
        kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod, query=[("dryRun", "All")])
    except ApiException as error:
        return json.loads(error.body)["message"]
    return None


def pod_of(document: dict, namespace: str) -> dict:
    """The pod of completion index 0 of the Job rendered from `document`, as the Job controller makes it."""
    template = render_job(parse_job(document), 0, namespace=namespace)["spec"]["template"]
    metadata = template["metadata"] | {"name": f"{document['metadata']['name']}-0"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_every_examples_pods_pass_pod_security_restricted(example, restricted):
    kube, namespace = restricted
    document = yaml.safe_load(example.read_text())
    assert admission_refusal(kube, namespace, pod_of(document, namespace)) is None


def test_a_privileged_sidecar_from_pod_template_is_refused_by_the_cluster(restricted):
    kube, namespace = restricted
    sidecar = {"name": "debug", "image": "busybox", "securityContext": {"privileged": True}}
    document = base_job(podTemplate={"spec": {"containers": [sidecar]}})
    refusal = admission_refusal(kube, namespace, pod_of(document, namespace))
    assert refusal is not None and 'violates PodSecurity "restricted:latest"' in refusal
    assert 'container "debug" must not set securityContext.privileged=true' in refusal


def test_pods_the_cluster_refuses_show_on_the_job_with_its_reason(control_plane, restricted, tmp_path):
    """The Job controller cannot create a privileged sidecar's pods in a restricted namespace; its
    reason, otherwise only in the Job's Events, becomes the job's PodCreationFailed condition."""
    kube, namespace = restricted
    install = install_watching(control_plane, namespace, tmp_path)
    with operator_process(install, *PROGRESS_EACH_READ, *QUIET):
        team = Team(kube, namespace)
        sidecar = {"name": "debug", "image": "busybox", "securityContext": {"privileged": True}}
        team.submit("sidecar", podTemplate={"spec": {"containers": [sidecar]}})
        failed = team.wait_condition("sidecar", "PodCreationFailed")
        assert failed["reason"] == "FailedCreate" and 'violates PodSecurity "restricted:latest"' in failed["message"]
        assert team.stj("sidecar")["status"]["phase"] == "Pending"  # the namespace may yet allow it
        warnings = [message for kind, reason, message in team.events("sidecar") if reason == "PodCreationFailed"]
        assert len(warnings) == 1 and "the Job sidecar-g0: " in warnings[0]
