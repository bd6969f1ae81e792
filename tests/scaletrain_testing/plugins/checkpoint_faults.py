"""A data set that dies in the middle of a checkpoint write, named by import path in a training config."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

from torch.distributed.checkpoint import FileSystemWriter

from scaletrain_testing.waiting import WaitTimeout, wait_until
from scaletrain_trainer.training.data import SyntheticSequences

POLL_INTERVAL_S = 0.02


class KilledMidCheckpoint(SyntheticSequences):
    """The synthetic data set, in a process whose checkpoint writes are slow: each rank's DCP write lingers
    `linger_seconds` after its files are written (a slow volume), before the checkpoint's .metadata, manifest
    and rename. On read number `kill_at_read`, every rank waits until `partial` holds a written shard (at
    most `linger_seconds`), then dies of SIGKILL, as a lost node's processes do; rank 0 first records what
    the checkpoint directory held to `record_file`."""

    def __init__(self, kill_at_read: int, partial: str, record_file: str, linger_seconds: float, **synthetic):
        super().__init__(**synthetic)
        self.kill_at_read, self.partial, self.record_file = kill_at_read, Path(partial), Path(record_file)
        self.linger_seconds = linger_seconds
        self.reads = 0
        write_data = FileSystemWriter.write_data

        def lingering_write_data(writer, plan, planner):
            written = write_data(writer, plan, planner)
            time.sleep(linger_seconds)
            return written

        FileSystemWriter.write_data = lingering_write_data

    def __getitem__(self, index: int):
        self.reads += 1
        if self.reads == self.kill_at_read:
            self._kill_once_a_shard_is_written()
        return super().__getitem__(index)

    def _kill_once_a_shard_is_written(self) -> None:
        with contextlib.suppress(WaitTimeout):  # no shard yet: it dies all the same
            wait_until(
                lambda: list(self.partial.glob("*.distcp")),
                self.linger_seconds,
                f"a shard in {self.partial}",
                interval_s=POLL_INTERVAL_S,
            )
        if os.environ.get("RANK", "0") == "0":
            directory = self.partial.parent
            held = {entry.name: sorted(p.name for p in entry.iterdir()) for entry in directory.iterdir()}
            self.record_file.write_text(json.dumps(held))
        os.kill(os.getpid(), signal.SIGKILL)
