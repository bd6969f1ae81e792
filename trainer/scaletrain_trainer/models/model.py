"""The built-in GPT-style decoder, and building the configured model.

A model maps inputs to logits; the trainer computes the loss (cross entropy against targets, with
-100 marking ignored positions). Models that keep their repeated layers in an `nn.ModuleList`
named `blocks` (GPT; a Hugging Face model's decoder layers, hf.py) get per-block FSDP sharding,
activation checkpointing and compiling. A model may say what a trained token costs with
`flops_per_token(context) -> int`, as GPT does; MFU is computed from it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..contract.config import HF_MODEL, ModelConfig
from ..contract.plugins import build_from
from .flops import transformer_flops_per_token, weight_flops_per_token


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.attn_norm = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, dropout)
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, context_length: int, layers: int, heads: int, width: int, dropout: float = 0.0):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, width)
        self.position_embedding = nn.Embedding(context_length, width)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size, bias=False)
        self.apply(self._init_weights)
        for name, parameter in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith(("attn.proj.weight", "mlp.2.weight")):
                nn.init.normal_(parameter, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def features(self, tokens: torch.Tensor) -> torch.Tensor:
        """The final hidden states, before the output projection."""
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = self.dropout(self.token_embedding(tokens) + self.position_embedding(positions))
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(tokens))

    def flops_per_token(self, context: int) -> int:
        """Training FLOPs per token: 6N plus attention (PaLM's and nanoGPT's estimate). N leaves out the
        two embedding tables, whose lookups are no matmuls; the head, untied here, is one."""
        embeddings = self.token_embedding.weight.numel() + self.position_embedding.weight.numel()
        width = self.token_embedding.embedding_dim
        return transformer_flops_per_token(count_parameters(self) - embeddings, len(self.blocks), width, context)


def build_model(config: ModelConfig) -> nn.Module:
    """The configured model, with its low-rank adapters when model.lora is set."""
    model = _base_model(config)
    if config.lora is not None:
        from .lora import apply_lora  # peft is an optional extra (hf): imported for LoRA only

        apply_lora(model, config.lora)
    return model


def _base_model(config: ModelConfig) -> nn.Module:
    if config.name == "gpt":
        return GPT(config.vocab_size, config.context_length, config.layers, config.heads, config.width, config.dropout)
    if config.name == HF_MODEL:
        from .hf import build_hf_model  # transformers is an optional extra: imported for hf models only

        return build_hf_model(config)
    return build_from(config.name, ("model", "name"), config.options, nn.Module, "a torch.nn.Module")


def repeated_layers(model: nn.Module) -> nn.ModuleList | None:
    """The model's repeated layers, its `blocks` ModuleList, if it has one: the unit FSDP shards, activation
    checkpointing recomputes and compile compiles."""
    blocks = getattr(model, "blocks", None)
    return blocks if isinstance(blocks, nn.ModuleList) else None


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def trainable_parameters(model: nn.Module) -> int:
    """The parameters that train: all of them, or with model.lora the adapters alone."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def flops_per_token(model: nn.Module, context: int) -> int:
    """Training FLOPs per token: the model's own `flops_per_token(context)` where it has one, else 6N over
    all its parameters: which of a custom model's parameters are matmul weights, and what its attention
    costs, cannot be told from outside, so its TFLOP/s and MFU are then rough (attention left out)."""
    own = getattr(model, "flops_per_token", None)
    return int(own(context)) if callable(own) else weight_flops_per_token(count_parameters(model))
