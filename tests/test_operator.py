"""The real kopf operator against an emulated API server. The tests play the Job controller and the
kubelet (pods and Job status) and watch how the operator reacts."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import kopf
import pytest
import yaml
from k8s_emulator import EmulatedCluster
from trainer_runs import free_port

from conftest import REPO, base_job
from scaletrain_operator import handlers
from scaletrain_operator.settings import OperatorConfig

NAMESPACE = "team-a"
PEERING_CRDS = list(yaml.safe_load_all((REPO / "charts/scaletrain/crds/kopf-peering.yaml").read_text()))
TIMEOUT = 10.0
METRICS_PORT = free_port()


@contextmanager
def configured_cluster(metrics_port=0):
    """An emulated cluster as the default of the kubernetes client, and the in-process operator's
    settings for it: NAMESPACE only, progress from 127.0.0.1 every 0.3 s."""
    with pytest.MonkeyPatch.context() as patch, EmulatedCluster(namespaces=(NAMESPACE,)) as emulated:
        emulated.make_default(patch)
        config = OperatorConfig(
            namespaces=[NAMESPACE],
            progress_url="http://127.0.0.1:{port}/progress",
            progress_interval_seconds=0.3,
            metrics_port=metrics_port,
            request_timeout_seconds=5.0,
        )
        patch.setattr(handlers, "CONFIG", config)
        patch.setattr(handlers, "_cluster", None)
        yield emulated


@pytest.fixture(scope="module")
def cluster():
    with configured_cluster(METRICS_PORT) as emulated:
        yield emulated


@contextmanager
def running_operator(cluster):
    with cluster.operator(kopf.get_default_registry(), namespaces=[NAMESPACE]):
        yield


@contextmanager
def operator_process(cluster, *args):
    """`scaletrain-operator ARGS` in its own process, as its Deployment runs it, against `cluster`.
    Its log goes to a file (a pipe nobody reads would block it), `process.log_path`, shown if the test fails."""
    command = [sys.executable, "-m", "scaletrain_operator.main", *args]
    env = os.environ | {"KUBECONFIG": str(cluster.kubeconfig), "PYTHONUNBUFFERED": "1"}  # as in its image
    with tempfile.NamedTemporaryFile("w", suffix=".log") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        process.log_path = Path(log.name)  # read through its own handle: the child writes through `log`

        def show_log():
            print("operator log (tail):\n" + process.log_path.read_text()[-5000:])

        try:
            yield process
        except BaseException:
            show_log()
            raise
        finally:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                show_log()
                raise


def create_peering(cluster, name, namespace=None):
    """kopf's peering object, as the chart creates it: cluster-wide, or in `namespace`."""
    kind = "KopfPeering" if namespace else "ClusterKopfPeering"
    plural = "kopfpeerings" if namespace else "clusterkopfpeerings"
    body = {"apiVersion": "kopf.dev/v1", "kind": kind, "metadata": {"name": name}}
    return cluster.create(f"kopf.dev/v1/{plural}", body, namespace)


@pytest.fixture(scope="module")
def operator(cluster):
    """One operator for the module, as in a cluster (the lifecycle tests start and stop their own)."""
    with running_operator(cluster):
        yield cluster


def submit(cluster, name, **spec):
    document = base_job(**spec)
    document["metadata"] = {"name": name, "namespace": NAMESPACE}
    return cluster.create("stj", document)


def stj(cluster, name):
    return cluster.get("stj", NAMESPACE, name)


def wait_phase(cluster, name, phase, timeout=TIMEOUT):
    return cluster.wait_until(
        lambda: (s := stj(cluster, name)) and s.get("status", {}).get("phase") == phase and s, timeout=timeout
    )


def children(cluster, name, kind):
    return cluster.list(kind, NAMESPACE, label_selector=f"scaletrain.io/job-name={name}")


def start_pods(cluster, job_name, phase="Running"):
    """Play the Job controller and the kubelet: one pod per completion index, in `phase`."""
    job = cluster.wait_until(lambda: cluster.get("jobs", NAMESPACE, job_name), timeout=TIMEOUT)
    labels = job["spec"]["template"]["metadata"]["labels"]
    return [
        cluster.create_pod(NAMESPACE, f"{job_name}-{index}-x", labels=labels, phase=phase, owner=job)
        for index in range(job["spec"]["completions"])
    ]


def fail_pod(cluster, pod_name, exit_code):
    cluster.set_pod_phase(NAMESPACE, pod_name, "Failed", exit_code=exit_code)


def events(cluster, name):
    return [
        (e["type"], e["reason"], e["message"])
        for e in cluster.list("events", NAMESPACE)
        if e["involvedObject"]["name"] == name
    ]


def condition(obj, kind):
    return next((c for c in obj["status"]["conditions"] if c["type"] == kind), None)


