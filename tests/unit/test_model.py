"""The models' FLOPs per token (models/model.py): 6N without the embeddings, plus attention, or what a
custom model says."""

from __future__ import annotations

from torch import nn

from scaletrain_trainer.models.model import GPT, flops_per_token


def test_gpt_flops_per_token_are_6n_without_the_embeddings_plus_attention():
    model = GPT(vocab_size=16, context_length=8, layers=2, heads=2, width=8)
    # By hand, width 8: a block has 2 norms (2 × 16), qkv (8·24 + 24), proj (8·8 + 8), the MLP (8·32 + 32
    # and 32·8 + 8): 872 parameters. Two blocks, the final norm (16) and the untied head (8·16): 1888
    # matmul parameters; the embedding tables (16·8 and 8·8) are lookups. Attention: 12 · 2 · 8 · context.
    assert flops_per_token(model, 8) == 6 * 1888 + 12 * 2 * 8 * 8 == 12864
    assert flops_per_token(model, 4) == 6 * 1888 + 12 * 2 * 8 * 4


def test_a_custom_model_counts_6n_unless_it_says_its_own_flops():
    assert flops_per_token(nn.Linear(4, 3), 8) == 6 * 15

    class Counted(nn.Linear):
        def flops_per_token(self, context: int) -> int:
            return 1000 * context

    assert flops_per_token(Counted(4, 3), 8) == 8000
