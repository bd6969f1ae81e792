"""Memory: FSDP2 vs DDP state per rank, and activation memory with gradient accumulation.

1. Per-rank bytes of parameters + gradients + AdamW state after one step, FSDP vs DDP at world
   size 2 (CPU/gloo, torchrun). Target: FSDP <= 0.6x DDP.
2. Peak activation memory (bytes autograd saves for backward, the peak over micro-steps) with
   4 accumulation steps at micro-batch 2 vs 1 step at micro-batch 8. Both give the same update.

    python bench/memory.py          # writes bench/results/memory.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from torchrun_worker import run_worker

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = {"layers": 4, "heads": 4, "width": 256, "vocabSize": 512, "contextLength": 128}


def _config(**overrides):
    from scaletrain_trainer.contract.config import parse_training_config

    base = {"globalBatchSize": 8, "microBatchSize": 2, "precision": "fp32", "model": MODEL, "maxSteps": 1}
    return parse_training_config(base | overrides)


def _local_bytes(tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def state_bytes_worker(strategy: str, result_file: Path) -> None:
    """Runs under torchrun: one real step, then count what this rank holds."""
    import torch

    from scaletrain_trainer.models.model import build_model
    from scaletrain_trainer.training.checkpoint import TrainState
    from scaletrain_trainer.training.data import GlobalBatches, build_dataset, collate, to_device
    from scaletrain_trainer.training.distributed import init_distributed, seed_everything, shutdown
    from scaletrain_trainer.training.loop import train_step
    from scaletrain_trainer.training.optimizer import build_optimizer, build_scheduler
    from scaletrain_trainer.training.parallel import apply_parallelism
    from scaletrain_trainer.training.precision import resolve_precision

    config = _config(strategy=strategy)
    runtime = init_distributed(120)
    seed_everything(0)
    precision = resolve_precision("fp32", runtime.device)
    model = apply_parallelism(build_model(config.model), strategy, precision, runtime, config)
    optimizer = build_optimizer(model, config.optimizer, runtime.device)
    state = TrainState(model, optimizer, build_scheduler(optimizer, config.scheduler, 1), precision.grad_scaler())
    dataset = build_dataset(config.data, config.model, 0)
    batches = GlobalBatches(len(dataset), 8, 2, runtime.world_size, runtime.rank, 0)
    micro_batches = to_device([collate(dataset, ids) for ids in batches.micro_batches(0)], runtime.device)
    train_step(model, micro_batches, state, precision, 1.0, runtime.world_size)
    batch = micro_batches[0]  # gradients again (the step cleared them), to count them
    torch.nn.functional.cross_entropy(model(batch.inputs).flatten(0, 1), batch.targets.flatten()).backward()
    counts = {
        "params": sum(_local_bytes(p) for p in model.parameters()),
        "grads": sum(_local_bytes(p.grad) for p in model.parameters() if p.grad is not None),
        "optimizer": sum(_local_bytes(v) for s in optimizer.state.values() for v in s.values() if v.dim() > 0),
    }
    shutdown()
    if runtime.rank == 0:
        result_file.write_text(json.dumps(counts))


def state_bytes(strategy: str) -> dict[str, int]:
    return run_worker(__file__, ["--worker", strategy])


def peak_activation_bytes(micro_batch: int, global_batch: int = 8) -> int:
    """Largest amount of activation memory autograd holds at once over an accumulation window."""
    import torch

    from scaletrain_trainer.models.model import GPT
    from scaletrain_trainer.training.data import SyntheticSequences, collate

    torch.manual_seed(0)
    model = GPT(MODEL["vocabSize"], MODEL["contextLength"], MODEL["layers"], MODEL["heads"], MODEL["width"])
    dataset = SyntheticSequences(64, MODEL["contextLength"], MODEL["vocabSize"], seed=0)
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    peak = 0
    for start in range(0, global_batch, micro_batch):
        saved: dict[int, int] = {}  # storage -> bytes, so views of one buffer count once

        def pack(tensor, saved=saved):
            saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        batch = collate(dataset, list(range(start, start + micro_batch)))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = torch.nn.functional.cross_entropy(model(batch.inputs).flatten(0, 1), batch.targets.flatten())
        peak = max(peak, sum(size for pointer, size in saved.items() if pointer not in parameters))
        loss.backward()
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", choices=["ddp", "fsdp"])
    parser.add_argument("--result-file", type=Path)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        return state_bytes_worker(args.worker, args.result_file)

    ddp, fsdp = state_bytes("ddp"), state_bytes("fsdp")
    accumulated, single = peak_activation_bytes(micro_batch=2), peak_activation_bytes(micro_batch=8)
    result = {
        "model": MODEL,
        "stateBytesPerRank": {"ddp": ddp, "fsdp": fsdp},
        "fsdpOverDdp": sum(fsdp.values()) / sum(ddp.values()),
        "peakActivationBytes": {"accumulation4xMicro2": accumulated, "single1xMicro8": single},
        "accumulationOverSingle": accumulated / single,
        "targets": {"fsdpOverDdp": 0.6},
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "memory.json").write_text(json.dumps(result, indent=2))
    mib = 2**20
    print(f"{'per rank, world 2':<22} {'params':>10} {'grads':>10} {'AdamW':>10} {'total MiB':>10}")
    for name, counts in (("ddp", ddp), ("fsdp", fsdp)):
        print(
            f"{name:<22} "
            + " ".join(f"{counts[k] / mib:>10.2f}" for k in ("params", "grads", "optimizer"))
            + f" {sum(counts.values()) / mib:>10.2f}"
        )
    print(f"FSDP / DDP = {result['fsdpOverDdp']:.3f} (target <= 0.6)")
    print(
        f"peak activations: 4 x micro-batch 2 = {accumulated / mib:.1f} MiB, "
        f"1 x micro-batch 8 = {single / mib:.1f} MiB -> {result['accumulationOverSingle']:.3f}x"
    )


if __name__ == "__main__":
    main()
