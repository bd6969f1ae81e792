"""A third-party script whose rank 1 raises once the gang has met, its entry point decorated with
torchelastic's @record as torchrun's documentation advises: the exception and its traceback go to the
worker's TORCHELASTIC_ERROR_FILE, which torchrun copies into its own. Rank 0 waits, bounded, to be
stopped with the gang."""

from __future__ import annotations

import time
from datetime import timedelta

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

WAIT_S = 120  # longer than the test waits: rank 0 ends when the gang policy stops the gang


@record
def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    if dist.get_rank() == 1:
        raise ValueError("shard 7 of the training data is corrupt (rank 1 raises this on purpose)")
    time.sleep(WAIT_S)


if __name__ == "__main__":
    main()
