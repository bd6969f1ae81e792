"""LoRA against full fine-tuning on the same Hugging Face Llama (CPU, one process): the bytes the training state
holds and the step time.

The model is a small Llama (4 layers, width 256, 8 heads, 4 KV heads, vocabulary 256), fp32, built from its config;
LoRA is rank 16 on the attention projections (model.lora's default targets). For each variant, after one real step
through the trainer's own parts (build_model, build_optimizer, train_step):
- state bytes: parameters, plus the gradients and AdamW moments of the parameters that train;
- peak activation bytes: what autograd saves for backward in one forward (the saved-tensor hooks' peak);
- step time: the median of --steps steps, the variants interleaved for --rounds rounds.
Target: LoRA's state <= 0.4x full fine-tuning's (the frozen base is its fp32 weights alone).

    python bench/lora.py [--rounds 3] [--steps 10]   # writes bench/results/lora.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
TARGET = 0.4
LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "intermediate_size": 688,
    "vocab_size": 256,
    "max_position_embeddings": 128,
}
VARIANTS = {"full": None, "lora": {"rank": 16, "alpha": 32.0}}


def _config(lora: dict | None):
    from scaletrain_trainer.contract.config import parse_training_config

    model = {"name": "hf", "vocabSize": 256, "contextLength": 128, "options": {"config": LLAMA}}
    model |= {"lora": lora} if lora else {}
    return parse_training_config(
        {"globalBatchSize": 8, "microBatchSize": 8, "precision": "fp32", "strategy": "ddp", "model": model}
    )


class Variant:
    """One variant's model, optimizer and a batch, set up as the trainer sets them up (world size 1)."""

    def __init__(self, lora: dict | None):
        import torch

        from scaletrain_testing.tiny_training import RUNTIME
        from scaletrain_trainer.models.model import build_model
        from scaletrain_trainer.training.checkpoint import TrainState
        from scaletrain_trainer.training.data import build_dataset, collate
        from scaletrain_trainer.training.optimizer import build_optimizer, build_scheduler
        from scaletrain_trainer.training.precision import resolve_precision

        config = _config(lora)
        torch.manual_seed(0)
        self.model = build_model(config.model)
        self.precision = resolve_precision("fp32", RUNTIME.device)
        optimizer = build_optimizer(self.model, config.optimizer, RUNTIME.device)
        scheduler = build_scheduler(optimizer, config.scheduler, 1000)
        self.state = TrainState(self.model, optimizer, scheduler, self.precision.grad_scaler())
        dataset = build_dataset(config.data, config.model, 0)
        self.micro_batches = [collate(dataset, list(range(8)))]

    def step(self) -> float:
        from scaletrain_trainer.training.loop import train_step

        started = time.perf_counter()
        train_step(self.model, self.micro_batches, self.state, self.precision, 1.0, 1)
        return time.perf_counter() - started

    def state_bytes(self) -> dict[str, int]:
        trained = [p for p in self.model.parameters() if p.requires_grad]
        moments = sum(t.numel() * t.element_size() for s in self.state.optimizer.state.values() for t in s.values())
        return {
            "parameters": sum(p.numel() * p.element_size() for p in self.model.parameters()),
            "gradients": sum(p.numel() * p.element_size() for p in trained),  # as held during a step
            "optimizer": moments,
        }

    def activation_bytes(self) -> int:
        import torch

        saved = peak = 0

        def pack(tensor):
            nonlocal saved, peak
            saved += tensor.numel() * tensor.element_size()
            peak = max(peak, saved)
            return tensor

        inputs = self.micro_batches[0].inputs
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            self.model(inputs).sum().backward()
        self.model.zero_grad(set_to_none=True)
        return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()

    import torch.distributed as dist

    from scaletrain_testing.trainer_runs import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    variants = {name: Variant(lora) for name, lora in VARIANTS.items()}
    for variant in variants.values():
        variant.step()  # the first step makes the optimizer's state
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, variant in variants.items():
            times[name] += [variant.step() for _ in range(args.steps)]
    dist.destroy_process_group()

    report: dict[str, Any] = {"model": LLAMA, "lora": VARIANTS["lora"], "variants": {}}
    for name, variant in variants.items():
        state = variant.state_bytes()
        report["variants"][name] = {
            "trainedParameters": sum(p.numel() for p in variant.model.parameters() if p.requires_grad),
            "stateBytes": state | {"total": sum(state.values())},
            "peakActivationBytes": variant.activation_bytes(),
            "stepSeconds": round(statistics.median(times[name]), 4),
        }
    full, lora = report["variants"]["full"], report["variants"]["lora"]
    report["loraVsFull"] = {
        "stateBytes": round(lora["stateBytes"]["total"] / full["stateBytes"]["total"], 3),
        "peakActivationBytes": round(lora["peakActivationBytes"] / full["peakActivationBytes"], 3),
        "stepSeconds": round(lora["stepSeconds"] / full["stepSeconds"], 3),
    }
    report["target"] = {"stateBytes": TARGET, "met": report["loraVsFull"]["stateBytes"] <= TARGET}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "lora.json").write_text(json.dumps(report, indent=2))
    print(f"{'variant':<8} {'trained':>10} {'state MB':>9} {'activations MB':>15} {'step ms':>8}")
    for name, measured in report["variants"].items():
        print(
            f"{name:<8} {measured['trainedParameters']:>10} {measured['stateBytes']['total'] / 1e6:>9.1f} "
            f"{measured['peakActivationBytes'] / 1e6:>15.1f} {measured['stepSeconds'] * 1e3:>8.1f}"
        )
    ratios = report["loraVsFull"]
    print(
        f"lora / full: state {ratios['stateBytes']}x (target <= {TARGET}), activations "
        f"{ratios['peakActivationBytes']}x, step time {ratios['stepSeconds']}x"
    )


if __name__ == "__main__":
    main()
