"""The learning-rate schedule (training/optimizer.py): a linear warmup, then a cosine decay to minLrRatio × lr."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from scaletrain_trainer.contract.config import SchedulerConfig
from scaletrain_trainer.training.optimizer import build_scheduler


def test_warmup_then_cosine_to_min_lr():
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = build_scheduler(optimizer, SchedulerConfig(warmup_steps=4, min_lr_ratio=0.1), max_steps=20)
    lrs = []
    for _ in range(21):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lrs[4] == pytest.approx(1.0) and lrs[20] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:], strict=False))
