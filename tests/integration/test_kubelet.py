"""The kubelet stand-in (scaletrain_testing/kubelet.py) on the real control plane: Nodes that register Ready,
pods the real scheduler binds to them and the real Job controller creates, run on the pod executor
with their status reported as the kubelet reports it, and deletion with the pod's grace period."""

from __future__ import annotations

import base64
import os
import secrets
import time

import pytest

from scaletrain_operator.local.pod_network import NAMESPACES
from scaletrain_operator.local.processes import scan_processes
from scaletrain_testing.kube import Kube
from scaletrain_testing.kubelet import GPU_RESOURCE, FakeNode, Kubelet, gpu_node
from scaletrain_testing.timeouts import POD_RUN_S
from scaletrain_testing.waiting import wait_until

# Writes its arguments to the container's termination message file, which the kubelet reports: at
# /dev/termination-log as on a cluster, or where pods share this machine's files, where the env says.
SAY = (
    "import os, sys; "
    "open(os.environ.get('SCALETRAIN_TERMINATION_LOG', '/dev/termination-log'), 'w').write(' '.join(sys.argv[1:]))"
)


@pytest.fixture
def kubelet(control_plane, tmp_path, namespace):
    """A CPU node and a GPU node (8 GPUs, tainted), both run here, for the test's namespace; the test
    output says in which pod network mode."""
    suffix = secrets.token_hex(3)
    nodes = [FakeNode(f"cpu-{suffix}", cpu="4"), gpu_node(f"gpu-{suffix}")]
    with Kubelet(control_plane.api_client(), nodes, tmp_path, namespaces=[namespace]) as running:
        print(f"pod network: {running.executor.network_mode} ({running.executor.network_reason})")
        yield running


@pytest.fixture
def kube(control_plane):
    return Kube(control_plane.api_client())


def a_pod(name, containers, **spec):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": containers, **spec},
    }


def container(name, command, **fields):
    return {"name": name, "image": "python:3.11", "command": command, **fields}


def phase_of(kube, namespace, name, *phases):
    def reached():
        pod = kube.get("pods", namespace, name)
        return pod if pod and (pod.get("status") or {}).get("phase") in phases else None

    return wait_until(reached, POD_RUN_S, f"pod {name} to be {' or '.join(phases)}")


def test_nodes_register_ready_with_their_capacity_taints_and_leases(kubelet, kube):
    for name, node in kubelet.nodes.items():
        registered = kube.get("nodes", None, name)
        ready = next(c for c in registered["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True" and registered["status"]["allocatable"] == node.capacity()
        assert (registered["spec"].get("taints") or []) == node.taints
        assert kube.get("leases", "kube-node-lease", name)["spec"]["holderIdentity"] == name
    gpu = next(node for node in kubelet.nodes.values() if node.gpus)
    assert kube.get("nodes", None, gpu.name)["status"]["capacity"][GPU_RESOURCE] == "8"


def test_a_pod_runs_and_its_status_is_reported(kubelet, kube, namespace):
    kube.create("pods", a_pod("hello", [container("main", ["python", "-c", "print('hello')"])]), namespace)
    pod = phase_of(kube, namespace, "hello", "Succeeded", "Failed")
    status = pod["status"]
    assert status["phase"] == "Succeeded", status
    assert pod["spec"]["nodeName"].startswith("cpu-")  # the GPU node's taint keeps it off
    assert status["hostIP"] == kubelet.executor.network.host_ip and status["startTime"]
    if kubelet.executor.network_mode == NAMESPACES:  # its own IP in the bridge's subnet
        assert (
            status["podIP"] != status["hostIP"]
            and status["podIP"].rsplit(".", 1)[0] == status["hostIP"].rsplit(".", 1)[0]
        )
    (main,) = status["containerStatuses"]
    terminated = main["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed" and terminated["finishedAt"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert (
        conditions["PodScheduled"] == "True" and conditions["Initialized"] == "True" and conditions["Ready"] == "False"
    )
    assert "hello" in kubelet.running(namespace, "hello").log_path.read_text()


def test_a_jobs_indexed_pods_run_with_field_refs_and_expanded_env(kubelet, kube, namespace):
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "GREETING", "value": "$(POD_NAME) at $(POD_IP)"},
        # The Job controller appends JOB_COMPLETION_INDEX after these: not defined yet, so not expanded.
        {"name": "TOO_EARLY", "value": "$(JOB_COMPLETION_INDEX)"},
    ]
    # In args every variable is defined, the index included.
    args = ["index $(JOB_COMPLETION_INDEX) is $(GREETING) on $(NODE)", "$(TOO_EARLY)", "$$(NODE)"]
    template = {
        "spec": {
            "restartPolicy": "Never",
            "subdomain": "indexed",
            "containers": [container("main", ["python", "-c", SAY, *args], env=env)],
        }
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "indexed"},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "backoffLimit": 0,
            "template": template,
        },
    }
    kube.create("jobs", job, namespace)

    def complete():
        conditions = (kube.get("jobs", namespace, "indexed").get("status") or {}).get("conditions") or []
        return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions) and conditions

    assert any(c["type"] == "Complete" for c in wait_until(complete, POD_RUN_S, "Job indexed to end"))
    pods = sorted(
        kube.list("pods", namespace),
        key=lambda p: p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"],
    )
    for index, pod in enumerate(pods):
        message = pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
        name, ip, node = pod["metadata"]["name"], pod["status"]["podIP"], pod["spec"]["nodeName"]
        assert message == f"index {index} is {name} at {ip} on {node} $(JOB_COMPLETION_INDEX) $(NODE)"
        assert pod["spec"]["hostname"] == f"indexed-{index}"


