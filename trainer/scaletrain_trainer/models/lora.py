"""Low-rank adapters (`model.lora`): the model's own weights frozen, each targeted linear layer given a trainable
update B·A scaled by alpha / rank (LoRA, Hu et al. 2021), through PEFT's LoRA layers.

PEFT rather than modules of our own: its layers are the ones Hugging Face users and tools know (an adapter saved in
its format loads with `PeftModel.from_pretrained`), it covers the layer types of the common architectures (Linear,
GPT-2's Conv1D, embeddings), and `inject_adapter_in_model` works on any nn.Module, the built-in gpt and one built on
the meta device included, without wrapping it: the trainer's model stays the model (its `blocks`, its
`flops_per_token`), and parallelism is applied to it as to any other. A base layer's parameters move under
`base_layer.` and the adapters are `lora_A.default` and `lora_B.default` beside it.

Only the adapters train: the optimizer is given parameters that require gradients only, so it holds their state
alone, and a checkpoint holds those parameters alone (checkpoint.TrainState: frozen parameters are left out), the
frozen base coming from `pretrained` (or the seed) again at every start.
"""

from __future__ import annotations

import re
from pathlib import Path

from torch import nn

from ..contract.config import LoraConfig
from ..contract.validation import Problem, ProblemsError

# The default targets: the linear layers of the attention modules, whatever an architecture names them (Llama's
# self_attn.q_proj ... o_proj, GPT-2's attn.c_attn and c_proj, the built-in gpt's attn.qkv and attn.proj).
ATTENTION_MODULE = re.compile(r"(^|\.)(self_attn|attn|attention|self_attention)\.")
TARGET_FIELD = ("model", "lora", "targetModules")
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # PEFT's file name


def apply_lora(model: nn.Module, config: LoraConfig) -> nn.Module:
    """`model` with adapters on the targeted layers, every other parameter frozen (in place). A Hugging Face
    model's adapters go on its causal LM, so that their names, and an exported adapter's, are the ones PEFT gives
    that model."""
    peft = _peft()
    adapted = adapted_module(model)
    targets = config.target_modules or _attention_linears(adapted)
    if not targets:
        message = "no linear layer in an attention module: name the layers to adapt, e.g. [q_proj, v_proj]"
        raise ProblemsError([Problem(TARGET_FIELD, message)])
    lora = peft.LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=config.dropout, target_modules=targets)
    try:
        peft.inject_adapter_in_model(lora, adapted)
    except ValueError as error:  # a name that matches no module, or a module PEFT cannot adapt
        raise ProblemsError([Problem(TARGET_FIELD, f"{error}".splitlines()[0])]) from None
    for name, parameter in model.named_parameters():
        parameter.requires_grad = ".lora_" in name
    return model


def adapted_module(model: nn.Module) -> nn.Module:
    """Where the adapters go: a Hugging Face model's causal LM (HFCausalLM.hf), else the model itself."""
    from .hf import HFCausalLM

    return model.hf if isinstance(model, HFCausalLM) else model


def merge_adapters(model: nn.Module) -> None:
    """Fold each adapter's update into its base layer's weight and put the base layer back in its place: the
    model as it would be without LoRA, with the trained weights (in place)."""
    from peft.tuners.lora import LoraLayer

    for name, module in list(model.named_modules()):
        if isinstance(module, LoraLayer):
            module.merge()
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, module.get_base_layer())


def save_adapter(causal_lm: nn.Module, config: LoraConfig, base_model: str | None, output: Path) -> None:
    """The adapters of a Hugging Face causal LM in PEFT's format (adapter_config.json, adapter_model.safetensors),
    which `PeftModel.from_pretrained(base, output)` loads onto the base model."""
    peft = _peft()
    from safetensors.torch import save_file

    targets = sorted({name.rsplit(".lora_", 1)[0] for name, _ in causal_lm.named_parameters() if ".lora_" in name})
    adapter_config = peft.LoraConfig(
        r=config.rank,
        lora_alpha=config.alpha,
        lora_dropout=config.dropout,
        target_modules=config.target_modules or targets,
        task_type="CAUSAL_LM",
        base_model_name_or_path=base_model,
    )
    output.mkdir(parents=True, exist_ok=True)
    adapter_config.save_pretrained(output)
    weights = peft.get_peft_model_state_dict(causal_lm)  # PeftModel names them under base_model.model.
    tensors = {f"base_model.model.{name}": tensor.contiguous() for name, tensor in weights.items()}
    save_file(tensors, output / ADAPTER_WEIGHTS, metadata={"format": "pt"})


def _peft():
    try:
        import peft
    except ImportError:
        message = "LoRA needs peft, which is not installed: pip install 'scaletrain[hf]'"
        raise ProblemsError([Problem(("model", "lora"), message)]) from None
    return peft


def _attention_linears(model: nn.Module) -> list[str]:
    linear_types = _adaptable_types()
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, linear_types) and ATTENTION_MODULE.search(name)
    ]


def _adaptable_types() -> tuple[type, ...]:
    """nn.Linear, and GPT-2's Conv1D (a transposed linear layer) where transformers is installed."""
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:
        return (nn.Linear,)
    return (nn.Linear, Conv1D)
