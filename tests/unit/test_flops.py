"""Peak FLOP/s by device name and the utilization they give (models/flops.py)."""

from __future__ import annotations

import pytest

from scaletrain_trainer.models.flops import ModelFlops, peak_flops


def test_peak_flops_by_the_device_name_cuda_reports():
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA A100-SXM4-80GB") == peak_flops("NVIDIA A100 80GB PCIe") == 312e12
    assert (peak_flops("NVIDIA L4"), peak_flops("NVIDIA L40S")) == (121e12, 362e12)  # whole words: L4 is not L40S
    assert peak_flops("Tesla V100-PCIE-16GB") == 112e12 and peak_flops("Tesla V100-SXM2-32GB") == 125e12
    assert peak_flops("NVIDIA GeForce GTX 1080") is None and peak_flops("cpu") is None


def test_tflops_are_per_device_and_mfu_is_absent_without_a_peak():
    assert ModelFlops(6 * 10**9, 4, 312e12).utilization(1e5) == pytest.approx(
        {"tflopsPerDevice": 150.0, "mfu": 150e12 / 312e12}
    )
    assert ModelFlops(6 * 10**9, 4, None).utilization(1e5) == pytest.approx({"tflopsPerDevice": 150.0})