def test_a_termination_message_and_every_containers_exit_show_up_in_the_status(kubelet, kube, namespace):
    containers = [
        container("writer", ["python", "-c", SAY + "; sys.exit(3)", "disk", "full"]),
        container(
            "logger",
            ["python", "-c", "print('last words'); raise SystemExit(1)"],
            terminationMessagePolicy="FallbackToLogsOnError",
        ),
        container("fine", ["python", "-c", "pass"]),
    ]
    kube.create("pods", a_pod("ends-badly", containers), namespace)
    status = phase_of(kube, namespace, "ends-badly", "Succeeded", "Failed")["status"]
    assert status["phase"] == "Failed"  # every container has ended, and one did not exit 0
    ended = {c["name"]: c["state"]["terminated"] for c in status["containerStatuses"]}
    assert (ended["writer"]["exitCode"], ended["writer"]["reason"], ended["writer"]["message"]) == (
        3,
        "Error",
        "disk full",
    )
    assert ended["logger"]["exitCode"] == 1 and ended["logger"]["message"].strip() == "last words"
    assert (ended["fine"]["exitCode"], ended["fine"]["reason"]) == (0, "Completed")


@pytest.mark.skipif(os.geteuid() != 0, reason="a container path in a volume needs a container's own filesystem")
def test_a_restart_all_containers_rule_restarts_the_pod_in_place_as_the_api_server_shows(kubelet, kube, namespace):
    """The API server of v1.37 keeps the rule (its gates are on by default), and takes the status of a pod whose
    containers restarted in place: the same pod, its restart count, why, and the pod's condition."""
    ask_once = (
        "import os, sys; first = '/scratch/first'; "
        "sys.exit(0) if os.path.exists(first) else (open(first, 'w').close(), sys.exit(42))"
    )
    rules = [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]
    main = container(
        "main",
        ["python", "-c", ask_once],
        restartPolicy="Never",
        restartPolicyRules=rules,
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
    )
    created = kube.create("pods", a_pod("twice", [main], volumes=[{"name": "scratch", "emptyDir": {}}]), namespace)
    assert created["spec"]["containers"][0]["restartPolicyRules"] == rules
    status = phase_of(kube, namespace, "twice", "Succeeded", "Failed")["status"]
    assert status["phase"] == "Succeeded", status
    (main_status,) = status["containerStatuses"]
    assert main_status["restartCount"] == 1 and main_status["state"]["terminated"]["exitCode"] == 0, main_status
    assert main_status["lastState"]["terminated"]["reason"] == "RestartingAllContainers", main_status
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["AllContainersRestarting"] == "False"


