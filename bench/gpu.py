"""GPU benchmark: bf16 vs fp32 step time, and MFU, for a GPT-2-small-sized model (~124M) on one GPU.

Uses the trainer's own components (model, parallelism, precision, train_step) in one process.
MFU is the trainer's (scaletrain_trainer.models.flops): the model's FLOPs per token (6N plus attention, as
nanoGPT counts them) × tokens/s ÷ the GPU's dense 16-bit peak. fp32 runs with TF32 matmuls allowed,
as PyTorch users usually do, and its MFU is against the same bf16 peak.

    python bench/gpu.py                      # on a GPU machine; writes bench/results/gpu.json
    python bench/gpu.py --tiny --allow-cpu   # smoke run of the same code path on a CPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
GPT2_SMALL = {"layers": 12, "heads": 12, "width": 768, "vocabSize": 50304, "contextLength": 1024}
TINY = {"layers": 2, "heads": 2, "width": 64, "vocabSize": 256, "contextLength": 32}


def measure(precision_name: str, model_shape: dict, micro_batch: int, accumulation: int, steps: int, warmup: int):
    import torch

    from scaletrain_trainer.contract.config import parse_training_config
    from scaletrain_trainer.models.model import build_model, count_parameters, flops_per_token
    from scaletrain_trainer.training.checkpoint import TrainState
    from scaletrain_trainer.training.data import SyntheticSequences, collate, to_device
    from scaletrain_trainer.training.distributed import Runtime
    from scaletrain_trainer.training.loop import build_optimizer, build_scheduler, train_step
    from scaletrain_trainer.training.parallel import apply_parallelism, unwrapped
    from scaletrain_trainer.training.precision import resolve_precision

    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    runtime = Runtime(0, 0, 1, device, "nccl" if device.type == "cuda" else "gloo")
    config = parse_training_config(
        {
            "globalBatchSize": micro_batch * accumulation,
            "microBatchSize": micro_batch,
            "model": model_shape,
            "precision": precision_name,
            "strategy": "ddp",
        }
    )
    torch.manual_seed(0)
    precision = resolve_precision(precision_name, device)
    model = apply_parallelism(build_model(config.model), "ddp", precision, runtime, config)
    optimizer = build_optimizer(model, config.optimizer)
    state = TrainState(model, optimizer, build_scheduler(optimizer, config.scheduler, steps), precision.grad_scaler())
    dataset = SyntheticSequences(micro_batch * accumulation, model_shape["contextLength"], model_shape["vocabSize"], 0)
    window = to_device(
        [collate(dataset, list(range(i, i + micro_batch))) for i in range(0, len(dataset), micro_batch)], device
    )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for step in range(warmup + steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        train_step(model, window, state, precision, 1.0, world_size=1)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    peak_memory = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    trained = unwrapped(model)
    flops = flops_per_token(trained, model_shape["contextLength"])
    return statistics.median(times), count_parameters(trained), flops, peak_memory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="a tiny model (smoke test)")
    parser.add_argument("--allow-cpu", action="store_true", help="run on a CPU when there is no GPU")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    from scaletrain_trainer.models.flops import ModelFlops, peak_flops
    from scaletrain_trainer.training.loop import device_name

    if not torch.cuda.is_available() and not args.allow_cpu:
        print("bench/gpu.py: no CUDA device here; run it on a GPU machine (or pass --allow-cpu)", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    shape = TINY if args.tiny else GPT2_SMALL
    device = device_name(torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu"))
    tokens_per_step = args.micro_batch * args.accumulation * shape["contextLength"]
    rows = {}
    for precision_name in ("fp32", "bf16"):
        seconds, parameters, flops_per_token, peak_memory = measure(
            precision_name, shape, args.micro_batch, args.accumulation, args.steps, args.warmup
        )
        tokens_per_second = tokens_per_step / seconds
        utilization = ModelFlops(flops_per_token, 1, peak_flops(device)).utilization(tokens_per_second)
        rows[precision_name] = {
            "stepSeconds": seconds,
            "tokensPerSecond": tokens_per_second,
            "tflopsPerDevice": utilization["tflopsPerDevice"],
            "mfu": utilization.get("mfu"),
            "peakMemoryBytes": peak_memory,
            "parameters": parameters,
        }
    dist.destroy_process_group()
    result = {
        "device": device,
        "model": shape,
        "microBatch": args.micro_batch,
        "accumulation": args.accumulation,
        "results": rows,
        "bf16Speedup": rows["fp32"]["stepSeconds"] / rows["bf16"]["stepSeconds"],
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "gpu.json").write_text(json.dumps(result, indent=2))
    print(f"{device}: GPT {rows['fp32']['parameters'] / 1e6:.1f}M params, {tokens_per_step} tokens/step")
    print(f"{'precision':<10} {'step ms':>9} {'tokens/s':>11} {'TFLOP/s':>9} {'MFU':>7}")
    for name, row in rows.items():
        mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else "n/a"
        print(
            f"{name:<10} {row['stepSeconds'] * 1000:>9.1f} {row['tokensPerSecond']:>11.0f}"
            f" {row['tflopsPerDevice']:>9.2f} {mfu:>7}"
        )
    print(f"bf16 speedup over fp32: {result['bf16Speedup']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
