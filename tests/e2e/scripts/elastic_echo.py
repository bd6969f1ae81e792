"""Stands in for Kubeflow's elastic `echo` example (training-operator
`examples/pytorch/elastic/echo/echo.py`), which its PyTorchJob starts with
`python -m torch.distributed.run --rdzv_backend=c10d ./echo.py` and nothing else: the node count,
processes per node and rendezvous endpoint come from the pod's PET_* env. It prints the env the
elastic agent gave its worker, then forms a gloo group and says which rank of how many it is."""

from __future__ import annotations

import json
import os

import torch.distributed as dist

AGENT_ENV = (
    "LOCAL_RANK",
    "RANK",
    "GROUP_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
)

if __name__ == "__main__":
    print(f"agent env on pid {os.getpid()}: {json.dumps({name: os.environ[name] for name in AGENT_ENV})}", flush=True)
    dist.init_process_group(backend="gloo")
    dist.barrier()
    print(f"after init on pid {os.getpid()}: rank={dist.get_rank()}, world_size={dist.get_world_size()}", flush=True)
    dist.destroy_process_group()
