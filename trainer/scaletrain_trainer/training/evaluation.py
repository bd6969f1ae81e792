"""Held-out evaluation (`training.eval`): the mean loss over the same held-out samples, every everySteps.

The held-out samples are a share of the data set chosen by seed (`fraction`), never trained on, or a
separate file (`path`). An evaluation covers the first `steps` global batches of them, split among
the ranks like a training step, so its loss does not depend on the world size.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.data import Dataset

from ..contract.config import EvalConfig, TrainingConfig
from ..contract.validation import Problem, ProblemsError
from .data import build_dataset, collate
from .distributed import Runtime, all_reduce_sum
from .losses import Loss
from .parallel import autocast_enabled
from .precision import Precision

# The held-out choice draws from its own stream: the epoch orders use seed + epoch.
HELD_OUT_SEED_OFFSET = 1 << 32


class Samples(Dataset):
    """The samples of `dataset` at `indices` (a compact tensor: a token data set can hold billions)."""

    def __init__(self, dataset: Dataset, indices: torch.Tensor):
        self.dataset, self.indices = dataset, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int):
        return self.dataset[int(self.indices[index])]


def split_off_eval(dataset: Dataset, config: TrainingConfig) -> tuple[Dataset, Dataset | None]:
    """(what to train on, what to evaluate on): the data set itself and no evaluation unless configured."""
    if config.eval is None:
        return dataset, None
    if config.eval.path is not None:
        return dataset, _separate_file(config)
    size = len(dataset)
    held_out = math.ceil(size * config.eval.fraction)
    generator = torch.Generator().manual_seed(config.seed + HELD_OUT_SEED_OFFSET)
    order = torch.randperm(size, generator=generator, dtype=torch.int32 if size < 2**31 else torch.int64)
    # In index order: a token file is then read front to back, as without evaluation.
    return Samples(dataset, order[held_out:].sort().values), Samples(dataset, order[:held_out].sort().values)


def _separate_file(config: TrainingConfig) -> Dataset:
    """eval.path, read as data.path is; its problems are reported at eval.path."""
    data = config.data.model_copy(update={"path": config.eval.path})
    try:
        return build_dataset(data, config.model, config.seed)
    except ProblemsError as error:
        moved = [Problem(("eval", "path"), p.message) if p.path == ("data", "path") else p for p in error.problems]
        raise ProblemsError(moved) from None


class Evaluator:
    """Evaluates the model on this rank's share of the held-out global batches; the mean over all ranks."""

    def __init__(self, held_out: Dataset, config: TrainingConfig, runtime: Runtime, loss: Loss):
        assert config.eval is not None
        self.config: EvalConfig = config.eval
        self.held_out, self.device, self.loss, self.max_steps = held_out, runtime.device, loss, config.max_steps
        batches = min(self.config.steps, len(held_out) // config.global_batch_size)
        if batches == 0:
            field, fix = ("path", "use a longer file") if self.config.path else ("fraction", "raise eval.fraction")
            message = (
                f"the held-out set holds {len(held_out)} samples, fewer than one global batch "
                f"({config.global_batch_size}): {fix}"
            )
            raise ProblemsError([Problem(("eval", field), message)])
        mine = list(range(batches * config.global_batch_size))[runtime.rank :: runtime.world_size]
        size = config.micro_batch_size
        self.micro_batches = [mine[start : start + size] for start in range(0, len(mine), size)]

    def due(self, step: int) -> bool:
        return step % self.config.every_steps == 0 or step == self.max_steps

    def __call__(self, model: nn.Module, precision: Precision) -> float:
        """The mean loss per token; every rank runs the same number of forward passes (FSDP's all-gathers)."""
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)  # summed loss, tokens
        model.eval()  # no dropout: evaluating draws no random numbers, so training's stream stays as it was
        try:
            with torch.no_grad():
                for indices in self.micro_batches:
                    batch = collate(self.held_out, indices).to(self.device)
                    with precision.autocast(enabled=autocast_enabled(model)):
                        logits = batch.logits(model)
                    summed, count = self.loss(logits, batch.targets)
                    totals += torch.stack((summed.double(), count.double()))
        finally:
            model.train()
        loss_sum, tokens = all_reduce_sum(totals).tolist()
        return loss_sum / max(tokens, 1)
