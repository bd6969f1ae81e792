"""A third-party script that fails once: in the first gang generation, once the gang has met, rank 1 exits 3 while
rank 0 waits (bounded) to be stopped with the gang; in the next generation both meet again and finish. The gang
generation comes from SCALETRAIN_GENERATION, which the operator's in-place agent sets for the workload."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch.distributed as dist

WAIT_S = 300  # longer than a restart takes: rank 0 ends when the gang restarts


def main() -> int:
    generation = os.environ["SCALETRAIN_GENERATION"]
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    if generation == "0":
        if rank == 1:
            return 3
        time.sleep(WAIT_S)
        return 1
    dist.barrier()
    print(f"rank {rank} of {dist.get_world_size()}: done in generation {generation}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
