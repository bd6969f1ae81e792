"""The torch-free checks of `model.name: hf`'s options, as the operator and `scaletrain validate` make them."""

from __future__ import annotations

import pytest

from scaletrain_trainer.contract.config import parse_training_config
from scaletrain_trainer.contract.validation import ProblemsError

pytestmark = pytest.mark.unit

BATCH = {"globalBatchSize": 8, "microBatchSize": 2}
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 256}


def _problems(options):
    with pytest.raises(ProblemsError) as error:
        parse_training_config(BATCH | {"model": {"name": "hf", "options": options}})
    return [str(problem) for problem in error.value.problems]


@pytest.mark.parametrize(
    "options",
    [
        {"config": LLAMA},
        {"config": "/models/llama"},
        {"pretrained": "/models/llama"},
        {"config": LLAMA, "pretrained": "/w"},
    ],
)
def test_hf_takes_a_config_mapping_or_directory_and_pretrained_weights(options):
    model = parse_training_config(BATCH | {"model": {"name": "hf", "options": options}}).model
    assert (model.name, model.options) == ("hf", options)


@pytest.mark.parametrize(
    "options, problem",
    [
        ({}, "model.options.config: required for model hf"),
        ({"config": {"hidden_size": 64}}, "model.options.config: a mapping of a Hugging Face config's fields, with "),
        ({"config": ""}, "model.options.config: a mapping of a Hugging Face config's fields, with model_type"),
        ({"config": LLAMA, "pretrained": 3}, "model.options.pretrained: a local directory of weights"),
        ({"config": LLAMA, "revision": "main"}, "model.options.revision: unknown option of the hf model; known: "),
    ],
)
def test_unusable_hf_options_are_named(options, problem):
    (found,) = _problems(options)
    assert found.startswith(problem)


def test_other_models_options_are_not_checked_as_hf_ones():
    config = parse_training_config(BATCH | {"model": {"name": "pkg.models:build", "options": {"revision": 1}}})
    assert config.model.options == {"revision": 1}
