"""How long a checkpoint blocks the training loop: synchronous vs asynchronous saves (checkpoint.async).

The same GPT, data and optimizer in both variants (4 layers, width 256, context 256; global batch 8,
micro-batch 2, fp32, DDP), 2 processes on CPU/gloo under torchrun, a checkpoint every 10 steps. The
blocked time of a save is the wall time the loop spends in it (loop.save, timed from outside): for
a synchronous save the whole write, verification and rename; for an asynchronous one the wait for the
save before it plus the copy to host memory. The run's last save, which waits for its write in both
variants, is reported apart. The variants run interleaved for several rounds; the table compares
medians over every periodic save of every round, and the runs' total times.
Target: asynchronous <= 0.3x synchronous.

    python bench/checkpoint_blocking.py [--rounds 3] [--steps 40]   # writes bench/results/checkpoint_blocking.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torchrun_worker import run_worker

RESULTS = Path(__file__).resolve().parent / "results"
EVERY_STEPS = 10
TARGET = 0.3  # asynchronous blocked time / synchronous, at most
TRAINING: dict[str, Any] = {
    "precision": "fp32",
    "strategy": "ddp",
    "seed": 0,
    "globalBatchSize": 8,
    "microBatchSize": 2,  # 2 accumulation steps at world size 2
    "model": {"layers": 4, "heads": 4, "width": 256, "vocabSize": 256, "contextLength": 256},
    "data": {"source": "synthetic", "syntheticSamples": 100_000},
    "optimizer": {"lr": 0.001, "weightDecay": 0.1},
    "scheduler": {"name": "cosine", "warmupSteps": 5},
    "logEverySteps": EVERY_STEPS,
}
VARIANTS = {"sync": False, "async": True}  # checkpoint.async


def worker(variant: str, steps: int, scratch: Path, result_file: Path) -> None:
    """Runs under torchrun: train with loop.save timed; rank 0 reports every save's blocked seconds."""
    from scaletrain_trainer.contract.config import parse_training_config
    from scaletrain_trainer.training import loop
    from scaletrain_trainer.training.distributed import init_distributed, shutdown

    saves: list[dict[str, Any]] = []
    untimed_save = loop.save

    def timed_save(checkpoints, state, *args, **kwargs) -> None:
        started = time.perf_counter()
        untimed_save(checkpoints, state, *args, **kwargs)
        saves.append({"step": state.step, "seconds": time.perf_counter() - started})

    loop.save = timed_save  # train() looks it up in the module at each call
    checkpoint = {"dir": str(scratch / "checkpoints"), "everySteps": EVERY_STEPS, "keep": 2, "async": VARIANTS[variant]}
    port = 20000 + os.getpid() % 20000  # only rank 0 serves; a busy port only disables the endpoint
    config = parse_training_config(
        TRAINING | {"maxSteps": steps, "checkpoint": checkpoint, "outputDir": str(scratch / "out"), "metricsPort": port}
    )
    runtime = init_distributed(config.distributed_timeout_seconds)
    summary = loop.train(config, runtime)
    shutdown()
    if runtime.is_main:
        newest = scratch / "checkpoints" / f"step-{steps:08d}"
        result = {
            "blockedSeconds": [save["seconds"] for save in saves if save["step"] < steps],
            # The last step's regular save, then the run's last (which waits for it, or finds it done).
            "lastSaveSeconds": sum(save["seconds"] for save in saves if save["step"] == steps),
            "runSeconds": summary["seconds"],
            "checkpointBytes": sum(path.stat().st_size for path in newest.iterdir()),
        }
        result_file.write_text(json.dumps(result))


def measure(variant: str, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:  # shared by both ranks, as checkpoint.dir must be
        return run_worker(__file__, ["--worker", variant, "--steps", str(steps), "--scratch", scratch])


def report(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    variants = {}
    for variant, variant_runs in runs.items():
        blocked = [seconds for run in variant_runs for seconds in run["blockedSeconds"]]
        variants[variant] = {
            "medianBlockedSeconds": statistics.median(blocked),
            "blockedSeconds": blocked,
            "medianLastSaveSeconds": statistics.median(run["lastSaveSeconds"] for run in variant_runs),
            "medianRunSeconds": statistics.median(run["runSeconds"] for run in variant_runs),
            "runSeconds": [run["runSeconds"] for run in variant_runs],
        }
    ratio = variants["async"]["medianBlockedSeconds"] / variants["sync"]["medianBlockedSeconds"]
    config = TRAINING | {"everySteps": EVERY_STEPS, "worldSize": 2, "backend": "gloo", "stepsPerRun": args.steps}
    return {
        "config": config | {"rounds": args.rounds},
        "checkpointBytes": runs["sync"][0]["checkpointBytes"],
        "variants": variants,
        "ratio": {"variant": "async", "baseline": "sync", "ratio": ratio, "atMost": TARGET, "met": ratio <= TARGET},
    }


def print_table(result: dict[str, Any]) -> None:
    model, config = result["config"]["model"], result["config"]
    print(
        f"GPT {model['layers']} layers, width {model['width']}, context {model['contextLength']}; global batch "
        f"{config['globalBatchSize']}, micro-batch {config['microBatchSize']}, 2 processes, CPU/gloo, fp32; a "
        f"checkpoint every {config['everySteps']} steps ({result['checkpointBytes'] / 2**20:.0f} MiB on disk), "
        f"{config['stepsPerRun']} steps per run, {config['rounds']} rounds"
    )
    columns = ("variant", "saves", "median blocked (ms)", "max blocked (ms)", "last save (ms)", "median run (s)")
    print(f"{columns[0]:<8} " + " ".join(f"{column:>{len(column)}}" for column in columns[1:]))
    for variant, measured in result["variants"].items():
        blocked = measured["blockedSeconds"]
        cells = (
            f"{len(blocked)}",
            f"{measured['medianBlockedSeconds'] * 1000:.1f}",
            f"{max(blocked) * 1000:.1f}",
            f"{measured['medianLastSaveSeconds'] * 1000:.1f}",
            f"{measured['medianRunSeconds']:.1f}",
        )
        print(
            f"{variant:<8} "
            + " ".join(f"{cell:>{len(column)}}" for cell, column in zip(cells, columns[1:], strict=True))
        )
    ratio = result["ratio"]
    verdict = "met" if ratio["met"] else "NOT met"
    print(f"async / sync blocked = {ratio['ratio']:.3f} (target <= {ratio['atMost']}: {verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40, help="per run; a multiple of 10, more than 10")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.steps % EVERY_STEPS or args.steps <= EVERY_STEPS:
        parser.error(f"--steps: {args.steps} is not a multiple of {EVERY_STEPS} above {EVERY_STEPS}")
    if args.worker:
        return worker(args.worker, args.steps, args.scratch, args.result_file)

    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    for round_index in range(args.rounds):
        for variant in VARIANTS:  # interleaved, so machine noise hits both alike
            runs[variant].append(measure(variant, args.steps))
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)
    result = report(runs, args)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "checkpoint_blocking.json").write_text(json.dumps(result, indent=2))
    print_table(result)


if __name__ == "__main__":
    main()
