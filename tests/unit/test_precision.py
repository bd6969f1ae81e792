"""Precision (training/precision.py): what auto resolves to, which precisions need a loss scaler, and the
dtype autocast computes in."""

from __future__ import annotations

import torch

from scaletrain_testing.tiny_training import CPU
from scaletrain_trainer.training.precision import resolve_precision


def test_precision_auto_is_fp32_on_cpu_and_autocast_follows_the_device():
    assert resolve_precision("auto", CPU).name == "fp32"
    bf16 = resolve_precision("bf16", CPU)
    assert not bf16.needs_scaler and resolve_precision("fp16", CPU).needs_scaler
    with bf16.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with resolve_precision("fp32", CPU).autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
