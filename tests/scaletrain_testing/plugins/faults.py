"""Models and data sets that fail on purpose, named by import path in a training config."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import torch
from torch.utils.data import Dataset

from scaletrain_trainer.models.model import GPT
from scaletrain_trainer.training.data import SyntheticSequences


class CrashingSynthetic(Dataset):
    """The synthetic data set, except that the process dies (like a lost node) on read number `crash_at_read`;
    only on `crash_rank` if given, and only in gang generation `crash_generation` if given (so that a
    restarted gang runs through). `seconds_per_read` paces it, as SlowSynthetic."""

    def __init__(
        self,
        crash_at_read: int,
        crash_rank: int | None = None,
        exit_code: int = 13,
        crash_generation: int | None = None,
        seconds_per_read: float = 0.0,
        **synthetic,
    ):
        self.inner = SlowSynthetic(seconds_per_read, **synthetic)
        self.crash_at_read, self.crash_rank, self.exit_code = crash_at_read, crash_rank, exit_code
        generation = os.environ.get("SCALETRAIN_GENERATION")
        self.armed = crash_generation is None or generation == str(crash_generation)
        self.reads = 0

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int):
        self.reads += 1
        rank = int(os.environ.get("RANK", "0"))
        if self.armed and self.reads == self.crash_at_read and self.crash_rank in (None, rank):
            os._exit(self.exit_code)
        return self.inner[index]


class SlowSynthetic(SyntheticSequences):
    """The synthetic data set, `seconds_per_read` slower per sample: paces a tiny run so that a test
    can act on it mid-training."""

    def __init__(self, seconds_per_read: float, **synthetic):
        super().__init__(**synthetic)
        self.seconds_per_read = seconds_per_read

    def __getitem__(self, index: int):
        time.sleep(self.seconds_per_read)
        return super().__getitem__(index)


class StoppingSynthetic(SlowSynthetic):
    """The slowed synthetic data set, except that on read number `stop_at_read` of rank `stop_rank` in gang
    generation `stop_generation` the process stops itself (SIGSTOP), as a wedged
    rank would: it never exits, never answers. It first writes the time to `record_dir`/stopped-at."""

    def __init__(self, stop_at_read: int, stop_rank: int, stop_generation: int, record_dir: str, **paced):
        super().__init__(**paced)
        self.stop_at_read, self.stop_rank, self.record = stop_at_read, stop_rank, Path(record_dir) / "stopped-at"
        self.armed = os.environ.get("SCALETRAIN_GENERATION") == str(stop_generation)
        self.reads = 0

    def __getitem__(self, index: int):
        self.reads += 1
        if self.armed and self.reads == self.stop_at_read and int(os.environ.get("RANK", "0")) == self.stop_rank:
            self.record.write_text(str(time.time()))
            os.kill(os.getpid(), signal.SIGSTOP)
        return super().__getitem__(index)


class InfGradientAtOrigin(torch.autograd.Function):
    """Identity forward; backward makes the gradient of element [0, 0] inf."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor) -> torch.Tensor:
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        grad[0, 0] = float("inf")
        return grad


class PoisonedGPT(GPT):
    """A GPT where one rank, during one step (or steps poison_step..poison_until), produces an inf
    gradient for a single weight element;
    records a checksum of this rank's parameters (its shard, under FSDP) as each step starts.

    Under FSDP the poisoned element (row 0 of the output projection) lands in rank 0's shard after
    the reduce-scatter, so the other rank's gradients stay finite: it must skip the step only
    because the scaler's found-inf is agreed across ranks."""

    def __init__(
        self, poison_step: int, poison_rank: int, micro_steps: int, record_dir: str, poison_until: int = 0, **gpt
    ):
        super().__init__(**gpt)
        self.poison_step, self.poison_rank, self.micro_steps = poison_step, poison_rank, micro_steps
        self.poison_until = max(poison_until, poison_step)  # the last step poisoned (1-based)
        self.record = Path(record_dir) / f"rank{os.environ.get('RANK', '0')}.jsonl"
        self.calls = 0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        step, micro_step = divmod(self.calls, self.micro_steps)  # 0-based step being computed
        self.calls += 1
        if micro_step == 0:
            local = [p.to_local() if hasattr(p, "to_local") else p for p in self.parameters()]
            checksum = float(sum(t.detach().double().sum() for t in local))
            with self.record.open("a") as file:
                file.write(json.dumps({"step": step, "checksum": checksum}) + "\n")
        weight = self.head.weight
        poisoned = self.poison_step <= step + 1 <= self.poison_until
        if poisoned and micro_step == 0 and int(os.environ.get("RANK", "0")) == self.poison_rank:
            weight = InfGradientAtOrigin.apply(weight)
        return torch.nn.functional.linear(self.features(tokens), weight)


