"""End to end on one machine: the real kopf operator against the API emulator, and a node agent that
turns its Jobs into pods and runs each pod's container as local processes (tests/support/node_agent.py).
ScaleTrainJobs really train here: 2 nodes × 1 process, gloo, the tiny test GPT."""

from __future__ import annotations

import json
import time

import pytest

from support.jobs import patched
from support.node_agent import NodeAgent
from support.operator_harness import NAMESPACE, condition, emulated_cluster, events, running_operator, stj, submit
from support.trainer_runs import BASE_CONFIG, PLUGIN_ENV, free_port, plugin_data

TIMEOUT = 180  # seconds for a whole job: torchrun start-up, training, and the operator's reactions
CHECKPOINT_EVERY = 5


def paced(seconds_per_read=0.01):
    """The test data set, slowed down so that the operator sees the job running (and a test can act)."""
    return plugin_data("SlowSynthetic", seconds_per_read=seconds_per_read)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("e2e")
    with emulated_cluster() as emulated, running_operator(emulated), NodeAgent(emulated, NAMESPACE, workdir) as agent:
        emulated.agent, emulated.workdir = agent, workdir
        yield emulated


def submit_training(cluster, name, training=None, **spec):
    """A 2-node CPU job writing checkpoints and metrics under the test's workdir."""
    directory = cluster.workdir / name
    config = patched(
        BASE_CONFIG,
        {
            "checkpoint": {"dir": str(directory / "checkpoints"), "everySteps": CHECKPOINT_EVERY},
            "outputDir": str(directory / "out"),
            "metricsPort": free_port(),  # rank 0's /progress, which the operator polls
        },
    )
    env = [{"name": name, "value": value} for name, value in PLUGIN_ENV.items()]
    submit(cluster, name, training=patched(config, training or {}), env=env, **spec)
    return directory


def wait_phase(cluster, name, phase, timeout=TIMEOUT):
    def reached():
        assert not cluster.agent.errors, cluster.agent.errors  # a broken agent, not a slow job
        status = (stj(cluster, name) or {}).get("status", {})
        if status.get("phase") == "Failed" and phase != "Failed":
            raise AssertionError(f"{name} failed: {status.get('message')}")
        return status.get("phase") == phase and status

    return cluster.wait_until(reached, timeout=timeout, interval=0.1)


def steps(directory):
    path = directory / "out" / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def test_a_two_node_job_goes_pending_running_succeeded_with_progress(cluster):
    directory = submit_training(cluster, "e2e-happy", {"data": paced(), "maxSteps": 30})
    status = wait_phase(cluster, "e2e-happy", "Succeeded")
    assert [reason for _, reason, _ in events(cluster, "e2e-happy")] == ["Created", "Running", "Succeeded"]
    created = condition(stj(cluster, "e2e-happy"), "Created")
    assert created["status"] == "True" and status["restarts"] == 0 and status["currentJob"] == "e2e-happy-g0"
    progress = status["progress"]  # rank 0's /progress, copied while the job ran
    assert 0 < progress["step"] <= 30 and progress["maxSteps"] == 30 and progress["loss"] > 0
    assert steps(directory) == list(range(1, 31))
    assert status["nodes"]["succeeded"] == 2
    pods = cluster.agent.pod_names("e2e-happy-g0")
    assert [p.rsplit("-", 1)[0] for p in pods] == ["e2e-happy-g0-0", "e2e-happy-g0-1"]


def test_a_killed_node_restarts_the_gang_which_resumes_from_its_checkpoint(cluster):
    directory = submit_training(cluster, "e2e-fault", {"data": paced(0.02), "maxSteps": 40}, maxRestarts=2)
    cluster.wait_until(lambda: len(steps(directory)) >= CHECKPOINT_EVERY + 2, timeout=TIMEOUT, interval=0.05)
    node_1 = next(name for name in cluster.agent.pod_names("e2e-fault-g0") if name.startswith("e2e-fault-g0-1-"))
    cluster.agent.kill(node_1)
    killed_at = max(steps(directory))

    status = wait_phase(cluster, "e2e-fault", "Succeeded")
    assert status["restarts"] == 1 and status["currentJob"] == "e2e-fault-g1"
    assert cluster.agent.pods[node_1].exit_code == 137  # SIGKILLed, as the kubelet reports it
    restarting = next(message for _, reason, message in events(cluster, "e2e-fault") if reason == "Restarting")
    # The first pod to fail: node 1, unless node 0 noticed the broken collective within the same second.
    assert "pod e2e-fault-g0-" in restarting and "gang restart 1/2 from the last checkpoint" in restarting
    logged = steps(directory)
    resumed_at = next(i for i in range(1, len(logged)) if logged[i] <= logged[i - 1])
    first_after = logged[resumed_at]
    # The new gang went on from the newest checkpoint before the kill, not from step 0.
    assert first_after > 1 and (first_after - 1) % CHECKPOINT_EVERY == 0 and first_after - 1 <= killed_at + 1
    assert logged[resumed_at:] == list(range(first_after, 41))
    rank_0_log = cluster.agent.log(next(p for p in cluster.agent.pod_names("e2e-fault-g1") if "-g1-0-" in p))
    assert f"step-{first_after - 1:08d}" in rank_0_log and "resumed from" in rank_0_log


def test_exhausted_restarts_fail_the_job_with_the_reason(cluster):
    crash_every_time = plugin_data("CrashingSynthetic", crash_at_read=3, crash_rank=1)
    submit_training(cluster, "e2e-doomed", {"data": crash_every_time}, maxRestarts=1)
    status = wait_phase(cluster, "e2e-doomed", "Failed")
    failed = condition(stj(cluster, "e2e-doomed"), "Failed")
    assert failed["reason"] == "RestartLimitReached" and "maxRestarts (1) reached" in status["message"]
    assert status["restarts"] == 1 and status["currentJob"] == "e2e-doomed-g1"


def test_a_config_error_fails_the_job_without_restarts(cluster):
    submit_training(cluster, "e2e-misconfigured", {"data": {"source": "text", "path": "/nonexistent/corpus.txt"}})
    status = wait_phase(cluster, "e2e-misconfigured", "Failed")
    failed = condition(stj(cluster, "e2e-misconfigured"), "Failed")
    assert failed["reason"] == "ConfigError" and status["restarts"] == 0
    assert "exit code 78" in status["message"] and "/nonexistent/corpus.txt" in status["message"]
    time.sleep(1.0)  # and it stays that way: no second generation
    assert cluster.get("jobs", NAMESPACE, "e2e-misconfigured-g1") is None