def test_children_are_created_once_as_rendered(operator):
    submit(operator, "create-once")
    status = wait_phase(operator, "create-once", "Pending")["status"]
    assert status["currentJob"] == "create-once-g0" and condition({"status": status}, "Created")["status"] == "True"
    time.sleep(0.5)  # later events (the operator's own status patch) must not create anything again
    assert [s["metadata"]["name"] for s in children(operator, "create-once", "services")] == ["create-once"]
    (job,) = children(operator, "create-once", "jobs")
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 2
    owner = job["metadata"]["ownerReferences"][0]
    assert owner["uid"] == stj(operator, "create-once")["metadata"]["uid"] and owner["controller"] is True
    assert operator.request_counts()[("create", "jobs.batch")] >= 1
    assert ("Normal", "Created", "created Job create-once-g0") in events(operator, "create-once")
    assert "finalizers" not in stj(operator, "create-once")["metadata"]  # deletion never waits for us


def test_running_then_succeeded(operator):
    submit(operator, "happy")
    pods = start_pods(operator, "happy-g0")
    wait_phase(operator, "happy", "Running")
    status = operator.wait_until(lambda: (s := stj(operator, "happy")["status"])["nodes"]["active"] == 2 and s)
    assert status["nodes"] == {"active": 2, "succeeded": 0, "failed": 0} and status["startTime"]
    for pod in pods:
        operator.set_pod_phase(NAMESPACE, pod["metadata"]["name"], "Succeeded")
    operator.set_status("jobs", NAMESPACE, "happy-g0", {"conditions": [{"type": "Complete", "status": "True"}]})
    done = wait_phase(operator, "happy", "Succeeded")
    assert done["status"]["completionTime"] and condition(done, "Succeeded")["status"] == "True"
    assert condition(done, "Running")["status"] == "False"
    reasons = [reason for _, reason, _ in events(operator, "happy")]
    assert reasons == ["Created", "Running", "Succeeded"]


def test_a_failed_rank_restarts_the_gang_up_to_max_restarts(operator):
    submit(operator, "flaky", maxRestarts=1)
    pods = start_pods(operator, "flaky-g0")
    wait_phase(operator, "flaky", "Running")
    fail_pod(operator, pods[1]["metadata"]["name"], exit_code=137)
    restarted = operator.wait_until(lambda: (s := stj(operator, "flaky")) and s["status"].get("restarts") == 1 and s)
    assert restarted["status"]["currentJob"] == "flaky-g1"
    operator.wait_until(lambda: operator.get("jobs", NAMESPACE, "flaky-g0") is None, timeout=TIMEOUT)
    assert operator.get("pods", NAMESPACE, pods[0]["metadata"]["name"]) is None  # the old gang went with its Job
    warning = next(e for e in events(operator, "flaky") if e[1] == "Restarting")
    assert warning[0] == "Warning" and "flaky-g0-1-x failed (Error, exit code 137)" in warning[2]

    new_pods = start_pods(operator, "flaky-g1")
    wait_phase(operator, "flaky", "Running")
    fail_pod(operator, new_pods[0]["metadata"]["name"], exit_code=1)
    failed = wait_phase(operator, "flaky", "Failed")
    assert condition(failed, "Failed")["reason"] == "RestartLimitReached"
    assert "maxRestarts (1) reached" in failed["status"]["message"]
    assert [j["metadata"]["name"] for j in children(operator, "flaky", "jobs")] == ["flaky-g1"]


def test_a_config_error_fails_at_once(operator):
    submit(operator, "bad-config")
    pods = start_pods(operator, "bad-config-g0")
    fail_pod(operator, pods[0]["metadata"]["name"], exit_code=78)
    failed = wait_phase(operator, "bad-config", "Failed")
    assert condition(failed, "Failed")["reason"] == "ConfigError" and failed["status"]["restarts"] == 0
    assert [j["metadata"]["name"] for j in children(operator, "bad-config", "jobs")] == ["bad-config-g0"]


def test_suspend_and_resume(operator):
    submit(operator, "pausable")
    start_pods(operator, "pausable-g0")
    wait_phase(operator, "pausable", "Running")
    operator.patch("stj", NAMESPACE, "pausable", {"spec": {"suspend": True}})
    wait_phase(operator, "pausable", "Suspended")
    assert operator.get("jobs", NAMESPACE, "pausable-g0")["spec"]["suspend"] is True
    operator.patch("stj", NAMESPACE, "pausable", {"spec": {"suspend": False}})
    operator.wait_until(lambda: operator.get("jobs", NAMESPACE, "pausable-g0")["spec"]["suspend"] is False)
    assert stj(operator, "pausable")["status"]["restarts"] == 0


def test_a_queued_job_is_created_suspended_for_kueue(operator):
    submit(operator, "queued", queueName="h100")
    status = wait_phase(operator, "queued", "Pending")["status"]
    job = operator.get("jobs", NAMESPACE, "queued-g0")
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "h100"
    operator.wait_until(lambda: "Kueue" in stj(operator, "queued")["status"].get("message", ""))
    assert status["restarts"] == 0


