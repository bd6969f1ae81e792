"""The optimizer and its learning-rate schedule, built from the config's `optimizer` and `scheduler`."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..contract.config import OptimizerConfig, SchedulerConfig


def build_optimizer(model: nn.Module, config: OptimizerConfig, device: torch.device) -> torch.optim.Optimizer:
    """Weight decay on matrices only (not on biases, norms or other vectors), as in GPT-2. On GPUs AdamW is
    fused: one kernel for all of its update, where the default (foreach) launches several per step."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if config.name == "sgd":
        return torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum)
    betas, fused = (config.beta1, config.beta2), device.type == "cuda"
    return torch.optim.AdamW(groups, lr=config.lr, betas=betas, eps=config.eps, fused=fused)


def build_scheduler(optimizer: torch.optim.Optimizer, config: SchedulerConfig, max_steps: int):
    """Linear warmup to lr, then cosine or linear decay to minLrRatio × lr at max_steps."""

    def factor(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        if config.name == "constant":
            return 1.0
        progress = min(1.0, (step - config.warmup_steps) / max(1, max_steps - config.warmup_steps))
        shape = 0.5 * (1 + math.cos(math.pi * progress)) if config.name == "cosine" else 1 - progress
        return config.min_lr_ratio + (1 - config.min_lr_ratio) * shape

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
