"""Process-group set-up: under torchrun (env://) or as a single standalone process.

Every collective gets a timeout, so a dead or stuck peer surfaces as an error and a non-zero exit
rather than a silent hang.
"""

from __future__ import annotations

import gc
import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist

from ..contract import wire

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Runtime:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(timeout_seconds: int) -> Runtime:
    """Join the process group torchrun describes, or form a group of one when run standalone."""
    use_cuda = torch.cuda.is_available()
    backend = os.environ.get(wire.BACKEND_ENV) or ("nccl" if use_cuda else "gloo")
    timeout = timedelta(seconds=timeout_seconds)
    if "RANK" in os.environ:  # set by torchrun for each worker
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        device = _device(backend, local_rank)
        dist.init_process_group(backend, timeout=timeout, device_id=device if device.type == "cuda" else None)
    else:
        rank, world_size, local_rank = 0, 1, 0
        device = _device(backend, local_rank)
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    log.info("rank %d/%d on %s, backend %s", rank, world_size, device, backend)
    return Runtime(rank, local_rank, world_size, device, backend)


def _device(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def seed_everything(seed: int) -> None:
    """The same seed on every rank: identical initial weights and identical random streams."""
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def agree(value: T, group: dist.ProcessGroup | None = None) -> T:
    """Rank 0's value on every rank (of `group`, else of the default group). Choices made from local facts
    (memory, device model) could differ between nodes, and ranks that choose differently deadlock in their
    first collective."""
    holder = [value]
    dist.broadcast_object_list(holder, src=0, group=group)
    return holder[0]


def all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    """The sum of `value` over the ranks (a new tensor, or `value` itself alone: no collective to launch)."""
    if dist.get_world_size() == 1:
        return value
    reduced = value.clone()
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    return reduced


class HostMax:
    """The largest of a small integer over the ranks, reduced on the host: under gloo in the default group,
    under NCCL in a gloo group of its own, so that reading it costs no device sync (the CPU keeps running
    ahead of the GPU). Constructing it is a collective: every rank at the same point of the set-up."""

    def __init__(self, backend: str, timeout_seconds: int):
        own_group = backend != "gloo"
        self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_seconds)) if own_group else None
        self.value = torch.zeros((), dtype=torch.int64)

    def __call__(self, value: int) -> int:
        if dist.get_world_size() == 1:
            return value
        self.value.fill_(value)
        dist.all_reduce(self.value, op=dist.ReduceOp.MAX, group=self.group)
        return int(self.value)


def shutdown() -> None:
    """Leave the process group cleanly after a successful run.

    FSDP2 modules hold collective state in reference cycles; destroying the group while they are
    alive, or while a peer still finishes its last collective, can abort the process at exit.
    """
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
