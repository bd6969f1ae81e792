"""LoRA (models/lora.py) on the models themselves, in process: which layers get adapters by default, what is
frozen, and a target that names no layer refused at its field."""

from __future__ import annotations

import pytest

from scaletrain_trainer.contract.config import ModelConfig, parse_training_config
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.models.model import build_model, count_parameters, trainable_parameters

GPT = {"layers": 2, "heads": 2, "width": 32, "vocabSize": 64, "contextLength": 16}


def lora_gpt(**lora):
    return build_model(ModelConfig.model_validate(GPT | {"lora": lora}))


def test_by_default_the_attention_layers_get_adapters_and_nothing_else_trains():
    model = lora_gpt(rank=4)
    trained = sorted(name for name, p in model.named_parameters() if p.requires_grad)
    assert trained == [
        f"blocks.{block}.attn.{layer}.lora_{ab}.default.weight"
        for block in (0, 1)
        for layer in ("proj", "qkv")
        for ab in ("A", "B")
    ]
    assert trainable_parameters(model) == 2 * (4 * (32 + 32) + 4 * (32 + 96)) < count_parameters(model) // 20


def test_the_adapters_start_as_a_zero_update():
    model = lora_gpt(rank=4)
    b_matrices = [p for name, p in model.named_parameters() if ".lora_B." in name]
    assert len(b_matrices) == 4 and all(not b.any() for b in b_matrices)  # B·A = 0: the model as it was


def test_named_targets_are_adapted_and_a_name_that_matches_no_layer_is_refused_at_its_field():
    model = lora_gpt(rank=2, targetModules=["mlp.0"])
    assert {name.split(".lora_")[0] for name, p in model.named_parameters() if p.requires_grad} == {
        "blocks.0.mlp.0",
        "blocks.1.mlp.0",
    }
    with pytest.raises(ProblemsError) as refused:
        lora_gpt(rank=2, targetModules=["no_such_layer"])
    assert str(refused.value.problems[0]).startswith("model.lora.targetModules: ")


@pytest.mark.parametrize(
    ("lora", "field"), [({"rank": 0}, "rank"), ({"alpha": 0}, "alpha"), ({"dropout": 1}, "dropout")]
)
def test_lora_settings_out_of_range_are_refused_at_their_field(lora, field):
    with pytest.raises(ProblemsError) as refused:
        parse_training_config({"globalBatchSize": 8, "microBatchSize": 2, "model": GPT | {"lora": lora}})
    assert str(refused.value.problems[0]).startswith(f"model.lora.{field}: ")
