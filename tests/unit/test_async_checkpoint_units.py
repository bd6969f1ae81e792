"""Asynchronous checkpoint saves in one process (a gloo group of one): what the loop may rely on while the
background write is still running, and how a failed one is reported."""

from __future__ import annotations

import errno
import os
import threading

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint import FileSystemWriter

from scaletrain_trainer.contract.config import CheckpointConfig
from scaletrain_trainer.contract.exit_codes import WriteError
from scaletrain_trainer.training.checkpoint import CheckpointManager, TrainState
from scaletrain_trainer.training.distributed import Runtime

RUNTIME = Runtime(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend="gloo")
WAIT_SECONDS = 30  # for a gated write; the tests release it within milliseconds


@pytest.fixture(scope="module", autouse=True)
def process_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _state() -> TrainState:
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return TrainState(model, optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False))


def _async_manager(directory) -> CheckpointManager:
    config = CheckpointConfig.model_validate({"dir": str(directory), "everySteps": 1, "async": True})
    return CheckpointManager(config, RUNTIME, "{}", timeout_seconds=60)


def test_an_async_save_returns_before_its_write_and_saves_the_state_as_it_was(tmp_path, monkeypatch):
    write, writing, gate = FileSystemWriter.write_data, threading.Event(), threading.Event()

    def gated_write(writer, plan, planner):
        writing.set()
        assert gate.wait(WAIT_SECONDS)
        return write(writer, plan, planner)

    monkeypatch.setattr(FileSystemWriter, "write_data", gated_write)
    manager, state, committed = _async_manager(tmp_path), _state(), []
    state.step = 1
    saved = state.model.weight.detach().clone()
    try:
        manager.save(state, on_commit=committed.append)
        assert writing.wait(WAIT_SECONDS)
        assert committed == [] and manager.completed() == [] and (tmp_path / "step-00000001.partial").is_dir()
        with torch.no_grad():
            state.model.weight.add_(1.0)  # training goes on while the copy is written
    finally:
        gate.set()
    manager.finish()
    assert committed == [1] and manager.completed() == ["step-00000001"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["step-00000001"]
    restored = _state()
    assert manager.restore_latest(restored) == str(tmp_path / "step-00000001")
    assert torch.equal(restored.model.weight, saved)
    manager.close()


def test_an_async_write_error_is_retried_once_then_raised_as_a_write_error_when_waited_for(tmp_path, monkeypatch):
    attempts = []

    def full_disk(writer, plan, planner):
        attempts.append(writer.path)
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    monkeypatch.setattr(FileSystemWriter, "write_data", full_disk)
    manager, state, committed = _async_manager(tmp_path), _state(), []
    state.step = 2
    manager.save(state, on_commit=committed.append)  # returns: the failure is the background's
    with pytest.raises(WriteError, match=rf"at step 2 in {tmp_path}: file too large \(EFBIG\)$"):
        manager.finish()
    assert len(attempts) == 2 and committed == [] and manager.completed() == []
    manager.close()
