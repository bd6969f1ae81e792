"""Instruction data (training/instructions.py) with a character-level tokenizer saved beside the model: prompt
tokens and padding are masked, the loss is the mean over response tokens as computed by hand, chat records are
split at the assistant's turn by the model's own template, and bad records are config errors naming the line."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
import torch.nn.functional as F

from scaletrain_testing.hf_models import save_tiny_llama, save_tiny_tokenizer, tiny_llama_model
from scaletrain_trainer.contract.config import DataConfig, ModelConfig
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.models.hf import HFCausalLM
from scaletrain_trainer.training.data import build_dataset
from scaletrain_trainer.training.instructions import InstructionSamples, best_fit_decreasing
from scaletrain_trainer.training.losses import IGNORE_INDEX, token_cross_entropy

CONTEXT = 8


@pytest.fixture
def model_directory(tmp_path):
    save_tiny_tokenizer(tmp_path / "model")  # no weights needed: only the tokenizer is read here
    return tmp_path / "model"


def samples(tmp_path, model_directory, *records, context=CONTEXT, packing=False):
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(json.dumps(record) for record in records) + "\n")
    model = ModelConfig.model_validate(tiny_llama_model(pretrained=str(model_directory)) | {"contextLength": context})
    return build_dataset(DataConfig(source="instructions", path=str(path), packing=packing), model, seed=0)


def ids(text):
    """The character-level tokenizer's ids (hf_models.save_tiny_tokenizer: printable ASCII after 6 specials)."""
    return [6 + ord(character) - 32 for character in text]


BOS, EOS, PAD = 1, 2, 0


def test_prompt_tokens_and_padding_are_masked_and_the_response_and_its_end_are_targets(tmp_path, model_directory):
    """The end-of-sequence token is a target, never an input: nothing follows it to predict."""
    inputs, targets = samples(tmp_path, model_directory, {"prompt": "ab", "response": "c"})[0]
    assert inputs.tolist() == [BOS, *ids("abc"), PAD, PAD, PAD, PAD]
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
    assert inputs.tolist()[:8] == [user, *ids("hi"), assistant, *ids("yo"), PAD, PAD]
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
    assert inputs.tolist() == [5, 6, PAD, PAD] and targets.tolist() == [6, 7, IGNORE_INDEX, IGNORE_INDEX]


def test_packing_puts_records_end_to_end_with_positions_restarting_at_each_and_at_the_padding(
    tmp_path, model_directory
):
    records = [{"prompt": "ab", "response": "c"}, {"prompt": "x", "response": "yz"}, {"prompt": "q", "response": "r"}]
    data = samples(tmp_path, model_directory, *records, context=12, packing=True)
    assert len(data) == 1
    inputs, targets, positions = data[0]
    # Longest first (4 tokens each, in file order), then the 3 of the last; 1 padding token.
    assert inputs.tolist() == [BOS, *ids("abc"), BOS, *ids("xyz"), BOS, *ids("qr"), PAD]
    assert targets.tolist() == [
        *[IGNORE_INDEX] * 2,
        *ids("c"),
        EOS,
        IGNORE_INDEX,
        *ids("yz"),
        EOS,
        IGNORE_INDEX,
        *ids("r"),
        EOS,
        IGNORE_INDEX,
    ]
    assert positions.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 0]


def test_a_packed_record_gets_the_logits_it_gets_alone(tmp_path, model_directory):
    """Each record attends to itself alone, with positions from its own start: a packed sample's logits are the
    records' own, so is the loss. Without the positions the later records would see the earlier ones."""
    model = HFCausalLM(save_tiny_llama(tmp_path / "llama"))
    records = [{"prompt": "ab", "response": "cde"}, {"prompt": "x", "response": "yz"}, {"prompt": "q", "response": "r"}]
    inputs, _, positions = samples(tmp_path, model_directory, *records, context=16, packing=True)[0]
    alone = [samples(tmp_path, model_directory, record, context=16)[0][0] for record in records]
    lengths = [6, 4, 3]  # each record's input tokens, in packing order (longest first)
    with torch.no_grad():
        packed = model(inputs[None], positions=positions[None])[0]
        unseparated = model(inputs[None])[0]
        starts = [0, 6, 10]
        for start, length, record_inputs in zip(starts, lengths, alone, strict=True):
            own = model(record_inputs[None])[0, :length]
            torch.testing.assert_close(packed[start : start + length], own, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(unseparated[6:10], model(alone[1][None])[0, :4], atol=1e-3)


def test_best_fit_decreasing_packs_the_longest_first_each_into_the_bin_it_fills_most():
    assert best_fit_decreasing([5, 3, 2, 4, 1, 6], capacity=8) == [[5, 2], [0, 1], [3, 4]]
    lengths = [random.Random(seed).randint(1, 64) for seed in range(500)]
    bins = best_fit_decreasing(lengths, capacity=64)
    assert sorted(index for records in bins for index in records) == list(range(500))
    assert all(sum(lengths[i] for i in records) <= 64 for records in bins)
    assert len(bins) <= 1.1 * math.ceil(sum(lengths) / 64)
