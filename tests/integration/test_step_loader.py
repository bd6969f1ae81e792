"""The step loader (training/data.py) with data workers, which are processes of their own: every step's
micro-batches in order, whoever loads them."""

from __future__ import annotations

import pytest

from scaletrain_testing.tiny_training import CPU
from scaletrain_trainer.contract.config import DataConfig, ModelConfig
from scaletrain_trainer.training.data import GlobalBatches, MicroBatch, build_dataset, collate, step_loader


@pytest.mark.parametrize("workers", [0, 2])
def test_the_step_loader_yields_every_steps_micro_batches_in_order(workers):
    """From a resumed step, across a short window (step 12) and an epoch boundary, with or without workers."""
    dataset = build_dataset(DataConfig(synthetic_samples=200), ModelConfig(context_length=8, vocab_size=32), seed=0)
    batches = GlobalBatches(len(dataset), 16, 4, world_size=2, rank=1, seed=0)
    steps = range(10, 16)
    loaded = list(step_loader(dataset, batches, steps, DataConfig(workers=workers), seed=0, device=CPU))
    expected = [[collate(dataset, ids) for ids in batches.micro_batches(step)] for step in steps]
    assert [len(micro) for micro in loaded] == [2, 2, 1, 2, 2, 2]
    assert _as_lists(loaded) == _as_lists(expected)
    assert all(isinstance(batch, MicroBatch) for micro in loaded for batch in micro)
    assert batches.samples_in(12) == len(batches.global_batch(12)) == 8


def _as_lists(steps):
    return [[[None if t is None else t.tolist() for t in batch] for batch in micro] for micro in steps]
