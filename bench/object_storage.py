"""Checkpoints on object storage against the local disk: save and load throughput of a ~1 GB checkpoint, the time a
save blocks training (synchronous vs checkpoint.async), and the requests a save makes.

The store is SeaweedFS on loopback (the tests' server, tests/scaletrain_testing/seaweedfs.py), the disk this
machine's temporary directory. One process, world size 1: a model of --megabytes of fp32 parameters in 64 MB
tensors, SGD without momentum (so the checkpoint is the parameters), saved through CheckpointManager as the trainer
saves (DCP's writer, the read-back of every object for the manifest, the commit) and loaded as a resume loads it
(the manifest's check, then DCP's reader). Timed per variant, interleaved for --rounds rounds, medians reported:
- save: the synchronous save's wall time (write, read back, commit), as MB/s of the checkpoint;
- blocked: what the loop waits for with checkpoint.async (the copy to host memory), against the synchronous save;
- load: restore_latest's wall time (verify, then read), as MB/s;
- requests per save to the store, by operation (botocore's events on the client the trainer uses).

    python bench/object_storage.py [--megabytes 1024] [--rounds 3]   # writes bench/results/object_storage.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
TENSOR_MB = 64
STORES = ("disk", "s3")


def checkpoint_state(megabytes: int):
    import torch
    from torch import nn

    from scaletrain_testing.tiny_training import train_state

    model = nn.Module()
    model.weights = nn.ParameterList(
        nn.Parameter(torch.randn(TENSOR_MB * 2**20 // 4)) for _ in range(max(1, megabytes // TENSOR_MB))
    )
    return model, train_state(model)


def requests_counter(manager) -> collections.Counter:
    """Requests the manager's store client sends, by operation (the writer and reader share that client)."""
    counts: collections.Counter = collections.Counter()
    fs = manager.store.fs
    fs.connect()
    fs.s3.meta.events.register("before-send.s3", lambda event_name, **_: counts.update([event_name.split(".")[-1]]))
    return counts


def one_round(directories: dict[str, str], model, state, step: int) -> dict[str, dict[str, Any]]:
    from scaletrain_testing.tiny_training import RUNTIME, train_state
    from scaletrain_trainer.contract.config import CheckpointConfig
    from scaletrain_trainer.training.checkpoint import CheckpointManager

    measured: dict[str, dict[str, Any]] = {}
    for store, directory in directories.items():
        synchronous = CheckpointManager(CheckpointConfig(dir=directory, keep=1), RUNTIME, "{}")
        counts = requests_counter(synchronous) if store == "s3" else collections.Counter()
        state.step = step
        started = time.perf_counter()
        synchronous.save(state)
        save_s = time.perf_counter() - started
        requests = dict(counts)

        asynchronous = CheckpointManager(CheckpointConfig(dir=directory, keep=1, asynchronous=True), RUNTIME, "{}")
        state.step = step + 1
        started = time.perf_counter()
        asynchronous.save(state)
        blocked_s = time.perf_counter() - started
        asynchronous.close()  # written, read back and committed before the load below

        started = time.perf_counter()
        asynchronous.restore_latest(train_state(model))
        load_s = time.perf_counter() - started
        measured[store] = {"saveSeconds": save_s, "blockedSeconds": blocked_s, "loadSeconds": load_s}
        measured[store] |= {"requests": requests} if requests else {}
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()

    import torch.distributed as dist

    from scaletrain_testing.seaweedfs import SeaweedS3
    from scaletrain_testing.trainer_runs import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    model, state = checkpoint_state(args.megabytes)
    megabytes = sum(p.numel() * p.element_size() for p in model.parameters()) / 1e6
    with tempfile.TemporaryDirectory() as scratch, SeaweedS3(Path(scratch) / "seaweedfs") as server:
        server.make_bucket("bench")
        os.environ.update(server.env())
        directories = {"disk": str(Path(scratch) / "checkpoints"), "s3": "s3://bench/checkpoints"}
        rounds = [one_round(directories, model, state, 10 * (index + 1)) for index in range(args.rounds)]
    dist.destroy_process_group()

    def median(store: str, field: str) -> float:
        return statistics.median(each[store][field] for each in rounds)

    report: dict[str, Any] = {"megabytes": round(megabytes), "rounds": args.rounds, "medians": {}}
    for store in STORES:
        save_s, blocked_s, load_s = (median(store, field) for field in ("saveSeconds", "blockedSeconds", "loadSeconds"))
        report["medians"][store] = {
            "saveSeconds": round(save_s, 2),
            "saveMBps": round(megabytes / save_s, 1),
            "asyncBlockedSeconds": round(blocked_s, 3),
            "loadSeconds": round(load_s, 2),
            "loadMBps": round(megabytes / load_s, 1),
        }
    report["medians"]["s3"]["requestsPerSave"] = rounds[-1]["s3"]["requests"]
    report["s3VsDisk"] = {
        "save": round(report["medians"]["s3"]["saveSeconds"] / report["medians"]["disk"]["saveSeconds"], 2),
        "load": round(report["medians"]["s3"]["loadSeconds"] / report["medians"]["disk"]["loadSeconds"], 2),
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "object_storage.json").write_text(json.dumps(report, indent=2))
    print(f"checkpoint of {megabytes:.0f} MB, {args.rounds} rounds, medians")
    print(f"{'store':<6} {'save s':>8} {'save MB/s':>10} {'async blocked s':>16} {'load s':>8} {'load MB/s':>10}")
    for store in STORES:
        m = report["medians"][store]
        print(
            f"{store:<6} {m['saveSeconds']:>8} {m['saveMBps']:>10} {m['asyncBlockedSeconds']:>16} "
            f"{m['loadSeconds']:>8} {m['loadMBps']:>10}"
        )
    print(f"s3 / disk: save {report['s3VsDisk']['save']}x, load {report['s3VsDisk']['load']}x")
    print("requests per save to S3:", json.dumps(report["medians"]["s3"]["requestsPerSave"], sort_keys=True))


if __name__ == "__main__":
    main()
