"""End to end on the real control plane: the operator as the chart installs it, the real Job
controller, scheduler and garbage collector, and the kubelet stand-in running each pod as local
processes (tests/scaletrain_testing/kubelet.py). ScaleTrainJobs really train here: 2 nodes × 1 process, gloo,
a tiny GPT."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import yaml

from scaletrain_operator.controller.settings import DEFAULTS
from scaletrain_operator.local.processes import scan_processes, signal_processes
from scaletrain_testing.e2e_jobs import (
    CHECKPOINT_EVERY,
    HANG_TIMEOUT_S,
    e2e_namespace,
    e2e_operator,
    paced,
    pods_of,
    rank_log,
    steps,
    submit_training,
    text_of,
    wait_event,
)
from scaletrain_testing.hf_models import assert_exports_give_the_trained_logits
from scaletrain_testing.jobs import DELETE, EXAMPLES, REPO
from scaletrain_testing.kubelet import FakeNode
from scaletrain_testing.operator_harness import PROGRESS_READ_S, condition
from scaletrain_testing.timeouts import CONTROLLERS_REACTION_S, GANG_TEARDOWN_S, WHOLE_JOB_S
from scaletrain_testing.trainer_runs import plugin_data
from scaletrain_testing.waiting import wait_until

SCRIPTS = Path(__file__).resolve().parent / "scripts"  # scripts of one's own, on the pods' PYTHONPATH
NODES = [FakeNode("cpu-node-1"), FakeNode("cpu-node-2")]


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    """One watched namespace with its operator, and two fake nodes whose pods run here."""
    with e2e_namespace(control_plane, tmp_path_factory.mktemp("e2e"), NODES) as team, e2e_operator(team.install):
        yield team


def master_alias_addresses(team, job_name):
    """The ready addresses behind the job's master alias, as the EndpointSlice controller lists them: what a
    cluster's DNS answers for NAME-master."""
    slices = team.kube.list("endpointslices", team.namespace, f"kubernetes.io/service-name={job_name}-master")
    endpoints = [endpoint for each in slices for endpoint in each.get("endpoints") or []]
    return sorted(address for e in endpoints if (e.get("conditions") or {}).get("ready") for address in e["addresses"])


def test_the_cpu_example_goes_pending_running_succeeded_with_progress(cluster):
    """examples/cpu-gloo.yaml as a user applies it: its claim provided, its pods scheduled onto the
    nodes, trained, and its progress in the status."""
    (example,) = [yaml.safe_load(path.read_text()) for path in EXAMPLES if path.name == "cpu-gloo.yaml"]
    cluster.provide_claim(example["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"])
    example["metadata"]["namespace"] = cluster.namespace
    cluster.kube.create("stj", example)
    name = example["metadata"]["name"]
    cluster.wait_phase(name, "Running", WHOLE_JOB_S)
    progress = cluster.wait_status(name, lambda s: (s.get("progress") or {}).get("step"), WHOLE_JOB_S, "progress")
    status = cluster.wait_phase(name, "Succeeded", WHOLE_JOB_S)["status"]
    assert 0 < progress["progress"]["step"] <= 200 and progress["progress"]["maxSteps"] == 200
    assert status["progress"]["step"] == 200 and 0 < status["progress"]["evalLoss"] < status["progress"]["loss"] + 1
    assert [reason for _, reason, _ in cluster.events(name)] == ["Created", "Running", "Succeeded"]
    assert status["restarts"] == 0 and status["nodes"]["succeeded"] == 2
    pods = pods_of(cluster, f"{name}-g0")
    assert len(pods) == 2 and {pod["spec"]["nodeName"] for pod in pods} <= {node.name for node in NODES}
    assert all(pod["status"]["phase"] == "Succeeded" for pod in pods)


