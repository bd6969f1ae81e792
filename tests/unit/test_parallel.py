"""Model parallelism (training/parallel.py): activation checkpointing wraps every block."""

from __future__ import annotations

import pytest

from scaletrain_testing.tiny_training import CPU, RUNTIME
from scaletrain_trainer.contract.config import parse_training_config
from scaletrain_trainer.training.precision import resolve_precision

pytestmark = pytest.mark.usefixtures("process_group")


def test_activation_checkpointing_wraps_every_block():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    from scaletrain_trainer.models.model import build_model
    from scaletrain_trainer.training.parallel import apply_parallelism

    config = parse_training_config({"globalBatchSize": 2, "microBatchSize": 1, "activationCheckpointing": True})
    model = apply_parallelism(build_model(config.model), "ddp", resolve_precision("fp32", CPU), RUNTIME, config)
    blocks = model.blocks  # at world size 1, not wrapped in DDP: there is nothing to all-reduce
    assert len(blocks) == config.model.layers and all(isinstance(b, CheckpointWrapper) for b in blocks)
