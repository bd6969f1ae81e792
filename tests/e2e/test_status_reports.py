"""Scripts of one's own that push their progress in the Kubeflow Trainer status protocol, end to end on the real
control plane: the operator serves the endpoint over HTTPS (report_server.py), the kubelet stand-in
projects each pod's token through the TokenRequest API, and the API server's TokenReview says whose it is.

- An unmodified Hugging Face Trainer script shows its step, loss and ETA in the status and in `kubectl get -o wide`.
- A token that is not a gang pod's, or not for this endpoint, is refused and changes nothing.
- A script that stops reporting is a Hang when its job opted in (statusReports.hangAfterSeconds), and nothing
  otherwise."""

from __future__ import annotations

import base64
import json
import secrets
import ssl
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import pytest

from scaletrain_operator.api import naming
from scaletrain_operator.api.naming import STATUS_REPORTS_PATH
from scaletrain_operator.api.timestamps import parse_timestamp
from scaletrain_operator.render.status_reports import AUDIENCE
from scaletrain_testing.e2e_jobs import OPERATOR_ARGS, OPERATOR_ENV, e2e_namespace, status_report_args
from scaletrain_testing.front_door import FrontDoor
from scaletrain_testing.jobs import DELETE
from scaletrain_testing.kubelet import FakeNode
from scaletrain_testing.operator_harness import active_replica, operator_process
from scaletrain_testing.status_faults import StatusWriteFaults
from scaletrain_testing.timeouts import OPERATOR_REACTION_S, OPERATOR_STOP_S, PEERING_EXPIRY_S, WHOLE_JOB_S
from scaletrain_testing.trainer_runs import free_port
from scaletrain_testing.waiting import wait_until

SCRIPTS = Path(__file__).resolve().parent / "scripts"  # scripts of one's own, on the pods' PYTHONPATH
ENV = [{"name": "PYTHONPATH", "value": str(SCRIPTS)}, {"name": "OMP_NUM_THREADS", "value": "1"}]
HANG_AFTER_S = 10
EVERY_S = 2  # how often the failover's script reports
FLOODERS, FLOOD_S = 8, 60.0  # threads sending forged tokens, and for how long at most


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


def test_an_unmodified_hf_trainer_script_shows_its_step_loss_and_eta_to_the_end(cluster, control_plane):
    # Train and eval logging, with scores: HF's callback reports every number ever logged, 18 names at the end.
    arguments = ("--max-steps", "60", "--seconds-per-step", "0.25", "--eval-steps", "20", "--eval-metrics", "8")
    own_script(cluster, "hf-trainer", "hf_trainer", *arguments)
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
    progress = status["progress"]
    assert status["restarts"] == 0 and progress["step"] > 0 and progress["evalLoss"] > 0
    # Current to the end: the last report, sent at train end with the run's summary, is the status's.
    assert progress["progressPercentage"] == 100 and "train_loss" in progress["metrics"], progress
    assert len(progress["metrics"]) == 16 and "eval_top8_accuracy" in progress["metrics"]
    reasons = [reason for _, reason, _ in cluster.events("hf-trainer")]
    assert reasons.count("MetricsLeftOut") == 1 and "StatusWriteRefused" not in reasons


class Answer(NamedTuple):
    status: int
    message: str  # the server's body: why it refused, when it did


