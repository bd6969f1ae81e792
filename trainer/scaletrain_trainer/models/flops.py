"""Model FLOPs: what a trained token costs, the TFLOP/s each device delivers, and MFU (the share of the
device's peak). The one place for the estimate and the peak table: the trainer's metrics and
bench/gpu.py both use it. Plain arithmetic: the models supply their parameter counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Per token and weight: a multiply-add (2 FLOPs) forward, two backward (the input's and the weight's
# gradients). 6N counts every weight as a matmul weight.
TRAINING_FLOPS_PER_WEIGHT = 6

# Dense (no sparsity) 16-bit tensor-core peak FLOP/s per device, from NVIDIA's data sheets: bf16, or fp16
# on V100 and T4, which have no bf16 (precision `auto` trains in fp16 there). MFU is measured against it
# whatever the run's precision, as torchtitan does. A key matches a device name
# (torch.cuda.get_device_name) holding all of its words; the first match wins, so a variant comes before
# its family.
PEAK_16_BIT_FLOPS = {
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H100": 989e12,  # SXM: "NVIDIA H100 80GB HBM3"
    "H200 NVL": 835e12,
    "H200": 989e12,
    "GH200": 989e12,
    "A100": 312e12,  # SXM and PCIe alike
    "L40S": 362e12,
    "L40": 181e12,
    "L4": 121e12,
    "A10G": 125e12,
    "A10": 125e12,
    "A40": 150e12,
    "V100S": 130e12,
    "V100 PCIe": 112e12,
    "V100": 125e12,  # SXM2
    "T4": 65e12,
}


def weight_flops_per_token(parameters: int) -> int:
    """6N: the training FLOPs per token of N matmul weights."""
    return TRAINING_FLOPS_PER_WEIGHT * parameters


def transformer_flops_per_token(matmul_parameters: int, layers: int, width: int, context: int) -> int:
    """Training FLOPs per token of a decoder-only transformer, as PaLM (appendix B) and nanoGPT's
    estimate_mfu count them: 6N, plus 12·layers·width·context for attention's own matmuls (QKᵀ and the
    weighted sum of V: 2 × 2·width·context forward, twice that backward), over the whole context, as the
    convention has it, though causal attention needs only half."""
    return weight_flops_per_token(matmul_parameters) + 12 * layers * width * context


def peak_flops(device_name: str) -> float | None:
    """The device's dense 16-bit peak FLOP/s, or None for a CPU or a GPU not in the table."""
    words = set(re.split(r"[\s-]+", device_name.upper()))
    return next((peak for key, peak in PEAK_16_BIT_FLOPS.items() if set(key.upper().split()) <= words), None)


@dataclass(frozen=True)
class ModelFlops:
    """How much compute a run's tokens take, over how many devices of which peak."""

    per_token: int
    devices: int
    peak_per_device: float | None  # None: unknown, so no MFU

    def utilization(self, tokens_per_second: float) -> dict[str, Any]:
        """`tflopsPerDevice`, and `mfu` (a fraction of the peak) where the peak is known."""
        per_device = self.per_token * tokens_per_second / self.devices
        metrics: dict[str, Any] = {"tflopsPerDevice": per_device / 1e12}
        if self.peak_per_device:
            metrics["mfu"] = per_device / self.peak_per_device
        return metrics
