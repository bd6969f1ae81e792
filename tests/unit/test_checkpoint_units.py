"""Checkpoints (training/checkpoint.py) in one process: saved atomically and pruned, restored, and refused
on a resume that changed the model or the global batch, or from storage other ranks cannot see."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from scaletrain_testing.tiny_training import RUNTIME, Bigram, train_state
from scaletrain_trainer.contract.config import CheckpointConfig
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.training.checkpoint import CheckpointManager, check_data_position
from scaletrain_trainer.training.data import GlobalBatches

pytestmark = pytest.mark.usefixtures("process_group")


def test_checkpoints_are_atomic_and_pruned(tmp_path):
    manager = CheckpointManager(CheckpointConfig(dir=str(tmp_path), every_steps=1, keep=2), RUNTIME, "{}")
    model = nn.parallel.DistributedDataParallel(Bigram())
    state = train_state(model)
    for step in (1, 2, 3):
        state.step = step
        manager.save(state)
    (tmp_path / "step-00000009.partial").mkdir()  # a save that crashed mid-write
    assert manager.completed() == ["step-00000002", "step-00000003"]
    with torch.no_grad():
        model.module.embedding.weight.zero_()
    restored = train_state(model)
    assert manager.restore_latest(restored) == str(tmp_path / "step-00000003")
    assert restored.step == 3 and model.module.embedding.weight.abs().sum() > 0
    state.step = 4
    manager.save(state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000003", "step-00000004"]


def test_resume_refuses_a_changed_global_batch():
    state = train_state(nn.parallel.DistributedDataParallel(Bigram()))
    state.step, state.data_position = 10, (0, 160)
    check_data_position(state, GlobalBatches(1000, 16, 4, 1, 0, 0).position(10))
    with pytest.raises(ProblemsError, match="keep globalBatchSize"):
        check_data_position(state, GlobalBatches(1000, 32, 4, 1, 0, 0).position(10))


def test_resume_refuses_a_different_model(tmp_path):
    manager = CheckpointManager(CheckpointConfig(dir=str(tmp_path), every_steps=1), RUNTIME, "{}")
    state = train_state(nn.parallel.DistributedDataParallel(Bigram()))
    state.step = 5
    manager.save(state)
    wider = nn.Module()
    wider.embedding, wider.extra = nn.Embedding(16, 32), nn.Linear(2, 2)
    with pytest.raises(ProblemsError, match=r"different model \(not in the checkpoint: model\.extra\.bias"):
        manager.restore_latest(train_state(nn.parallel.DistributedDataParallel(wider)))


def test_checkpoint_not_visible_to_every_rank_is_a_config_error(tmp_path):
    manager = CheckpointManager(CheckpointConfig(dir=str(tmp_path)), RUNTIME, "{}")
    with pytest.raises(ProblemsError, match="must be on shared storage"):
        manager._require_visible("step-00000001")