def post(cluster, token: str, body: dict) -> Answer:
    context = ssl.create_default_context(cafile=str(cluster.ca / "ca.crt"))
    request = urllib.request.Request(
        cluster.endpoint, json.dumps(body).encode(), {"Authorization": f"Bearer {token}"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return Answer(answer.status, answer.read().decode(errors="replace"))
    except urllib.error.HTTPError as refused:
        return Answer(refused.code, refused.read().decode(errors="replace"))


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
    # A pod of the namespace with the job's labels, which no gang Job owns (it never runs: no node takes it). Not the
    # Job controller's labels: the gang's Job would adopt a pod its selector matches, and delete it as one too many,
    # and a token bound to a deleted pod is refused as no token (401) before it could be refused as no gang's.
    (gang_pod,) = cluster.pods("reports-g0")
    labels = {k: v for k, v in gang_pod["metadata"]["labels"].items() if k.startswith(f"{naming.GROUP}/")}
    assert labels[naming.LABEL_JOB_NAME] == "reports"
    impostor = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "impostor", "namespace": cluster.namespace, "labels": labels},
        "spec": {"nodeSelector": {"no-such-node": "true"}, "containers": [{"name": "c", "image": "none"}]},
    }
    impostor = cluster.kube.create("pods", impostor)
    forged = {"trainerStatus": {"metrics": [{"name": "current_step", "value": "999"}]}}
    assert post(cluster, "not-a-token", forged).status == 401
    assert post(cluster, token_request(cluster, []), forged).status == 401  # the API server's audience, not ours
    assert post(cluster, token_request(cluster, ["https://example.com"], gang_pod), forged).status == 401
    assert post(cluster, token_request(cluster, [AUDIENCE], impostor), forged).status == 403
    cluster.wait_status("reports", lambda s: s["progress"]["readAt"] != reported["progress"]["readAt"])
    assert cluster.status("reports")["progress"]["step"] == 2  # still the script's own report
    assert post(cluster, token_request(cluster, [AUDIENCE], gang_pod), forged).status == 200  # the pod's own: taken
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


def named_metrics(prefix: str, count: int, step: int) -> dict:
    metrics = [{"name": f"{prefix}_{i:02}", "value": str(i)} for i in range(count)]
    return {"trainerStatus": {"metrics": [*metrics, {"name": "current_step", "value": str(step)}]}}


def test_each_report_replaces_the_metrics_and_one_of_40_names_keeps_16_and_says_so_once(cluster):
    own_script(cluster, "metrics", "reports_then_hangs", "--reports", "2")
    cluster.wait_status("metrics", lambda s: (s.get("progress") or {}).get("step") == 2, WHOLE_JOB_S)
    (pod,) = cluster.pods("metrics-g0")
    token = token_request(cluster, [AUDIENCE], pod)
    assert post(cluster, token, named_metrics("metric", 40, step=3)).status == 200
    first_16 = {f"metric_{i:02}" for i in range(16)}
    cluster.wait_status("metrics", lambda s: set(s["progress"].get("metrics", ())) == first_16, what="16 of 40")
    assert post(cluster, token, named_metrics("other", 16, step=4)).status == 200
    others = {f"other_{i:02}" for i in range(16)}
    replaced = cluster.wait_status(
        "metrics", lambda s: set(s["progress"].get("metrics", ())) == others, what="the next report's metrics alone"
    )
    assert replaced["progress"]["step"] == 4 and replaced["phase"] == "Running"
    said = [message for _, reason, message in cluster.events("metrics") if reason == "MetricsLeftOut"]
    assert len(said) == 1 and "reports 40 metrics" in said[0] and "metric_16" in said[0] and "metric_39" in said[0]
    cluster.kube.delete("stj", cluster.namespace, "metrics")


def test_a_status_write_the_api_server_refuses_is_said_and_the_hang_is_still_found(cluster, control_plane):
    spec = {"statusReports": {"hangAfterSeconds": HANG_AFTER_S}}
    own_script(cluster, "refused", "reports_then_hangs", "--reports", "3", **spec)

    def running_with_a_loss(stj: dict) -> bool:  # what every progress write of this script holds
        status = stj.get("status") or {}
        return status.get("phase") == "Running" and "loss" in (status.get("progress") or {})

    with StatusWriteFaults(
        control_plane, cluster.namespace, "refused", cluster.workdir, when=running_with_a_loss, times=10**6, code=422
    ) as faults:
        failed = cluster.wait_phase("refused", "Failed", WHOLE_JOB_S)["status"]
    assert faults.refused and "(Hang)" in failed["message"]
    said = [message for _, reason, message in cluster.events("refused") if reason == "StatusWriteRefused"]
    assert len(said) == 1 and "injected by the test: status.progress is invalid" in said[0], said


def forged_token(namespace: str) -> str:
    """A token that claims `namespace` and that no API server signed: each one new, so each is reviewed."""
    claims = {"kubernetes.io": {"namespace": namespace}, "jti": secrets.token_hex(8)}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJSUzI1NiJ9.{payload}.forged"


