"""Evaluation (training/evaluation.py): the held-out share, chosen by seed and never trained on, must hold a
global batch."""

from __future__ import annotations

import pytest
import torch

from scaletrain_testing.tiny_training import RUNTIME
from scaletrain_trainer.contract.config import parse_training_config
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.training.data import build_dataset
from scaletrain_trainer.training.evaluation import Evaluator, split_off_eval
from scaletrain_trainer.training.losses import resolve_loss


def test_the_held_out_share_is_chosen_by_seed_and_never_trained_on():
    config = parse_training_config(
        {"globalBatchSize": 8, "microBatchSize": 2, "eval": {"fraction": 0.2}, "data": {"syntheticSamples": 200}}
    )
    dataset = build_dataset(config.data, config.model, config.seed)
    train, held_out = split_off_eval(dataset, config)
    trained, evaluated = set(train.indices.tolist()), set(held_out.indices.tolist())
    assert len(evaluated) == 40 and not trained & evaluated and trained | evaluated == set(range(200))
    assert torch.equal(held_out[3][0], dataset[int(held_out.indices[3])][0])
    assert split_off_eval(dataset, config)[1].indices.tolist() == held_out.indices.tolist()
    other_seed = split_off_eval(dataset, config.model_copy(update={"seed": 8}))[1]
    assert other_seed.indices.tolist() != held_out.indices.tolist()
    assert split_off_eval(dataset, config.model_copy(update={"eval": None})) == (dataset, None)


def test_a_held_out_set_smaller_than_a_global_batch_is_a_config_error():
    config = parse_training_config(
        {"globalBatchSize": 64, "microBatchSize": 2, "eval": {"fraction": 0.1}, "data": {"syntheticSamples": 200}}
    )
    _, held_out = split_off_eval(build_dataset(config.data, config.model, config.seed), config)
    with pytest.raises(ProblemsError, match=r"eval.fraction: the held-out set holds 20 samples, fewer than one global"):
        Evaluator(held_out, config, RUNTIME, resolve_loss(None))