def test_the_fine_tuning_example_trains_on_its_volume_and_its_export_loads(cluster, tmp_path):
    """examples/finetune-lora.yaml as a user applies it, with the model and records already on the claim it
    mounts at /fixture: LoRA on packed instructions, the held-out loss falling, the last in the status; its checkpoint,
    exported here from the claim's copy of the model (--base), gives the trained model's logits."""
    example = yaml.safe_load((REPO / "examples" / "finetune-lora.yaml").read_text())
    cluster.provide_claim("finetune-lora-fixture", contents=REPO / "examples" / "finetune-lora")
    cluster.provide_claim("scaletrain-checkpoints")
    example["metadata"]["namespace"] = cluster.namespace
    cluster.kube.create("stj", example)
    name = example["metadata"]["name"]
    status = cluster.wait_phase(name, "Succeeded", WHOLE_JOB_S)["status"]
    claims = cluster.kubelet.executor.claims_dir / cluster.namespace
    output = claims / "scaletrain-checkpoints" / "finetune-lora" / "output" / "metrics.jsonl"
    records = [json.loads(line) for line in output.read_text().splitlines()]
    evaluations = {record["step"]: record["evalLoss"] for record in records if "evalLoss" in record}
    assert list(evaluations) == [20, 40, 60] and evaluations[60] < 0.95 * evaluations[20]
    assert status["progress"]["step"] == 60 and status["progress"]["evalLoss"] == pytest.approx(
        evaluations[60], rel=1e-3
    )
    lora = example["spec"]["training"]["model"]["lora"]
    base = claims / "finetune-lora-fixture" / "model"
    checkpoint = claims / "scaletrain-checkpoints" / "finetune-lora" / "step-00000060"
    assert_exports_give_the_trained_logits(checkpoint, base, lora, tmp_path, "--base", str(base))


def test_a_killed_rank_restarts_the_gang_which_resumes_from_its_checkpoint(cluster):
    directory = submit_training(cluster, "e2e-fault", {"data": paced(0.02), "maxSteps": 40}, maxRestarts=2)
    wait_until(
        lambda: len(steps(directory)) >= CHECKPOINT_EVERY + 2,
        WHOLE_JOB_S,
        f"{CHECKPOINT_EVERY + 2} steps logged",
        interval_s=0.05,
    )
    node_1 = next(p for p in pods_of(cluster, "e2e-fault-g0") if p["metadata"]["name"].startswith("e2e-fault-g0-1-"))
    cluster.kubelet.running(cluster.namespace, node_1["metadata"]["name"]).stop(grace_seconds=0)  # a lost node
    killed_at = max(steps(directory))

    def rank_0_of_the_new_gang():
        pods = [p for p in pods_of(cluster, "e2e-fault-g1") if "-g1-0-" in p["metadata"]["name"]]
        return pods and pods[0]["status"].get("podIP")

    # The master alias is the new gang's rank 0 alone, while it runs: a hardcoded endpoint finds it.
    new_rank_0 = wait_until(rank_0_of_the_new_gang, WHOLE_JOB_S, "the new gang's rank 0 with its IP")
    wait_until(
        lambda: master_alias_addresses(cluster, "e2e-fault") == [new_rank_0],
        CONTROLLERS_REACTION_S,
        "the master alias to be the new rank 0 alone",
    )
    status = cluster.wait_phase("e2e-fault", "Succeeded", WHOLE_JOB_S)["status"]
    events = cluster.events("e2e-fault")
    assert status["restarts"] == 1 and status["currentJob"] == "e2e-fault-g1", "\n".join(map(str, events))
    restarting = next(message for _, reason, message in events if reason == "Restarting")
    # The first pod to fail: node 1 (SIGKILLed: exit code 137), unless node 0 noticed the broken
    # collective within the same second.
    assert "pod e2e-fault-g0-" in restarting and "gang restart 1/2 from the last checkpoint" in restarting
    logged = steps(directory)
    resumed_at = next(i for i in range(1, len(logged)) if logged[i] <= logged[i - 1])
    first_after = logged[resumed_at]
    # The new gang went on from the newest checkpoint before the kill, not from step 0.
    assert first_after > 1 and (first_after - 1) % CHECKPOINT_EVERY == 0 and first_after - 1 <= killed_at + 1
    assert logged[resumed_at:] == list(range(first_after, 41))
    rank_0_log = rank_log(cluster, "e2e-fault-g1", 0)
    assert f"step-{first_after - 1:08d}" in rank_0_log and "resumed from" in rank_0_log


