"""Scripts of one's own that push their progress in the Kubeflow Trainer status protocol, end to end on the real
control plane: the operator serves the endpoint over HTTPS (report_server.py), the kubelet stand-in
projects each pod's token through the TokenRequest API, and the API server's TokenReview says whose it is.

- An unmodified Hugging Face Trainer script shows its step, loss and ETA in the status and in `kubectl get -o wide`.
- A token that is not a gang pod's, or not for this endpoint, is refused and changes nothing.
- A script that stops reporting is a Hang when its job opted in (statusReports.hangAfterSeconds), and nothing
  otherwise."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from scaletrain_operator.api.naming import STATUS_REPORTS_PATH
from scaletrain_operator.render.status_reports import AUDIENCE
from scaletrain_testing.e2e_jobs import OPERATOR_ARGS, OPERATOR_ENV, e2e_namespace, status_report_args
from scaletrain_testing.jobs import DELETE
from scaletrain_testing.kubelet import FakeNode
from scaletrain_testing.operator_harness import operator_process
from scaletrain_testing.timeouts import WHOLE_JOB_S

SCRIPTS = Path(__file__).resolve().parent / "scripts"  # scripts of one's own, on the pods' PYTHONPATH
ENV = [{"name": "PYTHONPATH", "value": str(SCRIPTS)}, {"name": "OMP_NUM_THREADS", "value": "1"}]
HANG_AFTER_S = 10


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    """One watched namespace whose operator serves status reports, and a fake node whose pods run here."""
    with e2e_namespace(control_plane, tmp_path_factory.mktemp("reports"), [FakeNode("report-node")]) as team:
        arguments = status_report_args(team)
        with operator_process(team.install, *OPERATOR_ARGS, *arguments, env=OPERATOR_ENV):
            team.endpoint = (
                next(a for a in arguments if a.startswith("--status-reports-url=")).split("=", 1)[1]
                + STATUS_REPORTS_PATH
            )
            team.ca = Path(next(a for a in arguments if a.startswith("--status-reports-tls-dir=")).split("=", 1)[1])
            yield team


def own_script(cluster, name, module, *arguments, **spec):
    command = ["python", "-m", module, *arguments]
    cluster.submit(name, nodes=1, training=DELETE, command=command, env=ENV, maxRestarts=0, **spec)


def test_an_unmodified_hf_trainer_script_shows_its_step_loss_and_eta(cluster, control_plane):
    own_script(cluster, "hf-trainer", "hf_trainer", "--max-steps", "60", "--seconds-per-step", "0.25")
    (pod,) = cluster.pods("hf-trainer-g0")
    env = {var["name"]: var.get("value") for var in pod["spec"]["containers"][0]["env"]}
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == cluster.endpoint

    def reported_a_step(status):
        progress = status.get("progress") or {}
        return progress.get("step", 0) > 0 and "etaSeconds" in progress and "loss" in progress

    running = cluster.wait_status("hf-trainer", reported_a_step, WHOLE_JOB_S, "a step reported")
    progress = running["progress"]
    assert running["phase"] == "Running" and progress["maxSteps"] == 60 and progress["generation"] == 0
    assert 0 < progress["progressPercentage"] < 100 and progress["etaSeconds"] > 0 and progress["loss"] > 0
    assert {"learning_rate", "current_epoch"} <= set(progress["metrics"]) and progress["reportedAt"]
    wide = control_plane.get_wide("stj", cluster.namespace, "hf-trainer")
    assert int(wide["STEP"]) > 0 and float(wide["LOSS"]) > 0 and float(wide["ETA-SECONDS"]) >= 0, wide
    status = cluster.wait_phase("hf-trainer", "Succeeded", WHOLE_JOB_S)["status"]
    assert status["progress"]["step"] > 0 and status["restarts"] == 0


def post(cluster, token: str, body: dict) -> int:
    context = ssl.create_default_context(cafile=str(cluster.ca / "ca.crt"))
    request = urllib.request.Request(
        cluster.endpoint, json.dumps(body).encode(), {"Authorization": f"Bearer {token}"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def token_request(cluster, audiences: list[str], pod: dict | None = None) -> str:
    """A service-account token of the namespace's default account from the TokenRequest API, bound to `pod`."""
    spec = {"audiences": audiences, "expirationSeconds": 600}
    if pod is not None:
        metadata = pod["metadata"]
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": metadata["name"], "uid": metadata["uid"]}
    path = f"/api/v1/namespaces/{cluster.namespace}/serviceaccounts/default/token"
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    return cluster.kube.request("POST", path, request)["status"]["token"]


def test_a_forged_or_foreign_token_is_refused_and_changes_nothing(cluster):
    own_script(cluster, "reports", "reports_then_hangs", "--reports", "2")
    reported = cluster.wait_status("reports", lambda s: (s.get("progress") or {}).get("step") == 2, WHOLE_JOB_S)
    # A pod of the namespace with the job's labels, which no gang Job owns (it never runs: no node takes it).
    (gang_pod,) = cluster.pods("reports-g0")
    impostor = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "impostor", "namespace": cluster.namespace, "labels": gang_pod["metadata"]["labels"]},
        "spec": {"nodeSelector": {"no-such-node": "true"}, "containers": [{"name": "c", "image": "none"}]},
    }
    impostor = cluster.kube.create("pods", impostor)
    forged = {"trainerStatus": {"metrics": [{"name": "current_step", "value": "999"}]}}
    assert post(cluster, "not-a-token", forged) == 401
    assert post(cluster, token_request(cluster, []), forged) == 401  # the API server's audience, not ours
    assert post(cluster, token_request(cluster, ["https://example.com"], gang_pod), forged) == 401
    assert post(cluster, token_request(cluster, [AUDIENCE], impostor), forged) == 403
    cluster.wait_status("reports", lambda s: s["progress"]["readAt"] != reported["progress"]["readAt"])
    assert cluster.status("reports")["progress"]["step"] == 2  # still the script's own report
    assert post(cluster, token_request(cluster, [AUDIENCE], gang_pod), forged) == 200  # the pod's own: taken
    cluster.kube.delete("stj", cluster.namespace, "reports")


def test_a_script_that_stops_reporting_is_a_hang_only_when_its_job_opted_in(cluster):
    own_script(cluster, "silent-opted-in", "reports_then_hangs", statusReports={"hangAfterSeconds": HANG_AFTER_S})
    own_script(cluster, "silent", "reports_then_hangs")
    failed = cluster.wait_phase("silent-opted-in", "Failed", WHOLE_JOB_S)["status"]
    assert "(Hang)" in failed["message"] and failed["progress"]["step"] == 3
    (hang,) = [message for _, reason, message in cluster.events("silent-opted-in") if reason == "Hang"]
    assert "the script reported nothing since" in hang and "statusReports.hangAfterSeconds" in hang, hang
    status = cluster.status("silent")
    assert status["phase"] == "Running" and status["progress"]["step"] == 3  # silent as long, and no hang
    assert "Hang" not in [reason for _, reason, _ in cluster.events("silent")]
