"""Hugging Face causal language models (`model.name: hf`): any `AutoModelForCausalLM`, built from a config
(`model.options.config`: a mapping of its fields, or a local directory holding config.json) and, with
`model.options.pretrained`, given the weights saved in a local directory (a volume), or under an object-store
prefix (s3://), which is copied to local disk once per machine (storage/fetched.py). Nothing is fetched from a
hub: a run must not depend on a hub, or change when a hub's copy does.

transformers is an optional extra (`pip install 'scaletrain[hf]'`), imported only when an hf model is built.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..contract.config import HF_CONFIG_OPTION, HF_PRETRAINED_OPTION, ModelConfig
from ..contract.storage_urls import is_object_url
from ..contract.validation import Problem, ProblemsError
from ..storage.fetched import FetchError, fetched_directory
from .flops import transformer_flops_per_token

CONFIG_FIELD = ("model", "options", HF_CONFIG_OPTION)
PRETRAINED_FIELD = ("model", "options", HF_PRETRAINED_OPTION)
# torch's scaled_dot_product_attention: a fused kernel, and it computes in the trainer's autocast dtype.
ATTENTION = "sdpa"
# The trainer keeps fp32 master weights whatever the saved dtype; autocast or FSDP's policy casts for compute.
WEIGHTS_DTYPE = torch.float32
ONE_LINE_CHARACTERS = 300


class HFCausalLM(nn.Module):
    """A transformers causal LM as the trainer sees a model: token ids in, logits out (the trainer computes the
    loss from its own shifted targets, so no labels go in). The causal LM is the child `hf`: its parameter
    names are the Hugging Face ones behind that prefix, so checkpoints map onto `save_pretrained` by name."""

    def __init__(self, causal_lm: nn.Module):
        super().__init__()
        self.hf = causal_lm
        self.decoder_layers_name = _decoder_layers_name(causal_lm)

    @property
    def blocks(self) -> nn.ModuleList | None:
        """The decoder layers, looked up by name: FSDP and activation checkpointing wrap them in place."""
        return self.hf.get_submodule(self.decoder_layers_name) if self.decoder_layers_name is not None else None

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Packed samples' positions restart at 0 where each sample starts: transformers' masks then keep each
        sample's tokens from attending to another's, and rotary or learned positions count from its start."""
        return self.hf(input_ids=tokens, position_ids=positions, use_cache=False).logits

    def flops_per_token(self, context: int) -> int:
        """6N + attention, as for the built-in GPT: N leaves out the embedding tables, whose lookups are no
        matmuls, except one tied to the output head, which is."""
        head = self.hf.get_output_embeddings()
        head_weight = head.weight if head is not None else None
        lookups = sum(
            module.weight.numel()
            for module in self.hf.modules()
            if isinstance(module, nn.Embedding) and module.weight is not head_weight
        )
        matmul_parameters = sum(p.numel() for p in self.hf.parameters()) - lookups
        text_config = self.hf.config.get_text_config()
        return transformer_flops_per_token(
            matmul_parameters, text_config.num_hidden_layers, text_config.hidden_size, context
        )


def build_hf_model(config: ModelConfig) -> HFCausalLM:
    """The configured causal LM with fp32 weights: `pretrained`'s, else freshly initialized from torch's RNG
    (so a seeded build gives the same weights on every rank). A skeleton built on the meta device reads no
    weights: the trainer gives it rank 0's."""
    transformers = transformers_module()
    hf_config = _hf_config(config.options, transformers)
    _require_matching_data_shape(hf_config, config)
    pretrained = config.options.get(HF_PRETRAINED_OPTION)
    if pretrained is not None and torch.get_default_device().type != "meta":
        causal_lm = _load_pretrained(pretrained, hf_config, transformers)
    else:
        causal_lm = _from_config(hf_config, transformers)
    causal_lm.train()  # from_pretrained returns it in eval mode, which would turn dropout off
    return HFCausalLM(causal_lm)


def transformers_module() -> Any:
    try:
        import transformers
    except ImportError:
        message = "hf models need transformers, which is not installed: pip install 'scaletrain[hf]'"
        raise ProblemsError([Problem(("model", "name"), message)]) from None
    return transformers


def _hf_config(options: dict[str, Any], transformers: Any) -> Any:
    """The model's Hugging Face config: `config` (a mapping, or a directory), else the `pretrained` directory's."""
    from huggingface_hub.errors import StrictDataclassError  # how a config refuses a field's value

    source = options.get(HF_CONFIG_OPTION, options.get(HF_PRETRAINED_OPTION))
    field = CONFIG_FIELD if HF_CONFIG_OPTION in options else PRETRAINED_FIELD
    try:
        if isinstance(source, dict):
            return _config_from_fields(dict(source), transformers)
        return transformers.AutoConfig.from_pretrained(local_directory(source, field), local_files_only=True)
    except (OSError, ValueError, TypeError, StrictDataclassError) as error:  # a field it refuses, no config.json
        raise ProblemsError([Problem(field, f"not a usable Hugging Face config: {one_line(error)}")]) from None


