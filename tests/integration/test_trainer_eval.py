"""Held-out evaluation, custom losses and TensorBoard in real trainer runs: torch.distributed (gloo, CPU),
1 and 2 processes under torchrun, through `python -m scaletrain_trainer`."""

from __future__ import annotations

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from scaletrain_testing.trainer_runs import BASE_CONFIG, FP32_EXACT, config_for, run_trainer

# 20 % held out; a loss on the second half of each sequence only, which counts its own tokens.
EVALUATED = {
    "eval": {"everySteps": 5, "steps": 2, "fraction": 0.2},
    "loss": "scaletrain_testing.plugins.losses:second_half_cross_entropy",
    "maxSteps": 12,
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """2 ranks under FSDP × 4 micro-batches of 2, with TensorBoard; and 1 rank × 2 micro-batches of 8."""
    root = tmp_path_factory.mktemp("runs")
    made = {}
    for name, overrides, nproc in (
        ("w2", {"strategy": "fsdp", "microBatchSize": 2, "tensorboard": True}, 2),
        ("w1", {"microBatchSize": 8}, 1),
    ):
        directory = root / name
        made[name] = run_trainer(directory, config_for(directory, EVALUATED | overrides), nproc)
        assert made[name].returncode == 0, made[name].output[-3000:]
    return made


def _eval_losses(run):
    return {record["step"]: record["evalLoss"] for record in run.metrics() if "evalLoss" in record}


def test_eval_loss_is_logged_every_n_steps_and_at_the_end_whatever_the_world_size(runs):
    assert list(_eval_losses(runs["w2"])) == [5, 10, 12]
    assert _eval_losses(runs["w2"]) == pytest.approx(_eval_losses(runs["w1"]), **FP32_EXACT)


def test_accumulation_stays_exact_with_a_custom_loss(runs):
    assert runs["w2"].losses() == pytest.approx(runs["w1"].losses(), **FP32_EXACT)
    assert runs["w2"].losses()[-1] < runs["w2"].losses()[0]
    # The loss's own count reached the throughput: half of each sample's tokens.
    half = BASE_CONFIG["model"]["contextLength"] // 2
    for record in (r for r in runs["w2"].metrics() if "loss" in r):
        assert record["tokensPerSecond"] == pytest.approx(half * record["samplesPerSecond"])


def test_tensorboard_files_hold_the_logged_losses(runs):
    run = runs["w2"]
    events = EventAccumulator(str(run.directory / "out" / "tensorboard")).Reload()
    logged = {e.step: e.value for e in events.Scalars("train/loss")}
    assert logged == pytest.approx({r["step"]: r["loss"] for r in run.metrics() if "loss" in r}, rel=1e-6)
    assert len(logged) == 12
    assert {e.step: e.value for e in events.Scalars("eval/loss")} == pytest.approx(_eval_losses(run), rel=1e-6)
    assert {"train/gradNorm", "train/lr", "train/tokensPerSecond"} <= set(events.Tags()["scalars"])
