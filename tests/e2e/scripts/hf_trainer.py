"""A Hugging Face `Trainer` script, as users bring them, with nothing about ScaleTrain or Kubeflow in it: a tiny
Llama made from its config, a data set of random tokens, CPU. HF's Trainer reports to whatever
KUBEFLOW_TRAINER_SERVER_URL names by itself (its KubeflowCallback). `--seconds-per-step` paces it so that a test
sees it running. `--eval-steps N` evaluates every N steps, and `--eval-metrics K` has compute_metrics add K numbers
to each evaluation, as a script that scores its model does."""

from __future__ import annotations

import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=30)
parser.add_argument("--seconds-per-step", type=float, default=0.0)
parser.add_argument("--output-dir", default="/tmp/hf-trainer")
parser.add_argument("--eval-steps", type=int, default=0)
parser.add_argument("--eval-metrics", type=int, default=0)
args = parser.parse_args()

torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
    num_key_value_heads=1, max_position_embeddings=32,
)  # fmt: skip
model = LlamaForCausalLM(config)
tokens = torch.randint(0, config.vocab_size, (64, 16))
dataset = [{"input_ids": row, "labels": row} for row in tokens]


class Paced(TrainerCallback):
    def on_step_end(self, *_, **__):
        time.sleep(args.seconds_per_step)


def compute_metrics(predicted):
    """Token accuracy, and more scores of the same kind (top-k accuracy for k = 2, 3, ...)."""
    logits, labels = torch.as_tensor(predicted.predictions[:, :-1]), torch.as_tensor(predicted.label_ids[:, 1:])
    ranked = logits.argsort(dim=-1, descending=True)
    return {f"top{k}_accuracy": (ranked[..., :k] == labels[..., None]).any(-1).float().mean().item()
            for k in range(1, args.eval_metrics + 1)}  # fmt: skip


evaluating = {"eval_strategy": "steps", "eval_steps": args.eval_steps} if args.eval_steps else {}
training = TrainingArguments(
    output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=4, logging_steps=1,
    save_strategy="no", use_cpu=True, report_to="none", disable_tqdm=True, **evaluating,
)  # fmt: skip
Trainer(
    model=model, args=training, train_dataset=dataset, eval_dataset=dataset[:16] if args.eval_steps else None,
    compute_metrics=compute_metrics if args.eval_metrics else None, callbacks=[Paced()],
).train()  # fmt: skip
