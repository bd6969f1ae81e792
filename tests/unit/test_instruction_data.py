"""Instruction data (training/instructions.py) with a character-level tokenizer saved beside the model: prompt
tokens and padding are masked, the loss is the mean over response tokens as computed by hand, chat records are
split at the assistant's turn by the model's own template, and bad records are config errors naming the line."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from scaletrain_testing.hf_models import save_tiny_tokenizer, tiny_llama_model
from scaletrain_trainer.contract.config import DataConfig, ModelConfig
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.training.data import IGNORE_INDEX, build_dataset
from scaletrain_trainer.training.instructions import InstructionSamples
from scaletrain_trainer.training.losses import token_cross_entropy

CONTEXT = 8


@pytest.fixture
def model_directory(tmp_path):
    save_tiny_tokenizer(tmp_path / "model")  # no weights needed: only the tokenizer is read here
    return tmp_path / "model"


def samples(tmp_path, model_directory, *records, context=CONTEXT):
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(json.dumps(record) for record in records) + "\n")
    model = ModelConfig.model_validate(tiny_llama_model(pretrained=str(model_directory)) | {"contextLength": context})
    return build_dataset(DataConfig(source="instructions", path=str(path)), model, seed=0)


def ids(text):
    """The character-level tokenizer's ids (hf_models.save_tiny_tokenizer: printable ASCII after 6 specials)."""
    return [6 + ord(character) - 32 for character in text]


BOS, EOS, PAD = 1, 2, 0


def test_prompt_tokens_and_padding_are_masked_and_the_response_and_its_end_are_targets(tmp_path, model_directory):
    inputs, targets = samples(tmp_path, model_directory, {"prompt": "ab", "response": "c"})[0]
    assert inputs.tolist() == [BOS, *ids("abc"), EOS, PAD, PAD, PAD]
    assert targets.tolist() == [IGNORE_INDEX, IGNORE_INDEX, *ids("c"), EOS, *[IGNORE_INDEX] * 4]


def test_the_loss_is_the_mean_over_response_tokens_computed_by_hand(tmp_path, model_directory):
    data = samples(tmp_path, model_directory, {"prompt": "ab", "response": "c"}, {"prompt": "x", "response": "yz"})
    batch_inputs, batch_targets = (torch.stack(parts) for parts in zip(*[data[0], data[1]], strict=True))
    logits = torch.randn(2, CONTEXT, 256, generator=torch.Generator().manual_seed(0))
    summed, count = token_cross_entropy(logits, batch_targets)
    # By hand: sample 0 predicts c at position 2 and </s> at 3; sample 1 y at 1, z at 2 and </s> at 3.
    wanted = [(0, 2, ids("c")[0]), (0, 3, EOS), (1, 1, ids("y")[0]), (1, 2, ids("z")[0]), (1, 3, EOS)]
    by_hand = [-F.log_softmax(logits[sample, position], dim=-1)[token] for sample, position, token in wanted]
    assert count.item() == 5
    assert math.isclose((summed / count).item(), (sum(by_hand) / 5).item(), rel_tol=1e-6)


def test_a_chat_is_split_at_the_assistants_turn_by_the_models_template(tmp_path, model_directory):
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    inputs, targets = samples(tmp_path, model_directory, chat, context=12)[0]
    user, assistant = 3, 4
    assert inputs.tolist()[:8] == [user, *ids("hi"), assistant, *ids("yo"), EOS, PAD]
    assert [t for t in targets.tolist() if t != IGNORE_INDEX] == [*ids("yo"), EOS]


def test_a_record_whose_prompt_fills_the_context_is_dropped(tmp_path, model_directory):
    data = samples(tmp_path, model_directory, {"prompt": "p" * 20, "response": "r"}, {"prompt": "a", "response": "b"})
    assert len(data) == 1


@pytest.mark.parametrize(
    ("record", "said"),
    [
        ({"prompt": "a"}, "line 1: a record is {prompt, response}"),
        ({"messages": [{"role": "user", "content": "a"}]}, "line 1: the last message must be the assistant's"),
    ],
)
def test_a_record_of_another_shape_is_a_config_error_naming_the_line(tmp_path, model_directory, record, said):
    with pytest.raises(ProblemsError) as refused:
        samples(tmp_path, model_directory, record)
    assert str(refused.value.problems[0]).startswith("data.path: ") and said in str(refused.value)


def test_instructions_need_the_models_own_tokenizer(tmp_path):
    gpt = ModelConfig()
    (tmp_path / "r.jsonl").write_text('{"prompt": "a", "response": "b"}\n')
    with pytest.raises(ProblemsError, match="data.source: instructions are tokenized by the model's tokenizer"):
        build_dataset(DataConfig(source="instructions", path=str(tmp_path / "r.jsonl")), gpt, seed=0)


def test_an_empty_prompt_masks_nothing_of_the_response():
    """A tokenizer without a BOS token leaves an empty prompt no token at all: every response token but the
    first (which nothing precedes) is a target."""
    inputs, targets = InstructionSamples([([5, 6, 7], 0)], context_length=4, pad_id=PAD)[0]
    assert inputs.tolist() == [5, 6, 7, PAD] and targets.tolist() == [6, 7, IGNORE_INDEX, IGNORE_INDEX]
