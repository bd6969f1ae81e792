"""Instruction data (`data.source: instructions`): a JSONL file of `{prompt, response}` records, or of chat
`{messages: [{role, content}, ...]}` rendered by the model's own chat template, tokenized with the model's own
tokenizer, with the loss on the response tokens alone.

A sample is one record: its prompt's tokens then its response's (and the tokenizer's end-of-sequence token), cut
to contextLength + 1 tokens and padded to it. The targets of the prompt and of the padding are IGNORE_INDEX, so the
token cross-entropy sums over response tokens only and the trainer divides by their count over the global batch:
the loss stays an exact mean over response tokens whatever the micro-batch split or the world size. A chat's
prompt is everything its template renders before the last message, which must be the assistant's; the response
is the rest of the rendering (that message and what the template closes it with).

With `data.packing`, a sample holds as many records as fit, end to end, then padding (best fit, longest
record first: a deterministic packing, the same on every rank). The sample carries each token's position
within its record, restarting at 0 where a record starts: transformers' models build their attention masks
from them, so a record attends to itself alone and its positions count from its own start, as unpacked.

The tokenizer and the chat template are read from the hf model's directory (`options.pretrained`, else
`options.config`), local files only: nothing is downloaded. A record whose prompt leaves no room for a response
token is dropped (the count is logged); a file with no usable record, or a record of another shape, is a config
error naming the line.
"""

from __future__ import annotations

import bisect
import json
import logging
from typing import Any

import torch
from torch.utils.data import Dataset

from ..contract.config import HF_CONFIG_OPTION, HF_MODEL, HF_PRETRAINED_OPTION, DataConfig, ModelConfig
from ..contract.storage_urls import is_object_url
from ..contract.validation import Problem, ProblemsError
from ..storage import objects
from .losses import IGNORE_INDEX

log = logging.getLogger(__name__)

PATH_FIELD = ("data", "path")
ASSISTANT = "assistant"


Record = tuple[list[int], int]  # a record's token ids, and how many of them are its prompt's


class InstructionSamples(Dataset):
    """The tokenized records, one a sample, or several when packed (`bins`: the records of each sample):
    (inputs, targets) of contextLength tokens, the targets masked but the responses', and, packed, each
    token's position within its record."""

    def __init__(self, records: list[Record], context_length: int, pad_id: int, bins: list[list[int]] | None = None):
        self.records, self.bins, self.length, self.pad_id = records, bins, context_length, pad_id

    def __len__(self) -> int:
        return len(self.records if self.bins is None else self.bins)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        parts = [_shifted(*self.records[i]) for i in ([index] if self.bins is None else self.bins[index])]
        padding = self.length - sum(len(inputs) for inputs, _ in parts)
        inputs = torch.cat([*(inputs for inputs, _ in parts), torch.full((padding,), self.pad_id)])
        targets = torch.cat([*(targets for _, targets in parts), torch.full((padding,), IGNORE_INDEX)])
        if self.bins is None:
            return inputs, targets
        # The padding is a sequence of its own: it restarts the positions too, so no record attends to it.
        positions = torch.cat([*(torch.arange(len(inputs)) for inputs, _ in parts), torch.arange(padding)])
        return inputs, targets, positions