def test_a_hung_rank_is_found_within_twice_the_hang_timeout_and_the_event_names_it(cluster):
    """Rank 1 stops (SIGSTOP) mid-step in the first gang: it never exits. Rank 0's watchdog stops it while it
    waits on rank 1, saying so; the gang policy then names the stuck pod, not the one that exited first."""
    record = cluster.workdir / "e2e-hang"  # the job's workdir, which its pods mount (submit_training)
    stop = plugin_data(
        "StoppingSynthetic", stop_at_read=4 * 7 + 2, stop_rank=1, stop_generation=0, record_dir=str(record),
        seconds_per_read=0.01,
    )  # fmt: skip
    training = {"data": stop, "maxSteps": 12, "hangTimeoutSeconds": HANG_TIMEOUT_S}
    directory = submit_training(cluster, "e2e-hang", training, maxRestarts=1)
    stopped_at = float(wait_until(lambda: text_of(record / "stopped-at"), WHOLE_JOB_S, "rank 1 to stop"))
    restarting = wait_event(cluster, "e2e-hang", "Restarting")
    detected_in = time.time() - stopped_at
    assert detected_in <= 2 * HANG_TIMEOUT_S, f"hang found after {detected_in:.1f} s"
    assert "pod e2e-hang-g0-1-" in restarting[0] and "stopped advancing" in restarting[0], restarting
    hang_dump = (directory / "out" / "hang-rank0.txt").read_text()
    assert "no optimizer step completed" in hang_dump and "while in step" in hang_dump
    assert 'File "' in hang_dump  # the stacks of every thread follow
    status = cluster.wait_phase("e2e-hang", "Succeeded", WHOLE_JOB_S)["status"]
    assert status["restarts"] == 1


def test_a_gang_that_freezes_whole_is_progress_unreachable_and_never_restarted_for_it(cluster):
    """Every process of both pods stops (SIGSTOP), rank 0's progress server too: nothing answers. An
    unreadable endpoint says nothing of the training (a NetworkPolicy, a node cut off, a server starved by
    other clients all look the same), so the job shows ProgressUnreachable and keeps its gang. Once the
    processes go on (SIGCONT), the condition clears and the job finishes (its gang may restart then: on
    waking, its watchdog and its own answer both say that no step came within the hang timeout)."""
    training = {"data": paced(0.02), "maxSteps": 50, "hangTimeoutSeconds": HANG_TIMEOUT_S,
                "checkpoint": {"everySteps": 1000}}  # fmt: skip
    submit_training(cluster, "e2e-frozen", training, maxRestarts=1)
    wait_until(lambda: _promised(cluster.stj("e2e-frozen")), WHOLE_JOB_S, "e2e-frozen Running with a promise")
    pods = [
        cluster.kubelet.running(cluster.namespace, pod["metadata"]["name"]) for pod in pods_of(cluster, "e2e-frozen-g0")
    ]
    table = scan_processes()
    frozen = [pid for pod in pods for pid in pod.processes(table)]
    signal_processes(frozen, signal.SIGSTOP)
    try:
        unreachable = cluster.wait_condition("e2e-frozen", "ProgressUnreachable", "True")
        assert "cannot be read (" in unreachable["message"]
        time.sleep(HANG_TIMEOUT_S + 2 * (PROGRESS_READ_S + DEFAULTS.progress_timeout_seconds))  # past the promise
        assert cluster.stj("e2e-frozen")["status"]["restarts"] == 0
    finally:
        signal_processes(frozen, signal.SIGCONT)
    cluster.wait_condition("e2e-frozen", "ProgressUnreachable", "False")
    cluster.wait_phase("e2e-frozen", "Succeeded", WHOLE_JOB_S)


def _promised(stj):
    status = (stj or {}).get("status") or {}
    return status.get("phase") == "Running" and ((status.get("progress") or {}).get("staleAfter"))


def test_exhausted_restarts_fail_the_job_with_the_reason(cluster):
    crash_every_time = plugin_data("CrashingSynthetic", crash_at_read=3, crash_rank=1)
    submit_training(cluster, "e2e-doomed", {"data": crash_every_time}, maxRestarts=1)
    status = cluster.wait_phase("e2e-doomed", "Failed", WHOLE_JOB_S)["status"]
    failed = condition(cluster.stj("e2e-doomed"), "Failed")
    assert failed["reason"] == "RestartLimitReached" and "maxRestarts (1) reached" in status["message"]
    assert status["restarts"] == 1 and status["currentJob"] == "e2e-doomed-g1"


