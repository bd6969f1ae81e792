"""The data (training/data.py): global batches that are the same at every world size, epochs reshuffled,
padding that ignores its targets, the step loader's order and random stream, and the data files and
sources that are config errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scaletrain_testing.tiny_training import CPU
from scaletrain_trainer.contract.config import DataConfig, ModelConfig
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.training.data import (
    GlobalBatches,
    build_dataset,
    check_holds_a_global_batch,
    collate,
    resolve_workers,
    step_loader,
)
from scaletrain_trainer.training.losses import IGNORE_INDEX

# --- data order -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dataset_size", [200, 64])
def test_global_batches_are_the_same_at_every_world_size(dataset_size):
    for step in range(30):  # two epochs, each ending in a short window (200 samples) or not (64)
        reference = None
        for world in (1, 2, 4):
            per_rank = [
                GlobalBatches(dataset_size, 16, 2, world, rank, seed=3).micro_batches(step) for rank in range(world)
            ]
            assert len({len(micro) for micro in per_rank}) == 1  # same number of micro-steps on every rank
            samples = sorted(i for micro in per_rank for batch in micro for i in batch if i is not None)
            reference = reference or samples
            assert samples == reference
            assert samples == sorted(GlobalBatches(dataset_size, 16, 2, world, 0, seed=3).global_batch(step))


def test_epochs_are_reshuffled_and_the_last_window_is_short():
    batches = GlobalBatches(200, 16, 4, world_size=2, rank=1, seed=0)
    assert batches.steps_per_epoch == 13
    assert len(batches.global_batch(12)) == 8  # 200 - 12 × 16
    assert batches.micro_batches(12) == [batches.global_batch(12)[1::2]]  # one micro-step of 4, not two
    assert batches.position(13) == (1, 0)
    first_epoch = [i for s in range(13) for i in batches.global_batch(s)]
    second_epoch = [i for s in range(13, 26) for i in batches.global_batch(s)]
    assert sorted(first_epoch) == sorted(second_epoch) == list(range(200)) and first_epoch != second_epoch


def test_padding_positions_ignore_their_targets():
    dataset = build_dataset(DataConfig(), ModelConfig(context_length=8, vocab_size=32), seed=0)
    inputs, targets, positions = collate(dataset, [5, None])
    assert positions is None
    assert torch.equal(inputs[0], inputs[1])
    assert (targets[1] == IGNORE_INDEX).all() and (targets[0] != IGNORE_INDEX).all()


def test_data_workers_unset_are_two_on_gpus_and_none_on_cpu():
    assert resolve_workers(None, torch.device("cuda", 0)) == 2
    assert resolve_workers(None, CPU) == 0
    assert resolve_workers(3, CPU) == 3 and resolve_workers(0, torch.device("cuda", 0)) == 0


def test_the_step_loader_leaves_the_training_random_stream_alone():
    """Resuming restores the global RNG; a loader drawing from it would shift dropout after a resume."""
    dataset = build_dataset(DataConfig(), ModelConfig(context_length=8, vocab_size=32), seed=0)
    batches = GlobalBatches(len(dataset), 4, 2, world_size=1, rank=0, seed=0)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    next(iter(step_loader(dataset, batches, range(3), DataConfig(), seed=0, device=CPU)))
    assert torch.equal(torch.rand(3), expected)


# --- data sources ---------------------------------------------------------------------------------


def test_text_and_token_files(tmp_path):
    text = tmp_path / "input.txt"
    text.write_text("hello world, " * 20)
    dataset = build_dataset(DataConfig(source="text", path=str(text)), ModelConfig(context_length=8), seed=0)
    assert len(dataset) == (260 - 1) // 8
    x, y = dataset[1]
    assert bytes(x.tolist()) == text.read_bytes()[8:16] and torch.equal(x[1:], y[:-1])

    tokens = tmp_path / "train.bin"
    np.arange(1000, dtype=np.uint32).tofile(tokens)
    data = DataConfig(source="tokens", path=str(tokens), token_dtype="uint32")
    x, y = build_dataset(data, ModelConfig(context_length=10, vocab_size=1000), seed=0)[3]
    assert x.tolist() == list(range(30, 40)) and y.tolist() == list(range(31, 41))


def test_data_that_cannot_be_trained_on_is_a_config_error_naming_the_field(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ProblemsError, match=r"data\.path: .*empty\.txt has fewer than contextLength \+ 1 tokens"):
        build_dataset(DataConfig(source="text", path=str(empty)), ModelConfig(), seed=0)
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x00\x02")
    with pytest.raises(
        ProblemsError, match=r"data\.tokenDtype: .*odd\.bin holds 3 bytes, not a whole number of uint16"
    ):
        build_dataset(DataConfig(source="tokens", path=str(odd)), ModelConfig(), seed=0)
    large = tmp_path / "large-ids.bin"
    np.array([1, 2, 300] * 100, dtype=np.uint16).tofile(large)
    with pytest.raises(ProblemsError, match=r"model\.vocabSize: .* holds token id 300, but model\.vocabSize is 256"):
        build_dataset(DataConfig(source="tokens", path=str(large)), ModelConfig(context_length=8), seed=0)
    small = tmp_path / "six-samples.bin"
    np.arange(6 * 8 + 1, dtype=np.uint16).tofile(small)
    data = DataConfig(source="tokens", path=str(small))
    dataset = build_dataset(data, ModelConfig(context_length=8), seed=0)
    with pytest.raises(
        ProblemsError, match=r"data\.path: the data set holds 6 samples, fewer than one global batch \(16\)"
    ):
        check_holds_a_global_batch(dataset, 16, data)


def test_missing_data_file_and_bad_import_path_are_config_errors(tmp_path):
    with pytest.raises(ProblemsError, match=r"data\.path: .* is not a readable file"):
        build_dataset(DataConfig(source="text", path=str(tmp_path / "missing.txt")), ModelConfig(), seed=0)
    with pytest.raises(ProblemsError, match=r"data\.source: cannot import nowhere.module:make"):
        build_dataset(DataConfig(source="nowhere.module:make"), ModelConfig(), seed=0)
