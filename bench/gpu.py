"""The GPU check, in one go on one GPU: the trainer against a hand-written loop, checkpoint saves, bf16 vs fp32.

Each measurement is a process of its own (this script's --worker mode), one after the other, so that none
inherits another's GPU memory or compile caches:

- **The trainer against a hand-written loop**, at GPT-2 small (124M; micro-batch 16 x 1024 tokens) eager and
  compiled, and at a 1.3B GPT (24 layers, width 2048, context 2048; micro-batch 8) compiled, bf16. The trainer
  is the whole of it (scaletrain_trainer.training.loop.train: its data loader, exact accumulation, non-finite
  checks, the stop agreement, logging); its tokens/s, MFU and peak memory are what its metrics.jsonl says. The
  hand-written loop is what a user writes without us, in nanoGPT's habits: the same GPT module, a pinned batch
  copied to the GPU, torch.autocast(bf16), the loss in float32, AdamW(fused=True), clipping at 1.0, and
  torch.compile(model) when compiled. Both are timed alike: tokens over the wall time between log steps (each a
  host sync), the median over the log intervals after the first (which holds the warm-up and the compile).
- **Checkpoint saves**, every 10 steps at 124M eager: the time the loop spends in a save, synchronous (the
  whole write) against asynchronous (the copy to pinned host memory, and any wait for the save before it).
- **bf16 against fp32**, the trainer at 124M eager.

It runs with whatever torch the machine has, and says which torch and GPU it measured.

    python bench/gpu.py                      # on a GPU: bench/results/gpu.json and gpu.md, about 6 minutes
    python bench/gpu.py --tiny --allow-cpu   # the same code paths on a CPU, with a tiny model (a smoke test)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
GPT2_SMALL = {"layers": 12, "heads": 12, "width": 768, "vocabSize": 50304, "contextLength": 1024}
GPT_1_3B = {"layers": 24, "heads": 16, "width": 2048, "vocabSize": 50304, "contextLength": 2048}
TINY = {"layers": 2, "heads": 2, "width": 64, "vocabSize": 256, "contextLength": 32}
# name: (model, micro-batch, compile, steps, log every); --tiny keeps the names and steps, not the sizes
SPEED_ROWS = {
    "124M eager": (GPT2_SMALL, 16, False, 50, 10),
    "124M compiled": (GPT2_SMALL, 16, True, 60, 10),
    "1.3B compiled": (GPT_1_3B, 8, True, 20, 5),
}
CHECKPOINT_EVERY = 10
TARGETS = {"trainerOverHandwritten": 0.98, "asyncOverSyncBlocked": 0.25}


def training(model: dict, micro_batch: int, compiled: bool, steps: int, log_every: int, **more: Any) -> dict:
    """The trainer's config for a run of `steps` steps of one micro-batch each, on synthetic tokens."""
    return {
        "globalBatchSize": micro_batch,
        "microBatchSize": micro_batch,
        "maxSteps": steps,
        "logEverySteps": log_every,
        "precision": "bf16",
        "strategy": "ddp",
        "compile": compiled,
        "seed": 0,
        "model": model,
        "data": {"source": "synthetic", "syntheticSamples": (steps + 2) * micro_batch},
        "optimizer": {"lr": 6e-4, "weightDecay": 0.1},
        "gradClipNorm": 1.0,
    } | more


# ---- the workers, each in a process of its own ----


def trainer_worker(spec: dict, scratch: Path) -> dict:
    """The trainer's own loop (loop.train), with loop.save timed from outside."""
    import torch

    from scaletrain_trainer.contract.config import parse_training_config
    from scaletrain_trainer.training import loop
    from scaletrain_trainer.training.distributed import init_distributed, shutdown

    saves: list[tuple[int, float]] = []
    untimed_save = loop.save

    def timed_save(checkpoints, state, *args, **kwargs) -> None:
        started = time.perf_counter()
        untimed_save(checkpoints, state, *args, **kwargs)
        saves.append((state.step, time.perf_counter() - started))

    loop.save = timed_save  # train() looks it up in the module at each call
    port = 20000 + os.getpid() % 20000
    config = parse_training_config(spec | {"outputDir": str(scratch / "out"), "metricsPort": port})
    runtime = init_distributed(config.distributed_timeout_seconds)
    summary = loop.train(config, runtime)
    shutdown()
    records = [json.loads(line) for line in (scratch / "out" / "metrics.jsonl").read_text().splitlines()]
    steady = [record for record in records if "tokensPerSecond" in record][1:]  # the first holds the warm-up
    return {
        "tokensPerSecond": statistics.median(record["tokensPerSecond"] for record in steady),
        "mfu": statistics.median(r["mfu"] for r in steady) if all("mfu" in r for r in steady) else None,
        "peakMemoryBytes": max((record.get("peakMemoryBytes") or 0 for record in records), default=0) or None,
        "blockedSeconds": [seconds for step, seconds in saves if step < config.max_steps],
        "runSeconds": summary["seconds"],
        "torch": torch.__version__,
    }


