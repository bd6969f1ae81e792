"""Data sets and the order in which ranks see them.

A data set is indexable and yields (inputs, targets) tensor pairs of fixed shape; targets of -100
are ignored by the loss. A sample that packs several sequences into one context yields their
positions too, (inputs, targets, positions), each token's position within its own sequence: the
model gets them as `positions`, and a Hugging Face model keeps the sequences from attending to each
other by them. `GlobalBatches` decides which samples make up each optimizer step. It
depends only on the seed, the step and globalBatchSize, never on the world size: the global batch
of step s is the same slice of the same shuffled order on 1 process or 64, and only the split of
that slice among ranks changes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from fsspec import AbstractFileSystem
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..contract.config import INSTRUCTIONS_SOURCE, DataConfig, ModelConfig
from ..contract.plugins import build_from
from ..contract.storage_urls import is_object_url
from ..contract.validation import Problem, ProblemsError
from ..storage import objects
from .losses import IGNORE_INDEX


class MicroBatch(NamedTuple):
    """Samples stacked: token ids in, the targets the loss compares the logits with, and, for packed samples,
    each token's position within its own sequence."""

    inputs: torch.Tensor
    targets: torch.Tensor
    positions: torch.Tensor | None = None

    def logits(self, model: nn.Module) -> torch.Tensor:
        if self.positions is None:
            return model(self.inputs)
        return model(self.inputs, positions=self.positions)

    def to(self, device: torch.device) -> MicroBatch:
        """Asynchronous from the loader's pinned memory on GPUs; the same tensors on CPU."""
        return MicroBatch(*(None if t is None else t.to(device, non_blocking=True) for t in self))


class SyntheticSequences(Dataset):
    """Arithmetic progressions modulo the vocabulary: token[i+1] = token[i] + stride. The stride must be
    read off the context, so the loss falls steadily as the model learns to attend."""

    def __init__(self, samples: int, context_length: int, vocab_size: int, seed: int):
        self.samples, self.length, self.vocab, self.seed = samples, context_length, vocab_size, seed

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        start = int(torch.randint(self.vocab, (1,), generator=generator))
        stride = 1 + int(torch.randint(min(7, self.vocab - 1), (1,), generator=generator))
        tokens = (start + stride * torch.arange(self.length + 1)) % self.vocab
        return tokens[:-1], tokens[1:]


class TokenWindows(Dataset):
    """Non-overlapping windows of context_length + 1 tokens from a flat token array."""

    def __init__(self, tokens: np.ndarray, context_length: int):
        self.tokens, self.length = tokens, context_length

    def __len__(self) -> int:
        return max(len(self.tokens) - 1, 0) // self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.length
        window = torch.from_numpy(self.tokens[start : start + self.length + 1].astype(np.int64))
        return window[:-1], window[1:]


def build_dataset(data: DataConfig, model: ModelConfig, seed: int) -> Dataset:
    if data.source == "synthetic":
        return SyntheticSequences(data.synthetic_samples, model.context_length, model.vocab_size, seed)
    if data.source == INSTRUCTIONS_SOURCE:
        from .instructions import instruction_samples  # the model's tokenizer: transformers, the hf extra's

        return instruction_samples(data, model)
    if data.source in ("text", "tokens"):
        path = data.path or ""
        tokens = RangedTokens(path, token_dtype(data)) if is_object_url(path) else read_tokens(Path(path), data)
        dataset = TokenWindows(tokens, model.context_length)
        if len(dataset) == 0:
            raise ProblemsError([Problem(("data", "path"), f"{path} has fewer than contextLength + 1 tokens")])
        if isinstance(tokens, np.ndarray):  # a scan would download a file on object storage whole
            check_token_ids(tokens, model.vocab_size, path)
        return dataset
    return build_from(data.source, ("data", "source"), data.options, Dataset, "a torch.utils.data.Dataset")


def token_dtype(data: DataConfig) -> np.dtype:
    """Bytes for text (byte-level tokens), else the tokens file's element type."""
    return np.dtype(np.uint8 if data.source == "text" else data.token_dtype)


