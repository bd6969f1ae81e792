"""A tiny Hugging Face causal LM for the trainer's tests (`model.name: hf`): its config, a saved copy of it to
train from, its data, and what a checkpoint holds of it, read without the code under test."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch

# 2 layers, width 64, vocabulary 256: a Llama (RMSNorm, rotary positions, grouped-query attention, SwiGLU).
TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 256,
    "max_position_embeddings": 64,
}
CONTEXT = 16
SEED = 7
# One global batch of the base config (16): every step trains on all of it, so the first step's loss is the
# saved model's mean loss over the whole data set, whatever order the samples come in.
SAMPLES = 16


def tiny_llama_model(**options: Any) -> dict[str, Any]:
    """The `model` section of a training config for the tiny Llama, with `options`."""
    return {"name": "hf", "vocabSize": TINY_LLAMA["vocab_size"], "contextLength": CONTEXT, "options": options}


def synthetic_options() -> dict[str, Any]:
    """The trainer's synthetic data set for the tiny Llama, as keyword arguments of SyntheticSequences (and of
    the fault plugins' data sets, which wrap it)."""
    return {"samples": SAMPLES, "context_length": CONTEXT, "vocab_size": TINY_LLAMA["vocab_size"], "seed": SEED}


def save_tiny_llama(directory: Path) -> torch.nn.Module:
    """A freshly initialized tiny Llama, saved with save_pretrained into `directory` (returned in eval mode)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**TINY_LLAMA)
    torch.manual_seed(12345)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    model.save_pretrained(directory)
    return model.eval()


def all_samples() -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of every sample of the synthetic data set, stacked."""
    from scaletrain_trainer.training.data import SyntheticSequences

    samples = SyntheticSequences(**synthetic_options())
    inputs, targets = zip(*(samples[index] for index in range(len(samples))), strict=True)
    return torch.stack(inputs), torch.stack(targets)


