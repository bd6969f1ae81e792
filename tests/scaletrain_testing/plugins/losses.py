"""Custom losses (training.loss), named by import path in a training config."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def second_half_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy on the second half of each sequence only (as a prompt/answer loss would be), with its
    token count: a count the targets' ignore marks do not give, so the trainer learns it from the loss."""
    half = targets.size(1) // 2
    logits, targets = logits[:, half:], targets[:, half:]
    mask = targets != -100
    summed = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), reduction="none")
    return (summed * mask.reshape(-1)).sum(), mask.sum().float()


def not_a_pair(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """A loss that returns the mean only: a contract error the trainer names."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
