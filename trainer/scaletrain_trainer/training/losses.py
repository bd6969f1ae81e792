"""The loss: token cross-entropy, or a function named by `training.loss`.

A loss function maps (logits, targets) of one micro-batch to (summed loss, token count), both 0-dim
tensors. The trainer divides the global batch's summed loss by its summed count, so accumulation is
exact whatever the micro-batch split: see loop.train_step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..contract.plugins import load_object
from ..contract.validation import Problem, ProblemsError

IGNORE_INDEX = -100  # a target that counts for no loss: padding, a prompt's tokens (cross_entropy's default)

LossFunction = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy (computed in fp32) over the targets that are not IGNORE_INDEX, and their count."""
    summed = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )
    return summed, count_valid_targets(targets)


def count_valid_targets(targets: torch.Tensor) -> torch.Tensor:
    return (targets != IGNORE_INDEX).sum()


@dataclass(frozen=True)
class Loss:
    """A loss function, and, where the targets alone give its token count, how: then each micro-batch's
    backward is normalized by the global count at once; otherwise the gradients are, after the last one."""

    function: LossFunction
    count_from_targets: Callable[[torch.Tensor], torch.Tensor] | None = None
    name: str = "token cross-entropy"

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        result = self.function(logits, targets)
        if not (
            isinstance(result, tuple)
            and len(result) == 2
            and all(isinstance(part, torch.Tensor) and part.dim() == 0 for part in result)
        ):
            message = f"{self.name} returned {type(result).__name__}, not (summed loss, token count) as 0-dim tensors"
            raise ProblemsError([Problem(("loss",), message)])
        return result


TOKEN_CROSS_ENTROPY = Loss(token_cross_entropy, count_valid_targets)


def resolve_loss(import_path: str | None) -> Loss:
    """`training.loss`: token cross-entropy when unset, else the named function."""
    if import_path is None:
        return TOKEN_CROSS_ENTROPY
    function = load_object(import_path, ("loss",))
    if not callable(function):
        raise ProblemsError([Problem(("loss",), f"{import_path} is {type(function).__name__}, not a function")])
    return Loss(function, name=import_path)