def handwritten_worker(spec: dict, scratch: Path) -> dict:
    """What a user writes without us (nanoGPT's habits), timed as the trainer's log steps time it."""
    import torch
    import torch.nn.functional as F

    from scaletrain_trainer.contract.config import parse_training_config
    from scaletrain_trainer.models.flops import ModelFlops, peak_flops
    from scaletrain_trainer.models.model import build_model, flops_per_token
    from scaletrain_trainer.training.loop import device_name

    config = parse_training_config(spec)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(0)
    model = build_model(config.model).to(device)
    flops = flops_per_token(model, config.model.context_length)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=6e-4, fused=device.type == "cuda")
    if config.compile:
        model = torch.compile(model)
    micro, context, vocab = config.micro_batch_size, config.model.context_length, config.model.vocab_size
    on_gpu = device.type == "cuda"
    batches = torch.randint(vocab, (4, micro, context + 1), pin_memory=on_gpu)
    intervals, last = [], time.perf_counter()
    for step in range(1, config.max_steps + 1):
        batch = batches[step % len(batches)].to(device, non_blocking=True)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % config.log_every_steps == 0:
            loss.item()  # the host sync of a log line
            now = time.perf_counter()
            intervals.append(now - last)
            last = now
    tokens_per_second = statistics.median(
        config.log_every_steps * micro * context / seconds for seconds in intervals[1:]
    )
    utilization = ModelFlops(flops, 1, peak_flops(device_name(device))).utilization(tokens_per_second)
    return {
        "tokensPerSecond": tokens_per_second,
        "mfu": utilization.get("mfu"),
        "peakMemoryBytes": torch.cuda.max_memory_allocated(device) if on_gpu else None,
        "torch": torch.__version__,
    }


WORKERS = {"trainer": trainer_worker, "handwritten": handwritten_worker}


