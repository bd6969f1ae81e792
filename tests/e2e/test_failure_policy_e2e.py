"""The failure policy end to end, on the real control plane with three fake nodes whose pods run
here: after a hang, the next gangs keep off the stuck pod's node, through an operator restart and a
spec-change restart."""

from __future__ import annotations

import pytest

from scaletrain_testing.e2e_jobs import (
    HANG_TIMEOUT_S,
    e2e_namespace,
    e2e_operator,
    paced,
    pods_of,
    steps,
    submit_training,
    wait_event,
)
from scaletrain_testing.kubelet import FakeNode
from scaletrain_testing.operator_harness import condition
from scaletrain_testing.timeouts import WHOLE_JOB_S
from scaletrain_testing.trainer_runs import TRAINER_ENV, plugin_data
from scaletrain_testing.waiting import wait_until

NODES = [FakeNode("excl-node-1"), FakeNode("excl-node-2"), FakeNode("excl-node-3")]


@pytest.fixture(scope="module")
def namespace(control_plane, tmp_path_factory):
    """A watched namespace and three fake nodes; each test runs the operator as it needs."""
    with e2e_namespace(control_plane, tmp_path_factory.mktemp("e2e-policy"), NODES) as team:
        yield team


def placed_nodes(team, job_name):
    """The nodes the scheduler bound the gang's pods to, once it bound both."""

    def bound():
        nodes = [pod["spec"].get("nodeName") for pod in pods_of(team, job_name)]
        return len(nodes) == 2 and all(nodes) and set(nodes)

    return wait_until(bound, WHOLE_JOB_S, f"the scheduler to bind both pods of {job_name}")


def test_after_a_hang_the_next_gangs_avoid_the_stuck_pods_node_even_after_an_operator_restart(namespace):
    team, name = namespace, "e2e-exclude"
    stop = plugin_data(
        "StoppingSynthetic", stop_at_read=4 * 7 + 2, stop_rank=1, stop_generation=0,
        record_dir=str(team.workdir / name),  # the job's workdir, which its pods mount (submit_training)
        seconds_per_read=0.02,
    )  # fmt: skip
    training = {"data": stop, "maxSteps": 80, "hangTimeoutSeconds": HANG_TIMEOUT_S}
    with e2e_operator(team.install):
        submit_training(team, name, training, maxRestarts=2, failurePolicy={"excludeNodes": {"mode": "Required"}})
        restarting = wait_event(team, name, "Restarting")
        stuck = next(pod for pod in pods_of(team, f"{name}-g0") if pod["metadata"]["name"].startswith(f"{name}-g0-1-"))
        bad_node = stuck["spec"]["nodeName"]
        assert f"pod {stuck['metadata']['name']} stopped advancing" in restarting[0]
        assert f"the next gangs avoid node {bad_node}" in restarting[0]
        assert bad_node not in placed_nodes(team, f"{name}-g1")
    # A new operator process (the old one is gone) and a spec change that restarts the gang (not counted).
    with e2e_operator(team.install):
        env = [{"name": key, "value": value} for key, value in TRAINER_ENV.items()] + [{"name": "EDITED", "value": "1"}]
        team.patch_stj(name, {"spec": {"env": env}})
        assert bad_node not in placed_nodes(team, f"{name}-g2")
        status = team.wait_phase(name, "Succeeded", WHOLE_JOB_S)["status"]
    assert status["excludedNodes"] == [bad_node] and status["restarts"] == 1


def test_an_evicted_pod_checkpoints_and_its_gang_restarts_as_a_disruption_without_using_max_restarts(namespace):
    """The real eviction API on rank 1 (as `kubectl drain` evicts it): DisruptionTarget on the pod, then
    SIGTERM from the kubelet. The trainer saves a checkpoint after the step it is in and exits 80; the next
    gang resumes there. With maxRestarts 0, a crash would fail the job."""
    team, name = namespace, "e2e-evicted"
    training = {"data": paced(0.02), "maxSteps": 60, "checkpoint": {"everySteps": 1000}}
    with e2e_operator(team.install):
        directory = submit_training(team, name, training, maxRestarts=0)
        wait_until(lambda: len(steps(directory)) >= 10, WHOLE_JOB_S, "10 steps logged", interval_s=0.05)
        rank_1 = next(pod for pod in pods_of(team, f"{name}-g0") if pod["metadata"]["name"].startswith(f"{name}-g0-1-"))
        pod_name = rank_1["metadata"]["name"]
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod_name}}
        team.kube.request("POST", f"/api/v1/namespaces/{team.namespace}/pods/{pod_name}/eviction", eviction)
        evicted_at = max(steps(directory))
        status = team.wait_phase(name, "Succeeded", WHOLE_JOB_S)["status"]
    assert (status["restarts"], status["disruptions"]) == (0, 1)
    restarting = next(message for _, reason, message in team.events(name) if reason == "Restarting")
    assert "a disruption, not counted against maxRestarts" in restarting
    saved = sorted(path.name for path in (directory / "checkpoints").iterdir() if path.name.startswith("step-"))
    assert len(saved) >= 1 and int(saved[0].removeprefix("step-")) >= evicted_at  # saved on SIGTERM, not before
    # The next gang went on from the step the evicted one stopped after: no step trained twice, none lost.
    assert steps(directory) == list(range(1, 61))


READS_PER_STEP = 8  # samples of each rank's data set per step: its half of a global batch of 16


def crashing_in_step(step, seconds_per_read=0.0):
    """The data set of both ranks, dying (exit 13) in `step` of every gang, counted from where it resumed."""
    return plugin_data(
        "CrashingSynthetic", crash_at_read=READS_PER_STEP * (step - 1) + 2, seconds_per_read=seconds_per_read
    )


def test_gangs_that_crash_before_any_new_checkpoint_end_the_job_with_no_progress(namespace):
    """A crash loop: every gang dies in its 3rd step, before its first checkpoint (every 5 steps). After
    maxRestartsWithoutProgress (3) such gangs the job fails, though maxRestarts would allow more."""
    team, name = namespace, "e2e-crash-loop"
    with e2e_operator(team.install):
        submit_training(team, name, {"data": crashing_in_step(3)}, maxRestarts=10, maxRestartsWithoutProgress=3)
        status = team.wait_phase(name, "Failed", WHOLE_JOB_S)["status"]
    assert condition({"status": status}, "Failed")["reason"] == "NoProgress" and status["restarts"] == 2
    assert [gang["ended"] for gang in status["gangs"]] == ["Failed"] * 3


def test_gangs_that_crash_after_a_newer_checkpoint_keep_the_job_going(namespace):
    """Every gang dies in its 9th step, after saving the checkpoint of its 5th: each resumes further on,
    and the third finishes (maxSteps 15) before its 9th step."""
    team, name = namespace, "e2e-crash-forward"
    training = {"data": crashing_in_step(9, seconds_per_read=0.05), "maxSteps": 15}
    with e2e_operator(team.install):
        submit_training(team, name, training, maxRestarts=5, maxRestartsWithoutProgress=1)
        status = team.wait_phase(name, "Succeeded", WHOLE_JOB_S)["status"]
    assert status["restarts"] == 2
    started_and_saved = [(gang["startedFromStep"], gang["checkpointStep"], gang["ended"]) for gang in status["gangs"]]
    assert started_and_saved[:2] == [(0, 5, "Failed"), (5, 10, "Failed")]
    assert started_and_saved[2][0::2] == (10, "Succeeded")
    assert status["goodput"]["recomputedSteps"] > 0  # the steps each gang got past its last checkpoint
