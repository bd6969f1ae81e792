"""Custom models and data sets by import path (contract/plugins.py): one that builds the wrong type, or
refuses its options, is a config error naming its field."""

from __future__ import annotations

import pytest

from scaletrain_trainer.contract.config import DataConfig, ModelConfig
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.models.model import build_model
from scaletrain_trainer.training.data import build_dataset


def test_a_plugin_of_the_wrong_type_is_a_config_error_naming_the_field():
    with pytest.raises(ProblemsError, match=r"data\.source: collections:OrderedDict returned OrderedDict, not a"):
        build_dataset(DataConfig(source="collections:OrderedDict"), ModelConfig(), seed=0)
    with pytest.raises(ProblemsError, match=r"model\.name: collections:OrderedDict returned OrderedDict, not a"):
        build_model(ModelConfig(name="collections:OrderedDict"))
    with pytest.raises(ProblemsError, match=r"data\.source: collections:namedtuple\(\*\*options\) failed"):
        build_dataset(DataConfig(source="collections:namedtuple"), ModelConfig(), seed=0)