def test_a_config_error_fails_the_job_without_restarts(cluster):
    submit_training(cluster, "e2e-misconfigured", {"data": {"source": "text", "path": "/nonexistent/corpus.txt"}})
    status = cluster.wait_phase("e2e-misconfigured", "Failed", WHOLE_JOB_S)["status"]
    failed = condition(cluster.stj("e2e-misconfigured"), "Failed")
    assert failed["reason"] == "ConfigError" and status["restarts"] == 0
    assert "exit code 78" in status["message"] and "/nonexistent/corpus.txt" in status["message"]
    time.sleep(1.0)  # and it stays that way: no second generation
    assert cluster.kube.get("jobs", cluster.namespace, "e2e-misconfigured-g1") is None


def test_a_config_error_only_a_worker_finds_fails_the_job_without_restarts(cluster, tmp_path):
    """Token ids beyond vocabSize, found inside torchrun: the pods exit 78 all the same."""
    tokens = tmp_path / "tokens.bin"
    tokens.write_bytes(bytes(range(200)) * 40)  # uint16 ids up to 0xC7C6; the test GPT's vocabSize is 64
    submit_training(cluster, "e2e-bad-ids", {"data": {"source": "tokens", "path": str(tokens)}})
    status = cluster.wait_phase("e2e-bad-ids", "Failed", WHOLE_JOB_S)["status"]
    failed = condition(cluster.stj("e2e-bad-ids"), "Failed")
    assert failed["reason"] == "ConfigError" and status["restarts"] == 0
    assert "exit code 78" in status["message"] and "model.vocabSize is 64" in status["message"]


def test_suspend_checkpoints_and_stops_the_gang_and_resume_continues_from_that_step(cluster):
    directory = submit_training(cluster, "e2e-paused", {"data": paced(0.02), "maxSteps": 40})
    wait_until(
        lambda: len(steps(directory)) >= CHECKPOINT_EVERY + 2,
        WHOLE_JOB_S,
        f"{CHECKPOINT_EVERY + 2} steps logged",
        interval_s=0.05,
    )
    cluster.patch_stj("e2e-paused", {"spec": {"suspend": True}})
    cluster.wait_phase("e2e-paused", "Suspended", WHOLE_JOB_S)
    # The Job controller deletes the suspended Job's pods; the kubelet stops their processes.
    wait_until(lambda: pods_of(cluster, "e2e-paused-g0") == [], GANG_TEARDOWN_S, "the pods of e2e-paused-g0 gone")
    paused_at = max(steps(directory))
    cluster.patch_stj("e2e-paused", {"spec": {"suspend": False}})
    status = cluster.wait_phase("e2e-paused", "Succeeded", WHOLE_JOB_S)["status"]
    # The next gang, counted as neither a restart nor a disruption: the suspended Job's pods ended Failed
    # (exit 80), which its podFailurePolicy would have counted once it ran again.
    assert (status["restarts"], status.get("disruptions", 0), status["currentJob"]) == (0, 0, "e2e-paused-g1")
    # The suspension's SIGTERM had the gang save the step it was in (exit 80): the resumed gang went on
    # from there, training no step twice.
    assert paused_at < 40 and steps(directory) == list(range(1, 41))


def test_deleting_a_running_job_removes_its_children_and_stops_its_processes(cluster):
    directory = submit_training(cluster, "e2e-deleted", {"data": paced(0.05), "maxSteps": 1000})
    wait_until(lambda: len(steps(directory)) >= 2, WHOLE_JOB_S, "2 steps logged", interval_s=0.05)
    pod_names = [pod["metadata"]["name"] for pod in pods_of(cluster, "e2e-deleted-g0")]
    cluster.kube.delete("stj", cluster.namespace, "e2e-deleted")
    for kind in ("jobs", "services", "pods"):  # the real garbage collector follows the ownerReferences
        wait_until(
            lambda kind=kind: cluster.children("e2e-deleted", kind) == [], GANG_TEARDOWN_S, f"no {kind} of e2e-deleted"
        )
    for name in pod_names:  # the kubelet stopped every process of the deleted pods
        running = cluster.kubelet.running(cluster.namespace, name)
        assert running is None or running.poll() in ("Succeeded", "Failed")


