"""A third-party script, as users bring them: a gloo all-reduce over the job's nodes, then a line
that says what it saw. Its rendezvous comes from the command line (`--master`, `--port`, with the
node rank and world size from the Job's env), or from torchrun (`env://`)."""

from __future__ import annotations

import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--master", help="the master's address; without it, torchrun's env")
parser.add_argument("--port", type=int, default=29500)
args = parser.parse_args()
timeout = timedelta(seconds=60)
if args.master:
    rank, world_size = int(os.environ["NODE_RANK"]), int(os.environ["WORLD_SIZE"])
    init = f"tcp://{args.master}:{args.port}"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size, timeout=timeout)
else:
    dist.init_process_group("gloo", timeout=timeout)
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
print(
    f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {int(total.item())}, "
    f"master {args.master or os.environ['MASTER_ADDR']}, cwd {os.getcwd()}, "
    f"caller's env {os.environ.get('SCALETRAIN_TEST_SENTINEL', 'absent')}",
    flush=True,
)
dist.destroy_process_group()
