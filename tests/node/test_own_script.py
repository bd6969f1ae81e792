"""Bring your own script: a third-party gloo all-reduce runs in the trainer image through its own
`command` (torchrun, or python with the master alias; the rank env from the operator), a gang under its own
torchrun restarts in place, a rank that raises under the script's own torchrun is why the job failed, an HF
Trainer script's progress reaches the status through the status protocol, and deleting a running job removes
every pod and every container of it from the node."""

from __future__ import annotations

import pytest
import yaml

from scaletrain_operator.api.naming import COMPLETION_INDEX_ANNOTATION
from scaletrain_testing.jobs import patched
from scaletrain_testing.node_jobs import SCRIPTS_MOUNT, container_id, job, script_job, scripts_config_map
from scaletrain_testing.operator_harness import Team
from scaletrain_testing.timeouts import CLUSTER_POD_TEARDOWN_S, TRAINER_RUN_S
from scaletrain_testing.waiting import wait_until

RANK_1_RAISES = "ValueError: shard 7 of the training data is corrupt (rank 1 raises this on purpose)"


@pytest.mark.parametrize(
    "command",
    [
        # torchrun meets on PET_MASTER_ADDR, rank 0's pod DNS name (NAME-g0-0.NAME) from CoreDNS.
        ["torchrun", f"{SCRIPTS_MOUNT}/allreduce.py"],
        # A plain python meets on the master alias Service written into its arguments.
        ["python", f"{SCRIPTS_MOUNT}/allreduce.py", "--master", "allreduce-master", "--port", "29500"],
    ],
    ids=["torchrun-pod-dns", "python-master-alias"],
)
def test_a_third_party_script_runs_through_its_own_command(node_cluster, restricted_namespace, command):
    team = Team(node_cluster.kube, restricted_namespace)
    submitted = script_job("allreduce", team.namespace, node_cluster.images["TRAINER_IMAGE"], command)
    config_map = scripts_config_map(team.namespace, "allreduce.py")
    node_cluster.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([config_map, submitted]))
    team.wait_phase("allreduce", "Succeeded", TRAINER_RUN_S)
    selector = "--selector=scaletrain.io/job-name=allreduce"
    logs = node_cluster.cluster.kubectl("--namespace", team.namespace, "logs", selector, "--prefix").stdout
    assert logs.count("of 2: sum 3") == 2, logs


def test_a_scripts_own_torchrun_restarts_its_gang_in_place(node_cluster, restricted_namespace):
    """Rank 1 of a script of one's own fails in the first generation. The agent, written onto the pod by an init
    container from the operator's image and run by the trainer image's python3, restarts both pods where they
    stand on the real kubelet, and the script's own torchrun meets again in the next generation."""
    team = Team(node_cluster.kube, restricted_namespace)
    command = ["torchrun", f"{SCRIPTS_MOUNT}/fails_once.py"]
    submitted = patched(script_job("once", team.namespace, node_cluster.images["TRAINER_IMAGE"], command),
                        {"spec": {"maxRestarts": 1}})  # fmt: skip
    config_map = scripts_config_map(team.namespace, "fails_once.py")
    node_cluster.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([config_map, submitted]))
    status = team.wait_phase("once", "Succeeded", TRAINER_RUN_S)["status"]
    assert (status["restarts"], status["gangGeneration"], status["currentJob"]) == (1, 1, "once-g0")
    pods = team.kube.list("pods", team.namespace, "scaletrain.io/job-name=once")
    assert len(pods) == 2 and all(p["status"]["containerStatuses"][0]["restartCount"] >= 1 for p in pods)
    selector = "--selector=scaletrain.io/job-name=once"
    logs = node_cluster.cluster.kubectl("--namespace", team.namespace, "logs", selector, "--prefix").stdout
    assert logs.count("of 2: done in generation 1") == 2, logs


def test_the_exception_of_a_rank_under_a_scripts_own_torchrun_ends_the_jobs_message(node_cluster, restricted_namespace):
    """Rank 1 raises under @record. torchrun, as the image's user (uid 10001), once tried to remove
    /dev/termination-log to copy the error there, and its PermissionError ended the log and the message."""
    team = Team(node_cluster.kube, restricted_namespace)
    command = ["python", "-m", "torch.distributed.run", f"{SCRIPTS_MOUNT}/raise_in_rank_1.py"]
    submitted = patched(script_job("cause", team.namespace, node_cluster.images["TRAINER_IMAGE"], command),
                        {"spec": {"maxRestarts": 0}})  # fmt: skip
    config_map = scripts_config_map(team.namespace, "raise_in_rank_1.py")
    node_cluster.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([config_map, submitted]))
    message = team.wait_phase("cause", "Failed", TRAINER_RUN_S)["status"]["message"]
    assert message.endswith(RANK_1_RAISES), message
    (rank_1,) = [pod for pod in team.kube.list("pods", team.namespace, "scaletrain.io/job-name=cause")
                 if pod["metadata"]["annotations"][COMPLETION_INDEX_ANNOTATION] == "1"]  # fmt: skip
    log = node_cluster.cluster.kubectl("--namespace", team.namespace, "logs", rank_1["metadata"]["name"]).stdout
    assert RANK_1_RAISES in log and "PermissionError" not in log, log[-3000:]