def read_tokens(path: Path, data: DataConfig) -> np.ndarray:
    """A text file's bytes (byte-level tokens), or a tokens file as a memmap of its dtype."""
    if not path.is_file():
        raise ProblemsError([Problem(("data", "path"), f"{path} is not a readable file")])
    if data.source == "text":
        return np.frombuffer(path.read_bytes(), dtype=np.uint8)
    check_token_file_size(path.stat().st_size, token_dtype(data), str(path))
    return np.memmap(path, dtype=data.token_dtype, mode="r")


def check_token_file_size(size: int, dtype: np.dtype, path: str) -> None:
    if size % dtype.itemsize:
        message = f"{path} holds {size} bytes, not a whole number of {dtype.name} tokens ({dtype.itemsize} bytes each)"
        raise ProblemsError([Problem(("data", "tokenDtype"), message)])
    if size == 0:
        raise ProblemsError([Problem(("data", "path"), f"{path} is empty")])


class RangedTokens:
    """A token (or text) file on object storage, as much of an array as TokenWindows uses: its length, and
    slices read as one ranged request each, so that no pod downloads the file whole. Picklable for the data
    workers, which open their own connection."""

    def __init__(self, url: str, dtype: np.dtype):
        self.url, self.dtype = url, dtype
        try:
            fs, path = self.filesystem()
            size = fs.size(path)
        except FileNotFoundError:
            raise ProblemsError([Problem(("data", "path"), f"{objects.where(url)}: no such object")]) from None
        except Exception as error:
            if (what := objects.store_failure(error)) is None:
                raise
            raise ProblemsError([Problem(("data", "path"), f"cannot read {objects.where(url)}: {what}")]) from None
        check_token_file_size(size, dtype, url)
        self.length = size // dtype.itemsize

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, window: slice) -> np.ndarray:
        start, stop, _ = window.indices(self.length)
        fs, path = self.filesystem()
        data = fs.cat_file(path, start=start * self.dtype.itemsize, end=stop * self.dtype.itemsize)
        return np.frombuffer(data, dtype=self.dtype)

    def filesystem(self) -> tuple[AbstractFileSystem, str]:
        """The file system and path of the file, in this process (fsspec keeps one client per process)."""
        return objects.filesystem(self.url)


TOKEN_SCAN_CHUNK = 1 << 24  # tokens per chunk: the scan's memory stays bounded on a large file


def check_token_ids(tokens: np.ndarray, vocab_size: int, path: str) -> None:
    """Every token id below vocabSize: otherwise the embedding lookup fails, possibly steps into training."""
    chunks = (tokens[start : start + TOKEN_SCAN_CHUNK] for start in range(0, len(tokens), TOKEN_SCAN_CHUNK))
    largest = max((int(chunk.max()) for chunk in chunks), default=0)
    if largest >= vocab_size:
        message = f"{path} holds token id {largest}, but model.vocabSize is {vocab_size}: ids must be below it"
        raise ProblemsError([Problem(("model", "vocabSize"), message)])


def check_holds_a_global_batch(dataset: Dataset, global_batch_size: int, data: DataConfig) -> None:
    """Fewer samples than one global batch would train on the same few samples every step."""
    if len(dataset) < global_batch_size:
        message = f"the data set holds {len(dataset)} samples, fewer than one global batch ({global_batch_size})"
        raise ProblemsError([Problem(("data", "path" if data.path else "source"), message)])


