"""An elastic gang end to end on the real control plane, with three fake nodes whose pods run here and
gang placement on: a node is cordoned and its pod evicted (as `kubectl drain` does), the gang goes on at 2
nodes, grows back to 3 when the node returns, and trains exactly the model a fixed 3-node run trains."""

from __future__ import annotations

import time

import pytest

from scaletrain_testing.e2e_jobs import e2e_namespace, e2e_operator, losses, pods_of, steps, submit_training
from scaletrain_testing.kubelet import FakeNode
from scaletrain_testing.node_jobs import eviction
from scaletrain_testing.timeouts import WHOLE_JOB_S
from scaletrain_testing.trainer_runs import FP32_EXACT, config_for, plugin_data, run_trainer
from scaletrain_testing.waiting import wait_until

NODES = [FakeNode("elastic-node-1"), FakeNode("elastic-node-2"), FakeNode("elastic-node-3")]
ONE_POD_A_NODE = {"requests": {"cpu": "5"}}  # each fake node has 8 CPUs
STEPS = 40
# 24 samples a step keep the batch exact at 3 nodes (2 micro-batches of 4 a rank) and at 2 (3 a rank).
TRAINING = {"globalBatchSize": 24, "maxSteps": STEPS, "checkpoint": {"everySteps": 1000}}
SCALE_DOWN_AFTER_S = 5
ELASTIC = {"minNodes": 2, "scaleDownAfterSeconds": SCALE_DOWN_AFTER_S, "scaleUp": {"checkEverySeconds": 10}}


@pytest.fixture(scope="module")
def namespace(control_plane, tmp_path_factory):
    with e2e_namespace(control_plane, tmp_path_factory.mktemp("e2e-elastic"), NODES) as team:
        yield team


def running_at(size):
    return lambda status: status.get("phase") == "Running" and (status.get("nodes") or {}).get("current") == size


def test_a_gang_that_loses_a_node_goes_on_smaller_grows_back_and_trains_the_same_model(control_plane, namespace):
    team, name = namespace, "e2e-elastic"
    # The same samples in the same order at every size, slowed down so that the test can act while it trains.
    data = {"data": plugin_data("SlowSynthetic", seconds_per_read=0.1)}
    with e2e_operator(team.install):
        directory = submit_training(
            team, name, TRAINING | data, nodes=3, maxRestarts=0, elastic=ELASTIC, resources=ONE_POD_A_NODE
        )
        wait_until(lambda: len(steps(directory)) >= 5, WHOLE_JOB_S, "5 steps logged", interval_s=0.05)
        (victim,) = [pod for pod in pods_of(team, f"{name}-g0") if "-g0-2-" in pod["metadata"]["name"]]
        lost = victim["spec"]["nodeName"]
        control_plane.kubectl("cordon", lost)
        lost_at = time.monotonic()
        path = f"/api/v1/namespaces/{team.namespace}/pods/{victim['metadata']['name']}/eviction"
        team.kube.request("POST", path, eviction(victim))
        team.wait_status(name, running_at(2), WHOLE_JOB_S, "a 2-node gang running")
        shrunk_in = time.monotonic() - lost_at
        at_two = len(steps(directory))
        wait_until(lambda: len(steps(directory)) >= at_two + 3, WHOLE_JOB_S, "steps at 2 nodes", interval_s=0.05)
        control_plane.kubectl("uncordon", lost)
        status = team.wait_phase(name, "Succeeded", WHOLE_JOB_S)["status"]
    assert shrunk_in <= SCALE_DOWN_AFTER_S + 30
    resizes = [(resize["fromNodes"], resize["toNodes"], resize["reason"]) for resize in status["resizes"]]
    assert resizes == [(3, 2, "Unschedulable"), (2, 3, "CapacityReturned")]
    # The eviction is a disruption; neither resize counts as a restart or a disruption.
    assert (status["restarts"], status["disruptions"], status["nodes"]["current"]) == (0, 1, 3)
    assert [entry["nodes"] for entry in status["goodput"]["runningSecondsAtSize"]] == [3, 2]
    assert status["elasticSizes"] == [2, 3]
    # Each gang saved a checkpoint after the step it was in when stopped, and the next went on from it: no
    # step trained twice, none lost; and each step's loss is a fixed 3-node run's.
    assert steps(directory) == list(range(1, STEPS + 1))
    fixed = run_trainer(team.workdir / "fixed-3", config_for(team.workdir / "fixed-3", TRAINING | data), nproc=3)
    assert fixed.returncode == 0, fixed.output
    assert losses(directory) == pytest.approx(fixed.losses(), **FP32_EXACT)