def _config_from_fields(fields: dict[str, Any], transformers: Any) -> Any:
    model_type = fields.pop("model_type")
    known = list(transformers.CONFIG_MAPPING.keys())
    if model_type not in known:
        close = difflib.get_close_matches(model_type, known, n=3)
        hint = f"did you mean {' or '.join(close)}?" if close else "see the model types transformers lists"
        message = f"unknown model_type {model_type!r} in transformers {transformers.__version__}; {hint}"
        raise ProblemsError([Problem(CONFIG_FIELD, message)])
    return transformers.AutoConfig.for_model(model_type, **fields)


def local_directory(path: str, field: tuple[str, ...]) -> Path:
    """A directory on this machine (an object-store one is fetched to it first): a name that is not one would make
    transformers look in the hub's cache."""
    if is_object_url(path):
        try:
            return fetched_directory(path)
        except FetchError as error:
            raise ProblemsError([Problem(field, str(error))]) from None
    directory = Path(path)
    if not directory.is_dir():
        message = f"{path} is not a directory here: give a local directory (a mounted volume) saved by save_pretrained"
        raise ProblemsError([Problem(field, message)])
    return directory


def _require_matching_data_shape(hf_config: Any, config: ModelConfig) -> None:
    """The data sets draw token ids below model.vocabSize and windows of model.contextLength: the model must
    take both."""
    text_config = hf_config.get_text_config()
    problems = []
    if text_config.vocab_size != config.vocab_size:
        message = (
            f"{config.vocab_size}, but the Hugging Face config's vocab_size is {text_config.vocab_size}: "
            f"set model.vocabSize: {text_config.vocab_size}"
        )
        problems.append(Problem(("model", "vocabSize"), message))
    positions = getattr(text_config, "max_position_embeddings", None)
    if positions is not None and positions < config.context_length:
        message = (
            f"{config.context_length} exceeds the Hugging Face config's max_position_embeddings ({positions}): "
            f"set model.contextLength to at most {positions}"
        )
        problems.append(Problem(("model", "contextLength"), message))
    if problems:
        raise ProblemsError(problems)


def _from_config(hf_config: Any, transformers: Any) -> nn.Module:
    try:
        return transformers.AutoModelForCausalLM.from_config(
            hf_config, attn_implementation=ATTENTION, dtype=WEIGHTS_DTYPE
        )
    except (ValueError, TypeError) as error:  # not a causal LM's config, a model without sdpa, values it cannot take
        raise ProblemsError([Problem(CONFIG_FIELD, f"no causal LM for this config: {one_line(error)}")]) from None


def _load_pretrained(path: str, hf_config: Any, transformers: Any) -> nn.Module:
    """The weights saved in the directory `path`, all of them: a parameter left at its random initialization
    would train from scratch unnoticed, so a missing one is a config error."""
    directory = local_directory(path, PRETRAINED_FIELD)
    try:
        causal_lm, loading = transformers.AutoModelForCausalLM.from_pretrained(
            directory,
            config=hf_config,
            local_files_only=True,
            attn_implementation=ATTENTION,
            dtype=WEIGHTS_DTYPE,
            output_loading_info=True,
        )
    except (OSError, ValueError, RuntimeError) as error:  # no weights file, weights of other shapes
        message = f"cannot load the weights in {directory}: {one_line(error)}"
        raise ProblemsError([Problem(PRETRAINED_FIELD, message)]) from None
    if loading["missing_keys"]:  # which transformers only reports, and initializes at random
        absent = sorted(loading["missing_keys"])
        named = ", ".join(absent[:3]) + (", ..." if len(absent) > 3 else "")
        message = f"{directory} lacks weights for {len(absent)} parameters of this config ({named})"
        raise ProblemsError([Problem(PRETRAINED_FIELD, message)])
    return causal_lm


def _decoder_layers_name(causal_lm: nn.Module) -> str | None:
    """The name of the ModuleList of decoder layers: the one holding the layer classes the model itself keeps
    whole when split over devices (`_no_split_modules`), else the base model's `layers` or `h`."""
    unsplit = set(getattr(causal_lm, "_no_split_modules", None) or ())
    for name, module in causal_lm.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) and all(type(m).__name__ in unsplit for m in module):
            return name
    base_name = causal_lm.base_model_prefix
    for name in (f"{base_name}.layers", f"{base_name}.h"):
        try:
            if isinstance(causal_lm.get_submodule(name), nn.ModuleList):
                return name
        except AttributeError:
            continue
    return None


def one_line(error: BaseException) -> str:
    """An error's message as one short line for a config error: library messages run to several lines (the
    reason often on the second), and some list every model type there is."""
    line = " ".join(str(error).split()) or type(error).__name__
    return line if len(line) <= ONE_LINE_CHARACTERS else line[:ONE_LINE_CHARACTERS] + "…"