def test_a_flood_of_forged_tokens_claiming_a_namespace_gets_none_of_its_pods_reports_refused(cluster):
    own_script(cluster, "flooded", "reports_then_hangs", "--reports", "2")
    cluster.wait_status("flooded", lambda s: (s.get("progress") or {}).get("step") == 2, WHOLE_JOB_S)
    (pod,) = cluster.pods("flooded-g0")
    port = int(cluster.endpoint.split(":")[2].split("/")[0])
    stop, answered = threading.Event(), []
    unverified = ssl.create_default_context()
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE

    def flood() -> None:  # from another address of this machine than the pods' reports come from
        body = json.dumps({"trainerStatus": {"progressPercentage": 1}}).encode()
        deadline = time.monotonic() + FLOOD_S
        while not stop.is_set() and time.monotonic() < deadline:
            headers = {"Authorization": f"Bearer {forged_token(cluster.namespace)}"}
            request = urllib.request.Request(f"https://127.0.0.1:{port}{STATUS_REPORTS_PATH}", body, headers)
            try:
                urllib.request.urlopen(request, timeout=10, context=unverified).close()
            except urllib.error.HTTPError as refused:
                answered.append(refused.code)
            except OSError:
                pass

    flooders = [threading.Thread(target=flood, daemon=True) for _ in range(FLOODERS)]
    for flooder in flooders:
        flooder.start()
    try:
        wait_until(lambda: answered.count(429) >= FLOODERS, FLOOD_S / 2, "the flood to be answered 429 too")
        fresh = [post(cluster, token_request(cluster, [AUDIENCE], pod), {"trainerStatus": {}}) for _ in range(25)]
    finally:
        stop.set()
        for flooder in flooders:
            flooder.join(FLOOD_S)
    assert [answer.status for answer in fresh] == [200] * 25, fresh
    cluster.kube.delete("stj", cluster.namespace, "flooded")


def test_after_a_failover_a_gang_that_goes_on_reporting_is_not_taken_for_hung(control_plane, tmp_path):
    """Two peered replicas behind one address (a front door, as the chart's Service): the active one is killed,
    and the gang's reports meet the standby's 503s until the dead replica's peering record expires (60 s). The
    replica that takes over counts the silence from its takeover, and the gang, reporting again, runs on."""
    with e2e_namespace(control_plane, tmp_path, [FakeNode("failover-node")]) as team:
        host, ports = team.kubelet.executor.network.host_ip, (free_port(), free_port())
        with FrontDoor(host, ports) as door:
            replicas = [status_report_args(team, port=port, url_port=door.port) for port in ports]
            with (
                operator_process(team.install, *OPERATOR_ARGS, *replicas[0], env=OPERATOR_ENV) as first,
                operator_process(team.install, *OPERATOR_ARGS, *replicas[1], env=OPERATOR_ENV) as second,
            ):
                active = wait_until(lambda: active_replica(team, (first, second)), OPERATOR_REACTION_S, "one active")
                standby = second if active is first else first
                door.order = [ports[(first, second).index(replica)] for replica in (active, standby)]
                command = ["python", "-m", "reports_then_hangs", "--reports", "1000", "--interval", str(EVERY_S)]
                # Pinned: the module's report-node is up too, and its kubelet runs only its own namespace's pods.
                team.submit("steady", nodes=1, training=DELETE, command=command, env=ENV, maxRestarts=0,
                            statusReports={"hangAfterSeconds": HANG_AFTER_S},
                            nodeSelector={"kubernetes.io/hostname": "failover-node"})  # fmt: skip
                team.wait_status("steady", lambda s: (s.get("progress") or {}).get("step", 0) >= 2, WHOLE_JOB_S)
                active.kill()  # no goodbye: its peering record stays until it expires
                active.wait(OPERATOR_STOP_S)
                killed = datetime.now(timezone.utc)
                taken_over = team.wait_status(  # the new active replica's first progress write
                    "steady", lambda s: parse_timestamp(s["progress"]["readAt"]) > killed, PEERING_EXPIRY_S
                )
                before = taken_over["progress"]["step"]
                # Two hang windows and more, the new active replica judging: the gang's reports keep its promise.
                team.wait_status(
                    "steady",
                    lambda s: s["progress"]["step"] > before + 2 * HANG_AFTER_S / EVERY_S,
                    4 * HANG_AFTER_S,
                    "the gang's reports to reach the new active replica",
                )
                status = team.status("steady")
                assert status["phase"] == "Running" and status["restarts"] == 0, status
                assert "Hang" not in [reason for _, reason, _ in team.events("steady")]
