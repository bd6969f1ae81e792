"""Step time of the ScaleTrain trainer vs a hand-written DDP loop (and HF Accelerate), in two suites.

Same GPT, data, optimizer and batch shape in every variant of a suite; 2 processes on CPU/gloo under
torchrun. The variants run interleaved for several rounds; each reports the mean step time of every
10-step window after warm-up (which holds torch.compile's compile), and the table compares medians.

- overhead (default; tiny GPT): ScaleTrain <= 1.05x the hand-written loop, and no slower than Accelerate.
- compile (a GPT where compute dominates: width 256, context 256, 4 layers): ScaleTrain with
  compile: true <= 0.85x the hand-written eager loop; ScaleTrain eager <= 1.03x it; 2 data workers
  per rank no slower than none.

    python bench/step_time.py [--suite overhead|compile] [--rounds 3] [--steps 40]
    # writes bench/results/step_time.json (overhead) or step_time_compile.json (compile)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchrun_worker import run_worker

RESULTS = Path(__file__).resolve().parent / "results"
WINDOW = 10  # steps per timing window
WARMUP_WINDOWS = 1

BASE_TRAINING: dict[str, Any] = {
    "precision": "fp32",
    "strategy": "ddp",
    "seed": 0,
    "data": {"source": "synthetic", "syntheticSamples": 100_000},
    "optimizer": {"lr": 0.001, "weightDecay": 0.1},
    "scheduler": {"name": "cosine", "warmupSteps": 5},
    "gradClipNorm": 1.0,
    "logEverySteps": WINDOW,
}


@dataclass(frozen=True)
class Variant:
    runner: str  # run_<runner> below
    overrides: dict[str, Any] = field(default_factory=dict)  # training config fields of a scaletrain run


@dataclass(frozen=True)
class Target:
    variant: str
    baseline: str
    at_most: float  # median step time of variant / baseline's


@dataclass(frozen=True)
class Suite:
    training: dict[str, Any]
    variants: dict[str, Variant]
    targets: tuple[Target, ...]
    result_file: str


SUITES = {
    "overhead": Suite(
        training=BASE_TRAINING
        | {
            "globalBatchSize": 32,
            "microBatchSize": 4,  # 4 accumulation steps at world size 2
            "model": {"layers": 4, "heads": 4, "width": 128, "vocabSize": 256, "contextLength": 64},
        },
        variants={name: Variant(name) for name in ("scaletrain", "handwritten", "accelerate")},
        targets=(Target("scaletrain", "handwritten", 1.05), Target("scaletrain", "accelerate", 1.0)),
        result_file="step_time.json",
    ),
    "compile": Suite(
        training=BASE_TRAINING
        | {
            "globalBatchSize": 8,
            "microBatchSize": 2,  # 2 accumulation steps at world size 2
            # Matmuls dominate the step here, unlike in the tiny GPT, whose step is mostly framework overhead.
            "model": {"layers": 4, "heads": 4, "width": 256, "vocabSize": 256, "contextLength": 256},
        },
        variants={
            "handwritten": Variant("handwritten"),
            "scaletrain": Variant("scaletrain"),
            "scaletrain-compile": Variant("scaletrain", {"compile": True}),
            "scaletrain-workers": Variant("scaletrain", {"data": BASE_TRAINING["data"] | {"workers": 2}}),
        },
        targets=(
            Target("scaletrain-compile", "handwritten", 0.85),
            Target("scaletrain", "handwritten", 1.03),
            Target("scaletrain-workers", "scaletrain", 1.0),
        ),
        result_file="step_time_compile.json",
    ),
}


# --- the variants (each runs inside a torchrun worker) -----------------------------------------------


def run_scaletrain(training: dict[str, Any], steps: int, output: Path) -> list[float]:
    from scaletrain_trainer.contract.config import parse_training_config
    from scaletrain_trainer.training.distributed import init_distributed, shutdown
    from scaletrain_trainer.training.loop import train

    port = 20000 + os.getpid() % 20000  # only rank 0 serves; a busy port only disables the endpoint
    config = parse_training_config(training | {"maxSteps": steps, "outputDir": str(output), "metricsPort": port})
    runtime = init_distributed(config.distributed_timeout_seconds)
    train(config, runtime)
    shutdown()
    if not runtime.is_main:  # only rank 0 writes metrics
        return []
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    return [training["globalBatchSize"] / r["samplesPerSecond"] for r in records]


def _textbook_setup(training: dict[str, Any]):
    import torch
    import torch.distributed as dist

    from scaletrain_trainer.models.model import GPT
    from scaletrain_trainer.training.data import SyntheticSequences

    m = training["model"]
    torch.manual_seed(0)
    model = GPT(m["vocabSize"], m["contextLength"], m["layers"], m["heads"], m["width"])
    dataset = SyntheticSequences(training["data"]["syntheticSamples"], m["contextLength"], m["vocabSize"], seed=0)
    accumulation = training["globalBatchSize"] // (training["microBatchSize"] * dist.get_world_size())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
    return model, dataset, accumulation, optimizer


def _windows(step_times: list[float]) -> list[float]:
    return [statistics.fmean(step_times[i : i + WINDOW]) for i in range(0, len(step_times) - WINDOW + 1, WINDOW)]


def run_handwritten(training: dict[str, Any], steps: int, output: Path) -> list[float]:
    """The textbook eager DDP loop: DistributedSampler, no_sync() for accumulation, loss / accumulation steps."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    model, dataset, accumulation, optimizer = _textbook_setup(training)
    ddp = DistributedDataParallel(model)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    batches = iter(DataLoader(dataset, batch_size=training["microBatchSize"], sampler=sampler, drop_last=True))
    step_times = []
    for _ in range(steps):
        start = time.perf_counter()
        for micro_step in range(accumulation):
            inputs, targets = next(batches)
            with ddp.no_sync() if micro_step < accumulation - 1 else nullcontext():
                logits = ddp(inputs)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1)) / accumulation
                loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step_times.append(time.perf_counter() - start)
    dist.barrier()
    dist.destroy_process_group()
    return _windows(step_times)


