"""Held-out evaluation, custom losses and TensorBoard in real trainer runs: torch.distributed (gloo, CPU),
1 and 2 processes under torchrun, through `python -m scaletrain_trainer`."""

from __future__ import annotations

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from scaletrain_testing.trainer_runs import config_for, run_trainer

FP32_EXACT = {"rel": 1e-5, "abs": 1e-6}  # different world sizes and splits only reorder float sums
EVAL = {"eval": {"everySteps": 5, "steps": 2, "fraction": 0.2}, "maxSteps": 12}
LOSSES = "scaletrain_testing.plugins.losses"
CUSTOM_LOSS = {"loss": f"{LOSSES}:second_half_cross_entropy", "maxSteps": 8}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    cache = {}

    def get(name, overrides, nproc=2):
        if name not in cache:
            directory = root / name
            cache[name] = run_trainer(directory, config_for(directory, overrides), nproc)
            assert cache[name].returncode == 0, cache[name].output[-3000:]
        return cache[name]

    return get


def _eval_losses(run):
    return {record["step"]: record["evalLoss"] for record in run.metrics() if "evalLoss" in record}


def test_eval_loss_is_logged_every_n_steps_and_at_the_end_whatever_the_world_size(runs):
    two = runs("eval-w2-fsdp", EVAL | {"strategy": "fsdp", "tensorboard": True})
    one = runs("eval-w1", EVAL, nproc=1)
    assert list(_eval_losses(two)) == [5, 10, 12]
    assert _eval_losses(two) == pytest.approx(_eval_losses(one), **FP32_EXACT)
    assert two.losses() == pytest.approx(one.losses(), **FP32_EXACT)


def test_tensorboard_files_hold_the_logged_losses(runs):
    run = runs("eval-w2-fsdp", EVAL | {"strategy": "fsdp", "tensorboard": True})
    events = EventAccumulator(str(run.directory / "out" / "tensorboard")).Reload()
    logged = {e.step: e.value for e in events.Scalars("train/loss")}
    assert logged == pytest.approx({r["step"]: r["loss"] for r in run.metrics() if "loss" in r}, rel=1e-6)
    assert len(logged) == 12
    assert {e.step: e.value for e in events.Scalars("eval/loss")} == pytest.approx(_eval_losses(run), rel=1e-6)
    assert {"train/gradNorm", "train/lr", "train/tokensPerSecond"} <= set(events.Tags()["scalars"])


def test_accumulation_stays_exact_with_a_custom_loss(runs):
    """A loss counting its own tokens (the second half of each sequence): 2 ranks × 4 micro-batches of 2 and
    1 rank × 2 of 8 make the same updates."""
    small_micro_batches = runs("loss-w2-micro2", CUSTOM_LOSS | {"microBatchSize": 2})
    one_rank = runs("loss-w1-micro8", CUSTOM_LOSS | {"microBatchSize": 8}, nproc=1)
    assert small_micro_batches.losses() == pytest.approx(one_rank.losses(), **FP32_EXACT)
    assert small_micro_batches.losses()[-1] < small_micro_batches.losses()[0]


def test_a_loss_that_breaks_its_contract_fails_as_a_config_error(tmp_path):
    run = run_trainer(
        tmp_path, config_for(tmp_path, {"loss": "scaletrain_testing.plugins.losses:not_a_pair", "maxSteps": 3})
    )
    assert run.returncode == 78, run.output[-3000:]
    assert (
        "loss: scaletrain_testing.plugins.losses:not_a_pair returned Tensor, not (summed loss, token count)"
        in run.output
    )
    assert "Traceback" not in run.output