class MaskedSynthetic(SyntheticSequences):
    """Synthetic sequences with a different number of ignored targets in every sample (like padding or
    prompt tokens excluded from the loss), so valid-token counts differ across micro-batches and ranks."""

    def __getitem__(self, index: int):
        inputs, targets = super().__getitem__(index)
        targets = targets.clone()
        targets[: index % self.length] = -100
        return inputs, targets


class SlowSavingGPT(GPT):
    """A GPT whose checkpoint saves take `save_seconds` longer: it writes `record_dir`/saving-<rank> when
    a save asks for its state, then sleeps, so that a test can signal the run mid-save. With
    `slow_generation`, only the saves of that gang generation are slow."""

    def __init__(self, save_seconds: float, record_dir: str, slow_generation: int | None = None, **gpt):
        super().__init__(**gpt)
        generation = os.environ.get("SCALETRAIN_GENERATION")
        self.save_seconds = save_seconds if slow_generation is None or generation == str(slow_generation) else 0
        self.record = Path(record_dir) / f"saving-{os.environ.get('RANK', '0')}"

    def state_dict(self, *args, **kwargs):
        self.record.write_text(str(time.time()))
        time.sleep(self.save_seconds)
        return super().state_dict(*args, **kwargs)


class DivergingGPT(GPT):
    """A GPT whose output, so its loss and every gradient, is NaN from step `nan_from_step` on (1-based), as a
    diverged model's is, while its weights stay finite. It counts its forward passes in a buffer, which a
    checkpoint saves, so that a resumed run turns NaN at the same step."""

    def __init__(self, nan_from_step: int, micro_steps: int, **gpt):
        super().__init__(**gpt)
        self.nan_from_step, self.micro_steps = nan_from_step, micro_steps
        self.register_buffer("forward_passes", torch.zeros((), dtype=torch.int64))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        step = int(self.forward_passes) // self.micro_steps + 1  # the step being computed
        self.forward_passes += 1
        logits = super().forward(tokens)
        return logits * float("nan") if step >= self.nan_from_step else logits


class TimedCrashes(Dataset):
    """The synthetic data set, timed for bench/recovery.py. Rank `crash_rank` dies (like a lost node) on read
    `crash_at_read` in each of the first `crashes` gang generations; each process of that rank appends to `timeline`
    (JSON lines) when its pod's workload (the launcher) started, when it crashes, and when it reads the first sample
    of its second step: its first step, a resumed one after a restart, is done then."""

    def __init__(
        self, timeline: str, crash_at_read: int, reads_per_step: int, crashes: int, crash_rank: int = 1, **synthetic
    ):
        self.inner = SlowSynthetic(0.0, **synthetic)
        self.timeline, self.crash_at_read, self.reads_per_step = Path(timeline), crash_at_read, reads_per_step
        self.generation = int(os.environ.get("SCALETRAIN_GENERATION", "0"))
        self.timed = int(os.environ.get("RANK", "0")) == crash_rank
        self.armed = self.timed and self.generation < crashes
        self.reads = 0
        if self.timed:
            self._note("started", _launcher_started())

    def _note(self, event: str, at: float) -> None:
        self.timeline.parent.mkdir(parents=True, exist_ok=True)
        with self.timeline.open("a") as timeline:
            timeline.write(json.dumps({"generation": self.generation, "event": event, "at": at}) + "\n")

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int):
        self.reads += 1
        if self.armed and self.reads == self.crash_at_read:
            self._note("crashed", time.time())
            os._exit(13)
        if self.timed and self.reads == self.reads_per_step + 1:
            self._note("first step done", time.time())
        return self.inner[index]


def _launcher_started() -> float:
    """When this worker's launcher (launch.py, torchrun's parent: the pod's workload) started, in time.time()'s terms:
    the kernel's start time, in clock ticks after boot, against the time since boot (both to 10 ms)."""
    launcher = _parent(_parent(os.getpid()))
    ticks = int(_stat(launcher)[19])
    since_boot = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - (since_boot - ticks / os.sysconf("SC_CLK_TCK"))


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _parent(pid: int) -> int:
    return int(_stat(pid)[1])