# Run in the HF script's pod: a report to the operator's endpoint with the token in argv[1], then with the token
# the kubelet projected for the endpoint.
POST_WITH_EACH_TOKEN = """
import json, os, ssl, sys, urllib.error, urllib.request
def post(token):
    body = json.dumps({"trainerStatus": {}}).encode()
    url = os.environ["KUBEFLOW_TRAINER_SERVER_URL"]
    request = urllib.request.Request(url, body, {"Authorization": "Bearer " + token})
    context = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
    try:
        return urllib.request.urlopen(request, timeout=10, context=context).status
    except urllib.error.HTTPError as refused:
        return refused.code
print(post(sys.argv[1]), post(open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read().strip()))
"""


def test_an_unmodified_hf_trainer_scripts_progress_shows_in_kubectl_and_a_foreign_token_is_refused(
    node_cluster, restricted_namespace
):
    """HF's Trainer reports by itself to the operator's endpoint (the chart's Service, its certificate and CA,
    the kubelet's projected token); a real token bound to the same pod, for the API server, is refused."""
    team = Team(node_cluster.kube, restricted_namespace)
    command = ["python", f"{SCRIPTS_MOUNT}/hf_trainer.py", "--max-steps", "100", "--seconds-per-step", "0.4"]
    submitted = patched(script_job("hf", team.namespace, node_cluster.images["TRAINER_IMAGE"], command),
                        {"spec": {"nodes": 1, "env": [{"name": "HF_HOME", "value": "/tmp/hf"}]}})  # fmt: skip
    config_map = scripts_config_map(team.namespace, "hf_trainer.py")
    node_cluster.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([config_map, submitted]))

    def reported_a_step(status):
        progress = status.get("progress") or {}
        return status.get("phase") == "Running" and progress.get("step", 0) > 0 and "etaSeconds" in progress

    team.wait_status("hf", reported_a_step, TRAINER_RUN_S, "a step reported")
    wide = node_cluster.cluster.control_plane.get_wide("stj", team.namespace, "hf")
    assert int(wide["STEP"]) > 0 and float(wide["LOSS"]) > 0 and float(wide["ETA-SECONDS"]) >= 0, wide
    (pod,) = team.kube.list("pods", team.namespace, "scaletrain.io/job-name=hf")
    metadata = pod["metadata"]
    bound = {"apiVersion": "v1", "kind": "Pod", "name": metadata["name"], "uid": metadata["uid"]}
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"boundObjectRef": bound}}
    path = f"/api/v1/namespaces/{team.namespace}/serviceaccounts/default/token"
    for_the_api_server = team.kube.request("POST", path, request)["status"]["token"]
    exec_ = ("--namespace", team.namespace, "exec", metadata["name"], "-c", "trainer", "--")
    command = ("python", "-c", POST_WITH_EACH_TOKEN, for_the_api_server)
    answers = node_cluster.cluster.kubectl(*exec_, *command).stdout.split()
    assert answers == ["401", "200"], answers
    status = team.wait_phase("hf", "Succeeded", TRAINER_RUN_S)["status"]
    assert 0 < status["progress"]["step"] <= 100, status["progress"]


def test_deleting_a_running_job_removes_its_pods_and_containers(node_cluster, restricted_namespace):
    team = Team(node_cluster.kube, restricted_namespace)
    sleeper = job(
        "sleeper",
        team.namespace,
        node_cluster.images["TRAINER_IMAGE"],
        command=["python", "-c", "import time; time.sleep(3600)"],
    )
    node_cluster.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(sleeper))

    def both_running() -> list[dict]:
        pods = team.kube.list("pods", team.namespace, "scaletrain.io/job-name=sleeper")
        return pods if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods) else []

    containers = {container_id(pod) for pod in wait_until(both_running, TRAINER_RUN_S, "the sleeper's pods running")}
    node_cluster.cluster.kubectl("--namespace", team.namespace, "delete", "stj", "sleeper", "--wait=false")

    def all_gone() -> bool:
        listed = node_cluster.cluster.ctr("--namespace=k8s.io", "tasks", "list", "--quiet").stdout.split()
        return not team.kube.list("pods", team.namespace, "scaletrain.io/job-name=sleeper") and not containers & set(
            listed
        )

    # Well within the grace period (120 s): the plain `python` gets its SIGTERM, not being PID 1.
    wait_until(all_gone, CLUSTER_POD_TEARDOWN_S, "every pod and container of the deleted job to be gone")
