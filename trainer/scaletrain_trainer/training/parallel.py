"""Parallelism, applied by one function: DDP or FSDP2, activation checkpointing, torch.compile, SyncBatchNorm."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from ..contract.config import TrainingConfig
from ..contract.validation import Problem, ProblemsError
from ..models.model import build_model, count_parameters, repeated_layers, trainable_parameters
from .distributed import Runtime, agree, seed_everything
from .precision import Precision

log = logging.getLogger(__name__)

# AdamW keeps fp32 params, grads and two moments: 16 bytes per trained parameter, before activations; a frozen one
# (LoRA's base) is its fp32 value alone.
BYTES_PER_PARAMETER = 16
BYTES_PER_FROZEN_PARAMETER = 4
# DDP replicates all of that on every device; above this share of device memory, shard instead.
DDP_MEMORY_SHARE = 0.5


def choose_strategy(requested: str, model: nn.Module, runtime: Runtime) -> str:
    """`auto`: ddp when a full replica fits comfortably in each process's memory, else fsdp (rank 0 decides)."""
    if requested != "auto":
        return requested
    trained = trainable_parameters(model)
    needed = trained * BYTES_PER_PARAMETER + (count_parameters(model) - trained) * BYTES_PER_FROZEN_PARAMETER
    available = _memory_per_process(runtime.device)
    strategy = agree("ddp" if needed <= DDP_MEMORY_SHARE * available else "fsdp")
    log.info(
        "strategy auto: params+grads+AdamW state %.2f GiB vs %.2f GiB memory per process -> %s",
        needed / 2**30,
        available / 2**30,
        strategy,
    )
    return strategy


def _memory_per_process(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            host = min(host, int(Path(limit_file).read_text()))  # the container's limit, where set
        except (OSError, ValueError):  # absent, or "max" (no limit)
            continue
    return host // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def build_parallel_model(config: TrainingConfig, precision: Precision, runtime: Runtime) -> tuple[nn.Module, str]:
    """Build the configured model and parallelize it; returns (the module to train, the strategy).

    Under FSDP only rank 0 materializes the full model, on the host: the others build it on the meta
    device, shard it, and receive their shards (and every buffer) from rank 0. Weights are the same as under
    DDP.
    """
    with torch.device("meta"):
        skeleton = build_model(config.model)
    strategy = choose_strategy(config.strategy, skeleton, runtime)
    if strategy == "fsdp":
        full_model = _seeded_model(config) if runtime.is_main else None
        model = apply_parallelism(skeleton, strategy, precision, runtime, config)
        model.to_empty(device=runtime.device)
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(model, full_model.state_dict() if full_model is not None else {}, options=options)
        _broadcast_non_persistent_buffers(model, full_model)
        return model, strategy
    return apply_parallelism(_seeded_model(config), strategy, precision, runtime, config), strategy


def _seeded_model(config: TrainingConfig) -> nn.Module:
    seed_everything(config.seed)
    return build_model(config.model)


@torch.no_grad()
def _broadcast_non_persistent_buffers(model: nn.Module, full_model: nn.Module | None) -> None:
    """Rank 0's non-persistent buffers (precomputed tables, such as rotary frequencies) to every rank: the state
    dict leaves them out, so the meta build left them uninitialized. Matched by order, which wrapping keeps."""
    buffers = _non_persistent_buffers(model)
    if full_model is not None:
        for buffer, built in zip(buffers, _non_persistent_buffers(full_model), strict=True):
            buffer.copy_(built)
    for buffer in buffers:
        dist.broadcast(buffer, src=0)


def _non_persistent_buffers(model: nn.Module) -> list[torch.Tensor]:
    return [
        module._buffers[name]
        for module in model.modules()
        for name in sorted(module._non_persistent_buffers_set)
        if module._buffers.get(name) is not None
    ]


def apply_parallelism(
    model: nn.Module, strategy: str, precision: Precision, runtime: Runtime, config: TrainingConfig
) -> nn.Module:
    """Wrap the model for `strategy` (moving it to its device unless it is on the meta device)."""
    if config.sync_batch_norm:
        if runtime.device.type != "cuda":
            raise ProblemsError([Problem(("syncBatchNorm",), "SyncBatchNorm only works on GPUs; turn it off on CPU")])
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    if not any(p.is_meta for p in model.parameters()):
        model.to(runtime.device)
    blocks = repeated_layers(model)
    if config.activation_checkpointing:
        if blocks is None:
            raise ProblemsError([Problem(("activationCheckpointing",), "the model has no `blocks` ModuleList")])
        for index, block in enumerate(blocks):
            blocks[index] = checkpoint_wrapper(block, preserve_rng_state=True)
    if config.compile:
        compile_in_place(model, runtime.device)
    if strategy == "fsdp":
        policy = MixedPrecisionPolicy(param_dtype=precision.dtype, reduce_dtype=torch.float32)
        for block in blocks if blocks is not None else []:
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        return model
    if runtime.world_size == 1:  # nothing to all-reduce: DDP's hooks and bucket copies would only cost time
        return model
    device_ids = [runtime.device.index] if runtime.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def compile_in_place(model: nn.Module, device: torch.device) -> None:
    """torch.compile each block of `blocks` (as torchtitan does: every block reuses one small graph, so
    compile time does not grow with depth), else the whole model.

    After activation checkpointing, so that the recomputation is compiled too; before DDP and FSDP,
    whose hooks stay outside the graphs. In place (Module.compile): parameter names stay as they are,
    so checkpoints move between compile on and off.
    """
    _require_compile_toolchain(device)
    blocks = repeated_layers(model)
    for module in blocks if blocks is not None else [model]:
        module.compile()


def _require_compile_toolchain(device: torch.device) -> None:
    """Inductor builds C++ kernels on CPU and Triton kernels on GPUs; without the tool the first step
    would fail deep inside a compile."""
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        found, tool = has_triton(), "Triton"
    else:
        found, tool = _has_cpp_compiler(), "a C++ compiler (g++, or $CXX)"
    if not found:
        message = f"torch.compile on {device.type} needs {tool}: add it to the image, or set compile: false"
        raise ProblemsError([Problem(("compile",), message)])


def _has_cpp_compiler() -> bool:
    from torch._inductor import cpp_builder, exc

    try:
        cpp_builder.get_cpp_compiler()  # the compiler inductor would use, found as inductor finds it
    except exc.InvalidCxxCompiler:
        return False
    return True


def autocast_enabled(model: nn.Module) -> bool:
    """FSDP2 casts parameters by its mixed-precision policy; autocast on top would cast twice."""
    return not isinstance(model, FSDPModule)


def gradient_sync(model: nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """Skip the gradient all-reduce on every micro-step but the last of an accumulation window."""
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    return model.no_sync() if isinstance(model, DistributedDataParallel) and not sync else contextlib.nullcontext()


def unwrapped(model: nn.Module) -> nn.Module:
    """The model itself, with its own methods: DDP wraps it (at world size 2 and more); FSDP2 and compile change
    it in place."""
    return model.module if isinstance(model, DistributedDataParallel) else model
