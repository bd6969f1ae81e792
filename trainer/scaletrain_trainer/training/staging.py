"""The host copy of an asynchronous checkpoint: a state dict's tensors copied into host buffers allocated at
the first save and reused by every save after it (pinned on GPUs, so that the copies from the device are
fast and need no staging buffer of the driver's), before a background thread writes the copy.

Our own rather than DCP's stager: it needs only public APIs (DTensor.to_local and from_local,
DeviceMesh.from_group), so no torch version's staging internals can break it. torch 2.11's DefaultStager
failed at the second save on GPUs, with pinned memory (KeyError: <class 'type'> in its deep copy).

A sharded tensor (FSDP2's DTensors) keeps its placements and global shape, on a CPU twin of its device mesh
over the checkpoint's own gloo group, so that DCP writes the same sharded checkpoint as from the device (and
resumes it at any world size). `stage` returns only once every copy is complete: training may change the
state as soon as it returns.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

Path = tuple[Any, ...]  # the keys and indices from the state dict's root to a value


class HostCopy:
    def __init__(self, group: dist.ProcessGroup, pinned: bool):
        """`group`: a gloo group of every rank, which the CPU meshes of sharded tensors are made over.
        `pinned`: page-locked buffers and non-blocking copies, for state on a GPU."""
        self.group, self.pinned = group, pinned
        self._buffers: dict[Path, torch.Tensor] = {}
        self._cpu_mesh: DeviceMesh | None = None

    @torch.no_grad()
    def stage(self, state: dict[str, Any]) -> dict[str, Any]:
        """`state`, its tensors copied into the host buffers: nothing of it is shared with `state`."""
        staged = self._copy(state, ())
        if self.pinned:
            torch.cuda.current_stream().synchronize()  # the non-blocking copies are complete
        return staged

    def _copy(self, value: Any, path: Path) -> Any:
        if isinstance(value, DTensor):
            local = self._into_buffer(value.to_local(), path)
            mesh = self._mesh_like(value.device_mesh)
            return DTensor.from_local(
                local, mesh, value.placements, run_check=False, shape=value.shape, stride=value.stride()
            )
        if isinstance(value, torch.Tensor):
            return self._into_buffer(value, path)
        if isinstance(value, dict):
            return {key: self._copy(item, (*path, key)) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self._copy(item, (*path, index)) for index, item in enumerate(value))
        return copy.deepcopy(value)  # numbers, strings, None: the scheduler's and the scaler's state

    def _into_buffer(self, tensor: torch.Tensor, path: Path) -> torch.Tensor:
        buffer = self._buffers.get(path)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            pinned = self.pinned and tensor.device.type == "cuda"
            buffer = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=pinned)
            self._buffers[path] = buffer
        buffer.copy_(tensor.detach(), non_blocking=self.pinned)
        return buffer

    def _mesh_like(self, mesh: DeviceMesh) -> DeviceMesh:
        """A CPU mesh of the same ranks in the same order (FSDP2's mesh is one-dimensional, over every rank)."""
        if mesh.ndim != 1 or mesh.mesh.tolist() != dist.get_process_group_ranks(self.group):
            raise ValueError(f"an asynchronous checkpoint of a {mesh.ndim}-D device mesh {mesh} is not supported")
        if self._cpu_mesh is None:
            self._cpu_mesh = DeviceMesh.from_group(self.group, "cpu")
        return self._cpu_mesh
