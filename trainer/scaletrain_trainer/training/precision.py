"""Mixed precision: which dtype to compute in, the autocast context, and the loss scaler."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Literal

import torch

from ..contract.config import PrecisionName

DTYPES: dict[PrecisionName, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass(frozen=True)
class Precision:
    name: PrecisionName
    device_type: str

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.name]

    @property
    def needs_scaler(self) -> bool:
        """fp16's narrow range underflows small gradients; bf16 has fp32's range and needs no scaling."""
        return self.name == "fp16"

    def autocast(self, enabled: bool = True) -> contextlib.AbstractContextManager:
        """Autocast on the real device type; off for fp32 (and under FSDP, which casts by policy)."""
        if self.name == "fp32" or not enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        return torch.amp.GradScaler(self.device_type, enabled=self.needs_scaler)


def resolve_precision(requested: PrecisionName | Literal["auto"], device: torch.device) -> Precision:
    """`auto`: bf16 on GPUs with native bf16 (compute capability >= 8.0), fp16 on older GPUs, fp32 on CPU.

    torch.cuda.is_bf16_supported() is not used: it also counts emulated bf16, which is slow.
    """
    if requested != "auto":
        return Precision(requested, device.type)
    if device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(device)
        return Precision("bf16" if major >= 8 else "fp16", device.type)
    return Precision("fp32", device.type)
