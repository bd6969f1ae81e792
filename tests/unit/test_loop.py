"""The training loop's parts (training/loop.py) in one process: an accumulated update that equals the
full-batch update, and the step the watchdog leaves alone while it compiles."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from scaletrain_testing.plugins.losses import second_half_cross_entropy
from scaletrain_testing.tiny_training import CPU, Bigram, tokens_with_ignored, train_state
from scaletrain_trainer.reporting.watchdog import Watchdog
from scaletrain_trainer.training.data import MicroBatch
from scaletrain_trainer.training.loop import train_step
from scaletrain_trainer.training.losses import IGNORE_INDEX, resolve_loss
from scaletrain_trainer.training.precision import resolve_precision

pytestmark = pytest.mark.usefixtures("process_group")


# --- loss normalization ---------------------------------------------------------------------------


@pytest.mark.parametrize("micro_batch", [1, 2, 4, 8])
def test_accumulated_update_equals_the_full_batch_update(micro_batch):
    inputs, targets = tokens_with_ignored(seed=1)
    reference = Bigram()
    loss = nn.functional.cross_entropy(
        reference(inputs).reshape(-1, 16), targets.reshape(-1), ignore_index=IGNORE_INDEX
    )
    loss.backward()
    expected = reference.embedding.weight.detach() - reference.embedding.weight.grad

    model = nn.parallel.DistributedDataParallel(Bigram())
    windows = [MicroBatch(inputs[i : i + micro_batch], targets[i : i + micro_batch]) for i in range(0, 8, micro_batch)]
    result = train_step(
        model, windows, train_state(model), resolve_precision("fp32", CPU), grad_clip_norm=0, world_size=1
    )
    assert int(result.tokens) == int((targets != IGNORE_INDEX).sum())
    torch.testing.assert_close(model.module.embedding.weight.detach(), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("micro_batch", [1, 2, 8])
def test_with_a_custom_loss_the_accumulated_update_equals_the_full_batch_update(micro_batch):
    """training.loss reports its own token count, known only after the forward pass: the gradients are divided
    by the global count after the last micro-batch, which must give the same update."""
    inputs, targets = tokens_with_ignored(seed=2)
    reference = Bigram()
    summed, count = second_half_cross_entropy(reference(inputs), targets)
    (summed / count).backward()
    expected = reference.embedding.weight.detach() - reference.embedding.weight.grad
    assert int(count) != int((targets != IGNORE_INDEX).sum())  # not cross-entropy's count

    model = nn.parallel.DistributedDataParallel(Bigram())
    windows = [MicroBatch(inputs[i : i + micro_batch], targets[i : i + micro_batch]) for i in range(0, 8, micro_batch)]
    loss = resolve_loss("scaletrain_testing.plugins.losses:second_half_cross_entropy")
    result = train_step(model, windows, train_state(model), resolve_precision("fp32", CPU), 0, 1, loss=loss)
    assert float(result.tokens) == float(count)
    torch.testing.assert_close(model.module.embedding.weight.detach(), expected, rtol=1e-6, atol=1e-7)


def test_per_micro_batch_mean_would_be_wrong():
    """The reference above can tell: averaging per-micro-batch means weights tokens unequally."""
    inputs, targets = tokens_with_ignored(seed=1)
    torch.set_grad_enabled(False)
    full = nn.functional.cross_entropy(Bigram()(inputs).reshape(-1, 16), targets.reshape(-1), ignore_index=IGNORE_INDEX)
    means = [
        nn.functional.cross_entropy(Bigram()(x).reshape(-1, 16), y.reshape(-1), ignore_index=IGNORE_INDEX)
        for x, y in zip(inputs.split(2), targets.split(2), strict=True)
        if (y != IGNORE_INDEX).any()
    ]
    torch.set_grad_enabled(True)
    assert float(sum(means) / len(means)) != pytest.approx(float(full), rel=1e-3)


# --- hang watch -----------------------------------------------------------------------------------


def test_the_step_that_compiles_is_not_watched_for_hangs(tmp_path):
    from scaletrain_trainer.training.loop import step_phase

    watchdog = Watchdog(4, str(tmp_path), rank=0)
    with step_phase(watchdog, 1, compiling=True):
        assert watchdog.paused and "torch.compile" in watchdog.doing
    with step_phase(watchdog, 2, compiling=False):
        assert not watchdog.paused and watchdog.waits_on_peers
