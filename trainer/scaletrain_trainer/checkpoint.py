"""Distributed checkpoints (torch.distributed.checkpoint) with atomic writes and automatic resume.

A checkpoint holds everything needed to continue exactly: model and optimizer (through DCP's
state-dict helpers, so it reshards across world sizes and between DDP and FSDP), LR scheduler,
loss scaler, step, data position and RNG state. It is written to `step-N.partial` and renamed to
`step-N` only once every rank has finished, so a crash mid-write never hides the last good one.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import DefaultLoadPlanner
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from .config import CheckpointConfig
from .distributed import Runtime
from .validation import Problem, ProblemsError

log = logging.getLogger(__name__)

CHECKPOINT_NAME = re.compile(r"^step-(\d+)$")
PARTIAL_SUFFIX = ".partial"


class TrainState(Stateful):
    """What a checkpoint saves and restores."""

    def __init__(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, scaler: torch.amp.GradScaler
    ):
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.step = 0
        self.data_position = (0, 0)  # (epoch, offset) where the next step starts

    def state_dict(self) -> dict[str, Any]:
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        state = {
            "model": model_state,
            "optimizer": optimizer_state,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "step": self.step,
            "data_position": list(self.data_position),
            # Every rank has the same seed and draws the same random numbers, so one copy is enough.
            "rng_cpu": torch.get_rng_state(),
        }
        if torch.cuda.is_available():
            state["rng_cuda"] = torch.cuda.get_rng_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        self.step = int(state["step"])
        self.data_position = tuple(state["data_position"])
        torch.set_rng_state(state["rng_cpu"])
        if "rng_cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state(state["rng_cuda"])


class CheckpointManager:
    def __init__(self, config: CheckpointConfig, runtime: Runtime):
        self.config, self.runtime = config, runtime
        self.directory = Path(config.dir) if config.dir else None

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def due(self, step: int) -> bool:
        return self.enabled and step % self.config.every_steps == 0

    def completed(self) -> list[Path]:
        """Finished checkpoints, oldest first."""
        if self.directory is None or not self.directory.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.directory.iterdir() if (m := CHECKPOINT_NAME.match(p.name))]
        return [path for _, path in sorted(found)]

    def restore_latest(self, state: TrainState) -> Path | None:
        """Load the newest checkpoint, if any. Rank 0 picks it, so every rank loads the same one."""
        if not self.enabled:
            return None
        choice = [str(self.completed()[-1]) if self.completed() else None]
        dist.broadcast_object_list(choice, src=0)
        if choice[0] is None:
            return None
        path = Path(choice[0])
        dcp.load({"train": state}, checkpoint_id=path, planner=DefaultLoadPlanner(allow_partial_load=True))
        log.info("resumed from %s at step %d", path, state.step)
        return path

    def save(self, state: TrainState) -> Path | None:
        assert self.directory is not None
        final = self.directory / f"step-{state.step:08d}"
        if final.exists():
            return None
        partial = final.with_name(final.name + PARTIAL_SUFFIX)
        if self.runtime.is_main:
            shutil.rmtree(partial, ignore_errors=True)  # left by a crash mid-write
            partial.mkdir(parents=True)
        dist.barrier()
        dcp.save({"train": state}, checkpoint_id=partial)
        dist.barrier()
        if self.runtime.is_main:
            partial.rename(final)
            self._prune()
        dist.barrier()
        log.info("saved checkpoint %s", final)
        return final

    def _prune(self) -> None:
        assert self.directory is not None
        for old in self.completed()[: -self.config.keep]:
            shutil.rmtree(old, ignore_errors=True)
        for stale in self.directory.glob(f"*{PARTIAL_SUFFIX}"):
            shutil.rmtree(stale, ignore_errors=True)


def check_data_position(state: TrainState, expected: tuple[int, int]) -> None:
    """A resumed run must continue the same sample stream; a changed globalBatchSize would not."""
    if state.data_position != expected:
        raise ProblemsError(
            [
                Problem(
                    ("globalBatchSize",),
                    f"the checkpoint at step {state.step} stopped at data position {state.data_position}, but this "
                    f"config puts step {state.step} at {expected}; keep globalBatchSize (and the data) unchanged "
                    "to resume",
                )
            ]
        )
