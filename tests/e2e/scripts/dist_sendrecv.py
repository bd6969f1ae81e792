"""Stands in for Kubeflow's smoke test `examples/pytorch/smoke-dist/dist_sendrecv.py` (training-operator),
launched as it is there: plain `python`, no torchrun. It logs the rendezvous env it finds
(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, read with os.environ.get), calls
`dist.init_process_group(backend)` with nothing else, so env:// reads them itself, and then rank 0
sends a tensor to every other rank, each of which squares it and sends it back."""

from __future__ import annotations

import logging
import os

import torch
import torch.distributed as dist


def exchange():
    rank, size = dist.get_rank(), dist.get_world_size()
    sent = torch.arange(1.0, 5.0).reshape(2, 2)  # known values, so that the test can check what arrived
    if rank == 0:
        for worker in range(1, size):
            dist.send(sent, dst=worker)
            squared = torch.zeros(2, 2)
            dist.recv(squared, src=worker)
            logging.info("result from worker %d: %s", worker, squared.flatten().tolist())
    else:
        received = torch.zeros(2, 2)
        dist.recv(received, src=0)
        logging.info("rank %d of %d received from rank 0: %s", rank, size, received.flatten().tolist())
        dist.send(received * received, dst=0)


def main(backend="gloo"):
    logging.info("torch %s", torch.__version__)
    for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"):
        logging.info("%s: %s", name, os.environ.get(name, "{}"))
    dist.init_process_group(backend)
    exchange()
    dist.destroy_process_group()


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    main()
