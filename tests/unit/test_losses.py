"""Custom losses (training/losses.py): one that does not return a summed loss and a token count, or cannot
be imported, is a config error naming training.loss."""

from __future__ import annotations

import pytest
from torch import nn

from scaletrain_testing.tiny_training import CPU, Bigram, tokens_with_ignored, train_state
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.training.data import MicroBatch
from scaletrain_trainer.training.loop import train_step
from scaletrain_trainer.training.losses import resolve_loss
from scaletrain_trainer.training.precision import resolve_precision

pytestmark = pytest.mark.usefixtures("process_group")


def test_a_loss_that_does_not_return_a_sum_and_a_count_is_a_config_error():
    model = nn.parallel.DistributedDataParallel(Bigram())
    inputs, targets = tokens_with_ignored(seed=1)
    loss = resolve_loss("scaletrain_testing.plugins.losses:not_a_pair")
    with pytest.raises(
        ProblemsError, match=r"loss: scaletrain_testing.plugins.losses:not_a_pair returned Tensor, not \(summed"
    ):
        batch = MicroBatch(inputs, targets)
        train_step(model, [batch], train_state(model), resolve_precision("fp32", CPU), 0, 1, loss=loss)
    with pytest.raises(ProblemsError, match="loss: cannot import scaletrain_testing.plugins.losses:missing"):
        resolve_loss("scaletrain_testing.plugins.losses:missing")