def test_a_spec_the_node_cannot_run_stays_pending_with_the_reason(kubelet, kube, namespace):
    secret_env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k"}}}]
    kube.create("pods", a_pod("misconfigured", [container("main", ["true"], env=secret_env)]), namespace)

    def waiting():
        statuses = (kube.get("pods", namespace, "misconfigured").get("status") or {}).get("containerStatuses") or []
        return statuses and statuses[0]["state"].get("waiting")

    state = wait_until(waiting, POD_RUN_S, "pod misconfigured to wait")
    assert state["reason"] == "CreateContainerConfigError" and "TOKEN" in state["message"]


def test_env_from_a_secret_is_read_from_the_api_server(kubelet, kube, namespace):
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "credentials"},
        "data": {"token": base64.b64encode(b"s3cret").decode()},
    }
    kube.create("secrets", secret, namespace)
    env = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "credentials", "key": "token"}}},
        {"name": "ABSENT", "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k", "optional": True}}},
    ]
    check = "import os, sys; sys.exit(os.environ['TOKEN'] != 's3cret' or 'ABSENT' in os.environ)"
    kube.create("pods", a_pod("reader", [container("main", ["python", "-c", check], env=env)]), namespace)
    assert phase_of(kube, namespace, "reader", "Succeeded", "Failed")["status"]["phase"] == "Succeeded"


def test_deletion_honours_the_grace_period_then_kills(kubelet, kube, namespace):
    ignore = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
    )
    obey = "import time; print('up', flush=True); time.sleep(600)"
    kube.create(
        "pods",
        a_pod("stubborn", [container("main", ["python", "-c", ignore])], terminationGracePeriodSeconds=3),
        namespace,
    )
    kube.create(
        "pods",
        a_pod("polite", [container("main", ["python", "-c", obey])], terminationGracePeriodSeconds=30),
        namespace,
    )
    for name in ("stubborn", "polite"):
        phase_of(kube, namespace, name, "Running")
        wait_until(
            lambda name=name: "up" in kubelet.running(namespace, name).log_path.read_text(),
            POD_RUN_S,
            f"pod {name} to say up",
        )

    taken = {}
    for name in ("stubborn", "polite"):
        started = time.monotonic()
        kube.delete("pods", namespace, name)  # the pod's own grace period
        wait_until(lambda name=name: kube.get("pods", namespace, name) is None, POD_RUN_S, f"pod {name} to be gone")
        taken[name] = time.monotonic() - started
    assert 3 <= taken["stubborn"] < 10, taken  # SIGTERM ignored: killed when its 3 s were up
    assert taken["polite"] < 3, taken  # SIGTERM ends it; the 30 s are a limit, not a wait
    stubborn, polite = kubelet.running(namespace, "stubborn"), kubelet.running(namespace, "polite")
    assert stubborn.container("main").exit_code == 137 and polite.container("main").exit_code == 143
    assert not stubborn.processes(scan_processes()) and not polite.processes(scan_processes())


def test_pods_bind_to_the_gpu_node_only_when_they_tolerate_its_taint(kubelet, kube, namespace):
    gpu = {"resources": {"limits": {GPU_RESOURCE: "1"}}}
    toleration = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    kube.create("pods", a_pod("cpu-only", [container("main", ["true"])]), namespace)
    kube.create("pods", a_pod("tolerant", [container("main", ["true"], **gpu)], tolerations=toleration), namespace)
    kube.create("pods", a_pod("intolerant", [container("main", ["true"], **gpu)]), namespace)
    assert phase_of(kube, namespace, "cpu-only", "Succeeded")["spec"]["nodeName"].startswith("cpu-")
    assert phase_of(kube, namespace, "tolerant", "Succeeded")["spec"]["nodeName"].startswith("gpu-")

    def unschedulable():
        pod = kube.get("pods", namespace, "intolerant")
        conditions = (pod.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"), None)

    refused = wait_until(unschedulable, POD_RUN_S, "the scheduler to refuse pod intolerant")
    assert refused["reason"] == "Unschedulable"
    assert not kube.get("pods", namespace, "intolerant")["spec"].get("nodeName")
