"""Training-config plugins that crash the built-in trainer on purpose, named by import path."""

from __future__ import annotations

import torch
import torch.distributed as dist

CRASH_MESSAGE = "the loss of rank 1 broke (a test's plugin raises this)"


def cross_entropy_but_rank_1_raises(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Token cross-entropy, summed with its count; on rank 1, a RuntimeError the trainer does not expect."""
    if dist.get_rank() == 1:
        raise RuntimeError(CRASH_MESSAGE)
    summed = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))
    count = (targets != -100).sum().float()
    return summed * count, count