def test_a_finished_job_expires_with_its_children_after_its_ttl(cluster):
    submit_training(cluster, "e2e-expiring", {"maxSteps": 3}, ttlSecondsAfterFinished=0)
    wait_until(lambda: cluster.stj("e2e-expiring") is None, WHOLE_JOB_S, "the TTL to delete e2e-expiring")
    for kind in ("jobs", "services", "pods"):
        wait_until(
            lambda kind=kind: cluster.children("e2e-expiring", kind) == [],
            GANG_TEARDOWN_S,
            f"no {kind} of e2e-expiring",
        )


def test_a_script_of_ones_own_without_a_training_block_shows_its_progress_and_succeeds(cluster):
    """The progress protocol (docs/api.md): rank 0 serves JSON at /progress on $SCALETRAIN_METRICS_PORT,
    and its termination message holds the final progress."""
    env = [
        {"name": "PYTHONPATH", "value": str(SCRIPTS)},
        {"name": "OMP_NUM_THREADS", "value": "1"},
        {"name": "STEPS", "value": "40"},
        {"name": "SECONDS_PER_STEP", "value": "0.1"},
    ]
    cluster.submit("e2e-own", training=DELETE, command=["python", "-m", "progress_protocol"], env=env)
    running = cluster.wait_status("e2e-own", lambda status: (status.get("progress") or {}).get("step", 0) > 0)
    assert running["phase"] == "Running" and running["progress"]["maxSteps"] == 40
    status = cluster.wait_phase("e2e-own", "Succeeded", WHOLE_JOB_S)["status"]
    assert status["progress"]["step"] == 40 and status["progress"]["loss"] == 0.025
    assert status["restarts"] == 0


def test_kubeflows_sendrecv_smoke_test_with_plain_python(cluster):
    """Kubeflow's smoke test (stand-in: scripts/dist_sendrecv.py) as its PyTorchJob starts it, plain
    `python` in each pod and env:// from the pod's env, no training block, through the operator to
    Succeeded. (Its run-local side, and the other third-party scripts, are in test_third_party_scripts.py.)"""
    command = ["python", str(SCRIPTS / "dist_sendrecv.py")]
    env = [{"name": "OMP_NUM_THREADS", "value": "1"}]
    cluster.submit("sendrecv", training=DELETE, command=command, env=env, maxRestarts=0)

    def finished():
        assert not cluster.kubelet.errors, cluster.kubelet.errors  # a broken kubelet, not a slow job
        status = (cluster.stj("sendrecv") or {}).get("status", {})
        return status.get("phase") in ("Succeeded", "Failed") and status

    status = wait_until(finished, WHOLE_JOB_S, "sendrecv to end", interval_s=0.2)
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] == 0 and status["nodes"]["succeeded"] == 2, status
    pods = cluster.kube.list("pods", cluster.namespace, "batch.kubernetes.io/job-name=sendrecv-g0")
    names = sorted(pod["metadata"]["name"] for pod in pods)  # sendrecv-g0-0-…, then sendrecv-g0-1-…
    logs = [cluster.kubelet.running(cluster.namespace, name).log_path.read_text() for name in names]
    for rank, log in enumerate(logs):
        assert f"RANK: {rank}\n" in log and "WORLD_SIZE: 2\n" in log, log
    assert "rank 1 of 2 received from rank 0: [1.0, 2.0, 3.0, 4.0]" in logs[1], logs[1]
    assert "result from worker 1: [1.0, 4.0, 9.0, 16.0]" in logs[0], logs[0]


def test_a_ranks_exception_under_torchrun_is_in_the_status_message_and_the_failed_event(cluster):
    """A script of one's own, run by the pod launcher's torchrun with torchelastic's @record, raises in
    rank 1: the exception's last line, from the pod's termination message, ends the job's status.message
    and its Failed Event."""
    env = [{"name": "PYTHONPATH", "value": str(SCRIPTS)}, {"name": "OMP_NUM_THREADS", "value": "1"}]
    cluster.submit("e2e-raises", training=DELETE, args=["--module", "raise_in_rank_1"], env=env, maxRestarts=0)
    status = cluster.wait_phase("e2e-raises", "Failed", WHOLE_JOB_S)["status"]
    last_line = "ValueError: shard 7 of the training data is corrupt (rank 1 raises this on purpose)"
    assert status["message"].rstrip().endswith(last_line), status["message"]
    failed_events = [message for _, reason, message in cluster.events("e2e-raises") if reason == "Failed"]
    assert len(failed_events) == 1 and failed_events[0].rstrip().endswith(last_line), failed_events