def run_accelerate(training: dict[str, Any], steps: int, output: Path) -> list[float]:
    import torch.nn.functional as F
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=1)
    model, dataset, accumulation, optimizer = _textbook_setup(training)
    accelerator.gradient_accumulation_steps = accumulation
    loader = DataLoader(dataset, batch_size=training["microBatchSize"], shuffle=True, drop_last=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batches = iter(loader)
    step_times = []
    for _ in range(steps):
        start = time.perf_counter()
        for _ in range(accumulation):
            inputs, targets = next(batches)
            with accelerator.accumulate(model):
                logits = model(inputs)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        step_times.append(time.perf_counter() - start)
    accelerator.end_training()
    return _windows(step_times)


# --- the driver -----------------------------------------------------------------------------------------


def worker(suite: Suite, variant: str, steps: int, result_file: Path) -> None:
    chosen = suite.variants[variant]
    with tempfile.TemporaryDirectory() as output:
        windows = globals()[f"run_{chosen.runner}"](suite.training | chosen.overrides, steps, Path(output))
    if int(os.environ.get("RANK", "0")) == 0:
        result_file.write_text(json.dumps(windows))


def measure(suite_name: str, variant: str, steps: int) -> list[float]:
    arguments = ["--suite", suite_name, "--worker", variant, "--steps", str(steps)]
    return run_worker(__file__, arguments)[WARMUP_WINDOWS:]


def report(suite: Suite, windows: dict[str, list[float]], args: argparse.Namespace) -> dict[str, Any]:
    medians = {variant: statistics.median(values) for variant, values in windows.items()}
    ratios = [_ratio(target, medians) for target in suite.targets]
    config = suite.training | {"worldSize": 2, "backend": "gloo", "stepsPerRun": args.steps, "rounds": args.rounds}
    overrides = {name: variant.overrides for name, variant in suite.variants.items() if variant.overrides}
    return {
        "suite": args.suite,
        "config": config,
        "variantOverrides": overrides,
        "medianStepSeconds": medians,
        "windows": windows,
        "ratios": ratios,
    }


def _ratio(target: Target, medians: dict[str, float]) -> dict[str, Any]:
    ratio = medians[target.variant] / medians[target.baseline]
    return {
        "variant": target.variant,
        "baseline": target.baseline,
        "ratio": ratio,
        "atMost": target.at_most,
        "met": ratio <= target.at_most,
    }


def print_table(result: dict[str, Any]) -> None:
    medians, model = result["medianStepSeconds"], result["config"]["model"]
    print(
        f"suite {result['suite']}: GPT {model['layers']} layers, width {model['width']}, context "
        f"{model['contextLength']}; global batch {result['config']['globalBatchSize']}, micro-batch "
        f"{result['config']['microBatchSize']}, 2 processes, CPU/gloo, fp32"
    )
    print(f"{'variant':<20} {'median step (ms)':>17} {'vs handwritten':>15}")
    for variant, seconds in medians.items():
        print(f"{variant:<20} {seconds * 1000:>17.1f} {seconds / medians['handwritten']:>14.3f}x")
    for ratio in result["ratios"]:
        verdict = "met" if ratio["met"] else "NOT met"
        print(
            f"{ratio['variant']} / {ratio['baseline']} = {ratio['ratio']:.3f} (target <= {ratio['atMost']}: {verdict})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", choices=SUITES, default="overhead")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    suite = SUITES[args.suite]
    if args.worker:
        return worker(suite, args.worker, args.steps, args.result_file)

    windows: dict[str, list[float]] = {variant: [] for variant in suite.variants}
    for round_index in range(args.rounds):
        for variant in suite.variants:  # interleaved, so machine noise hits every variant alike
            windows[variant] += measure(args.suite, variant, args.steps)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)
    result = report(suite, windows, args)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / suite.result_file).write_text(json.dumps(result, indent=2))
    print_table(result)


if __name__ == "__main__":
    main()
