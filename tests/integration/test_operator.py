"""The real kopf operator against an emulated API server. The tests play the Job controller and the
kubelet (pods and Job status) and watch how the operator reacts."""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.request

import pytest
import yaml

from support.jobs import REPO
from support.operator_harness import (
    NAMESPACE,
    TIMEOUT,
    children,
    condition,
    emulated_cluster,
    events,
    fail_pod,
    operator_config,
    running_operator,
    start_pods,
    stj,
    submit,
    wait_phase,
)
from support.trainer_runs import free_port

METRICS_PORT = free_port()


@pytest.fixture(scope="module")
def operator():
    """One operator for the module, as in a cluster (the lifecycle tests start and stop their own)."""
    with emulated_cluster() as cluster, running_operator(cluster, operator_config(METRICS_PORT)):
        yield cluster


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


def test_a_drifted_job_is_patched_back_while_the_status_stays_the_same(operator):
    """The Job's deadline edited by hand: the operator patches it back. The status does not change, and the
    Job to patch was once taken from the status patch, which is dropped when unchanged: a patch of Job None
    then failed on every event."""
    submit(operator, "drifted", activeDeadlineSeconds=600)
    start_pods(operator, "drifted-g0")
    wait_phase(operator, "drifted", "Running")
    operator.wait_until(lambda: stj(operator, "drifted")["status"]["nodes"]["active"] == 2)
    operator.patch("jobs", NAMESPACE, "drifted-g0", {"spec": {"activeDeadlineSeconds": 60}})
    deadline = lambda: operator.get("jobs", NAMESPACE, "drifted-g0")["spec"]["activeDeadlineSeconds"]  # noqa: E731
    operator.wait_until(lambda: deadline() == 600, timeout=TIMEOUT)
    assert stj(operator, "drifted")["status"]["phase"] == "Running"


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