def mean_token_loss(causal_lm: torch.nn.Module) -> float:
    """The model's mean cross entropy over every target token of the data set."""
    inputs, targets = all_samples()
    with torch.no_grad():
        logits = causal_lm(input_ids=inputs, use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()


def checkpoint_weights(step_directory: Path, scratch: Path) -> dict[str, torch.Tensor]:
    """The model's weights in a checkpoint by their Hugging Face names, read with DCP's own converter (the
    trainer saves them as `model.hf.<name>`)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    converted = scratch / "checkpoint.pt"
    dcp_to_torch_save(step_directory, converted)
    state = torch.load(converted, weights_only=False)
    return {name.removeprefix("hf."): tensor for name, tensor in state["model"].items()}


def assert_exports_give_the_trained_logits(
    checkpoint: Path, base: Path, lora: dict[str, Any], scratch: Path, *export_args: str
) -> None:
    """Export a LoRA checkpoint of the tiny Llama merged and as an adapter (`python -m scaletrain_trainer.export`,
    with `export_args`), load each with transformers and PEFT, and check their logits against the trained model's,
    built independently of the export: the base at `base`, PEFT's layers on its attention projections, and the
    adapters as DCP's own converter reads them from the checkpoint."""
    import peft
    from transformers import AutoModelForCausalLM

    from scaletrain_trainer.export import main as export_main

    assert export_main([str(checkpoint), str(scratch / "merged"), *export_args]) == 0
    assert export_main([str(checkpoint), str(scratch / "adapter"), "--adapter", *export_args]) == 0

    def base_model() -> torch.nn.Module:
        return AutoModelForCausalLM.from_pretrained(base, local_files_only=True).eval()

    adapters = peft.LoraConfig(
        r=lora["rank"], lora_alpha=lora["alpha"], target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    trained = peft.inject_adapter_in_model(adapters, base_model())
    missing, unexpected = trained.load_state_dict(checkpoint_weights(checkpoint, scratch), strict=False)
    assert not unexpected and all(".lora_" not in name for name in missing)
    merged = AutoModelForCausalLM.from_pretrained(scratch / "merged", local_files_only=True).eval()
    adapter = peft.PeftModel.from_pretrained(base_model(), scratch / "adapter").eval()
    inputs = torch.arange(256).view(16, 16)
    with torch.no_grad():
        expected = trained.eval()(input_ids=inputs).logits
        assert not torch.allclose(base_model()(input_ids=inputs).logits, expected)  # the adapters trained
        assert torch.allclose(adapter(input_ids=inputs).logits, expected, atol=1e-6, rtol=0)
        # W + BA·s rounds each merged weight once in fp32: on the example's trained adapters, 3.6e-5 at most on
        # logits up to 7.4.
        assert torch.allclose(merged(input_ids=inputs).logits, expected, atol=1e-4, rtol=0)


# A character-level tokenizer for the tiny Llama (ids below its vocabulary of 256): the special tokens, then
# printable ASCII, one id a character; a chat template that marks each turn with its role.
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<unk>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% if m['role'] == 'assistant' %}</s>{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def save_tiny_tokenizer(directory: Path) -> Any:
    """The character-level tokenizer, saved with save_pretrained into `directory` (beside a model, as a model's
    directory holds its tokenizer); returned."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocabulary = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    vocabulary |= {chr(code): len(SPECIAL_TOKENS) + code - 32 for code in range(32, 127)}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=["<|user|>", "<|assistant|>"],
    )
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(directory)
    return wrapped


def instruction_records(count: int, seed: int) -> list[dict[str, str]]:
    """`count` instruction records of two small tasks a tiny model learns within a few dozen steps: reverse a
    word, or write it in capitals; half of them as chats."""
    generator = random.Random(seed)
    records = []
    for index in range(count):
        word = "".join(generator.choice("abcdefgh") for _ in range(generator.randint(2, 4)))
        task, answer = ("reverse", word[::-1]) if index % 2 else ("upper", word.upper())
        if index % 4 < 2:
            records.append({"prompt": f"{task} {word}:", "response": answer})
        else:
            chat = [{"role": "user", "content": f"{task} {word}"}, {"role": "assistant", "content": answer}]
            records.append({"messages": chat})
    return records


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


FINETUNE_FIXTURE_README = """\
# The fixture of examples/finetune-lora.yaml (generated by `make generate`; do not edit)

- `model/`: a tiny Llama (2 layers, width 64, 106k parameters, fp32), pretrained for 300 steps as a character
  model of text of the same words (so that fine-tuning has a base that knows its characters), saved with
  `save_pretrained`, with a character-level tokenizer and its chat template beside it.
- `train.jsonl` (320 records) and `held-out.jsonl` (64): reverse a word of a to h, or write it in capitals,
  half of them as `{prompt, response}`, half as chat `messages`.

Written by `write_finetune_fixture` in tests/scaletrain_testing/hf_models.py, with the tokenizer and records
of the trainer's LoRA tests.
"""


def write_finetune_fixture(directory: Path) -> None:
    """examples/finetune-lora/: a tiny Llama pretrained on text of the tasks' words, with its tokenizer, and
    instruction records to train on and to hold out."""
    model = save_tiny_llama(directory / "model")
    tokenizer = save_tiny_tokenizer(directory / "model")
    _pretrain(model, tokenizer, steps=300)
    model.save_pretrained(directory / "model")
    write_jsonl(directory / "train.jsonl", instruction_records(320, seed=1))
    write_jsonl(directory / "held-out.jsonl", instruction_records(64, seed=2))
    (directory / "README.md").write_text(FINETUNE_FIXTURE_README)


def _pretrain(model: torch.nn.Module, tokenizer: Any, steps: int) -> None:
    """Full training of `model` as a character model of sentences of random words (of a to h, in either case,
    and the tasks' words), which never pair a word with its reversal or capitals: that is left to fine-tuning."""
    generator = random.Random(3)

    def word() -> str:
        letters = "".join(generator.choice("abcdefgh") for _ in range(generator.randint(2, 4)))
        return generator.choice([letters, letters.upper(), "reverse", "upper", "hi", "yo"])

    text = " ".join(" ".join(word() for _ in range(generator.randint(3, 8))) + "." for _ in range(4000))
    tokens = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
    windows = tokens[: len(tokens) // 65 * 65].view(-1, 65)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    torch.manual_seed(3)
    for _ in range(steps):
        batch = windows[torch.randint(len(windows), (16,))]
        logits = model(input_ids=batch[:, :-1]).logits
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
