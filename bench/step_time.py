"""Step time of the ScaleTrain trainer vs a hand-written DDP loop vs HF Accelerate.

Same tiny GPT, data, optimizer and batch shape; 2 processes on CPU/gloo under torchrun. The three
variants run interleaved for several rounds; each reports the mean step time of every 10-step
window after warm-up, and the table compares medians. Targets: ScaleTrain <= 1.05x the hand-written
loop, and no slower than Accelerate.

    python bench/step_time.py [--rounds 3] [--steps 40]     # writes bench/results/step_time.json
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
from pathlib import Path

from torchrun_worker import run_worker

RESULTS = Path(__file__).resolve().parent / "results"
VARIANTS = ("scaletrain", "handwritten", "accelerate")
WINDOW = 10  # steps per timing window
WARMUP_WINDOWS = 1

TRAINING = {
    "globalBatchSize": 32,
    "microBatchSize": 4,  # 4 accumulation steps at world size 2
    "precision": "fp32",
    "strategy": "ddp",
    "seed": 0,
    "model": {"layers": 4, "heads": 4, "width": 128, "vocabSize": 256, "contextLength": 64},
    "data": {"source": "synthetic", "syntheticSamples": 100_000},
    "optimizer": {"lr": 0.001, "weightDecay": 0.1},
    "scheduler": {"name": "cosine", "warmupSteps": 5},
    "gradClipNorm": 1.0,
    "logEverySteps": WINDOW,
}


# --- the variants (each runs inside a torchrun worker) -----------------------------------------------


def run_scaletrain(steps: int, output: Path) -> list[float]:
    from scaletrain_trainer.config import parse_training_config
    from scaletrain_trainer.distributed import init_distributed, shutdown
    from scaletrain_trainer.loop import train

    port = 20000 + os.getpid() % 20000  # only rank 0 serves; a busy port only disables the endpoint
    config = parse_training_config(TRAINING | {"maxSteps": steps, "outputDir": str(output), "metricsPort": port})
    runtime = init_distributed(config.distributed_timeout_seconds)
    train(config, runtime)
    shutdown()
    if not runtime.is_main:  # only rank 0 writes metrics
        return []
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    return [TRAINING["globalBatchSize"] / r["samplesPerSecond"] for r in records]


def _textbook_setup():
    import torch
    import torch.distributed as dist

    from scaletrain_trainer.data import SyntheticSequences
    from scaletrain_trainer.model import GPT

    m = TRAINING["model"]
    torch.manual_seed(0)
    model = GPT(m["vocabSize"], m["contextLength"], m["layers"], m["heads"], m["width"])
    dataset = SyntheticSequences(TRAINING["data"]["syntheticSamples"], m["contextLength"], m["vocabSize"], seed=0)
    accumulation = TRAINING["globalBatchSize"] // (TRAINING["microBatchSize"] * dist.get_world_size())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
    return model, dataset, accumulation, optimizer


def _windows(step_times: list[float]) -> list[float]:
    return [statistics.fmean(step_times[i : i + WINDOW]) for i in range(0, len(step_times) - WINDOW + 1, WINDOW)]


def run_handwritten(steps: int, output: Path) -> list[float]:
    """The textbook DDP loop: DistributedSampler, no_sync() for accumulation, loss / accumulation steps."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    model, dataset, accumulation, optimizer = _textbook_setup()
    ddp = DistributedDataParallel(model)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    batches = iter(DataLoader(dataset, batch_size=TRAINING["microBatchSize"], sampler=sampler, drop_last=True))
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


def run_accelerate(steps: int, output: Path) -> list[float]:
    import torch.nn.functional as F
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=1)
    model, dataset, accumulation, optimizer = _textbook_setup()
    accelerator.gradient_accumulation_steps = accumulation
    loader = DataLoader(dataset, batch_size=TRAINING["microBatchSize"], shuffle=True, drop_last=True)
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


def worker(variant: str, steps: int, result_file: Path) -> None:
    with tempfile.TemporaryDirectory() as output:
        windows = globals()[f"run_{variant}"](steps, Path(output))
    if int(os.environ.get("RANK", "0")) == 0:
        result_file.write_text(json.dumps(windows))


def measure(variant: str, steps: int) -> list[float]:
    return run_worker(__file__, ["--worker", variant, "--steps", str(steps)])[WARMUP_WINDOWS:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--worker", choices=VARIANTS)
    parser.add_argument("--result-file", type=Path)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.steps, args.result_file)

    windows: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for round_index in range(args.rounds):
        for variant in VARIANTS:  # interleaved, so machine noise hits every variant alike
            windows[variant] += measure(variant, args.steps)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)
    medians = {variant: statistics.median(values) for variant, values in windows.items()}
    result = {
        "config": TRAINING | {"worldSize": 2, "backend": "gloo", "stepsPerRun": args.steps, "rounds": args.rounds},
        "medianStepSeconds": medians,
        "windows": windows,
        "ratioVsHandwritten": medians["scaletrain"] / medians["handwritten"],
        "ratioVsAccelerate": medians["scaletrain"] / medians["accelerate"],
        "targets": {"ratioVsHandwritten": 1.05, "ratioVsAccelerate": 1.0},
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "step_time.json").write_text(json.dumps(result, indent=2))
    print(f"{'variant':<12} {'median step (ms)':>17} {'vs handwritten':>15}")
    for variant in VARIANTS:
        print(f"{variant:<12} {medians[variant] * 1000:>17.1f} {medians[variant] / medians['handwritten']:>14.3f}x")
    print(
        f"ScaleTrain / hand-written = {result['ratioVsHandwritten']:.3f} (target <= 1.05); "
        f"ScaleTrain / Accelerate = {result['ratioVsAccelerate']:.3f} (target <= 1.0)"
    )


if __name__ == "__main__":
    main()