def test_a_spec_change_restarts_the_gang_with_the_new_spec(operator):
    submit(operator, "resized")
    start_pods(operator, "resized-g0")
    wait_phase(operator, "resized", "Running")
    operator.patch("stj", NAMESPACE, "resized", {"spec": {"nodes": 4, "training": {"globalBatchSize": 32}}})
    job = operator.wait_until(lambda: operator.get("jobs", NAMESPACE, "resized-g1"), timeout=TIMEOUT)
    assert job["spec"]["completions"] == 4
    status = operator.wait_until(
        lambda: (s := stj(operator, "resized")["status"]).get("currentJob") == "resized-g1" and s
    )
    assert status["restarts"] == 0 and status["observedGeneration"] == 2


def test_an_invalid_spec_that_passes_the_schema_fails_once(operator):
    submit(operator, "reserved-env", env=[{"name": "WORLD_SIZE", "value": "8"}])
    failed = wait_phase(operator, "reserved-env", "Failed")
    assert condition(failed, "Failed")["reason"] == "InvalidSpec"
    assert "spec.env[0].name: WORLD_SIZE is set by ScaleTrain" in failed["status"]["message"]
    operator.reset_request_counts()
    operator.patch("stj", NAMESPACE, "reserved-env", {"metadata": {"labels": {"touched": "yes"}}})
    time.sleep(0.5)
    status_patches = [
        call for call in operator.emulator.calls if call[:2] == ("patch", "scaletrainjobs.scaletrain.io/status")
    ]
    assert [call[3] for call in status_patches if call[3] == "reserved-env"] == []  # no retry loop
    assert children(operator, "reserved-env", "jobs") == []
    assert [e[1] for e in events(operator, "reserved-env")] == ["InvalidSpec"]


RANK0_PROGRESS = {"step": 42, "maxSteps": 100, "loss": 1.25, "samplesPerSecond": 8.0, "etaSeconds": 70.0,
                  "updatedAt": "2026-11-30T12:00:00+00:00"}  # fmt: skip


class _Progress(http.server.BaseHTTPRequestHandler):
    """Rank 0's /progress, as the trainer serves it (with a field status.progress does not keep)."""

    def do_GET(self):  # noqa: N802
        body = json.dumps(RANK0_PROGRESS | {"tokensPerSecond": 128.0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_progress_of_rank_zero_reaches_the_status(operator):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Progress)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        submit(operator, "watched", training={"metricsPort": server.server_address[1]})
        start_pods(operator, "watched-g0")
        wait_phase(operator, "watched", "Running")
        progress = operator.wait_until(lambda: stj(operator, "watched")["status"].get("progress"), timeout=TIMEOUT)
        assert progress == RANK0_PROGRESS
    finally:
        server.shutdown()


def test_ttl_deletes_a_finished_job_with_its_children(operator):
    submit(operator, "short-lived", ttlSecondsAfterFinished=0)
    start_pods(operator, "short-lived-g0", phase="Succeeded")
    operator.set_status("jobs", NAMESPACE, "short-lived-g0", {"conditions": [{"type": "Complete", "status": "True"}]})
    operator.wait_until(lambda: stj(operator, "short-lived") is None, timeout=TIMEOUT)
    assert children(operator, "short-lived", "jobs") == [] and children(operator, "short-lived", "services") == []


def test_kubectl_apply_and_get_show_the_printer_columns(operator):
    example = yaml.safe_load((REPO / "examples" / "cpu-gloo.yaml").read_text())
    operator.kubectl("apply", "-n", NAMESPACE, "-f", str(REPO / "examples" / "cpu-gloo.yaml"))
    name = example["metadata"]["name"]
    wait_phase(operator, name, "Pending")
    table = operator.kubectl("get", "stj", "-n", NAMESPACE, name).stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "NODES", "STEP", "LOSS", "RESTARTS", "AGE"]
    assert table[1].split()[:3] == [name, "Pending", "2"]
    jobs = operator.kubectl("get", "jobs", "-n", NAMESPACE, "-l", f"scaletrain.io/job-name={name}", "-o", "name")
    assert jobs.stdout.split() == [f"job.batch/{name}-g0"]


def test_metrics_endpoint_counts_jobs(operator):
    submit(operator, "counted")
    wait_phase(operator, "counted", "Pending")
    text = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5).read().decode()
    created = next(line for line in text.splitlines() if line.startswith('scaletrain_jobs_total{outcome="created"}'))
    assert float(created.split()[-1]) >= 1
    assert "scaletrain_reconcile_seconds_count" in text


def test_events_reference_the_job(operator):
    submit(operator, "evented")
    wait_phase(operator, "evented", "Pending")
    event = next(e for e in operator.list("events", NAMESPACE) if e["involvedObject"]["name"] == "evented")
    assert event["involvedObject"]["kind"] == "ScaleTrainJob"
    assert event["involvedObject"]["uid"] == stj(operator, "evented")["metadata"]["uid"]


def test_steady_state_makes_no_writes(operator):
    """Last in this module: with every job above settled, the operator writes nothing (no patch loops)."""
    time.sleep(1.0)
    operator.reset_request_counts()
    time.sleep(1.5)
    writes = [call for call in operator.emulator.calls if call[0] in ("create", "patch", "update", "delete")]
    assert writes == []