def run_worker(kind: str, spec: dict, timeout: int) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        result_file = Path(scratch) / "result.json"
        command = [sys.executable, __file__, "--worker", kind, "--spec", json.dumps(spec), "--scratch", scratch,
                   "--result-file", str(result_file)]  # fmt: skip
        env = os.environ | {"PYTHONWARNINGS": "ignore"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the {kind} worker failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return json.loads(result_file.read_text())


# ---- the report ----


def measure(args: argparse.Namespace, device: str, write) -> dict:
    """Every measurement, each written (`write`) as soon as it is done: the checkpoints first, then the speed
    rows, smallest first, with fp32 after the 124M eager row."""
    report: dict[str, Any] = {"device": device, "targets": TARGETS, "speed": {}, "checkpoints": {}}
    model, micro_batch, steps = (TINY, 2, 3 * CHECKPOINT_EVERY + 1) if args.tiny else (GPT2_SMALL, 16, 41)
    for variant, asynchronous in (("sync", False), ("async", True)) if "checkpoints" in args.rows else ():
        with tempfile.TemporaryDirectory() as directory:
            checkpoint = {"dir": directory, "everySteps": CHECKPOINT_EVERY, "keep": 1, "async": asynchronous}
            spec = training(model, micro_batch, False, steps, CHECKPOINT_EVERY, checkpoint=checkpoint)
            run = run_worker("trainer", spec, args.timeout)
        report["torch"] = run["torch"]
        report["checkpoints"][variant] = {
            "blockedSeconds": run["blockedSeconds"],
            "medianBlockedSeconds": statistics.median(run["blockedSeconds"]),
            "runSeconds": run["runSeconds"],
        }
        write(report)
    if checkpoints := report["checkpoints"]:
        blocked = checkpoints["async"]["medianBlockedSeconds"], checkpoints["sync"]["medianBlockedSeconds"]
        checkpoints["asyncOverSync"] = blocked[0] / blocked[1]
    for name, (model, micro_batch, compiled, steps, log_every) in SPEED_ROWS.items():
        if name not in args.rows:
            continue
        if args.tiny:
            model, micro_batch, compiled, steps, log_every = TINY, 2, False, 6, 2
        spec = training(model, micro_batch, compiled, steps, log_every)
        started = time.perf_counter()
        trainer = run_worker("trainer", spec, args.timeout)
        handwritten = run_worker("handwritten", spec, args.timeout)
        report["torch"] = trainer["torch"]
        report["speed"][name] = {
            "trainer": trainer,
            "handwritten": handwritten,
            "ratio": trainer["tokensPerSecond"] / handwritten["tokensPerSecond"],
            "seconds": time.perf_counter() - started,
        }
        write(report)
        if name == "124M eager":
            fp32 = run_worker("trainer", spec | {"precision": "fp32"}, args.timeout)
            faster = trainer["tokensPerSecond"] / fp32["tokensPerSecond"]
            report["precision"] = {"fp32": fp32, "bf16TokensPerSecondOverFp32": faster}
            write(report)
    return report


def table(report: dict) -> str:
    lines = [
        f"{report['device']}, torch {report.get('torch', '?')}, bf16",
        "",
        "| run | trainer tok/s | MFU | peak GiB | hand-written tok/s | MFU | peak GiB | trainer / hand-written |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in report["speed"].items():
        cells = []
        for side in ("trainer", "handwritten"):
            run = row[side]
            mfu = f"{run['mfu']:.1%}" if run.get("mfu") is not None else "n/a"
            peak = f"{run['peakMemoryBytes'] / 2**30:.1f}" if run.get("peakMemoryBytes") else "n/a"
            cells += [f"{run['tokensPerSecond'] / 1000:.1f}k", mfu, peak]
        lines.append(f"| {name} | {' | '.join(cells)} | {row['ratio']:.3f} |")
    if "async" in report["checkpoints"]:
        sync, asynchronous = report["checkpoints"]["sync"], report["checkpoints"]["async"]
        blocked, unblocked = sync["medianBlockedSeconds"], asynchronous["medianBlockedSeconds"]
        lines += ["", f"Checkpoint every {CHECKPOINT_EVERY} steps at 124M: training blocked per save (median) "
                  f"{blocked:.2f} s synchronous, {unblocked:.2f} s asynchronous "
                  f"({unblocked / blocked:.2f}x)."]  # fmt: skip
    if "precision" in report:
        faster = report["precision"]["bf16TokensPerSecondOverFp32"]
        lines += ["", f"bf16 over fp32, the trainer at 124M eager: {faster:.2f}x the tokens/s."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="a tiny model (smoke test)")
    parser.add_argument("--allow-cpu", action="store_true", help="run on a CPU when there is no GPU")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--timeout", type=int, default=300, help="seconds a worker may take")
    parser.add_argument("--rows", nargs="+", default=["checkpoints", *SPEED_ROWS], help="which to measure")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)  # a worker's own directory
    parser.add_argument("--result-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = WORKERS[args.worker](json.loads(args.spec), args.scratch)
        args.result_file.write_text(json.dumps(result))
        return 0

    import torch

    from scaletrain_trainer.training.loop import device_name

    if not torch.cuda.is_available() and not args.allow_cpu:
        print("bench/gpu.py: no CUDA device here; run it on a GPU machine (or pass --allow-cpu)", file=sys.stderr)
        return 2
    device = device_name(torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu"))
    args.results_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def write(report: dict) -> None:
        report["seconds"] = time.perf_counter() - started
        (args.results_dir / "gpu.json").write_text(json.dumps(report, indent=2))
        (args.results_dir / "gpu.md").write_text(table(report))

    report = measure(args, device, write)
    print(table(report), end="")
    print(f"in {report['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