def _shifted(ids: list[int], prompt_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A record's inputs and next-token targets; the prompt predicts nothing the loss counts."""
    tokens = torch.tensor(ids, dtype=torch.int64)
    targets = tokens[1:].clone()
    targets[: max(prompt_length - 1, 0)] = IGNORE_INDEX
    return tokens[:-1], targets


def instruction_samples(data: DataConfig, model: ModelConfig) -> InstructionSamples:
    tokenizer = model_tokenizer(model)
    lines = _read_records(data.path or "")
    records, dropped = [], 0
    for line, record in lines:
        prompt, response, templated = _prompt_and_response(record, line, tokenizer)
        # A chat template writes the special tokens it wants (a BOS, say) itself.
        prompt_ids = tokenizer(prompt, add_special_tokens=not templated)["input_ids"]
        response_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
        if tokenizer.eos_token_id is not None and response_ids[-1:] != [tokenizer.eos_token_id]:
            response_ids = [*response_ids, tokenizer.eos_token_id]
        ids = (prompt_ids + response_ids)[: model.context_length + 1]
        if len(prompt_ids) >= len(ids):  # no response token fits
            dropped += 1
            continue
        records.append((ids, len(prompt_ids)))
    if dropped:
        log.warning("%d of %d records dropped: their prompts fill contextLength", dropped, len(lines))
    if not records:
        message = f"no record of {data.path} leaves room for a response within contextLength ({model.context_length})"
        raise ProblemsError([Problem(PATH_FIELD, message)])
    bins = None
    if data.packing:
        lengths = [len(ids) - 1 for ids, _ in records]
        bins = best_fit_decreasing(lengths, model.context_length)
        filled = sum(lengths) / (len(bins) * model.context_length)
        log.info(
            "packed %d records into %d samples of %d tokens, %.0f%% of them the records' (the rest padding)",
            len(records),
            len(bins),
            model.context_length,
            100 * filled,
        )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id or 0
    return InstructionSamples(records, model.context_length, pad_id, bins)


def best_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Bins of indices whose lengths sum to at most capacity: the longest first, each into the bin it fills
    most. Open bins are kept by the room they have left, so that finding one is a bisection."""
    bins: list[list[int]] = []
    rooms: list[int] = []  # the distinct rooms of bins with some left, ascending
    bins_with_room: dict[int, list[int]] = {}
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        length = lengths[index]
        at = bisect.bisect_left(rooms, length)
        if at == len(rooms):
            chosen, room = len(bins), capacity
            bins.append([])
        else:
            room = rooms[at]
            chosen = bins_with_room[room].pop()
            if not bins_with_room[room]:
                del bins_with_room[room]
                rooms.pop(at)
        bins[chosen].append(index)
        if (left := room - length) > 0:
            if left not in bins_with_room:
                bins_with_room[left] = []
                bisect.insort(rooms, left)
            bins_with_room[left].append(chosen)
    return bins


def model_tokenizer(model: ModelConfig) -> Any:
    """The hf model's own tokenizer (and chat template), from its directory, local files only."""
    directory = model.options.get(HF_PRETRAINED_OPTION, model.options.get(HF_CONFIG_OPTION))
    if model.name != HF_MODEL or not isinstance(directory, str):
        message = "instructions are tokenized by the model's tokenizer: use model.name hf with a pretrained directory"
        raise ProblemsError([Problem(("data", "source"), message)])
    from ..models.hf import local_directory, transformers_module  # transformers is the hf extra's

    transformers = transformers_module()

    field = ("model", "options", HF_PRETRAINED_OPTION if HF_PRETRAINED_OPTION in model.options else HF_CONFIG_OPTION)
    try:
        return transformers.AutoTokenizer.from_pretrained(local_directory(directory, field), local_files_only=True)
    except (OSError, ValueError) as error:
        message = f"no usable tokenizer in {directory}: {str(error).splitlines()[0]}"
        raise ProblemsError([Problem(field, message)]) from None


def _read_records(path: str) -> list[tuple[int, Any]]:
    """(line number, parsed record) of every non-empty line."""
    try:
        if is_object_url(path):
            fs, key = objects.filesystem(path)
            text = fs.cat_file(key).decode()
        else:
            with open(path, encoding="utf-8") as file:
                text = file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ProblemsError([Problem(PATH_FIELD, f"cannot read {path}: {error}")]) from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except ValueError as error:
            raise ProblemsError([Problem(PATH_FIELD, f"{path} line {number} is not JSON: {error}")]) from None
    return records


def _prompt_and_response(record: Any, line: int, tokenizer: Any) -> tuple[str, str, bool]:
    """The record's prompt and response texts, and whether the chat template rendered them."""
    if isinstance(record, dict) and isinstance(record.get("prompt"), str) and isinstance(record.get("response"), str):
        return record["prompt"], record["response"], False
    messages = record.get("messages") if isinstance(record, dict) else None
    if not (isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages)):
        message = f"line {line}: a record is {{prompt, response}} strings or {{messages: [{{role, content}}, ...]}}"
        raise ProblemsError([Problem(PATH_FIELD, message)])
    if messages[-1].get("role") != ASSISTANT:
        raise ProblemsError([Problem(PATH_FIELD, f"line {line}: the last message must be the assistant's")])
    if tokenizer.chat_template is None:
        message = "chat messages need the tokenizer's chat template, which the model's directory lacks"
        raise ProblemsError([Problem(PATH_FIELD, message)])
    prompt = tokenizer.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
    whole = tokenizer.apply_chat_template(messages, tokenize=False)
    if not whole.startswith(prompt):
        message = f"line {line}: the chat template renders the conversation otherwise than its start"
        raise ProblemsError([Problem(PATH_FIELD, message)])
    return prompt, whole[len(prompt) :], True