@dataclass(frozen=True)
class GlobalBatches:
    """Which samples this rank trains on at each optimizer step.

    Epochs are shuffled by seed + epoch (as DistributedSampler does). Each step takes the next
    globalBatchSize samples of the epoch; the last step of an epoch takes the remainder (a short
    window). Rank r takes every world_size-th sample of the step's batch, in micro-batches of
    microBatchSize; positions past the end of a short window are padding (None), which the loss
    ignores. Every rank runs the same number of micro-steps, so the collectives line up.
    """

    dataset_size: int
    global_batch_size: int
    micro_batch_size: int
    world_size: int
    rank: int
    seed: int

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.dataset_size / self.global_batch_size)

    def position(self, step: int) -> tuple[int, int]:
        """(epoch, index of the first sample within the epoch's order) at the start of `step`."""
        epoch, step_in_epoch = divmod(step, self.steps_per_epoch)
        return epoch, step_in_epoch * self.global_batch_size

    def samples_in(self, step: int) -> int:
        """len(global_batch(step)), without the epoch's shuffled order (which only the data workers need)."""
        _, offset = self.position(step)
        return min(self.global_batch_size, self.dataset_size - offset)

    def global_batch(self, step: int) -> list[int]:
        epoch, offset = self.position(step)
        order = _epoch_order(self.dataset_size, self.seed, epoch)
        return order[offset : offset + self.global_batch_size].tolist()

    def micro_batches(self, step: int) -> list[list[int | None]]:
        batch = self.global_batch(step)
        local = batch[self.rank :: self.world_size]
        per_rank = math.ceil(len(batch) / self.world_size)
        count = math.ceil(per_rank / self.micro_batch_size)
        padded = local + [None] * (count * self.micro_batch_size - len(local))
        return [padded[i : i + self.micro_batch_size] for i in range(0, len(padded), self.micro_batch_size)]


@functools.lru_cache(maxsize=1)
def _epoch_order(size: int, seed: int, epoch: int) -> torch.Tensor:
    """The epoch's shuffled order, computed once per epoch (each step needs a slice of it); a compact
    tensor, since a token data set can hold billions of samples."""
    dtype = torch.int32 if size < 2**31 else torch.int64
    return torch.randperm(size, generator=torch.Generator().manual_seed(seed + epoch), dtype=dtype)


def collate(dataset: Dataset, indices: Sequence[int | None]) -> MicroBatch:
    """Stack samples into a micro-batch; padding positions copy a real sample and ignore its targets."""
    filler = next((i for i in indices if i is not None), 0)
    samples = []
    for index in indices:
        inputs, targets, *positions = dataset[filler if index is None else index]
        samples.append((inputs, targets if index is not None else torch.full_like(targets, IGNORE_INDEX), *positions))
    return MicroBatch(*(torch.stack(column) for column in zip(*samples, strict=True)))


class StepMicroBatches(Dataset):
    """Item `step`: this rank's micro-batches of that step, collated on the host. The samples come from
    GlobalBatches alone, so a loader over it keeps the order, whoever loads the step."""

    def __init__(self, dataset: Dataset, batches: GlobalBatches):
        self.dataset, self.batches = dataset, batches

    def __getitem__(self, step: int) -> list[MicroBatch]:
        return [collate(self.dataset, indices) for indices in self.batches.micro_batches(step)]


AUTO_GPU_WORKERS = 2


def resolve_workers(workers: int | None, device: torch.device) -> int:
    """Unset: 2 on GPUs, whose steps leave the host's cores idle; 0 on CPU, where the ranks use them."""
    if workers is not None:
        return workers
    return AUTO_GPU_WORKERS if device.type == "cuda" else 0


def step_loader(
    dataset: Dataset, batches: GlobalBatches, steps: range, data: DataConfig, seed: int, device: torch.device
) -> DataLoader:
    """The micro-batches of each step in `steps`, in order, loaded ahead by `data.workers` processes.

    One pass over every remaining step, so the workers live for the whole run (across epochs too), as
    persistent workers would. Its own generator seeds the workers: drawn from the global one, the seed
    would shift the training's random stream (dropout), which resuming restores exactly.
    """
    workers = resolve_workers(data.workers, device)
    return DataLoader(
        StepMicroBatches(dataset, batches),
        batch_size=None,  # an item is already a step's micro-batches
        sampler=steps,
        num_workers=workers,
        prefetch_factor=data.prefetch_factor if workers else None,
        pin_memory=device.type == "cuda",  # from pinned memory the copy to the GPU overlaps with compute
        generator=torch.Generator().manual_seed(seed),
    )


def to_device(micro_batches: list[MicroBatch], device: torch.device) -> list[MicroBatch]:
    return [batch.to(device) for batch in micro_batches]
