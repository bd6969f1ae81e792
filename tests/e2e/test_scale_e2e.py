"""`kubectl scale` on a running job, end to end on the real control plane with three fake nodes whose pods
run here: the API server's scale subresource refuses a size that cannot keep the global batch exact, and a
3-node gang scaled to 2 stops at a step boundary and goes on at 2 nodes, training the same model as a
fixed 3-node run."""

from __future__ import annotations

import pytest

from scaletrain_testing.control_plane import KubectlError
from scaletrain_testing.e2e_jobs import e2e_namespace, e2e_operator, losses, steps, submit_training, wait_event
from scaletrain_testing.kubelet import FakeNode
from scaletrain_testing.timeouts import WHOLE_JOB_S
from scaletrain_testing.trainer_runs import FP32_EXACT, GPT_OPTIONS, config_for, plugin_data, run_trainer
from scaletrain_testing.waiting import wait_until

NODES = [FakeNode("scale-node-1"), FakeNode("scale-node-2"), FakeNode("scale-node-3")]
STEPS = 30
# 24 samples a step keep the batch exact at 3 nodes (2 micro-batches of 4 a rank) and at 2 (3 a rank), not at 4.
TRAINING = {"globalBatchSize": 24, "maxSteps": STEPS, "checkpoint": {"everySteps": 1000}}


@pytest.fixture(scope="module")
def namespace(control_plane, tmp_path_factory):
    with e2e_namespace(control_plane, tmp_path_factory.mktemp("e2e-scale"), NODES) as team:
        yield team


def test_kubectl_scale_resizes_a_running_gang_at_a_step_boundary_with_the_same_losses(control_plane, namespace):
    team, name = namespace, "e2e-scaled"
    scale = ("scale", f"stj/{name}", "-n", team.namespace)
    # The same samples in the same order, slowed down so that the test can act while the gang trains; and
    # the tiny GPT with saves as slow as a large model's, so that a next gang started before the save was
    # complete would find no checkpoint and train from step 1 again.
    slow_saves = {"save_seconds": 20, "slow_generation": 0, "record_dir": str(team.workdir)}
    model = {"name": "scaletrain_testing.plugins.faults:SlowSavingGPT", "options": GPT_OPTIONS | slow_saves}
    data = {"data": plugin_data("SlowSynthetic", seconds_per_read=0.02), "model": model}
    with e2e_operator(team.install):
        directory = submit_training(team, name, TRAINING | data, nodes=3, maxRestarts=0)
        wait_until(lambda: len(steps(directory)) >= 8, WHOLE_JOB_S, "8 steps logged", interval_s=0.05)
        with pytest.raises(KubectlError) as refused:
            control_plane.kubectl(*scale, "--replicas=4")
        assert "globalBatchSize must be divisible" in refused.value.stderr
        control_plane.kubectl(*scale, "--replicas=2")
        scaled_at = max(steps(directory))
        (resized,) = wait_event(team, name, "Resized")
        status = team.wait_phase(name, "Succeeded", WHOLE_JOB_S)["status"]
    assert resized == "the gang resizes from 3 to 2 nodes (spec.nodes is 2)"
    assert (status["restarts"], status["disruptions"], status["nodes"]["current"]) == (0, 0, 2)
    (resize,) = status["resizes"]
    assert (resize["fromNodes"], resize["toNodes"], resize["reason"]) == (3, 2, "Scaled")
    assert [entry["nodes"] for entry in status["goodput"]["runningSecondsAtSize"]] == [3, 2]
    # The first gang saved a checkpoint after the step it was in when told to stop, and the next gang went
    # on from it: no step trained twice, none lost.
    saved = sorted(path.name for path in (directory / "checkpoints").iterdir() if path.name.startswith("step-"))
    assert int(saved[0].removeprefix("step-")) >= scaled_at
    assert steps(directory) == list(range(1, STEPS + 1))
    # Every step's loss is a fixed 3-node run's: the global batch, its order and the update do not depend
    # on the gang's size.
    fixed = run_trainer(team.workdir / "fixed-3", config_for(team.workdir / "fixed-3", TRAINING | data), nproc=3)
    assert fixed.returncode == 0, fixed.output
    assert losses(directory) == pytest.approx(fixed.losses(), **FP32_EXACT)
