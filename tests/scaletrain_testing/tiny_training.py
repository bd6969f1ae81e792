"""The trainer's parts in one CPU process, for their tests: a small training config, the runtime of a single
rank, a tiny model, its training state, and token batches with ignored targets."""

from __future__ import annotations

import torch
from torch import nn

from scaletrain_trainer.contract.config import TrainingConfig, parse_training_config
from scaletrain_trainer.training.checkpoint import TrainState
from scaletrain_trainer.training.distributed import Runtime
from scaletrain_trainer.training.losses import IGNORE_INDEX

CPU = torch.device("cpu")
RUNTIME = Runtime(rank=0, local_rank=0, world_size=1, device=CPU, backend="gloo")


def training_config(output_dir, **fields) -> TrainingConfig:
    return parse_training_config({"globalBatchSize": 8, "microBatchSize": 2, "outputDir": str(output_dir)} | fields)


def train_state(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return TrainState(model, optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False))


def tokens_with_ignored(seed: int):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randint(0, 16, (8, 6), generator=generator)
    targets = torch.randint(0, 16, (8, 6), generator=generator)
    targets[torch.rand(8, 6, generator=generator) < 0.4] = IGNORE_INDEX  # uneven valid counts per sample
    targets[6:] = IGNORE_INDEX  # two padding samples, as in a short window
    return inputs, targets


class Bigram(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embedding = nn.Embedding(16, 16)

    def forward(self, tokens):
        return self.embedding(tokens)
